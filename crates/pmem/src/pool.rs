//! Pools: a header, a root region and an arena, on any [`Persist`] backend.
//!
//! [`Pool::format`] and [`Pool::attach`] work on every backend (the crash simulator formats
//! and reopens pools through them); [`Pool::create`] and [`Pool::open`] add the file
//! handling of the native backend: exclusive creation with mode 0600, space reservation, an
//! advisory lock against a second opener, and validation before mapping.

use crate::error::PoolError;
use crate::header::{self, AreaHeader, COPY_OFFSET, FLAG_CLEAN, HEADER_LEN, Header, STATE_OFFSET};
use crate::native::{Native, NativeOptions};
use crate::seam::{Persist, WriteClass};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Default directory for pools: tmpfs, DRAM standing in for PM.
pub const DEFAULT_POOL_DIR: &str = "/dev/shm";

/// A byte range of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Region {
    /// Absolute offset in the pool.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl Region {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset + self.len
    }

    /// Whether `[offset, offset + len)` lies inside this region.
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        offset >= self.offset && offset.checked_add(len).is_some_and(|end| end <= self.end())
    }
}

/// Parameters of a new pool.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// Total size in bytes (at least [`header::MIN_POOL_SIZE`]).
    pub size: u64,
    /// The application's layout name, checked on every open.
    pub layout: String,
    /// Size of the root region (rounded up to 4 KiB).
    pub root_size: u64,
    /// Backend options (native pools only).
    pub native: NativeOptions,
}

impl CreateOptions {
    /// A pool of `size` bytes with layout `layout` and a 4 KiB root region.
    pub fn new(layout: &str, size: u64) -> Self {
        CreateOptions {
            size,
            layout: layout.to_owned(),
            root_size: 4096,
            native: NativeOptions::default(),
        }
    }
}

/// An open pool over backend `B`.
#[derive(Debug)]
pub struct Pool<B: Persist> {
    pm: B,
    header: Header,
    was_clean: bool,
    repaired: Vec<String>,
    path: Option<PathBuf>,
    closed: AtomicBool,
    /// The process that opened the pool. A child forked without `exec` holds a copy of this
    /// value and of the mapping; its copy never marks the pool clean (the opener may still be
    /// writing it), and its backend never releases the opener's lock.
    opener: u32,
}

impl<B: Persist> Pool<B> {
    /// Writes a fresh pool onto `pm`, which must be exactly `options.size` bytes: header and
    /// state word first, the magic last, so an interrupted format is "not a pool".
    pub fn format(pm: B, options: &CreateOptions) -> Result<Self, PoolError> {
        if pm.len() != options.size {
            return Err(PoolError::InvalidArgument(format!(
                "backend has {} bytes, pool size is {}",
                pm.len(),
                options.size
            )));
        }
        let header = Header::new(&options.layout, options.size, options.root_size)?;
        let bytes = header.encode();
        // Clear any old magic durably first, so an interrupted re-format never shows the old
        // magic over a half-written header (whose other lines could persist before line 0).
        if pm.read_u64(0) != 0 {
            pm.write_u64(0, 0, WriteClass::Meta);
            pm.persist(0, 8);
        }
        pm.write(8, &bytes[8..], WriteClass::Meta);
        // The copy, magic included: it is read only while the header's own magic is present
        // (`header::decode_area`), which happens after the fence below.
        pm.write(COPY_OFFSET, &bytes, WriteClass::Meta);
        pm.write_u64(
            STATE_OFFSET,
            header::encode_state(0, &header.uuid),
            WriteClass::Meta,
        );
        pm.fill(header.root_offset, header.root_size, 0, WriteClass::Meta);
        pm.flush(0, HEADER_LEN as u64);
        pm.flush(COPY_OFFSET, HEADER_LEN as u64);
        pm.flush(STATE_OFFSET, 8);
        pm.flush(header.root_offset, header.root_size);
        pm.fence();
        pm.write(0, &bytes[..8], WriteClass::Meta);
        pm.persist(0, 8);
        Ok(Pool {
            pm,
            header,
            was_clean: true,
            repaired: Vec::new(),
            path: None,
            closed: AtomicBool::new(false),
            opener: std::process::id(),
        })
    }

