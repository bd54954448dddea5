//! End-to-end tests of the `ferrite` binary: exit codes, one-line errors, JSON output and the
//! evaluation report.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{ferrite, stderr, stdout};

/// Exit codes of `pmem::PoolError::exit_code` that these tests expect.
const NOT_A_POOL: i32 = 10;
const TRUNCATED: i32 = 13;
const CORRUPT: i32 = 14;
const ALREADY_EXISTS: i32 = 17;
/// clap's exit code for usage errors.
const USAGE: i32 = 2;

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").expect("scratch directory in /dev/shm")
}

fn text(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

/// Creates a 64 MiB pool at `dir/name` and returns its path.
fn create_pool(dir: &Path, name: &str, layout: &str) -> PathBuf {
    let path = dir.join(name);
    let output = ferrite(&[
        "pool",
        "create",
        text(&path),
        "--size",
        "64M",
        "--layout",
        layout,
    ]);
    assert!(
        output.status.success(),
        "create failed: {}",
        stderr(&output)
    );
    path
}

/// Asserts a failed command: the exit code, and exactly one stderr line naming the path and
/// the reason, without a panic.
fn assert_one_line_failure(output: &Output, path: &Path, code: i32, reason: &str) {
    let err = stderr(output);
    assert!(!err.contains("panicked"), "panicked: {err}");
    assert_eq!(output.status.code(), Some(code), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line on stderr, got: {err:?}");
    let prefix = format!("ferrite: {}: ", path.display());
    assert!(
        err.starts_with(&prefix),
        "{err:?} lacks the prefix {prefix:?}"
    );
    assert!(
        err.contains(reason),
        "{err:?} does not give the reason {reason:?}"
    );
}

#[test]
fn create_then_info_and_check_describe_the_pool() {
    let dir = scratch();
    let path = create_pool(dir.path(), "pool", "kv-store");

    let info = ferrite(&["pool", "info", text(&path)]);
    assert!(info.status.success(), "{}", stderr(&info));
    let info_text = stdout(&info);
    for needle in [
        "kv-store",
        "64 MiB",
        "67108864 bytes",
        "clean shutdown:  yes",
        "in use:",
    ] {
        assert!(
            info_text.contains(needle),
            "{needle:?} missing from:\n{info_text}"
        );
    }

    let check = ferrite(&["pool", "check", text(&path)]);
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    assert!(stdout(&check).starts_with("ok: "), "{}", stdout(&check));
    assert!(stderr(&check).is_empty());
}

#[test]
fn info_and_check_speak_json() {
    let dir = scratch();
    let path = create_pool(dir.path(), "pool", "ferrite");

    let info = ferrite(&["pool", "info", "--json", text(&path)]);
    assert!(info.status.success(), "{}", stderr(&info));
    let info: Value = serde_json::from_str(&stdout(&info)).expect("info --json is JSON");
    assert_eq!(info["layout"], "ferrite");
    assert_eq!(info["pool_size"], 64 << 20);
    assert_eq!(info["version"], 1);
    assert_eq!(info["clean"], true);
    assert!(info["created"].as_str().is_some_and(|t| t.ends_with('Z')));

    let check = ferrite(&["pool", "check", "--json", text(&path)]);
    assert!(check.status.success(), "{}", stderr(&check));
    let check: Value = serde_json::from_str(&stdout(&check)).expect("check --json is JSON");
    assert_eq!(check["ok"], true);
    assert_eq!(check["uuid"], info["uuid"]);
}

/// Deterministic noise that cannot start with the pool magic.
fn noise(len: usize) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

#[test]
fn damaged_files_fail_with_one_line_and_the_right_code() {
    let dir = scratch();
    let pool = create_pool(dir.path(), "pool", "ferrite");
    let original = std::fs::read(&pool).expect("read pool");

    let flipped = dir.path().join("flipped");
    let mut bytes = original.clone();
    // Inside the layout name, covered by the header checksum, and the same byte of the
    // header's copy (a header whose copy is intact is repaired, not refused).
    bytes[100] ^= 0x01;
    bytes[pmem::header::COPY_OFFSET as usize + 100] ^= 0x01;
    std::fs::write(&flipped, &bytes).expect("write");

    let truncated = dir.path().join("truncated");
    std::fs::write(&truncated, &original[..1 << 20]).expect("write");

    let random = dir.path().join("random");
    std::fs::write(&random, noise(64 * 1024)).expect("write");
    assert_ne!(&std::fs::read(&random).expect("read")[..8], b"FERRPOOL");

    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").expect("write");

    let cases = [
        (&flipped, CORRUPT, "checksum mismatch"),
        (&truncated, TRUNCATED, "truncated pool"),
        (&random, NOT_A_POOL, "not a Ferrite pool (bad magic)"),
        (&empty, NOT_A_POOL, "not a Ferrite pool (no magic"),
    ];
    for (path, code, reason) in cases {
        for command in ["check", "info"] {
            let output = ferrite(&["pool", command, text(path)]);
            assert_one_line_failure(&output, path, code, reason);
            assert!(stdout(&output).is_empty(), "{command}: {}", stdout(&output));
        }
    }
}

#[test]
fn info_and_check_json_report_a_failure_as_json_too() {
    let dir = scratch();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").expect("write");
    for command in ["info", "check"] {
        let output = ferrite(&["pool", command, "--json", text(&empty)]);
        assert_one_line_failure(&output, &empty, NOT_A_POOL, "not a Ferrite pool");
        let verdict: Value = serde_json::from_str(&stdout(&output)).expect("JSON on stdout");
        assert_eq!(verdict["ok"], false, "{command}");
        assert_eq!(verdict["exit_code"], NOT_A_POOL, "{command}");
    }
}

#[test]
fn create_refuses_an_existing_file_and_leaves_it_alone() {
    let dir = scratch();
    let pool = create_pool(dir.path(), "pool", "ferrite");
    let before = std::fs::read(&pool).expect("read");
    let again = ferrite(&["pool", "create", text(&pool), "--size", "32M"]);
    assert_one_line_failure(&again, &pool, ALREADY_EXISTS, "already exists");
    assert_eq!(
        std::fs::read(&pool).expect("read"),
        before,
        "pool untouched"
    );

    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, b"keep me").expect("write");
    let over = ferrite(&["pool", "create", text(&notes), "--size", "1M"]);
    assert_one_line_failure(&over, &notes, ALREADY_EXISTS, "already exists");
    assert_eq!(std::fs::read(&notes).expect("read"), b"keep me");

    // A directory is an existing file with or without its trailing slash (EISDIR otherwise).
    let folder = dir.path().join("folder");
    std::fs::create_dir(&folder).expect("folder");
    for arg in [text(&folder).to_owned(), format!("{}/", text(&folder))] {
        let output = ferrite(&["pool", "create", &arg, "--size", "1M"]);
        assert_eq!(
            output.status.code(),
            Some(ALREADY_EXISTS),
            "{arg}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("already exists"),
            "{}",
            stderr(&output)
        );
    }
}

#[test]
fn bad_sizes_are_usage_errors() {
    let dir = scratch();
    let path = dir.path().join("never");
    for size in ["12Q", "0", "", "1.5", "-4K"] {
        // `--size=VALUE`, so that "-4K" reaches the size parser instead of reading as a flag.
        let output = ferrite(&["pool", "create", text(&path), &format!("--size={size}")]);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(USAGE), "size {size:?}: {err}");
        assert!(err.contains("invalid value"), "size {size:?}: {err}");
        assert!(!err.contains("panicked"));
    }
    let root = ferrite(&[
        "pool",
        "create",
        text(&path),
        "--size",
        "1M",
        "--root-size",
        "4X",
    ]);
    assert_eq!(root.status.code(), Some(USAGE), "{}", stderr(&root));
    // Well-formed but too small: the pool layer refuses it, still as an argument error.
    let tiny = ferrite(&["pool", "create", text(&path), "--size", "1K"]);
    assert_one_line_failure(&tiny, &path, USAGE, "at least 32768");
    assert!(!path.exists(), "no file is left behind");
}

