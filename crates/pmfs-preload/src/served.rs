//! The served file system: configuration from the environment, path routing, the table of
//! served descriptors (kernel descriptor number → `pmfs` descriptor) and of live mappings.
//! Everything here is safe Rust over `pmfs::Posix`; `abi.rs` turns it into C functions.

use parking_lot::{Mutex, RwLock};
use pmem::{Native, NativeOptions, Pool};
use pmfs::mmap::FileMap;
use pmfs::{Errno, Fd, Fs, MountOptions, Posix};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::time::{Duration, Instant};

/// What the environment asks for.
#[derive(Debug)]
pub(crate) struct Config {
    /// The pool file (`PMFS_POOL`).
    pub(crate) pool: PathBuf,
    /// The served prefix, absolute, without a trailing slash (`PMFS_PREFIX`, default
    /// `/pmfs`).
    pub(crate) prefix: String,
}

/// The configuration, read once; `None` when `PMFS_POOL` is unset (nothing is served).
pub(crate) fn config() -> Option<&'static Config> {
    static CONFIG: OnceLock<Option<Config>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let pool = PathBuf::from(std::env::var_os("PMFS_POOL")?);
            let prefix = match std::env::var("PMFS_PREFIX") {
                Ok(prefix) => prefix.trim_end_matches('/').to_owned(),
                Err(std::env::VarError::NotPresent) => "/pmfs".to_owned(),
                Err(std::env::VarError::NotUnicode(raw)) => {
                    // Refused, never replaced by the default. Not `eprintln!`: a panic must
                    // not unwind into the C program.
                    let _ = writeln!(
                        std::io::stderr(),
                        "pmfs-preload: PMFS_PREFIX={raw:?} is not UTF-8: nothing is served"
                    );
                    return None;
                }
            };
            let usable = prefix_is_usable(&prefix);
            if !usable {
                let _ = writeln!(
                    std::io::stderr(),
                    "pmfs-preload: PMFS_PREFIX={prefix:?} is not an absolute directory other \
                     than / without empty, \".\" or \"..\" components: nothing is served"
                );
            }
            usable.then_some(Config { pool, prefix })
        })
        .as_ref()
}

/// Whether `prefix` (trailing slashes removed) can be served: absolute, not `/`, and
/// spelled the one way the kernel would name it. Routing compares bytes, so `//pmfs` served
/// `//pmfs/a` only, while `/pmfs/a` (the same file to the kernel) went to the kernel, and
/// `/x/../pmfs` matched nothing a program passes.
fn prefix_is_usable(prefix: &str) -> bool {
    match prefix.strip_prefix('/') {
        Some(rest) if !rest.is_empty() => rest
            .split('/')
            .all(|component| !matches!(component, "" | "." | "..")),
        _ => false,
    }
}

/// The path inside the file system of `path` when it is under the prefix. Paths are bytes,
/// as the kernel's are: a name need not be UTF-8.
pub(crate) fn route(config: &Config, path: &[u8]) -> Option<Vec<u8>> {
    let rest = path.strip_prefix(config.prefix.as_bytes())?;
    if !rest.is_empty() && rest[0] != b'/' {
        return None;
    }
    Some(if rest.is_empty() {
        b"/".to_vec()
    } else {
        rest.to_vec()
    })
}

/// `rel` relative to served directory `dir`: `dir/rel` (one slash between them).
pub(crate) fn join(dir: &[u8], rel: &[u8]) -> Vec<u8> {
    let dir = trim_trailing_slashes(dir);
    let mut path = Vec::with_capacity(dir.len() + 1 + rel.len());
    path.extend_from_slice(dir);
    path.push(b'/');
    path.extend_from_slice(rel);
    path
}

/// `path` without its trailing slashes (`/` becomes empty).
pub(crate) fn trim_trailing_slashes(path: &[u8]) -> &[u8] {
    let end = path.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
    &path[..end]
}

/// A served descriptor.
#[derive(Clone, Debug)]
pub(crate) struct Open {
    /// The library's descriptor.
    pub(crate) fd: Fd,
    /// The path it was opened with, inside the file system (for the `*at` calls).
    pub(crate) path: Vec<u8>,
    /// The `open` flags (for `F_GETFL`, and to open the file again after `exec`).
    pub(crate) flags: i32,
}

/// A live mapping of a served file.
#[derive(Debug)]
pub(crate) struct Mapping {
    /// First byte in the program's address space.
    pub(crate) addr: usize,
    /// Bytes mapped.
    pub(crate) len: usize,
    /// The pinned range (its blocks stay the file's until the mapping goes).
    pub(crate) map: FileMap<'static, Native>,
}