    /// Validates the header on `pm`, checks the layout, and marks the pool open (not clean)
    /// with one failure-atomic store.
    ///
    /// A damaged header whose copy is intact is rewritten from the copy (and a damaged copy
    /// from the header), and a damaged state word is read as "not clean" (the layers above
    /// then recover, which is always safe) and rewritten by that store; [`Pool::repaired`]
    /// says what was repaired.
    pub fn attach(pm: B, layout: &str) -> Result<Self, PoolError> {
        let AreaHeader {
            header,
            primary_damage,
            copy_damaged,
        } = read_area_header(&pm)?;
        if header.layout != layout {
            return Err(PoolError::WrongLayout {
                expected: layout.to_owned(),
                found: header.layout.clone(),
            });
        }
        if pm.len() != header.pool_size {
            return Err(PoolError::SizeMismatch {
                actual: pm.len(),
                expected: header.pool_size,
            });
        }
        let mut repaired = Vec::new();
        if let Some(damage) = primary_damage {
            restore_header_from_copy(&pm);
            repaired.push(header_repair(&damage));
        }
        if copy_damaged {
            restore_copy_from_header(&pm);
            repaired.push(COPY_REPAIR.to_owned());
        }
        let flags = match header::decode_state(pm.read_u64(STATE_OFFSET), &header.uuid) {
            Ok(flags) => flags,
            Err(damage) => {
                repaired.push(state_repair(&damage));
                0
            }
        };
        let pool = Pool {
            pm,
            header,
            was_clean: flags & FLAG_CLEAN != 0,
            repaired,
            path: None,
            closed: AtomicBool::new(false),
            opener: std::process::id(),
        };
        pool.write_state(flags & !FLAG_CLEAN);
        Ok(pool)
    }

    /// What opening the pool repaired in its header area (empty for an intact one): a
    /// damaged header rewritten from its copy, a damaged copy rewritten from the header, a
    /// damaged state word read as "not clean".
    pub fn repaired(&self) -> &[String] {
        &self.repaired
    }

    fn write_state(&self, flags: u32) {
        self.pm.write_u64(
            STATE_OFFSET,
            header::encode_state(flags, &self.header.uuid),
            WriteClass::Meta,
        );
        self.pm.persist(STATE_OFFSET, 8);
    }

    /// The persistence seam of this pool.
    #[inline]
    pub fn pm(&self) -> &B {
        &self.pm
    }

    /// The decoded header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Whether the previous session closed the pool cleanly (no crash since). Recovery runs
    /// either way; this is informational.
    pub fn was_clean(&self) -> bool {
        self.was_clean
    }

    /// The application's root region (zeroed at creation).
    pub fn root(&self) -> Region {
        Region {
            offset: self.header.root_offset,
            len: self.header.root_size,
        }
    }

    /// The arena: the rest of the pool, laid out by upper layers.
    pub fn arena(&self) -> Region {
        Region {
            offset: self.header.arena_offset,
            len: self.header.arena_size,
        }
    }

    /// The pool's file, for native pools.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Marks the pool clean and releases it.
    pub fn close(mut self) -> Result<(), PoolError> {
        self.mark_closed()
    }

    fn mark_closed(&mut self) -> Result<(), PoolError> {
        if self.closed.swap(true, Ordering::AcqRel) || std::process::id() != self.opener {
            return Ok(());
        }
        if self.pm.is_poisoned() {
            return Err(PoolError::Poisoned);
        }
        self.write_state(FLAG_CLEAN);
        Ok(())
    }

    /// Releases the pool without marking it clean, as a crash would (the next open sees
    /// `was_clean() == false`). Used by tests and crash drills.
    pub fn abandon(self) {
        self.mark_unclean_on_drop();
    }

