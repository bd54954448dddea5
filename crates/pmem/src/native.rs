//! The native backend: a mapped pool file, persisted with real CPU instructions (or `msync`
//! for pools on ordinary file systems).

use crate::cpu::{self, FlushInstr};
use crate::latency::{LatencyModel, spin_ns};
use crate::mapping::{self, Mapping};
use crate::protect::{Guard, Protection};
use crate::seam::{CACHE_LINE, Persist, WriteClass, assert_in_bounds, lines_covering};
use crate::stats::Stats;
use serde::Serialize;
use std::fs::File;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// How stores are made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PersistMode {
    /// Caches are volatile (ADR): flush lines, then fence.
    Adr,
    /// Caches are in the persistence domain (eADR): flushes are no-ops, fences still order.
    Eadr,
    /// Page-cache file: `msync` the pages of each flushed range.
    Msync,
}

impl PersistMode {
    /// Every mode.
    pub const ALL: [PersistMode; 3] = [PersistMode::Adr, PersistMode::Eadr, PersistMode::Msync];

    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            PersistMode::Adr => "adr",
            PersistMode::Eadr => "eadr",
            PersistMode::Msync => "msync",
        }
    }

    /// Parses a name as printed by [`PersistMode::name`].
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|mode| mode.name() == text)
    }
}

/// What kind of memory backs the mapping (decides the default [`PersistMode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Media {
    /// A DAX file system granted `MAP_SYNC`: real persistent memory.
    Dax,
    /// tmpfs (`/dev/shm`): DRAM standing in for PM, flushed with real instructions.
    EmulatedTmpfs,
    /// An ordinary file system: the page cache, made durable with `msync`.
    PageCache,
}

/// Options of the native backend. The default picks everything automatically.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NativeOptions {
    /// Persistence mode; `None` chooses from the media (ADR on DAX without eADR and on
    /// tmpfs, eADR when the platform reports a CPU-cache persistence domain, msync otherwise).
    pub mode: Option<PersistMode>,
    /// Flush instruction; `None` takes the best the CPU has (clwb, clflushopt, clflush).
    pub flush: Option<FlushInstr>,
    /// Emulated extra PM latency.
    pub latency: LatencyModel,
}

/// An environment variable of the native backend set to a value it does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?} is not one of {expected}")]
pub struct EnvOverrideError {
    /// The variable.
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// The values it takes.
    pub expected: &'static str,
}

impl NativeOptions {
    /// Applies `FERRITE_PERSIST_MODE` (adr | eadr | msync) and `FERRITE_FLUSH`
    /// (clwb | clflushopt | clflush) from the environment, where set and valid; a value that
    /// is set but not valid is ignored (see [`NativeOptions::try_with_env_overrides`]).
    pub fn with_env_overrides(mut self) -> Self {
        if let Ok(Some(mode)) = persist_mode_from_env() {
            self.mode = Some(mode);
        }
        if let Ok(Some(flush)) = flush_from_env() {
            self.flush = Some(flush);
        }
        self
    }

    /// Applies `FERRITE_PERSIST_MODE` and `FERRITE_FLUSH` from the environment; a value
    /// that is set but not one of theirs is an error naming the variable.
    pub fn try_with_env_overrides(mut self) -> Result<Self, EnvOverrideError> {
        if let Some(mode) = persist_mode_from_env()? {
            self.mode = Some(mode);
        }
        if let Some(flush) = flush_from_env()? {
            self.flush = Some(flush);
        }
        Ok(self)
    }
}

fn persist_mode_from_env() -> Result<Option<PersistMode>, EnvOverrideError> {
    env_choice(
        "FERRITE_PERSIST_MODE",
        "adr, eadr, msync",
        PersistMode::parse,
    )
}

fn flush_from_env() -> Result<Option<FlushInstr>, EnvOverrideError> {
    env_choice(
        "FERRITE_FLUSH",
        "clwb, clflushopt, clflush",
        FlushInstr::parse,
    )
}

/// The variable `name` parsed by `parse`: `None` when it is not set.
fn env_choice<T>(
    name: &'static str,
    expected: &'static str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Option<T>, EnvOverrideError> {
    let Some(value) = std::env::var_os(name) else {
        return Ok(None);
    };
    let value = value.to_string_lossy().into_owned();
    match parse(&value) {
        Some(choice) => Ok(Some(choice)),
        None => Err(EnvOverrideError {
            name,
            value,
            expected,
        }),
    }
}

