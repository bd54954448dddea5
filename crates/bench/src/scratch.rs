//! Scratch pool files: each is removed when the run that made it ends, and [`remove_all`]
//! removes the ones still open when the process is interrupted (a signal that ends the
//! process runs no destructor, so without it Ctrl-C would leave a pool on `/dev/shm`).

use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Every scratch file this process has open, in creation order.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A scratch file's path, listed while the guard lives; dropping it removes the file.
#[derive(Debug)]
pub struct ScratchFile {
    path: PathBuf,
}

impl ScratchFile {
    /// Lists `path` (the file need not exist yet: an engine creates it after this).
    pub fn new(path: PathBuf) -> Self {
        LIVE.lock().push(path.clone());
        Self { path }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchFile {
    fn drop(&mut self) {
        let mut live = LIVE.lock();
        let _ = std::fs::remove_file(&self.path);
        if let Some(at) = live.iter().rposition(|path| *path == self.path) {
            live.remove(at);
        }
    }
}

/// A file name no other scratch file of any process has: `ferrite-<kind>-<pid>-<n>.pool`.
pub fn unique_name(kind: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("ferrite-{kind}-{}-{n}.pool", std::process::id())
}

/// Removes every listed scratch file that exists, for a process about to exit on a signal;
/// returns how many it removed. The list stays locked afterwards, so no run can list (and
/// then leave behind) a new file while the process exits.
pub fn remove_all() -> usize {
    let live = LIVE.lock();
    let removed = live
        .iter()
        .filter(|path| std::fs::remove_file(path).is_ok())
        .count();
    std::mem::forget(live);
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_guard_removes_its_file_and_unlists_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("a.pool");
        let guard = ScratchFile::new(path.clone());
        std::fs::write(&path, b"x").expect("write");
        assert!(LIVE.lock().contains(&path));
        drop(guard);
        assert!(!path.exists());
        assert!(!LIVE.lock().contains(&path));
    }
}