    /// The same open pool on a wrapper of its backend (a test backend that observes every
    /// access, such as one that simulates power failures). Nothing is written: the pool
    /// stays open and its state word unchanged. If `wrap` fails, the backend is gone and the
    /// pool is left as a crash leaves it (not marked clean).
    pub fn wrap_backend<C: Persist, E>(
        self,
        wrap: impl FnOnce(B) -> Result<C, E>,
    ) -> Result<Pool<C>, E> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, and these four fields are not touched again
        // after being read, so each is moved out exactly once (the usual way to take fields
        // out of a type with `Drop`); `was_clean` and `closed` are plain values read below.
        let (pm, header, repaired, path) = unsafe {
            (
                std::ptr::read(&this.pm),
                std::ptr::read(&this.header),
                std::ptr::read(&this.repaired),
                std::ptr::read(&this.path),
            )
        };
        Ok(Pool {
            pm: wrap(pm)?,
            header,
            was_clean: this.was_clean,
            repaired,
            path,
            closed: AtomicBool::new(this.closed.load(Ordering::Acquire)),
            opener: this.opener,
        })
    }

    /// Makes dropping the pool leave it marked unclean (for upper layers whose recovery
    /// failed: the pool was not shut down cleanly and must not claim it was).
    pub fn mark_unclean_on_drop(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

impl<B: Persist> Drop for Pool<B> {
    fn drop(&mut self) {
        // A panicking thread may have left upper-layer state half-written; leave the pool
        // marked unclean so the next opener knows.
        if !std::thread::panicking() {
            let _ = self.mark_closed();
        }
    }
}

/// Reads and validates the header through the seam (from its copy if the header itself is
/// damaged, see [`header::decode_area`]).
pub fn read_header<B: Persist>(pm: &B) -> Result<Header, PoolError> {
    read_area_header(pm).map(|area| area.header)
}

fn read_area_header<B: Persist>(pm: &B) -> Result<AreaHeader, PoolError> {
    if pm.len() < header::HEADER_AREA {
        return Err(PoolError::Truncated {
            actual: pm.len(),
            expected: header::HEADER_AREA,
        });
    }
    // Read the whole header area: a future version may have a longer header.
    let mut bytes = vec![0u8; header::HEADER_AREA as usize];
    pm.read(0, &mut bytes);
    header::decode_area(&bytes)
}

/// Rewrites the header from its copy, all 256 bytes at once: until they persist, every mix of
/// old and new lines fails the header's checksum (or keeps its damaged, non-zero magic), so
/// a crash during the repair leaves the copy in charge and the next open repairs again.
fn restore_header_from_copy<B: Persist>(pm: &B) {
    let mut copy = [0u8; HEADER_LEN];
    pm.read(COPY_OFFSET, &mut copy);
    pm.write(0, &copy, WriteClass::Meta);
    pm.persist(0, HEADER_LEN as u64);
}

/// Rewrites the copy from the header. The copy is read only when the header fails its check,
/// so a crash during the rewrite leaves the header in charge and the next open rewrites again.
fn restore_copy_from_header<B: Persist>(pm: &B) {
    let mut header = [0u8; HEADER_LEN];
    pm.read(0, &mut header);
    pm.write(COPY_OFFSET, &header, WriteClass::Meta);
    pm.persist(COPY_OFFSET, HEADER_LEN as u64);
}

/// The note for a copy that differs from the intact header.
const COPY_REPAIR: &str = "pool header copy at 0x800 damaged (it differs from the header)";

/// The note for a damaged header that its copy stands in for.
fn header_repair(damage: &PoolError) -> String {
    format!("pool header damaged ({damage}); its copy at {COPY_OFFSET:#x} is intact")
}

/// The note for a damaged state word, read as "not clean".
fn state_repair(damage: &PoolError) -> String {
    format!("pool state word damaged ({damage}); read as not cleanly closed")
}

impl Pool<Native> {
    /// Creates a pool file at `path` (which must not exist) with mode 0600, reserves its
    /// space, maps it and formats it. The file is locked for as long as the pool is open.
    pub fn create(path: impl AsRef<Path>, options: &CreateOptions) -> Result<Self, PoolError> {
        let path = path.as_ref();
        Header::new(&options.layout, options.size, options.root_size)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let pool = lock(&file)
            .and_then(|()| reserve(&file, options.size).inspect_err(|_| unlock(&file)))
            .and_then(|()| Ok(Native::map(file, options.size, &options.native)?))
            .and_then(|pm| Pool::format(pm, options));
        match pool {
            Ok(mut pool) => {
                pool.path = Some(path.to_owned());
                sync_parent(path);
                Ok(pool)
            }
            Err(error) => {
                // Nothing of value is in the new file; do not leave a half-made pool behind.
                let _ = std::fs::remove_file(path);
                Err(error)
            }
        }
    }

    /// Opens the pool at `path`, checking that it has layout `layout`.
    pub fn open(
        path: impl AsRef<Path>,
        layout: &str,
        native: &NativeOptions,
    ) -> Result<Self, PoolError> {
        let path = path.as_ref();
        let file = open_regular(OpenOptions::new().read(true).write(true), path)?;
        lock(&file)?;
        let header = validate_file(&file).inspect_err(|_| unlock(&file))?.header;
        // From here on the backend owns the file and releases the lock when it is dropped,
        // whether `map` or `attach` fails or the pool is closed.
        let pm = Native::map(file, header.pool_size, native)?;
        let mut pool = Pool::attach(pm, layout)?;
        pool.path = Some(path.to_owned());
        Ok(pool)
    }
}

/// What `pool check` reports about a pool file.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FileReport {
    /// The validated header.
    pub header: Header,
    /// Whether the pool was closed cleanly.
    pub clean: bool,
    /// Whether a process holds it open right now (from `/proc/locks`).
    pub in_use: bool,
    /// Damage in the header area that the next open repairs: a header whose copy is intact
    /// (the copy is reported), a copy that differs from the header, a state word that fails
    /// its check (reported as not clean).
    pub repairable: Vec<String>,
}

