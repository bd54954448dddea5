//! What a run leaves on the machine while it runs — scratch pool files, directories, mounts,
//! loop devices — and how to take it down when the process is interrupted: a signal that ends
//! the process runs no destructor, so without [`tear_down_all`] Ctrl-C would leave pools on
//! `/dev/shm` and dead mounts behind.
//!
//! Each thing a run creates registers its teardown with [`on_interrupt`] and keeps the
//! returned [`Teardown`]; its own destructor cleans up as usual and the guard unregisters.
//! The programs a run starts come from [`child_command`] and die with the process.

use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

type Action = Box<dyn FnOnce() + Send>;

/// The teardowns of everything alive, in creation order, by guard id.
static PENDING: Mutex<Vec<(u64, Action)>> = Mutex::new(Vec::new());

/// Unregisters its teardown when dropped (the owner cleaned up itself).
#[derive(Debug)]
#[must_use = "dropping the guard unregisters the teardown at once"]
pub struct Teardown {
    id: u64,
}

/// A guard id no other guard has.
fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Registers `action` to run if the process is interrupted while the returned guard lives.
pub fn on_interrupt(action: impl FnOnce() + Send + 'static) -> Teardown {
    let id = next_id();
    PENDING.lock().push((id, Box::new(action)));
    Teardown { id }
}

/// Runs `create`, then registers `action` to take down what it made, with no moment between
/// the two at which an interrupt finds one without the other ([`tear_down_all`] waits for
/// `create`). Nothing is registered when `create` fails.
pub fn create_with_teardown<E>(
    create: impl FnOnce() -> Result<(), E>,
    action: impl FnOnce() + Send + 'static,
) -> Result<Teardown, E> {
    let mut pending = PENDING.lock();
    create()?;
    let id = next_id();
    pending.push((id, Box::new(action)));
    Ok(Teardown { id })
}

impl Drop for Teardown {
    fn drop(&mut self) {
        let mut pending = PENDING.lock();
        if let Some(at) = pending.iter().position(|(id, _)| *id == self.id) {
            drop(pending.remove(at));
        }
    }
}

/// Runs every registered teardown, newest first (a mount before the directory it is on),
/// for a process about to exit on a signal; returns how many ran. The list stays locked
/// afterwards, so that nothing registered later is left behind unnoticed while the process
/// exits.
pub fn tear_down_all() -> usize {
    let mut pending = PENDING.lock();
    let actions: Vec<(u64, Action)> = pending.drain(..).collect();
    let count = actions.len();
    for (_, action) in actions.into_iter().rev() {
        action();
    }
    std::mem::forget(pending);
    count
}

/// A command for a program a run starts (fio, sqlite, the NVthreads programs, the tools that
/// set targets up): its process gets `SIGKILL` when this process dies, even by a `SIGKILL`
/// that runs no teardown, so no benchmark program outlives the run that started it. Spawn it
/// from a thread that waits for it (the signal follows the spawning thread).
pub fn child_command(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    let mut command = std::process::Command::new(program);
    pdeathsig::die_with_parent(&mut command, pdeathsig::Signal::Kill);
    command
}

/// A scratch file's path, torn down on interrupt while the guard lives; dropping it removes
/// the file.
#[derive(Debug)]
pub struct ScratchFile {
    path: PathBuf,
    _teardown: Teardown,
}