#[test]
fn bench_refuses_keys_that_no_run_could_load() {
    let dir = scratch();
    let common = [
        "bench",
        "--quiet",
        "--engine",
        "redo",
        "--ops",
        "10",
        "--warmup",
        "1",
        "--runs",
        "1",
        "--pool-dir",
        text(dir.path()),
    ];
    // A million million keys: the list, BST and YCSB-E workloads built their DRAM model of
    // them before the pool ran out, and the process aborted on that allocation.
    for workload in ["list", "bst", "ycsb-e", "hash"] {
        let mut args = common.to_vec();
        args.extend(["--workload", workload, "--keys", "1000000000000"]);
        let output = ferrite(&args);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(USAGE), "{workload}: {err}");
        assert!(err.contains("--pool-size"), "{workload}: {err}");
    }
    // Twenty thousand threads could not all get their stacks: the run aborted (exit 134).
    let mut args = common.to_vec();
    args.extend(["--threads", "1,20000"]);
    let output = ferrite(&args);
    assert_eq!(output.status.code(), Some(USAGE), "{}", stderr(&output));
    assert!(stderr(&output).contains("1..=1024"), "{}", stderr(&output));
    // The array swaps two distinct elements: with one it measured nothing, and said so nowhere.
    let mut args = common.to_vec();
    args.extend(["--workload", "array", "--keys", "1"]);
    let output = ferrite(&args);
    assert_eq!(output.status.code(), Some(USAGE), "{}", stderr(&output));
    assert!(stderr(&output).contains("--keys 2"), "{}", stderr(&output));
    assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 0);
}