/// Validates a pool file without modifying it and without mapping it (safe on any file).
pub fn inspect(path: impl AsRef<Path>) -> Result<FileReport, PoolError> {
    let file = open_regular(OpenOptions::new().read(true), path.as_ref())?;
    let AreaHeader {
        header,
        primary_damage,
        copy_damaged,
    } = validate_file(&file)?;
    let mut repairable: Vec<String> = primary_damage.iter().map(header_repair).collect();
    if copy_damaged {
        repairable.push(COPY_REPAIR.to_owned());
    }
    let mut state = [0u8; 8];
    read_at(&file, STATE_OFFSET, &mut state)?;
    let flags =
        header::decode_state(u64::from_le_bytes(state), &header.uuid).unwrap_or_else(|damage| {
            repairable.push(state_repair(&damage));
            0
        });
    let in_use = is_flocked(&file.metadata()?);
    Ok(FileReport {
        header,
        clean: flags & FLAG_CLEAN != 0,
        in_use,
        repairable,
    })
}

/// Reads the whole pool file at `path` into memory after validating it as [`inspect`] does
/// (read-only, no lock, no mapping): the image for a check that must not write the file.
pub fn read_image(path: impl AsRef<Path>) -> Result<(Vec<u8>, FileReport), PoolError> {
    let report = inspect(path.as_ref())?;
    let file = open_regular(OpenOptions::new().read(true), path.as_ref())?;
    let size = report.header.pool_size;
    let too_large = || {
        PoolError::Io(std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!("a pool of {size} bytes does not fit in memory"),
        ))
    };
    let len = usize::try_from(size).map_err(|_| too_large())?;
    // The size comes from the file (a sparse file can claim terabytes): an allocation that
    // fails is this error, not the process abort of `vec!`.
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(len).map_err(|_| too_large())?;
    bytes.resize(len, 0);
    read_at(&file, 0, &mut bytes)?;
    Ok((bytes, report))
}

