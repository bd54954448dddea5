//! Bad arguments and environment variables a new user may try on `fs`, `pool check` and
//! `sim reproduce`: each is refused with its exit code and a message that names it, before
//! any work and without leaving anything behind (a dead mount, a half-run plan).

use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::stderr;

fn ferrite(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the ferrite binary runs")
}

fn text(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

/// A freshly made PMFS pool of 1 MiB in `dir`.
fn pmfs_pool(dir: &Path) -> std::path::PathBuf {
    let pool = dir.join("fs.pool");
    let made = ferrite(&["fs", "mkfs", text(&pool), "--size", "1M"], &[]);
    assert!(made.status.success(), "mkfs: {}", stderr(&made));
    pool
}

/// A scratch directory holding a fresh PMFS pool and an empty mount point.
fn pool_and_mount_point() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let pool = pmfs_pool(dir.path());
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mount point");
    (dir, pool, mnt)
}

#[test]
fn repairs_refuse_a_bad_persistence_variable_instead_of_ignoring_it() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let pool = pmfs_pool(dir.path());
    for (args, variable) in [
        (vec!["fs", "fsck", "--repair", text(&pool)], "FERRITE_FLUSH"),
        (
            vec!["pool", "check", "--repair", text(&pool)],
            "FERRITE_PERSIST_MODE",
        ),
        (
            vec!["pool", "check", "--salvage", text(&pool)],
            "FERRITE_FLUSH",
        ),
    ] {
        let output = ferrite(&args, &[(variable, "bogus")]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(stderr(&output).contains(variable), "{}", stderr(&output));
    }
    // A check that writes nothing does not read them.
    let output = ferrite(&["fs", "fsck", text(&pool)], &[("FERRITE_FLUSH", "bogus")]);
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn an_owner_of_uid_minus_one_is_refused() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let pool = dir.path().join("fs.pool");
    for owner in ["4294967295:0", "0:4294967295"] {
        let output = ferrite(
            &["fs", "mkfs", text(&pool), "--size", "1M", "--owner", owner],
            &[],
        );
        assert_eq!(
            output.status.code(),
            Some(2),
            "{owner}: {}",
            stderr(&output)
        );
        assert!(stderr(&output).contains("(uid_t)-1"), "{}", stderr(&output));
        assert!(!pool.exists(), "{owner}: nothing is created");
    }
}

#[test]
fn mount_threads_out_of_range_are_refused_before_mounting() {
    let (_scratch, pool, mnt) = pool_and_mount_point();
    for threads in ["0", "257", "18446744073709551615"] {
        let output = ferrite(
            &[
                "fs",
                "mount",
                "--background",
                "--threads",
                threads,
                text(&pool),
                text(&mnt),
            ],
            &[],
        );
        // Whatever happened, leave no mount behind.
        let _ = ferrite(&["fs", "unmount", text(&mnt)], &[]);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{threads}: {}",
            stderr(&output)
        );
        assert!(stderr(&output).contains("--threads"), "{}", stderr(&output));
    }
}

/// More threads than the descriptor limit leaves room for: fuser clones one `/dev/fuse`
/// descriptor per thread after the mount is up, so this used to print "mounted", then fail
/// and leave a dead mount ("transport endpoint is not connected") at the mount point.
#[test]
fn mount_threads_beyond_the_descriptor_limit_are_refused_before_mounting() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: no /dev/fuse");
        return;
    }
    let (_scratch, pool, mnt) = pool_and_mount_point();
    let script = format!(
        "ulimit -n 64 && exec {} fs mount --background --threads 200 {} {}",
        env!("CARGO_BIN_EXE_ferrite"),
        text(&pool),
        text(&mnt)
    );
    let output = Command::new("sh")
        .args(["-c", &script])
        .output()
        .expect("sh");
    let mounted = std::fs::read_dir(&mnt).is_err()
        || std::fs::read_to_string("/proc/self/mounts")
            .is_ok_and(|mounts| mounts.contains(text(&mnt)));
    let _ = ferrite(&["fs", "unmount", text(&mnt)], &[]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("ulimit -n"),
        "names the limit: {}",
        stderr(&output)
    );
    assert!(!mounted, "nothing is left mounted");
}

#[test]
fn a_reproduction_whose_traces_cannot_be_generated_is_a_usage_error() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let out = dir.path().join("report");
    let output = ferrite(
        &[
            "sim",
            "reproduce",
            "--quick",
            "--quiet",
            "--transactions",
            "18446744073709551615",
            "--out",
            text(&out),
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("MiB of memory per core"),
        "{}",
        stderr(&output)
    );
}

