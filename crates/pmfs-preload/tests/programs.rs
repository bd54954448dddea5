//! Unmodified programs on a pool through the preload library: sqlite and coreutils, `mmap`
//! with `msync`, the single-owner rule, and `SIGKILL` of a program in the middle of
//! `fsync`'ed writes (every acknowledged file survives, fsck finds nothing wrong).

mod common;

use common::{PREFIX, TestPool, compile, have, library, read_file, run, serial};
use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

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

/// Runs `command` for at most 20 s: its output, or `None` when it had to be killed.
fn output_within_20_s(command: &mut Command) -> Option<std::process::Output> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Some(child.wait_with_output().expect("output"))
}

/// A pool the library would open through itself — a relative `PMFS_POOL` looked up from a
/// served working directory, or a pool under the prefix — hung the program (the open
/// waited on the mount it was part of); now served calls fail at once, naming the variable.
#[test]
fn a_pool_the_library_would_open_through_itself_is_refused_not_hung() {
    let _serial = serial();
    let pool = TestPool::new("self", 16 << 20);
    let dir = pool.0.parent().expect("/dev/shm");
    let name = pool.0.file_name().expect("pool name");
    let relative = Command::new("sh")
        // `exec`: the program that hangs is the one a timeout kills.
        .args(["-c", &format!("cd {PREFIX} && exec cat anything")])
        .current_dir(dir)
        .env("LD_PRELOAD", library())
        .env("PMFS_POOL", name)
        .env("PMFS_PREFIX", PREFIX)
        .output_within_20_s_or_hang();
    let err = String::from_utf8_lossy(&relative.stderr);
    assert!(!relative.status.success(), "{err}");
    assert!(
        err.contains("PMFS_POOL") && err.contains("not an absolute path"),
        "{err}"
    );

    let under = Command::new("cat")
        .arg(dir.join("anything"))
        .env("LD_PRELOAD", library())
        .env("PMFS_POOL", &pool.0)
        .env("PMFS_PREFIX", dir)
        .output_within_20_s_or_hang();
    let err = String::from_utf8_lossy(&under.stderr);
    assert!(!under.status.success(), "{err}");
    assert!(err.contains("is under PMFS_PREFIX"), "{err}");
}

/// A prefix spelled another way than the kernel names it (`//x`, `/x/.`, `/a/../x`)
/// served only paths spelled the same way; it is refused like a relative one.
#[test]
fn a_prefix_that_is_not_normalised_is_refused() {
    let _serial = serial();
    let pool = TestPool::new("prefix", 16 << 20);
    for prefix in [
        format!("/{PREFIX}"),
        format!("{PREFIX}/."),
        format!("/x/..{PREFIX}"),
    ] {
        let output = Command::new("cat")
            .arg("/proc/self/stat")
            .env("LD_PRELOAD", library())
            .env("PMFS_POOL", &pool.0)
            .env("PMFS_PREFIX", &prefix)
            .output()
            .expect("cat");
        let err = String::from_utf8_lossy(&output.stderr);
        assert!(
            err.contains("PMFS_PREFIX") && err.contains("nothing is served"),
            "{prefix}: {err}"
        );
    }
}

trait HangGuard {
    fn output_within_20_s_or_hang(&mut self) -> std::process::Output;
}

impl HangGuard for Command {
    fn output_within_20_s_or_hang(&mut self) -> std::process::Output {
        output_within_20_s(self).unwrap_or_else(|| panic!("{self:?} hung (killed after 20 s)"))
    }
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

#[test]
fn a_shared_mapping_writes_the_pool_and_msync_makes_it_durable() {
    let _serial = serial();
    let Some(program) = compile("mmap", PROGRAM) else {
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
    let Some(program) = compile("kill", PROGRAM) else {
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