/// Whether some process holds a `flock` on the file, read from `/proc/locks` so that
/// inspecting never takes a lock (which could make a concurrent open fail).
fn is_flocked(metadata: &std::fs::Metadata) -> bool {
    !flock_holders_of(metadata).is_empty()
}

/// The processes holding a `flock` on the file at `path` (a pool's opener), from
/// `/proc/locks`; empty when either cannot be read.
pub fn flock_holders(path: &Path) -> Vec<u32> {
    std::fs::metadata(path).map_or_else(|_| Vec::new(), |meta| flock_holders_of(&meta))
}

fn flock_holders_of(metadata: &std::fs::Metadata) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return Vec::new();
    };
    let (major, minor) = (libc::major(metadata.dev()), libc::minor(metadata.dev()));
    let file = format!("{major:02x}:{minor:02x}:{}", metadata.ino());
    locks
        .lines()
        .filter_map(|line| flock_holder(line, &file))
        .collect()
}

/// The process of a `/proc/locks` line that is a granted `flock` on `file`
/// (`MAJOR:MINOR:INODE`, as the kernel writes it): `1: FLOCK ADVISORY WRITE 1234
/// 00:1a:5678 0 EOF`. A request still waiting (`1: -> FLOCK …`) holds nothing.
fn flock_holder(line: &str, file: &str) -> Option<u32> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.get(1) != Some(&"FLOCK") || fields.get(5) != Some(&file) {
        return None;
    }
    fields.get(4)?.parse().ok()
}

/// Opens `path` without blocking (a FIFO would otherwise block the open) and refuses anything
/// but a regular file.
fn open_regular(options: &mut OpenOptions, path: &Path) -> Result<File, PoolError> {
    let file = match options.custom_flags(libc::O_NONBLOCK).open(path) {
        // Opening a directory for writing fails before its type can be checked.
        Err(error) if error.kind() == std::io::ErrorKind::IsADirectory => {
            return Err(PoolError::NotAPool {
                reason: "not a regular file",
            });
        }
        other => other?,
    };
    if !file.metadata()?.is_file() {
        return Err(PoolError::NotAPool {
            reason: "not a regular file",
        });
    }
    Ok(file)
}

/// Reads the header with ordinary file I/O and checks it against the file length, so a
/// truncated file is rejected before it is mapped (touching a page past the end of a mapped
/// file raises SIGBUS).
fn validate_file(file: &File) -> Result<AreaHeader, PoolError> {
    let file_len = file.metadata()?.len();
    let mut bytes = vec![0u8; file_len.min(header::HEADER_AREA) as usize];
    read_at(file, 0, &mut bytes)?;
    let area = header::decode_area(&bytes)?;
    let header = &area.header;
    if file_len < header.pool_size {
        return Err(PoolError::Truncated {
            actual: file_len,
            expected: header.pool_size,
        });
    }
    if file_len > header.pool_size {
        return Err(PoolError::SizeMismatch {
            actual: file_len,
            expected: header.pool_size,
        });
    }
    Ok(area)
}

fn read_at(file: &File, offset: u64, buf: &mut [u8]) -> Result<(), PoolError> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, offset).map_err(PoolError::from)
}

/// Makes the new directory entry durable (best effort: some file systems refuse it).
fn sync_parent(path: &Path) {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Ok(dir) = File::open(parent) {
        let _ = dir.sync_all();
    }
}

/// Releases the lock explicitly: a child forked meanwhile shares the open file description
/// (and with it the lock) until its exec, so closing our descriptor would not release it.
fn unlock(file: &File) {
    let _ = file.unlock();
}