#[test]
fn a_bench_removes_the_pools_a_killed_bench_left_behind() {
    let dir = scratch();
    let bench = |ops: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
        command.args([
            "bench",
            "--quiet",
            "--engine",
            "redo",
            "--keys",
            "1000",
            "--ops",
            ops,
            "--warmup",
            "1",
            "--runs",
            "1",
            "--pool-size",
            "64M",
            "--pool-dir",
            text(dir.path()),
        ]);
        command
    };
    let pools = || -> Vec<PathBuf> {
        std::fs::read_dir(dir.path())
            .expect("list")
            .map(|entry| entry.expect("entry").path())
            .collect()
    };
    // The process measuring (a re-run of `ferrite` that the command starts, named in the
    // pool's name) killed by SIGKILL, as the OOM killer kills it, runs no teardown: its pool
    // stays. The command exits as a shell reports a SIGKILL (137), saying what happened (it
    // once exited 137 with no word).
    let killed = bench("1000000000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while pools().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pool = pools().pop().expect("the run made its pool");
    let name = pool
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    let pid: i32 = name
        .trim_end_matches(".pool")
        .rsplit('-')
        .nth(1)
        .and_then(|pid| pid.parse().ok())
        .expect("ferrite-bench-<pid>-<n>.pool");
    // SAFETY: `kill` only sends a signal, to the measuring process this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let parent = killed.wait_with_output().expect("reaped");
    assert_eq!(parent.status.code(), Some(137), "{}", stderr(&parent));
    let said = stderr(&parent);
    assert!(
        said.contains(&format!("the measuring process {pid}"))
            && said.contains("was killed by SIGKILL")
            && said.contains("until the next bench or eval removes them"),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "{said}");
    while std::path::Path::new(&format!("/proc/{pid}")).exists()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let left = pools();
    assert_eq!(left.len(), 1, "{left:?}");
    let next = bench("10").output().expect("the ferrite binary runs");
    assert!(next.status.success(), "{}", stderr(&next));
    assert!(
        stderr(&next).contains("removed 1 scratch pool"),
        "{}",
        stderr(&next)
    );
    assert!(pools().is_empty(), "{:?}", pools());
}

#[test]
fn quick_eval_writes_a_complete_report() {
    let dir = scratch();
    let out = dir.path().join("report");
    let output = ferrite(&["eval", "--quick", "--out", text(&out)]);
    assert_eq!(output.status.code(), Some(0), "stderr: {}", stderr(&output));
    let summary = stdout(&output);
    assert!(summary.contains(&out.display().to_string()), "{summary}");
    assert!(
        summary.contains("Crash simulator self-test [PASS]"),
        "{summary}"
    );

    let html = std::fs::read_to_string(out.join("index.html")).expect("index.html");
    assert!(html.contains("<svg") && html.contains("<table>"));
    let svgs = std::fs::read_dir(&out)
        .expect("list report")
        .filter_map(Result::ok)
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "svg"))
        .count();
    assert!(svgs >= 1, "no SVG plot written");

    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("report.json")).expect("report.json"),
    )
    .expect("report.json is JSON");
    let sections = report["sections"].as_array().expect("sections");
    let section = |id: &str| {
        sections
            .iter()
            .find(|section| section["id"] == id)
            .unwrap_or_else(|| panic!("section {id} missing"))
    };
    let selftest = section("crash-selftest");
    assert_eq!(selftest["verdict"], "pass");
    assert_eq!(selftest["data"]["all_mutants_caught"], true);
    assert_eq!(selftest["data"]["correct_engine_passed"], true);
    assert_eq!(
        section("silo")["verdict"],
        "info",
        "the quick Silo reproduction ran"
    );
    let substrate = section("substrate");
    assert!(
        substrate["data"]["persist_64b"]
            .as_array()
            .is_some_and(|costs| !costs.is_empty())
    );
    for section in sections {
        let id = section["id"].as_str().expect("id");
        assert!(
            out.join(format!("{id}.json")).is_file(),
            "{id}.json missing"
        );
    }
}

#[test]
fn unknown_eval_section_is_a_usage_error() {
    let output = ferrite(&["eval", "--quick", "--only", "no-such-section"]);
    assert_eq!(output.status.code(), Some(USAGE), "{}", stderr(&output));
}