/// The pool, mounted, with the served descriptors and mappings.
#[derive(Debug)]
pub(crate) struct Served {
    pub(crate) px: Posix<Native>,
    pub(crate) fds: RwLock<HashMap<i32, Open>>,
    pub(crate) maps: Mutex<Vec<Mapping>>,
    /// The pool file, opened again for mapping its pages into the program.
    pub(crate) pool_file: std::fs::File,
    /// The process's file-creation mask when the pool was opened (applied to new files
    /// and directories, as the kernel applies the current one).
    pub(crate) umask: u32,
    /// The process that opened the pool (and so holds its lock; a forked child does not
    /// own it).
    pub(crate) owner_pid: u32,
}

/// This process's file-creation mask, read without changing it.
fn current_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("Umask:"))?;
            u32::from_str_radix(line.split_whitespace().nth(1)?, 8).ok()
        })
        .unwrap_or(0o022)
}

/// The mounted pool, or null. Set under [`MOUNTING`]; taken down only by
/// [`release_if_idle`], when no other reference to it can exist.
static CURRENT: AtomicPtr<Served> = AtomicPtr::new(std::ptr::null_mut());

/// Serialises mounting and releasing, and keeps a refusal that another try would repeat
/// (no pool file, no permission, not a PMFS pool). A busy pool is tried again at the next
/// served call: its owner may have released it meanwhile.
static MOUNTING: Mutex<Option<Refusal>> = Mutex::new(None);

/// Whether the "pool is busy" line was printed (once per process).
static BUSY_REPORTED: AtomicBool = AtomicBool::new(false);

/// Why the pool cannot be served, and the error number every served call then fails with.
#[derive(Debug)]
pub(crate) struct Refusal {
    errno: Errno,
    why: String,
}

impl Refusal {
    fn io(why: String) -> Self {
        Refusal {
            errno: Errno::EIO,
            why,
        }
    }
}

/// The served file system if it is up (descriptor calls: a descriptor can only be served
/// once it is).
pub(crate) fn served() -> Option<&'static Served> {
    let current = CURRENT.load(Ordering::Acquire);
    // SAFETY: a non-null `CURRENT` came from `Box::into_raw` in `served_or_open` and is
    // freed only by `release_if_idle`, in a process of one thread that is not inside a
    // served call, holds nothing served open, and so keeps no reference to it (a forked
    // child sets it to null without freeing its copy, `forget_after_fork`).
    (!current.is_null()).then(|| unsafe { &*current })
}

/// The served file system, opening and mounting the pool on first use. When it cannot be
/// (after one message on stderr), served calls fail: `EBUSY` while another process has the
/// pool (waited for up to [`BUSY_WAIT`], tried again at every call), `ENOENT` when the pool file does not exist, `EACCES`
/// when it may not be opened, `EIO` otherwise (those three for good).
pub(crate) fn served_or_open(config: &Config) -> Result<&'static Served, Errno> {
    if let Some(fs) = served() {
        return Ok(fs);
    }
    let mut refused = MOUNTING.lock();
    if let Some(fs) = served() {
        return Ok(fs);
    }
    if let Some(refusal) = refused.as_ref() {
        return Err(refusal.errno);
    }
    match open_waiting(config) {
        Ok(fs) => {
            forget_in_forked_children();
            let fs = Box::into_raw(Box::new(fs));
            CURRENT.store(fs, Ordering::Release);
            // SAFETY: just made by `Box::into_raw`; see `served`.
            Ok(unsafe { &*fs })
        }
        Err(refusal) => {
            let busy = refusal.errno == Errno::EBUSY;
            if !busy || !BUSY_REPORTED.swap(true, Ordering::Relaxed) {
                let _ = writeln!(
                    std::io::stderr(),
                    "pmfs-preload: cannot serve {}: {}",
                    config.prefix,
                    refusal.why
                );
            }
            let errno = refusal.errno;
            if !busy {
                *refused = Some(refusal);
            }
            Err(errno)
        }
    }
}

/// How long a served call waits for a pool another process holds before it fails with
/// `EBUSY`. Most holders of a moment are shells between `fork` and `exec`: bash looks a
/// pipeline stage's command up in `PATH` in the child, `stat`ing `.`, which from a served
/// working directory mounts the pool until the child execs (about 10 ms on a 1 GiB pool);
/// the neighbouring stage that reads a served file found the pool busy about one time in
/// five. A holder for good (a FUSE mount, a program running) costs this wait once: see
/// [`WAIT_RAN_OUT`].
const BUSY_WAIT: Duration = Duration::from_millis(300);

/// Set when a wait for a busy pool ran out: later calls fail at once instead of waiting
/// again, until the pool is mounted (a process that finds the pool held for good pays
/// [`BUSY_WAIT`] once, not at each call).
static WAIT_RAN_OUT: AtomicBool = AtomicBool::new(false);