/// Backend over a mapped pool file.
#[derive(Debug)]
pub struct Native {
    map: Mapping,
    len: u64,
    mode: PersistMode,
    flush: FlushInstr,
    media: Media,
    latency: LatencyModel,
    stats: Stats,
    /// Set when an `msync` failed: the pool's durability can no longer be trusted.
    poisoned: AtomicBool,
    /// Write protection, once installed by [`Native::protect`] (empty: unprotected). Dropped
    /// after `map`, so an MPK key is freed only once the pages it tagged are unmapped.
    guard: OnceLock<Guard>,
    /// Serialises [`Native::protect`]: two guards installed at once would each change the
    /// mapping's protection, and the one that lost the race would be dropped while its
    /// protection (or its MPK key's tag) stayed in force.
    protecting: parking_lot::Mutex<()>,
    /// Holds the advisory lock for as long as the backend lives (last, so it is released
    /// after the mapping is gone).
    _file: PoolFile,
}

/// A pool file whose advisory lock is released explicitly when it is dropped. Closing the
/// descriptor is not enough: a `flock` belongs to the open file description, which a child
/// forked by another thread shares until its exec closes its copy, so the lock would
/// outlive the pool and a new open would be refused as "already open". For the same
/// reason only the process that opened the file releases it: a child forked without
/// `exec` that drops its copy closes its descriptor and leaves the opener's lock alone.
#[derive(Debug)]
struct PoolFile {
    file: File,
    opener: u32,
}

impl PoolFile {
    fn new(file: File) -> Self {
        PoolFile {
            file,
            opener: std::process::id(),
        }
    }
}

impl Drop for PoolFile {
    fn drop(&mut self) {
        // Unlocking a file that holds no lock (an unlocked mapping, a test backend) is a
        // harmless no-op.
        if std::process::id() == self.opener {
            let _ = self.file.unlock();
        }
    }
}

/// A description of the backend, for `pool info` and reports.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct NativeInfo {
    /// Persistence mode in use.
    pub mode: PersistMode,
    /// Flush instruction in use.
    pub flush: FlushInstr,
    /// Media kind.
    pub media: Media,
    /// Whether the kernel granted `MAP_SYNC`.
    pub map_sync: bool,
    /// Emulated latency.
    pub latency: LatencyModel,
}