/// A short `bench` run with `extra` arguments (the last occurrence of a flag wins nowhere:
/// callers pass flags this base does not).
fn bench(extra: &[&str]) -> Output {
    let mut args = vec![
        "bench",
        "--engine",
        "redo",
        "--workload",
        "hash",
        "--warmup",
        "10",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    ferrite(&args)
}

#[test]
fn bench_pool_failures_exit_with_the_tables_codes() {
    let small = ["--ops", "50", "--runs", "1", "--keys", "64"];
    let cases: [(&[&str], i32); 4] = [
        (&["--pool-dir", "/nonexistent-ferrite-dir"], 19),
        (&["--pool-dir", "/sys"], 16),
        (&["--pool-size", "999T"], 18),
        (&["--pool-size", "1K"], USAGE),
    ];
    for (extra, code) in cases {
        let mut args = small.to_vec();
        args.extend_from_slice(extra);
        let output = bench(&args);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{extra:?}: {}",
            stderr(&output)
        );
        assert!(!stderr(&output).contains("panicked"), "{}", stderr(&output));
    }
}

#[test]
fn bench_refuses_zero_counts_as_usage_errors() {
    // "0 is not in 1..18446744073709551615" was clap's range parser talking.
    for flag in ["--ops", "--runs", "--keys"] {
        let output = bench(&[flag, "0"]);
        assert_usage_error(&output, &format!("for '{flag} <"), flag);
        assert_usage_error(&output, "must be at least 1", flag);
        assert!(!stderr(&output).contains("18446744073709551615"), "{flag}");
    }
    let output = bench(&["--threads", "0"]);
    assert_usage_error(&output, "not in 1..=1024", "--threads");
}

/// A usage error: exit 2, `needle` in the message, nothing on standard output.
fn assert_usage_error(output: &Output, needle: &str, case: &str) {
    assert_eq!(
        output.status.code(),
        Some(USAGE),
        "{case}: {}",
        stderr(output)
    );
    assert!(
        stderr(output).contains(needle),
        "{case}: {}",
        stderr(output)
    );
    assert!(stdout(output).is_empty(), "{case}: {}", stdout(output));
}

#[test]
fn mkfs_with_bad_arguments_exits_2_and_leaves_no_file() {
    let dir = scratch();
    let path = dir.path().join("fs.pool");
    let cases: [&[&str]; 3] = [
        &["--size", "64K"],
        &["--size", "8M", "--inodes", "0"],
        &["--size", "8M", "--journal-entries", "0"],
    ];
    for extra in cases {
        let mut args = vec!["fs", "mkfs", text(&path)];
        args.extend_from_slice(extra);
        let output = ferrite(&args);
        assert_eq!(
            output.status.code(),
            Some(USAGE),
            "{extra:?}: {}",
            stderr(&output)
        );
        assert!(!path.exists(), "{extra:?} left a file behind");
    }
    let made = ferrite(&["fs", "mkfs", text(&path), "--size", "8M"]);
    assert!(made.status.success(), "{}", stderr(&made));
    let again = ferrite(&["fs", "mkfs", text(&path), "--size", "8M"]);
    assert_eq!(
        again.status.code(),
        Some(ALREADY_EXISTS),
        "{}",
        stderr(&again)
    );
    assert!(path.exists(), "a refused mkfs removed the existing file");
}

#[test]
fn mount_failures_on_the_pool_exit_with_the_tables_codes() {
    let dir = scratch();
    let mount_point = dir.path().join("mnt");
    std::fs::create_dir(&mount_point).expect("mount point");
    let other = create_pool(dir.path(), "other.pool", "not-a-file-system");
    let truncated = dir.path().join("truncated.pool");
    let bytes = std::fs::read(&other).expect("read");
    std::fs::write(&truncated, &bytes[..8192]).expect("write");
    for (pool, code) in [(&other, 12), (&truncated, TRUNCATED)] {
        for background in [false, true] {
            let mut args = vec!["fs", "mount"];
            if background {
                args.push("--background");
            }
            args.extend([text(pool), text(&mount_point)]);
            let output = ferrite(&args);
            assert_eq!(
                output.status.code(),
                Some(code),
                "{pool:?} background {background}: {}",
                stderr(&output)
            );
        }
    }
}

#[test]
fn output_paths_are_checked_before_the_work() {
    let dir = scratch();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"x").expect("write");
    let eval = ferrite(&[
        "eval",
        "--quick",
        "--only",
        "substrate",
        "--out",
        text(&file),
    ]);
    assert_eq!(eval.status.code(), Some(USAGE), "{}", stderr(&eval));
    assert!(
        stdout(&eval).is_empty(),
        "the section ran: {}",
        stdout(&eval)
    );
    assert_eq!(std::fs::read(&file).expect("read"), b"x");

    let missing = dir.path().join("missing").join("x.json");
    let bench = bench(&[
        "--ops",
        "50",
        "--runs",
        "1",
        "--keys",
        "64",
        "--json",
        text(&missing),
    ]);
    assert_eq!(bench.status.code(), Some(USAGE), "{}", stderr(&bench));
    assert!(
        stdout(&bench).is_empty(),
        "the bench ran: {}",
        stdout(&bench)
    );
}