fn lock(file: &File) -> Result<(), PoolError> {
    file.try_lock().map_err(|error| match error {
        std::fs::TryLockError::WouldBlock => PoolError::AlreadyOpen,
        std::fs::TryLockError::Error(error) => PoolError::from(error),
    })
}

/// Allocates the file's blocks now, so running out of space is an error at creation rather
/// than a SIGBUS on first touch of a sparse page.
fn reserve(file: &File, size: u64) -> Result<(), PoolError> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(size)
        .map_err(|_| PoolError::InvalidArgument(format!("pool size {size} too large")))?;
    // SAFETY: posix_fallocate only reads its integer arguments and acts on our own fd.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 => Ok(()),
        // glibc emulates fallocate where the file system lacks it; a C library that does not
        // (musl) reports EOPNOTSUPP, and older kernels EINVAL.
        libc::EOPNOTSUPP | libc::EINVAL => reserve_by_writing(file, size),
        errno => Err(space_error(std::io::Error::from_raw_os_error(errno), size)),
    }
}

/// Allocates the blocks of `[0, size)` by writing zeros over them: a sparse file (`set_len`)
/// would defer running out of space to a SIGBUS at the first store into a hole.
fn reserve_by_writing(file: &File, size: u64) -> Result<(), PoolError> {
    use std::os::unix::fs::FileExt;
    const CHUNK: u64 = 1 << 20;
    let zeros = vec![0u8; CHUNK as usize];
    let mut done = 0;
    while done < size {
        let n = (size - done).min(CHUNK);
        file.write_all_at(&zeros[..n as usize], done)
            .map_err(|error| space_error(error, size))?;
        done += n;
    }
    Ok(())
}

/// The error of a failed reservation: a full file system, a quota or a file-size limit is
/// `OutOfSpace`, anything else its I/O error.
fn space_error(error: std::io::Error, size: u64) -> PoolError {
    match error.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => {
            PoolError::OutOfSpace { requested: size }
        }
        _ => PoolError::from(error),
    }
}

#[cfg(test)]
mod reserve_tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_fallback_reservation_allocates_every_block() {
        let dir = tempfile::tempdir_in(DEFAULT_POOL_DIR).expect("tempdir");
        let file = File::create_new(dir.path().join("p")).expect("create");
        let size = (3 << 20) + 4096;
        reserve_by_writing(&file, size).expect("reserve");
        let meta = file.metadata().expect("metadata");
        assert_eq!(meta.len(), size);
        assert!(
            meta.blocks() * 512 >= size,
            "{} of {size} bytes allocated: a sparse file",
            meta.blocks() * 512
        );
    }

    #[test]
    fn a_full_disk_a_quota_and_a_size_limit_are_out_of_space() {
        for errno in [libc::ENOSPC, libc::EDQUOT, libc::EFBIG] {
            let error = space_error(std::io::Error::from_raw_os_error(errno), 1 << 20);
            assert!(
                matches!(error, PoolError::OutOfSpace { requested: 1048576 }),
                "errno {errno}: {error:?}"
            );
        }
        let other = space_error(std::io::Error::from_raw_os_error(libc::EIO), 1);
        assert!(matches!(other, PoolError::Io(_)), "{other:?}");
    }
}

#[cfg(test)]
mod flock_tests {
    use super::flock_holder;

    #[test]
    fn only_granted_flocks_of_the_file_name_a_holder() {
        let file = "00:1a:5678";
        let granted = "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF";
        assert_eq!(flock_holder(granted, file), Some(1234));
        let waiting = "1: -> FLOCK  ADVISORY  WRITE 99 00:1a:5678 0 EOF";
        assert_eq!(flock_holder(waiting, file), None);
        let other = "2: FLOCK  ADVISORY  WRITE 1234 00:1a:56789 0 EOF";
        assert_eq!(flock_holder(other, file), None);
        let posix = "3: POSIX  ADVISORY  WRITE 1234 00:1a:5678 0 EOF";
        assert_eq!(flock_holder(posix, file), None);
    }
}