impl Native {
    /// Maps the first `len` bytes of `file`; a file shorter than `len` is refused
    /// (`InvalidInput`). The backend keeps
    /// `file` open, so an advisory lock taken on it lasts as long as the backend.
    /// If mapping fails, the file's lock is released before the error returns.
    pub fn map(file: File, len: u64, options: &NativeOptions) -> std::io::Result<Self> {
        let file = PoolFile::new(file);
        let flush = options.flush.unwrap_or_else(FlushInstr::best_available);
        if !flush.is_supported() && options.mode.is_none_or(|mode| mode == PersistMode::Adr) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!("this CPU does not implement {}", flush.name()),
            ));
        }
        let size = usize::try_from(len).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        // A mapping longer than its file raises SIGBUS on the first touch past the end; refuse
        // it here, where it is still an error (`Pool::open` has checked the length already,
        // a direct caller may not have).
        let file_len = file.file.metadata()?.len();
        if file_len < len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("the file has {file_len} bytes, fewer than the {len} to map"),
            ));
        }
        let map = Mapping::new(&file.file, size)?;
        let media = if map.is_sync() {
            Media::Dax
        } else if mapping::fs_type(&file.file)? == mapping::TMPFS_MAGIC {
            Media::EmulatedTmpfs
        } else {
            Media::PageCache
        };
        let mode = options.mode.unwrap_or(match media {
            Media::Dax if platform_has_eadr() => PersistMode::Eadr,
            Media::Dax | Media::EmulatedTmpfs => PersistMode::Adr,
            Media::PageCache => PersistMode::Msync,
        });
        Ok(Native {
            map,
            len,
            mode,
            flush,
            media,
            latency: options.latency,
            stats: Stats::new(),
            poisoned: AtomicBool::new(false),
            guard: OnceLock::new(),
            protecting: parking_lot::Mutex::new(()),
            _file: file,
        })
    }

    /// What this backend is doing.
    pub fn info(&self) -> NativeInfo {
        NativeInfo {
            mode: self.mode,
            flush: self.flush,
            media: self.media,
            map_sync: self.map.is_sync(),
            latency: self.latency,
        }
    }

    /// Base address of the mapping. Dereferencing it is the caller's responsibility: stores
    /// made through it bypass the seam and its accounting and are outside the crash model
    /// (the direct-access path of the file system and of the threads runtime).
    pub fn base_ptr(&self) -> *mut u8 {
        self.map.base()
    }

    /// Makes the mapping read-only and every store through the seam a short write window
    /// (`crate::protect`); returns the mechanism in force ([`Protection::Auto`] picks MPK
    /// where the CPU has it, `mprotect` otherwise). Install it before the backend is shared
    /// with other threads. Protection cannot be changed or removed once installed.
    /// Stores through [`Native::base_ptr`] outside a window fault with `SIGSEGV`.
    pub fn protect(&self, mode: Protection) -> std::io::Result<Protection> {
        if mode == Protection::None {
            return Ok(self.protection());
        }
        let _installing = self.protecting.lock();
        if let Some(guard) = self.guard.get() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("already protected with {}", guard.mode().name()),
            ));
        }
        let guard = Guard::install(self.map.base(), self.len as usize, mode)?;
        let active = guard.mode();
        // Cannot fail: the guard is only ever set here, under `protecting`.
        let _ = self.guard.set(guard);
        Ok(active)
    }

    /// The protection in force.
    pub fn protection(&self) -> Protection {
        self.guard.get().map_or(Protection::None, Guard::mode)
    }

    /// Write windows opened since protection was installed.
    pub fn write_windows(&self) -> u64 {
        self.guard.get().map_or(0, Guard::windows)
    }

    /// Runs `store` (which writes `[off, off + len)`) inside a write window when protected.
    #[inline]
    fn storing<R>(&self, off: u64, len: usize, store: impl FnOnce() -> R) -> R {
        match self.guard.get() {
            None => store(),
            Some(guard) => guard.window(off, len, store),
        }
    }

    #[inline]
    fn addr(&self, off: u64, len: usize) -> *mut u8 {
        assert_in_bounds(off, len as u64, self.len);
        // SAFETY: off + len <= self.len == mapping length (checked above), so the result
        // points inside the mapping.
        unsafe { self.map.base().add(off as usize) }
    }

    fn msync(&self, off: u64, len: u64) {
        if self.map.msync(off as usize, len as usize).is_err() {
            self.poisoned.store(true, Ordering::Release);
        }
    }

    /// Writes back the lines of `[off, off + len)`; returns how many.
    fn write_back(&self, off: u64, len: u64) -> u64 {
        let lines = lines_covering(off, len);
        let count = lines.end - lines.start;
        for line in lines {
            let addr = self.addr(line * CACHE_LINE, CACHE_LINE as usize);
            // SAFETY: addr is inside the mapping; in ADR mode (the only caller) the flush
            // instruction was checked to be supported when the backend was built.
            unsafe { cpu::flush_line(self.flush, addr) };
        }
        self.stats.record_flush(count);
        count
    }

    fn flush_lines(&self, off: u64, len: u64) {
        let count = self.write_back(off, len);
        spin_ns(count * self.latency.line_writeback_ns);
    }

    /// The non-temporal copy of `write_nt`, without the write window.
    fn write_nt_unguarded(&self, off: u64, src: &[u8], class: WriteClass) {
        let dst = self.addr(off, src.len());
        self.stats.record_nt_store(class, src.len() as u64);
        if self.mode == PersistMode::Msync {
            // Streaming stores do not bypass the page cache; make the range durable now.
            // SAFETY: dst..dst+src.len() is inside the mapping.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
            return self.msync(off, src.len() as u64);
        }
        // SAFETY: dst..dst+src.len() is inside the mapping and does not overlap src.
        let copy = unsafe { cpu::copy_nontemporal(dst, src) };
        if self.mode == PersistMode::Adr {
            // Unaligned fringe bytes went through the cache: write their lines back so the
            // next fence makes the whole copy durable, as the seam promises.
            let base = self.map.base() as usize;
            for addr in [copy.first, copy.last].into_iter().flatten() {
                self.write_back((addr - base) as u64, 1);
            }
        }
        let lines = lines_covering(off, src.len() as u64);
        spin_ns((lines.end - lines.start) * self.latency.line_writeback_ns);
    }
}

