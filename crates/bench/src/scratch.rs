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

/// Registers `action` to run if the process is interrupted while the returned guard lives.
pub fn on_interrupt(action: impl FnOnce() + Send + 'static) -> Teardown {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    PENDING.lock().push((id, Box::new(action)));
    Teardown { id }
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

#[cfg(test)]
mod tests {
    use super::*;

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
