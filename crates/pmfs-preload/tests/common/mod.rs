//! What the preload tests share: a fresh pool per test, the preload library cargo built,
//! running programs with it and reading the result back through the library.
// Each test binary uses a part of this module.
#![allow(dead_code)]

use pmem::{NativeOptions, Pool};
use pmfs::posix::O_RDONLY;
use pmfs::{Fs, MkfsOptions, MountOptions, Posix};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const PREFIX: &str = "/pmfs-test";

/// One test at a time: a child spawned by one test inherits, until it execs, whatever pool
/// descriptor (and so `flock`) another test holds at that moment, which would make that
/// test's next open of its pool fail as "in use".
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The preload library cargo built beside this test: `cargo test` builds the library (an
/// rlib and a cdylib) into `deps`, next to the test; `cargo build` copies it one level up.
pub fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test path");
    let deps = exe.parent().expect("deps dir");
    let candidates = [
        deps.to_owned(),
        deps.parent().expect("target dir").to_owned(),
    ];
    candidates
        .iter()
        .map(|dir| dir.join("libpmfs_preload.so"))
        .find(|lib| lib.is_file())
        .unwrap_or_else(|| panic!("libpmfs_preload.so is in neither {candidates:?}"))
}

/// A fresh pool of `size` bytes in /dev/shm, removed on drop.
pub struct TestPool(pub PathBuf);

impl TestPool {
    pub fn new(tag: &str, size: u64) -> TestPool {
        let path = PathBuf::from(format!(
            "/dev/shm/ferrite-preload-{tag}-{}.pool",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let pool = Pool::create(&path, &pmfs::pool_options(size)).expect("pool");
        Fs::mkfs(pool, &MkfsOptions::default(), MountOptions::default())
            .expect("mkfs")
            .unmount()
            .expect("unmount");
        TestPool(path)
    }

    /// `program` with the library preloaded and this pool served under [`PREFIX`].
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command
            .env("LD_PRELOAD", library())
            .env("PMFS_POOL", &self.0)
            .env("PMFS_PREFIX", PREFIX);
        command
    }

    /// Mounts the pool here (recovering as after a crash), checks it, and returns it.
    pub fn mount_and_check(&self) -> Posix<pmem::Native> {
        let pool = Pool::open(&self.0, pmfs::LAYOUT, &NativeOptions::default()).expect("open");
        let fs = Fs::mount(pool, MountOptions::default()).expect("mount");
        fs.fsck().expect("fsck");
        Posix::new(fs)
    }
}

impl Drop for TestPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub fn read_file(
    px: &Posix<pmem::Native>,
    path: &(impl pmfs::PathArg + ?Sized),
) -> Option<Vec<u8>> {
    let fd = px.open(path, O_RDONLY, 0).ok()?;
    let size = px.fstat(fd).ok()?.size as usize;
    let mut buf = vec![0u8; size];
    let n = px.pread(fd, &mut buf, 0).ok()?;
    px.close(fd).ok()?;
    buf.truncate(n);
    Some(buf)
}

pub fn run(command: &mut Command) -> String {
    let output = command.output().expect("run");
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Compiles C program `source` with gcc; `None` when gcc is not installed.
pub fn compile(tag: &str, source: &str) -> Option<PathBuf> {
    if !have("gcc") {
        return None;
    }
    // In Cargo's scratch directory for tests, one place per program (a directory under
    // /tmp per test process was never removed); compiled under this process's names and
    // renamed into place, so two test processes building it at once each run a whole one.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("preload-programs")
        .join(tag);
    std::fs::create_dir_all(&dir).expect("dir");
    let pid = std::process::id();
    let source_path = dir.join(format!("program-{pid}.c"));
    std::fs::write(&source_path, source).expect("source");
    let staged = dir.join(format!("program-{pid}"));
    let status = Command::new("gcc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&staged)
        .arg(&source_path)
        .status()
        .expect("gcc");
    let _ = std::fs::remove_file(&source_path);
    assert!(status.success(), "gcc failed");
    let binary = dir.join("program");
    std::fs::rename(&staged, &binary).expect("rename the program into place");
    Some(binary)
}

impl TestPool {
    /// `sh -c script` with the library preloaded (every tool the script runs inherits it),
    /// `$P` naming the prefix; fails the test unless the script succeeds.
    pub fn sh(&self, script: &str) -> String {
        run(self.command("sh").env("P", PREFIX).args(["-c", script]))
    }
}