impl Persist for Native {
    fn len(&self) -> u64 {
        self.len
    }

    #[inline]
    fn read(&self, off: u64, dst: &mut [u8]) {
        if let Some(guard) = self.guard.get() {
            guard.prepare_read();
        }
        let src = self.addr(off, dst.len());
        // SAFETY: src..src+dst.len() is inside the mapping; dst is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) }
    }

    #[inline]
    fn write(&self, off: u64, src: &[u8], class: WriteClass) {
        if src.len() == 8 && off.is_multiple_of(8) {
            // One untorn store, as the seam promises for aligned words.
            let word = u64::from_le_bytes(src.try_into().expect("8 bytes"));
            return self.write_u64(off, word, class);
        }
        let dst = self.addr(off, src.len());
        // SAFETY: dst..dst+src.len() is inside the mapping (writable inside the window);
        // src is a distinct Rust buffer. (x86 copy routines store aligned 8-byte words
        // untorn, which the seam promises.)
        self.storing(off, src.len(), || unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len())
        });
        self.stats.record_store(class, src.len() as u64);
    }

    #[inline]
    fn write_u64(&self, off: u64, value: u64, class: WriteClass) {
        if !off.is_multiple_of(8) {
            return self.write(off, &value.to_le_bytes(), class);
        }
        let dst = self.addr(off, 8);
        self.storing(off, 8, || {
            // SAFETY: dst is 8-byte aligned and inside the mapping (writable inside the
            // window); an atomic store guarantees a single untorn 8-byte store, which is
            // what failure atomicity needs.
            unsafe { AtomicU64::from_ptr(dst.cast()) }.store(value.to_le(), Ordering::Relaxed)
        });
        self.stats.record_store(class, 8);
    }

    #[inline]
    fn read_u64(&self, off: u64) -> u64 {
        if !off.is_multiple_of(8) {
            let mut word = [0u8; 8];
            self.read(off, &mut word);
            return u64::from_le_bytes(word);
        }
        if let Some(guard) = self.guard.get() {
            guard.prepare_read();
        }
        let src = self.addr(off, 8);
        // SAFETY: src is 8-byte aligned and inside the mapping.
        u64::from_le(unsafe { AtomicU64::from_ptr(src.cast()) }.load(Ordering::Relaxed))
    }

    fn write_nt(&self, off: u64, src: &[u8], class: WriteClass) {
        // Bounds first, as `write` does: the window changes the protection of the pages of
        // `[off, off + len)`, which must be pages of this mapping.
        assert_in_bounds(off, src.len() as u64, self.len);
        self.storing(off, src.len(), || self.write_nt_unguarded(off, src, class));
    }

    #[inline]
    fn flush(&self, off: u64, len: u64) {
        match self.mode {
            PersistMode::Adr => self.flush_lines(off, len),
            PersistMode::Eadr => assert_in_bounds(off, len, self.len),
            PersistMode::Msync => {
                assert_in_bounds(off, len, self.len);
                let lines = lines_covering(off, len);
                self.stats.record_flush(lines.end - lines.start);
                self.msync(off, len);
            }
        }
    }

    #[inline]
    fn fence(&self) {
        cpu::sfence();
        self.stats.record_fence();
        spin_ns(self.latency.fence_ns);
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }

    fn durability_point(&self) {
        self.stats.record_durability_point();
    }

    fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }
}

/// Whether an NVDIMM region reports a CPU-cache persistence domain (eADR), as libpmem2 checks.
fn platform_has_eadr() -> bool {
    let Ok(regions) = std::fs::read_dir("/sys/bus/nd/devices") else {
        return false;
    };
    let domains: Vec<String> = regions
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("region"))
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("persistence_domain")).ok())
        .collect();
    !domains.is_empty() && domains.iter().all(|domain| domain.trim() == "cpu_cache")
}