/// [`open`], trying a pool that another process holds again every 2 ms for up to
/// [`BUSY_WAIT`] (not at all after a wait that ran out). Called under [`MOUNTING`].
fn open_waiting(config: &Config) -> Result<Served, Refusal> {
    if nvthreads_active() {
        return Err(Refusal {
            errno: Errno::EOPNOTSUPP,
            why: "the NVthreads runtime runs this program, whose threads are processes: \
                  they cannot share this library's file system (its locks wake threads \
                  of one process only, and a pool is open in one process at a time); \
                  mount the pool with `ferrite fs mount POOL DIR` and use DIR instead"
                .into(),
        });
    }
    let deadline = Instant::now() + BUSY_WAIT;
    loop {
        match open(config) {
            Ok(fs) => {
                WAIT_RAN_OUT.store(false, Ordering::Relaxed);
                return Ok(fs);
            }
            Err(refusal) if refusal.errno == Errno::EBUSY => {
                if WAIT_RAN_OUT.load(Ordering::Relaxed) || Instant::now() >= deadline {
                    WAIT_RAN_OUT.store(true, Ordering::Relaxed);
                    return Err(refusal);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(refusal) => return Err(refusal),
        }
    }
}

/// Whether NVthreads' runtime (`libnvthreads_rt.so`, loaded beside this library) runs in
/// this process: it exports `nvt_active`, 1 unless it is dormant.
fn nvthreads_active() -> bool {
    // SAFETY: dlsym with the default handle and a NUL-terminated name.
    let found = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"nvt_active".as_ptr()) };
    if found.is_null() {
        return false;
    }
    // SAFETY: NVthreads defines `nvt_active` as `int nvt_active(void)` (`nvthreads.h`).
    let active: unsafe extern "C" fn() -> libc::c_int = unsafe { std::mem::transmute(found) };
    // SAFETY: it takes no argument and only reads the runtime's start state.
    unsafe { active() == 1 }
}

/// Registers (once) [`forget_after_fork`] to run in every child `fork` makes.
fn forget_in_forked_children() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: registers a child handler that only stores to an atomic, which is
        // allowed between `fork` and `exec`.
        unsafe { libc::pthread_atfork(None, None, Some(forget_after_fork)) };
    });
}

/// In a child of the pool's owner: drops the inherited copy of the served state without
/// running its destructor. The copy goes stale at the parent's next change, and its
/// destructor would unlock the parent's pool (the lock belongs to the open file
/// description both share). The child's served calls then try to open the pool for
/// themselves, and find it busy while the parent has it (`EBUSY`); its inherited served
/// descriptors are placeholders (`EBADF`).
extern "C" fn forget_after_fork() {
    CURRENT.store(std::ptr::null_mut(), Ordering::Release);
}

/// Gives the pool up if this process holds nothing served (`holds_nothing`: no
/// descriptor, stream or mapping) and runs one thread, so that a program it starts can
/// open the pool: a shell that wrote a file with a built-in's redirection then runs `cat`
/// of it. Called before `fork`, `posix_spawn`, `system` and `popen`; the next served call
/// mounts the pool again (recovering as every mount does).
pub(crate) fn release_if_idle(holds_nothing: impl FnOnce(&Served) -> bool) {
    let _mounting = MOUNTING.lock();
    let Some(fs) = served() else {
        return;
    };
    if fs.owner_pid != std::process::id() || !holds_nothing(fs) || !single_threaded() {
        return;
    }
    let current = CURRENT.swap(std::ptr::null_mut(), Ordering::AcqRel);
    // SAFETY: from `Box::into_raw` in `served_or_open`; with one thread, outside any served
    // call and nothing served open, nothing refers to it any more (see `served`).
    drop(unsafe { Box::from_raw(current) });
}

/// Whether this process runs a single thread (its task directory has one entry).
fn single_threaded() -> bool {
    std::fs::read_dir("/proc/self/task").is_ok_and(|tasks| tasks.take(2).count() == 1)
}

/// The refusal of a pool that [`Pool::open`] would not open.
fn refusal_of(pool: &std::path::Path, error: &pmem::PoolError) -> Refusal {
    let (errno, hint) = match error {
        pmem::PoolError::AlreadyOpen => (
            Errno::EBUSY,
            " (one process at a time: is it mounted or served elsewhere?)",
        ),
        pmem::PoolError::NotFound => (Errno::ENOENT, " (PMFS_POOL names no file)"),
        pmem::PoolError::PermissionDenied => (Errno::EACCES, ""),
        _ => (Errno::EIO, ""),
    };
    Refusal {
        errno,
        why: format!("{}: {error}{hint}", pool.display()),
    }
}

