//! Unmodified programs on a pool through the preload library: sqlite and coreutils, `mmap`
//! with `msync`, the single-owner rule, and `SIGKILL` of a program in the middle of
//! `fsync`'ed writes (every acknowledged file survives, fsck finds nothing wrong).

use pmem::{NativeOptions, Pool};
use pmfs::posix::O_RDONLY;
use pmfs::{Fs, MkfsOptions, MountOptions, Posix};
use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

const PREFIX: &str = "/pmfs-test";

/// One test at a time: a child spawned by one test inherits, until it execs, whatever pool
/// descriptor (and so `flock`) another test holds at that moment, which would make that
/// test's next open of its pool fail as "in use".
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The preload library cargo built beside this test: `cargo test` builds the library (an
/// rlib and a cdylib) into `deps`, next to the test; `cargo build` copies it one level up.
fn library() -> PathBuf {
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
struct TestPool(PathBuf);

impl TestPool {
    fn new(tag: &str, size: u64) -> TestPool {
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
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command
            .env("LD_PRELOAD", library())
            .env("PMFS_POOL", &self.0)
            .env("PMFS_PREFIX", PREFIX);
        command
    }

    /// Mounts the pool here (recovering as after a crash), checks it, and returns it.
    fn mount_and_check(&self) -> Posix<pmem::Native> {
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

fn read_file(px: &Posix<pmem::Native>, path: &str) -> Option<Vec<u8>> {
    let fd = px.open(path, O_RDONLY, 0).ok()?;
    let size = px.fstat(fd).ok()?.size as usize;
    let mut buf = vec![0u8; size];
    let n = px.pread(fd, &mut buf, 0).ok()?;
    px.close(fd).ok()?;
    buf.truncate(n);
    Some(buf)
}

fn run(command: &mut Command) -> String {
    let output = command.output().expect("run");
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn sqlite_in_both_journal_modes_and_coreutils() {
    let _serial = serial();
    if !have("sqlite3") {
        eprintln!("SKIPPED: sqlite3 is not installed");
        return;
    }
    let pool = TestPool::new("sqlite", 64 << 20);
    for mode in ["delete", "wal"] {
        let db = format!("{PREFIX}/{mode}.db");
        let mut script = format!(
            "pragma journal_mode={mode}; create table t(id integer primary key, v text);\n"
        );
        for i in 0..500 {
            script.push_str(&format!("insert into t(v) values('row {i}');\n"));
        }
        script.push_str("select count(*), sum(id) from t;\n");
        let out = run(pool.command("sqlite3").arg(&db).arg(&script));
        assert!(out.trim_end().ends_with("500|125250"), "{mode}: {out}");
    }
    run(pool.command("mkdir").arg(format!("{PREFIX}/dir")));
    run(pool
        .command("cp")
        .arg("/etc/hostname")
        .arg(format!("{PREFIX}/dir/h")));
    run(pool
        .command("mv")
        .args([format!("{PREFIX}/dir/h"), format!("{PREFIX}/dir/g")]));
    let listing = run(pool.command("ls").args(["-l", &format!("{PREFIX}/dir")]));
    assert!(listing.contains(" g\n"), "{listing}");
    let px = pool.mount_and_check();
    let copied = read_file(&px, "/dir/g").expect("copied file");
    assert_eq!(copied, std::fs::read("/etc/hostname").expect("hostname"));
    let names: Vec<Vec<u8>> = px
        .readdir("/")
        .expect("readdir")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.contains(&b"wal.db".to_vec()) && names.contains(&b"delete.db".to_vec()));
    px.into_fs().unmount().expect("unmount");
}

#[test]
fn a_pool_in_use_is_refused_with_a_clear_message() {
    let _serial = serial();
    let pool = TestPool::new("busy", 16 << 20);
    let held = pool.mount_and_check();
    let output = pool
        .command("cat")
        .arg(format!("{PREFIX}/anything"))
        .output()
        .expect("cat");
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        err.contains("pmfs-preload") && err.contains("already open"),
        "{err}"
    );
    held.into_fs().unmount().expect("unmount");
}

#[test]
fn a_missing_pool_or_a_relative_prefix_is_said_plainly() {
    let _serial = serial();
    let missing = PathBuf::from(format!(
        "/dev/shm/ferrite-preload-missing-{}.pool",
        std::process::id()
    ));
    let output = Command::new("cat")
        .arg(format!("{PREFIX}/anything"))
        .env("LD_PRELOAD", library())
        .env("PMFS_POOL", &missing)
        .env("PMFS_PREFIX", PREFIX)
        .output()
        .expect("cat");
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        err.contains("no such file") && err.contains("No such file or directory"),
        "ENOENT, named: {err}"
    );
    assert!(!err.contains("busy") && !err.contains("elsewhere"), "{err}");

    // Any file call reads the configuration: here the open of a file outside any prefix.
    let output = Command::new("cat")
        .arg("/proc/self/stat")
        .env("LD_PRELOAD", library())
        .env("PMFS_POOL", &missing)
        .env("PMFS_PREFIX", "pmfs")
        .output()
        .expect("cat");
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains("PMFS_PREFIX") && err.contains("nothing is served"),
        "{err}"
    );
}

/// A C program: `writer START` creates files `f<i>` (8 KiB of byte `i % 251`) through a
/// temporary name, `fsync`, `rename`, and prints `i` once each is durable, forever;
/// `mapper` writes a pattern through a shared mapping, `msync`s it and exits.
const PROGRAM: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static char buf[8192];
static void die(const char *what) { perror(what); exit(2); }
int main(int argc, char **argv) {
    const char *dir = getenv("DIR");
    char tmp[256], name[256];
    if (strcmp(argv[1], "mapper") == 0) {
        snprintf(name, sizeof name, "%s/mapped", dir);
        int fd = open(name, O_CREAT | O_RDWR, 0644);
        if (fd < 0 || ftruncate(fd, 3 * 4096) != 0) die("open");
        char *p = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) die("mmap");
        for (int i = 0; i < 3 * 4096; i++) p[i] = (char)(i % 253);
        if (msync(p, 3 * 4096, MS_SYNC) != 0) die("msync");
        printf("mapped\n");
        fflush(stdout);
        return 0;
    }
    for (long i = atol(argv[2]);; i++) {
        snprintf(tmp, sizeof tmp, "%s/tmp%ld", dir, i);
        snprintf(name, sizeof name, "%s/f%ld", dir, i);
        memset(buf, (int)(i % 251), sizeof buf);
        int fd = open(tmp, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0) die("open");
        if (write(fd, buf, sizeof buf) != sizeof buf) die("write");
        if (fsync(fd) != 0) die("fsync");
        if (close(fd) != 0) die("close");
        if (rename(tmp, name) != 0) die("rename");
        printf("%ld\n", i);
        fflush(stdout);
    }
}
"#;