impl ScratchFile {
    /// Registers `path` (the file need not exist yet: an engine creates it after this).
    pub fn new(path: PathBuf) -> Self {
        let doomed = path.clone();
        let teardown = on_interrupt(move || {
            let _ = std::fs::remove_file(doomed);
        });
        Self {
            path,
            _teardown: teardown,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A fresh scratch directory (a `tempfile::TempDir`: removed with its contents on drop), torn
/// down on interrupt too.
#[derive(Debug)]
pub struct ScratchDir {
    dir: tempfile::TempDir,
    _teardown: Teardown,
}

impl ScratchDir {
    /// A new directory named `<prefix><random>` in `parent`.
    pub fn new_in(parent: &Path, prefix: &str) -> std::io::Result<Self> {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir_in(parent)?;
        let doomed = dir.path().to_owned();
        let teardown = on_interrupt(move || {
            let _ = std::fs::remove_dir_all(doomed);
        });
        Ok(Self {
            dir,
            _teardown: teardown,
        })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A file name no other scratch file of any process has: `ferrite-<kind>-<pid>-<n>.pool`.
pub fn unique_name(kind: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("ferrite-{kind}-{}-{n}.pool", std::process::id())
}

/// The kinds of scratch pool [`unique_name`] names (`runner` and `raw`).
const SCRATCH_KINDS: [&str; 2] = ["bench", "raw"];

/// The process id in a scratch pool name `ferrite-<kind>-<pid>-<n>.pool` of one of
/// [`SCRATCH_KINDS`]; `None` for any other name.
fn scratch_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("ferrite-")?.strip_suffix(".pool")?;
    let (kind, numbers) = rest.split_once('-')?;
    if !SCRATCH_KINDS.contains(&kind) {
        return None;
    }
    let (pid, n) = numbers.split_once('-')?;
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    (digits(pid) && digits(n)).then(|| pid.parse().ok())?
}

/// Removes the scratch pools in `dir` that runs which ended without their teardown left
/// behind (killed by `SIGKILL` or the OOM killer, or aborted): a `ferrite-bench-…` or
/// `ferrite-raw-…` file whose process is gone and that no process holds open. Each such file
/// is as large as its `--pool-size` and, on `/dev/shm`, holds that much memory until someone
/// deletes it, so every later run would have less. The file is locked while it is judged
/// and removed: a pool still open elsewhere (its opener holds the lock, even from another
/// PID namespace, where its process would look gone) is left alone. Returns the files
/// removed.
pub fn remove_abandoned(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let own = std::process::id();
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(scratch_owner) else {
            continue;
        };
        let path = entry.path();
        let alive = pid == own || Path::new("/proc").join(pid.to_string()).exists();
        let regular = entry.file_type().is_ok_and(|kind| kind.is_file());
        if alive || !regular {
            continue;
        }
        let Ok(file) = std::fs::OpenOptions::new().read(true).open(&path) else {
            continue;
        };
        if file.try_lock().is_err() {
            continue;
        }
        if std::fs::remove_file(&path).is_ok() {
            removed.push(path);
        }
        let _ = file.unlock();
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_scratch_pool_names_name_an_owner() {
        assert_eq!(scratch_owner("ferrite-bench-1234-0.pool"), Some(1234));
        assert_eq!(scratch_owner("ferrite-raw-77-12.pool"), Some(77));
        assert_eq!(scratch_owner("ferrite-bench-1234-0.pool.bak"), None);
        assert_eq!(scratch_owner("ferrite-mine-1234-0.pool"), None);
        assert_eq!(scratch_owner("ferrite-bench-x-0.pool"), None);
        assert_eq!(scratch_owner("ferrite-bench-1234-.pool"), None);
        assert_eq!(scratch_owner("ferrite-bench-12-3-4.pool"), None);
        assert_eq!(scratch_owner("p.pool"), None);
    }

    #[test]
    fn abandoned_scratch_pools_go_and_everything_else_stays() {
        let dir = tempfile::tempdir().expect("scratch");
        // A process id above the kernel's limit (2^22) is never alive.
        let dead = dir.path().join("ferrite-bench-4194305-0.pool");
        let held = dir.path().join("ferrite-raw-4194306-1.pool");
        let mine = dir.path().join(unique_name("bench"));
        let user = dir.path().join("ferrite-mine-4194305-0.pool");
        for path in [&dead, &held, &mine, &user] {
            std::fs::write(path, b"pool").expect("write");
        }
        let holder = std::fs::File::open(&held).expect("open");
        holder.try_lock().expect("lock");
        let removed = remove_abandoned(dir.path());
        assert_eq!(removed, std::slice::from_ref(&dead));
        assert!(!dead.exists());
        assert!(held.exists() && mine.exists() && user.exists());
        drop(holder);
        assert_eq!(remove_abandoned(dir.path()), std::slice::from_ref(&held));
        assert!(mine.exists() && user.exists());
    }

    fn registered(id: u64) -> bool {
        PENDING.lock().iter().any(|(pending, _)| *pending == id)
    }

    #[test]
    fn a_dropped_guard_removes_its_file_and_unregisters() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.pool");
        let guard = ScratchFile::new(path.clone());
        std::fs::write(&path, b"x").expect("write");
        let id = guard._teardown.id;
        assert!(registered(id));
        drop(guard);
        assert!(!path.exists());
        assert!(!registered(id));
    }

    #[test]
    fn a_dropped_teardown_does_not_run() {
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let guard = on_interrupt(move || flag.store(true, Ordering::Relaxed));
        drop(guard);
        assert!(!ran.load(Ordering::Relaxed));
    }
}