/// `FERRITE_PERSIST_MODE` and `FERRITE_FLUSH` set to a value they do not take are usage
/// errors naming the variable, before any pool file is made — never silently ignored.
#[test]
fn a_backend_variable_that_does_not_parse_is_a_usage_error() {
    let dir = scratch();
    let pool = dir.path().join("env.pool");
    let pool_arg = pool.to_str().expect("utf-8 path");
    for (name, args) in [
        (
            "FERRITE_PERSIST_MODE",
            vec!["pool", "create", pool_arg, "--size", "8M"],
        ),
        (
            "FERRITE_FLUSH",
            vec!["fs", "mkfs", pool_arg, "--size", "64M"],
        ),
        (
            "FERRITE_FLUSH",
            vec![
                "bench", "--engine", "redo", "--ops", "50", "--runs", "1", "--keys", "64",
            ],
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_ferrite"))
            .args(&args)
            .env(name, "bogus")
            .output()
            .expect("the ferrite binary runs");
        assert_eq!(
            output.status.code(),
            Some(USAGE),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(stderr(&output).contains(name), "{}", stderr(&output));
        assert!(!pool.exists(), "{args:?} made a pool file");
    }
}

/// 128 + SIGINT: what `ferrite bench` and `eval` exit with when interrupted.
const INTERRUPTED: i32 = 130;

/// Starts a `bench` too long to finish before the signal into `pool_dir`, waits for its scratch pool to
/// appear, sends `signal` to the process started (with `PMEM_IS_PMEM_FORCE` unset it is the
/// parent that re-runs itself with the variable), and returns its output.
fn interrupted_bench(pool_dir: &Path, force_env: bool, signal: nix::sys::signal::Signal) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    command
        .args(["bench", "--engine", "redo", "--workload", "hash", "--quiet"])
        // Long enough never to end before the signal, short enough that a run the signal
        // failed to stop ends the test in seconds rather than hours.
        .args([
            "--ops",
            "30000000",
            "--runs",
            "1",
            "--pool-dir",
            text(pool_dir),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if force_env {
        command.env("PMEM_IS_PMEM_FORCE", "1");
    } else {
        command.env_remove("PMEM_IS_PMEM_FORCE");
    }
    let child = command.spawn().expect("the ferrite binary runs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while pools_in(pool_dir).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no scratch pool appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, signal).expect("signal the bench");
    child.wait_with_output().expect("wait for the bench")
}

fn pools_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .expect("read the pool directory")
        .map(|entry| entry.expect("directory entry").path())
        .collect()
}

#[test]
fn an_interrupted_bench_removes_its_scratch_pool_and_exits_130() {
    use nix::sys::signal::Signal;
    for (force_env, signal) in [
        (true, Signal::SIGINT),
        (false, Signal::SIGINT),
        (false, Signal::SIGTERM),
    ] {
        let dir = scratch();
        let output = interrupted_bench(dir.path(), force_env, signal);
        let what = format!("{signal} with PMEM_IS_PMEM_FORCE set: {force_env}");
        assert_eq!(
            output.status.code(),
            Some(INTERRUPTED),
            "{what}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains("cleaned up 1 scratch item"),
            "{what}: {}",
            stderr(&output)
        );
        assert_eq!(pools_in(dir.path()), Vec::<PathBuf>::new(), "{what}");
    }
}

/// The children of `pid` (Linux's `/proc/PID/task/PID/children`).
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Whether `pid` still runs (a zombie waiting to be reaped has ended).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next());
        state != Some("Z")
    })
}