/// A background server's stderr is its `--log`; a log that cannot be written (a full file
/// system, here `/dev/full`) made its first line panic with the mount up, leaving it dead.
#[test]
fn a_mount_whose_log_cannot_be_written_still_serves() {
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: no /dev/fuse");
        return;
    }
    let (_scratch, pool, mnt) = pool_and_mount_point();
    let mounted = ferrite(
        &[
            "fs",
            "mount",
            "--background",
            "--log",
            "/dev/full",
            text(&pool),
            text(&mnt),
        ],
        &[],
    );
    if !mounted.status.success() {
        eprintln!("SKIPPED: cannot mount here: {}", stderr(&mounted));
        return;
    }
    // The server wrote its "mounted" line to the log by the time the parent returned.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let written = std::fs::write(mnt.join("file"), b"kept");
    let read = std::fs::read(mnt.join("file"));
    let unmounted = ferrite(&["fs", "unmount", text(&mnt)], &[]);
    written.expect("the mount serves writes");
    assert_eq!(read.expect("and reads"), b"kept");
    assert!(unmounted.status.success(), "{}", stderr(&unmounted));
    // The server closed the pool cleanly: it is consistent and holds the file.
    let checked = ferrite(&["fs", "fsck", text(&pool)], &[]);
    assert!(checked.status.success(), "{}", stderr(&checked));
    assert!(
        String::from_utf8_lossy(&checked.stdout).contains("closed cleanly"),
        "{}",
        String::from_utf8_lossy(&checked.stdout)
    );
}

#[test]
fn sim_run_refuses_a_json_output_that_is_its_trace_or_config() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let trace = dir.path().join("t.trace");
    let written = ferrite(
        &[
            "sim",
            "trace",
            "--workload",
            "hash",
            "--cores",
            "1",
            "--tx",
            "5",
            "--keys",
            "64",
            "--out",
            text(&trace),
        ],
        &[],
    );
    assert!(written.status.success(), "{}", stderr(&written));
    // One core, said in the singular.
    assert!(
        String::from_utf8_lossy(&written.stdout).contains("hash on 1 core, "),
        "{}",
        String::from_utf8_lossy(&written.stdout)
    );
    let before = std::fs::read(&trace).expect("trace");
    let config = dir.path().join("machine.json");
    std::fs::write(&config, "{}").expect("config");
    // The trace through another path naming the same file.
    let alias = dir.path().join(".").join("t.trace");
    for (json, option) in [(&alias, "--trace"), (&config, "--config")] {
        let output = ferrite(
            &[
                "sim",
                "run",
                "--design",
                "silo",
                "--trace",
                text(&trace),
                "--config",
                text(&config),
                "--json",
                text(json),
            ],
            &[],
        );
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).contains(option), "{}", stderr(&output));
    }
    assert_eq!(
        std::fs::read(&trace).expect("trace"),
        before,
        "the trace is intact"
    );
    assert_eq!(std::fs::read_to_string(&config).expect("config"), "{}");
}

/// `--trace` and `--config` of a device that never ends were read until memory ran out
/// (9 GB in 15 s here). Run under a 2 GiB address-space limit, so that without the fix the
/// command fails at once instead of taking the machine's memory.
#[test]
fn sim_run_inputs_that_never_end_are_refused_from_their_first_bytes() {
    for (args, expected) in [
        ("--trace /dev/zero", "not a Ferrite trace"),
        (
            "--workload hash --tx 5 --keys 64 --config /dev/zero",
            "larger than 1024 KiB",
        ),
    ] {
        let script = format!(
            "ulimit -v 2097152 && exec {} sim run --design silo {args}",
            env!("CARGO_BIN_EXE_ferrite")
        );
        let output = Command::new("sh")
            .args(["-c", &script])
            .output()
            .expect("sh");
        assert_eq!(output.status.code(), Some(2), "{args}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(expected),
            "{args}: {}",
            stderr(&output)
        );
    }
}

/// A `--log` that is a directory is a wrong argument (exit 2), as a mount point that is a
/// file is; it exited 1 with the system's "Is a directory". Refused before any server
/// starts, so nothing is mounted.
#[test]
fn a_background_mount_refuses_a_log_that_is_a_directory() {
    let (dir, pool, mnt) = pool_and_mount_point();
    let output = ferrite(
        &[
            "fs",
            "mount",
            "--background",
            "--log",
            text(dir.path()),
            text(&pool),
            text(&mnt),
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("--log"), "{}", stderr(&output));
    assert_eq!(std::fs::read_dir(&mnt).expect("list").count(), 0);
}