fn compile(tag: &str) -> Option<PathBuf> {
    if !have("gcc") {
        return None;
    }
    let dir = std::env::temp_dir().join(format!("ferrite-preload-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let source = dir.join("program.c");
    std::fs::write(&source, PROGRAM).expect("source");
    let binary = dir.join("program");
    let status = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("gcc");
    assert!(status.success(), "gcc failed");
    Some(binary)
}

#[test]
fn a_shared_mapping_writes_the_pool_and_msync_makes_it_durable() {
    let _serial = serial();
    let Some(program) = compile("mmap") else {
        eprintln!("SKIPPED: gcc is not installed");
        return;
    };
    let pool = TestPool::new("mmap", 16 << 20);
    let out = run(pool
        .command(program.to_str().unwrap())
        .arg("mapper")
        .env("DIR", PREFIX));
    assert_eq!(out, "mapped\n");
    let px = pool.mount_and_check();
    let data = read_file(&px, "/mapped").expect("mapped file");
    let expected: Vec<u8> = (0..3 * 4096).map(|i| (i % 253) as u8).collect();
    assert_eq!(data, expected);
    px.into_fs().unmount().expect("unmount");
}

#[test]
fn sigkill_keeps_every_acknowledged_file() {
    let _serial = serial();
    let Some(program) = compile("kill") else {
        eprintln!("SKIPPED: gcc is not installed");
        return;
    };
    let pool = TestPool::new("kill", 64 << 20);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(19);
    let mut next = 0u64;
    for round in 0..20 {
        let mut child = pool
            .command(program.to_str().unwrap())
            .args(["writer", &next.to_string()])
            .env("DIR", PREFIX)
            .stdout(Stdio::piped())
            .spawn()
            .expect("writer");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let acks = rng.random_range(1..40);
        let mut last = None;
        for _ in 0..acks {
            let line = lines.next().expect("an acknowledgement").expect("line");
            last = Some(line.trim().parse::<u64>().expect("number"));
        }
        std::thread::sleep(std::time::Duration::from_micros(rng.random_range(0..3000)));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        let acked = last.expect("acknowledged");
        let px = pool.mount_and_check();
        for i in 0..=acked {
            let data = read_file(&px, &format!("/f{i}"))
                .unwrap_or_else(|| panic!("round {round}: acknowledged f{i} lost"));
            assert_eq!(data, vec![(i % 251) as u8; 8192], "round {round}: f{i}");
        }
        // Whatever was in flight: a complete file or a temporary one, nothing torn that
        // was acknowledged.
        next = acked + 1;
        while px.stat(&format!("/f{next}")).is_ok() {
            next += 1;
        }
        px.into_fs().unmount().expect("unmount");
    }
}