/// Refuses a pool path the library cannot open: opening it goes through this library's
/// own `open`, which serves an absolute path under the prefix, and a relative one while
/// the working directory is served, from the pool being mounted, so the open waited on
/// itself and the program hung.
fn check_pool_path(config: &Config) -> Result<(), Refusal> {
    let pool = &config.pool;
    let why = if !pool.is_absolute() {
        format!(
            "PMFS_POOL={pool:?} is not an absolute path (a relative one would be looked up in \
             the served working directory, inside the pool itself)"
        )
    } else if route(config, pool.as_os_str().as_encoded_bytes()).is_some() {
        format!(
            "PMFS_POOL={pool:?} is under PMFS_PREFIX={:?}: the pool cannot be a file of its \
             own file system",
            config.prefix
        )
    } else {
        return Ok(());
    };
    Err(Refusal {
        errno: Errno::EINVAL,
        why,
    })
}

fn open(config: &Config) -> Result<Served, Refusal> {
    check_pool_path(config)?;
    let native = NativeOptions::default()
        .try_with_env_overrides()
        .map_err(|e| Refusal::io(e.to_string()))?;
    let pool = Pool::open(&config.pool, pmfs::LAYOUT, &native)
        .map_err(|e| refusal_of(&config.pool, &e))?;
    let pool_file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&config.pool)
        .map_err(|e| Refusal::io(format!("{}: {e}", config.pool.display())))?;
    let fs = Fs::mount(pool, MountOptions::default()).map_err(|e| {
        let pool = config.pool.display();
        // Damage is refused whole (one bad bit in an unused inode is enough): say what to do.
        let hint = match e {
            pmfs::FsError::Corrupted(_) => format!(
                " (`ferrite fs fsck {pool}` lists the damage; `ferrite fs fsck --repair \
                 {pool}` repairs what it can, removing what it cannot trust)"
            ),
            _ => String::new(),
        };
        Refusal::io(format!("{pool}: {e}{hint}"))
    })?;
    Ok(Served {
        px: Posix::new(fs),
        fds: RwLock::new(HashMap::new()),
        maps: Mutex::new(Vec::new()),
        pool_file,
        umask: current_umask(),
        owner_pid: std::process::id(),
    })
}

impl Served {
    /// The served descriptor behind kernel descriptor `kfd`.
    pub(crate) fn open_of(&self, kfd: i32) -> Option<Open> {
        self.fds.read().get(&kfd).cloned()
    }

    /// Makes every mapping of inode `ino` durable (an `fsync` covers stores through them).
    pub(crate) fn persist_maps_of(&self, ino: u64) -> Result<(), Errno> {
        for mapping in self.maps.lock().iter().filter(|m| m.map.ino() == ino) {
            mapping.map.persist_all()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_only_paths_under_the_prefix() {
        let config = Config {
            pool: PathBuf::from("/dev/shm/p"),
            prefix: "/pmfs".to_owned(),
        };
        assert_eq!(route(&config, b"/pmfs").as_deref(), Some(&b"/"[..]));
        assert_eq!(route(&config, b"/pmfs/a/b").as_deref(), Some(&b"/a/b"[..]));
        assert_eq!(
            route(&config, b"/pmfs/caf\xe9").as_deref(),
            Some(&b"/caf\xe9"[..]),
            "a name that is not UTF-8 is served, never left to the kernel"
        );
        assert_eq!(route(&config, b"/pmfsx/a"), None);
        assert_eq!(route(&config, b"/tmp/pmfs"), None);
        assert_eq!(route(&config, b"pmfs/a"), None);
    }

    #[test]
    fn only_a_prefix_spelled_as_the_kernel_names_it_is_served() {
        for good in ["/pmfs", "/mnt/pmfs", "/a.b/..c"] {
            assert!(prefix_is_usable(good), "{good}");
        }
        for bad in [
            "",
            "/",
            "pmfs",
            "//pmfs",
            "/pmfs/.",
            "/x/../pmfs",
            "/a//b",
            "/..",
        ] {
            assert!(!prefix_is_usable(bad), "{bad}");
        }
    }

    #[test]
    fn a_pool_the_library_would_open_through_itself_is_refused() {
        let config = |pool: &str| Config {
            pool: PathBuf::from(pool),
            prefix: "/pmfs".to_owned(),
        };
        assert!(check_pool_path(&config("/dev/shm/p")).is_ok());
        assert!(check_pool_path(&config("/pmfsx/p")).is_ok());
        for bad in ["p", "", "./p", "/pmfs/p", "/pmfs"] {
            let refusal = check_pool_path(&config(bad)).expect_err(bad);
            assert_eq!(refusal.errno, Errno::EINVAL, "{bad}");
            assert!(refusal.why.contains("PMFS_POOL"), "{}", refusal.why);
        }
    }
}