/// A `SIGKILL` runs no handler, so the parent cannot pass it on: the kernel does, as the
/// re-run's parent-death signal (`SIGTERM`), and the re-run tears down its scratch pool and
/// ends within a second instead of running its whole bench as an orphan.
#[test]
fn the_rerun_dies_with_a_sigkilled_parent_and_removes_its_pool() {
    use std::time::{Duration, Instant};
    let dir = scratch();
    let mut parent = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["bench", "--engine", "redo", "--workload", "hash", "--quiet"])
        .args([
            "--ops",
            "30000000",
            "--runs",
            "1",
            "--pool-dir",
            text(dir.path()),
        ])
        // A small pool: its creation and removal take milliseconds, so the second measures
        // how soon the re-run learns of its parent's death, not how long 1 GiB takes to free.
        .args(["--pool-size", "64M"])
        .env_remove("PMEM_IS_PMEM_FORCE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the ferrite binary runs");
    let deadline = Instant::now() + Duration::from_secs(60);
    while pools_in(dir.path()).is_empty() {
        assert!(Instant::now() < deadline, "no scratch pool appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The pool file appears before it is sized; let the run start on it.
    std::thread::sleep(Duration::from_millis(200));
    let rerun = children_of(parent.id());
    assert_eq!(rerun.len(), 1, "the parent runs one re-run: {rerun:?}");
    parent.kill().expect("SIGKILL the parent");
    parent.wait().expect("reap the parent");
    let killed = Instant::now();
    while running(rerun[0]) && killed.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let outlived = running(rerun[0]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", rerun[0])).unwrap_or_default();
    if outlived {
        let _ = Command::new("kill")
            .args(["-KILL", &rerun[0].to_string()])
            .status();
    }
    assert!(
        !outlived,
        "the re-run {} outlived its parent by a second: {status}",
        rerun[0]
    );
    assert_eq!(
        pools_in(dir.path()),
        Vec::<PathBuf>::new(),
        "the re-run tore down"
    );
}

/// What `ferrite` exits with when its output pipe has no reader (128 + SIGPIPE).
const BROKEN_PIPE: i32 = 141;

#[test]
fn output_to_a_pipe_without_reader_ends_quietly_with_141() {
    let dir = scratch();
    let pool = create_pool(dir.path(), "p.pool", "anything");
    // The read end is closed before the command starts: its first write fails, every time.
    let (read_end, write_end) = nix::unistd::pipe().expect("pipe");
    drop(read_end);
    let output = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["pool", "info", text(&pool)])
        .stdout(std::process::Stdio::from(write_end))
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("the ferrite binary runs");
    assert_eq!(
        output.status.code(),
        Some(BROKEN_PIPE),
        "{}",
        stderr(&output)
    );
    assert_eq!(stderr(&output), "", "nothing on stderr");
}

#[test]
fn a_missing_mount_point_is_named_once() {
    let dir = scratch();
    let pool = dir.path().join("fs.pool");
    let made = ferrite(&["fs", "mkfs", text(&pool), "--size", "64M"]);
    assert_eq!(made.status.code(), Some(0), "{}", stderr(&made));
    let missing = dir.path().join("no-such-dir");
    let output = ferrite(&["fs", "mount", text(&pool), text(&missing)]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(19), "no such file: {err}");
    assert_eq!(err.matches(text(&missing)).count(), 1, "{err}");
    assert!(err.contains("not an existing directory"), "{err}");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").expect("make a file");
    let output = ferrite(&["fs", "mount", text(&pool), text(&file)]);
    let err = stderr(&output);
    assert_eq!(
        output.status.code(),
        Some(2),
        "a file is a wrong argument: {err}"
    );
    assert!(err.contains("not an existing directory"), "{err}");
    let background = ferrite(&["fs", "mount", "--background", text(&pool), text(&missing)]);
    assert_eq!(
        background.status.code(),
        Some(19),
        "{}",
        stderr(&background)
    );
}

#[test]
fn bench_json_says_what_was_asked_and_whether_traffic_was_counted() {
    let dir = scratch();
    let json = dir.path().join("bench.json");
    // The helper's engine is redo.
    let output = bench(&[
        "--ops",
        "400",
        "--runs",
        "2",
        "--keys",
        "64",
        "--json",
        text(&json),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read")).expect("JSON");
    assert_eq!(report["format"], "ferrite-bench");
    assert_eq!(report["version"], 1);
    assert_eq!(report["request"]["ops_per_run"], 400);
    assert_eq!(report["request"]["runs"], 2);
    assert_eq!(report["request"]["keys"], 64);
    let measurements = report["measurements"].as_array().expect("measurements");
    assert_eq!(measurements.len(), 1);
    for m in measurements {
        assert_eq!(m["ops"], 800, "ops over all runs");
        assert_eq!(m["traffic_counted"], true, "{m}");
        assert_eq!(m["latency_ns"].as_array().map(Vec::len), Some(3));
    }
}

/// A short all-update hash bench of `engines` under the emulated PM `costs`, with its JSON
/// written to `json`.
fn costed_bench(engines: &str, costs: &[&str], json: &Path) -> Output {
    let mut args = vec![
        "bench",
        "--engine",
        engines,
        "--workload",
        "hash",
        "--update",
        "100",
        "--ops",
        "200",
        "--runs",
        "1",
        "--keys",
        "64",
        "--warmup",
        "10",
        "--quiet",
        "--json",
        text(json),
    ];
    args.extend_from_slice(costs);
    ferrite(&args)
}

/// `--pm-line-ns` and `--pm-fence-ns` charge Ferrite's pools (every committing operation
/// writes back at least one line and fences once, so its latency is at least the charge:
/// a lower bound, whatever the machine's speed), are recorded in the JSON, and skip PMDK,
/// whose stores the emulation cannot reach.
#[test]
fn emulated_pm_cost_is_charged_recorded_and_skips_pmdk() {
    let dir = scratch();
    let json = dir.path().join("bench.json");
    let output = costed_bench(
        "redo,pmdk",
        &["--pm-line-ns", "3000", "--pm-fence-ns", "2000"],
        &json,
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("skipping pmdk: PMDK writes PM through its own library"),
        "{}",
        stderr(&output)
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read")).expect("JSON");
    assert_eq!(report["request"]["pm_line_ns"], 3000);
    assert_eq!(report["request"]["pm_fence_ns"], 2000);
    let measurements = report["measurements"].as_array().expect("measurements");
    assert_eq!(measurements.len(), 1, "redo only");
    let p50 = measurements[0]["latency_ns"][0].as_u64().expect("p50");
    assert!(p50 >= 5000, "one line and one fence charged: p50 {p50} ns");
    let usage = ferrite(&["bench", "--pm-line-ns", "100001"]);
    assert_eq!(usage.status.code(), Some(2), "{}", stderr(&usage));
}

/// Under an emulated PM cost the table says what was charged: a note with the prices and
/// the engines it cannot charge (mem has no pool, raw:volatile writes nothing back), and
/// each engine's charge per operation, in the table and in the JSON; a PMDK baseline, which
/// the emulation skips, is a usage error rather than a ratio silently against another engine.
#[test]
fn emulated_pm_cost_says_which_engines_were_charged() {
    let dir = scratch();
    let json = dir.path().join("bench.json");
    let output = costed_bench("raw:volatile,mem,redo", &["--pm-line-ns", "200"], &json);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let out = stdout(&output);
    assert!(out.contains("Emulated PM cost: 200 ns"), "{out}");
    assert!(
        out.contains("Not charged at all: raw:volatile, mem "),
        "{out}"
    );
    assert!(out.contains("emulated PM µs/op"), "{out}");
    assert!(out.contains("none (no PM)"), "{out}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("read")).expect("JSON");
    let charge = |engine: &str| {
        report["measurements"]
            .as_array()
            .expect("measurements")
            .iter()
            .find(|m| m["engine"] == engine)
            .map(|m| m["emulated_pm_ns_per_op"].clone())
            .expect("engine measured")
    };
    assert!(charge("redo").as_f64().expect("redo charged") >= 200.0);
    assert_eq!(charge("raw:volatile").as_f64(), Some(0.0));
    assert!(charge("mem").is_null());
    let usage = ferrite(&[
        "bench",
        "--engine",
        "pmdk,redo",
        "--baseline",
        "pmdk",
        "--pm-line-ns",
        "100",
    ]);
    assert_eq!(usage.status.code(), Some(2), "{}", stderr(&usage));
    assert!(
        stderr(&usage).contains("--baseline pmdk"),
        "{}",
        stderr(&usage)
    );
}

/// Value sizes outside what every engine can log (none, or above 64 KiB) are usage errors
/// before any pool is made, not a benchmark of nothing or a failed operation after the
/// setup; sizes take suffixes.
#[test]
fn bench_value_sizes_out_of_range_are_usage_errors() {
    // 64 keys of 64 KiB: a setup that put 64 values in one transaction overflowed the lane.
    let largest = bench(&[
        "--ops",
        "20",
        "--runs",
        "1",
        "--keys",
        "64",
        "--pool-size",
        "64M",
        "--value-size",
        "64K",
    ]);
    assert_eq!(largest.status.code(), Some(0), "{}", stderr(&largest));
    for size in ["0", "65537", "1M", "4294967295"] {
        let output = bench(&[
            "--ops",
            "50",
            "--runs",
            "1",
            "--keys",
            "64",
            "--value-size",
            size,
        ]);
        let reason = if size == "0" {
            "greater than zero"
        } else {
            "64 KiB"
        };
        assert_usage_error(&output, reason, size);
    }
}

/// A failed configuration says what to change: the pool directory that could not take the
/// pool, the pool size that could not hold the engine and workload.
#[test]
fn bench_failures_name_the_directory_or_the_option() {
    let small = ["--ops", "50", "--runs", "1", "--keys", "64"];
    let cases: [(&[&str], i32, &str); 3] = [
        (
            &["--pool-dir", "/nonexistent-ferrite-dir"],
            19,
            "--pool-dir: /nonexistent-ferrite-dir: no such file",
        ),
        (&["--pool-dir", "/sys"], 16, "creating its pool in /sys"),
        (
            &["--pool-size", "1M"],
            USAGE,
            "--pool-size 1 MiB cannot hold hash on redo",
        ),
    ];
    for (extra, code, named) in cases {
        let mut args = small.to_vec();
        args.extend_from_slice(extra);
        let output = bench(&args);
        assert_eq!(output.status.code(), Some(code), "{}", stderr(&output));
        assert!(stderr(&output).contains(named), "{}", stderr(&output));
        assert_eq!(stderr(&output).lines().count(), 1, "{}", stderr(&output));
    }
}

/// A hash table for more keys than any pool holds is refused before it runs (its nodes
/// alone exceed the pool: a usage error), naming the options to change, not an abort naming
/// the workload's internal bound.
#[test]
fn keys_no_pool_can_hold_name_the_pool_size() {
    let output = bench(&[
        "--ops",
        "50",
        "--runs",
        "1",
        "--keys",
        "1000000000000",
        "--pool-size",
        "64M",
    ]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(USAGE), "{err}");
    assert!(err.contains("give --pool-size 104T or more"), "{err}");
    assert!(err.ends_with("or fewer --keys\n"), "{err}");
    assert!(!err.contains("transaction aborted"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A bench whose every configuration was skipped measured nothing: it fails instead of
/// exiting 0 with no table.
#[test]
fn a_bench_that_measures_nothing_fails() {
    let output = ferrite(&[
        "bench",
        "--engine",
        "raw",
        "--workload",
        "btree",
        "--ops",
        "50",
        "--runs",
        "1",
        "--keys",
        "64",
        "--quiet",
    ]);
    assert_usage_error(
        &output,
        "nothing was measured",
        "a bench that measures nothing",
    );
}

/// Outputs in a place that takes no files (`/sys`, even for root) fail before the work, not
/// after a whole benchmark or evaluation.
#[test]
fn unwritable_outputs_fail_before_the_work() {
    let bench = bench(&[
        "--ops",
        "50",
        "--runs",
        "1",
        "--keys",
        "64",
        "--json",
        "/sys/ferrite-bench.json",
    ]);
    assert_eq!(bench.status.code(), Some(USAGE), "{}", stderr(&bench));
    assert!(
        stdout(&bench).is_empty(),
        "the bench ran: {}",
        stdout(&bench)
    );
    let eval = ferrite(&[
        "eval",
        "--quick",
        "--only",
        "substrate",
        "--out",
        "/sys/ferrite-report",
    ]);
    assert_eq!(eval.status.code(), Some(USAGE), "{}", stderr(&eval));
    assert!(
        !stderr(&eval).contains("started"),
        "the section ran: {}",
        stderr(&eval)
    );
}

/// A missing scratch directory stops `eval` before its first section, not section by
/// section after minutes of the ones that need no pool.
#[test]
fn eval_with_a_missing_pool_dir_fails_before_any_section() {
    let dir = scratch();
    let out = dir.path().join("report");
    let output = ferrite(&[
        "eval",
        "--quick",
        "--only",
        "crash-selftest",
        "--pool-dir",
        "/nonexistent-ferrite-dir",
        "--out",
        text(&out),
    ]);
    assert_eq!(output.status.code(), Some(19), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("--pool-dir: /nonexistent-ferrite-dir"),
        "{}",
        stderr(&output)
    );
    assert!(!stderr(&output).contains("started"), "{}", stderr(&output));
    assert!(!out.exists(), "the report folder was made");
}

/// Lists with a name twice (two rows or tables nobody can tell apart) and a baseline that is
/// not measured (the ratio column silently divided by the first engine) are usage errors.
#[test]
fn bench_duplicate_names_and_an_unmeasured_baseline_are_usage_errors() {
    let cases: [(&[&str], &str); 4] = [
        (&["--engine", "redo,undo,redo"], "--engine lists redo twice"),
        (
            &["--workload", "hash,array,hash"],
            "--workload lists hash twice",
        ),
        (&["--threads", "1,1"], "--threads lists 1 twice"),
        (
            &["--baseline", "undo"],
            "--baseline undo is not one of the engines",
        ),
    ];
    for (extra, reason) in cases {
        let mut args = vec!["--ops", "50", "--runs", "1", "--keys", "64"];
        args.extend_from_slice(extra);
        // `bench` passes `--engine redo --workload hash`; a list given again is appended.
        let output = bench(&args);
        assert_eq!(
            output.status.code(),
            Some(USAGE),
            "{extra:?}: {}",
            stderr(&output)
        );
        assert!(stderr(&output).contains(reason), "{}", stderr(&output));
        assert!(stdout(&output).is_empty(), "{extra:?}: {}", stdout(&output));
    }
}

/// A pool path in a directory that does not exist names the directory, not the pool file
/// as missing (exit 19 as before).
#[test]
fn a_missing_directory_for_a_new_pool_is_named() {
    let dir = scratch();
    let missing = dir.path().join("no-such-dir");
    let pool = missing.join("p.pool");
    for args in [
        ["pool", "create", text(&pool), "--size", "8M"],
        ["fs", "mkfs", text(&pool), "--size", "8M"],
    ] {
        let output = ferrite(&args);
        assert_eq!(output.status.code(), Some(19), "{}", stderr(&output));
        let named = format!(
            "the directory to create it in: {}: no such file",
            text(&missing)
        );
        assert!(stderr(&output).contains(&named), "{}", stderr(&output));
        assert!(!missing.exists());
    }
}
