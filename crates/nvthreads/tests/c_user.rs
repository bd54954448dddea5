//! The runtime as a C programmer meets it (`docs/nvthreads.md` §3.7, §9): wrappers that
//! link libraries with threads of their own, C11 `<threads.h>`, daemonising by `fork`, and
//! the `nvmalloc` error contract.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn compile(args: &[&std::ffi::OsStr]) {
    let output = Command::new("cc").args(args).output().expect("run cc");
    assert!(
        output.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn c_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}"))
}

/// Builds `tests/c/spawnlib.c` as `dir/libspawnlib.so`: a library that imports
/// `pthread_create`, without the runtime.
fn build_spawnlib(dir: &Path) {
    require_cc();
    let library = dir.join("libspawnlib.so");
    compile(&[
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-pthread".as_ref(),
        "-Wall".as_ref(),
        "-Werror".as_ref(),
        "-o".as_ref(),
        library.as_os_str(),
        c_source("spawnlib.c").as_os_str(),
    ]);
}

/// Builds `tests/c/wrapper.c` linked with `libspawnlib.so` (which imports `pthread_create`;
/// the wrapper does not), without the runtime.
fn build_wrapper(dir: &Path) -> PathBuf {
    build_spawnlib(dir);
    let wrapper = dir.join("wrapper");
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    compile(&[
        "-Wall".as_ref(),
        "-Werror".as_ref(),
        "-o".as_ref(),
        wrapper.as_os_str(),
        c_source("wrapper.c").as_os_str(),
        "-L".as_ref(),
        dir.as_os_str(),
        "-Wl,--no-as-needed".as_ref(),
        "-lspawnlib".as_ref(),
        rpath.as_ref(),
    ]);
    wrapper
}

/// Runs `counter 2 10` twice on one pool through `wrapper` with the runtime preloaded: the
/// second run must find the first one's 20 sections.
fn counter_persists_through(wrapper: &[&Path]) {
    let library = library_dir().join("libnvthreads_rt.so");
    let counter = &program("counter").preload;
    let (_dir, pool) = pool_path("wrapped");
    let mut states = Vec::new();
    for _ in 0..2 {
        let mut wrapped = command(wrapper[0], &pool, &[]);
        wrapped
            .args(&wrapper[1..])
            .arg(counter)
            .args(["2", "10"])
            .env("LD_PRELOAD", &library);
        let lines = run(wrapped);
        states.push(parse_state(&lines[0]));
    }
    assert_eq!(
        (states[1].run, states[1].seq),
        (1, 20),
        "{wrapper:?}: the wrapper must stay dormant and the program persist: {states:?}"
    );
}

/// A wrapper that links a library importing `pthread_create` (but does not import it
/// itself) leaves the runtime dormant; the program it starts runs on the runtime.
#[test]
fn a_wrapper_whose_library_creates_threads_leaves_the_pool_to_the_program() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wrapper = build_wrapper(dir.path());
    counter_persists_through(&[&wrapper]);
}

/// The real `strace` loads `liblzma`, which imports `pthread_create`.
#[test]
fn strace_leaves_the_pool_to_the_program() {
    let works = Command::new("strace")
        .args(["-o", "/dev/null", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !works {
        eprintln!("SKIPPED: strace is not installed or cannot trace here (apt-get install strace)");
        return;
    }
    counter_persists_through(&[Path::new("strace"), Path::new("-o"), Path::new("/dev/null")]);
}

/// `NVT_ENABLE=1` starts the runtime in a process that would stay dormant (here the
/// wrapper itself, which then holds the pool: the program it starts finds it in use).
#[test]
fn nvt_enable_forces_the_runtime_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let wrapper = build_wrapper(dir.path());
    let library = library_dir().join("libnvthreads_rt.so");
    let (_pool_dir, pool) = pool_path("forced");
    let mut forced = command(&wrapper, &pool, &[]);
    forced
        .arg(&program("counter").preload)
        .args(["2", "3"])
        .env("LD_PRELOAD", &library)
        .env("NVT_ENABLE", "1")
        .stderr(Stdio::piped());
    let output = forced.output().expect("spawn");
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(pool.exists(), "the forced wrapper made the pool");
    assert!(
        stderr.contains("in use by the program that started this one"),
        "the program must find the pool taken by the forced wrapper: {stderr}"
    );
}

/// A program linked with the runtime (`-Wl,--no-as-needed -lnvthreads_rt`) uses it even if
/// its threads are all created by a library (C++ `std::thread`); preloaded, such a program
/// stays dormant unless `NVT_ENABLE=1`.
#[test]
fn threads_made_by_a_library_run_on_the_runtime_when_linked_or_enabled() {
    let dir = tempfile::tempdir().expect("tempdir");
    build_spawnlib(dir.path());
    let runtime_dir = library_dir();
    let program = |name: &str, with_runtime: bool| {
        let output = dir.path().join(name);
        let mut args: Vec<std::ffi::OsString> = vec![
            "-Wall".into(),
            "-Werror".into(),
            "-o".into(),
            output.clone().into(),
            c_source("libthreads.c").into(),
            format!("-L{}", dir.path().display()).into(),
            "-lspawnlib".into(),
            format!("-Wl,-rpath,{}", dir.path().display()).into(),
        ];
        if with_runtime {
            // Nothing in the program refers to the runtime: without --no-as-needed the
            // linker would drop it.
            args.push(format!("-L{}", runtime_dir.display()).into());
            args.push("-Wl,--no-as-needed".into());
            args.push("-lnvthreads_rt".into());
            args.push(format!("-Wl,-rpath,{}", runtime_dir.display()).into());
        }
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        compile(&args);
        output
    };
    let linked = program("libthreads-linked", true);
    let plain = program("libthreads", false);
    let preload = runtime_dir.join("libnvthreads_rt.so");
    let cases: [(&Path, bool, bool); 3] = [
        (&linked, false, true),
        (&plain, false, false),
        (&plain, true, true),
    ];
    for (binary, enable, runs) in cases {
        let (_pool_dir, pool) = pool_path("libthreads");
        let mut started = command(binary, &pool, &[]);
        if binary == plain.as_path() {
            started.env("LD_PRELOAD", &preload);
        }
        if enable {
            started.env("NVT_ENABLE", "1");
        }
        assert_eq!(run(started), ["SPAWNED 0"], "{binary:?} enable={enable}");
        assert_eq!(
            pool.exists(),
            runs,
            "{binary:?} NVT_ENABLE={enable}: the runtime must run: {runs}"
        );
    }
}

/// The counter written with C11 `<threads.h>` (`tests/c/c11.c`).
const C11: Spec = Spec {
    name: "c11",
    args: &["2", "6"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[],
    per_thread: false,
};

/// Every C11 function returns the C11 result codes, linked and preloaded.
#[test]
fn c11_threads_return_the_c11_result_codes() {
    let library = library_dir().join("libnvthreads_rt.so");
    let built = program("c11");
    for (binary, preload) in [(&built.linked, false), (&built.preload, true)] {
        let (_dir, pool) = pool_path("c11codes");
        let mut codes = command(binary, &pool, &["codes"]);
        if preload {
            codes.env("LD_PRELOAD", &library);
        }
        assert_eq!(run(codes), ["CODES ok"], "preloaded: {preload}");
    }
}

/// C11 threads are thread-processes of the runtime: each section is one commit (glibc's
/// own `thrd_create` would bypass the runtime and log nothing but the start and end).
#[test]
fn c11_sections_are_logged() {
    let (_dir, pool) = pool_path("c11stats");
    let mut counted = C11.command(&pool, &["2", "50"]);
    counted.env("NVT_STATS", "1").stderr(Stdio::piped());
    let output = counted.output().expect("spawn c11");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("DONE run=1 seq=100 once=1"), "{stdout}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let commits = stderr
        .lines()
        .find_map(|line| field(line, "commits"))
        .unwrap_or_else(|| panic!("no commits= in {stderr}"));
    assert!(commits >= 100, "100 sections, {commits} commits: {stderr}");
}

#[test]
fn c11_crashes_at_every_step_and_every_recovery_fence() {
    let report = crash_every_step(&C11, None, true).unwrap_or_else(|p| panic!("c11: {p}"));
    report.assert_covers("c11", 12);
}

/// SIGKILLs at varied points of runs of the C11 counter: nothing acknowledged is lost,
/// nothing torn, at most one section per thread more than acknowledged.
#[test]
fn c11_sections_survive_sigkill() {
    let (_dir, pool) = pool_path("c11kill");
    let args = ["2", "100000"];
    let kills = 12u64;
    let mut acked = Acked::default();
    let mut mid_run = 0;
    for kill in 0..kills {
        let mut running = start(C11.command(&pool, &args), None, None);
        let wanted = 1 + (kill * 7919) % 20_000;
        running
            .progress
            .wait_for(wanted, std::time::Duration::from_secs(30));
        let (got, _, exited) = kill_and_reap(&mut running, true);
        mid_run += u64::from(!exited);
        acked.merge(&got);
        let state = parse_state(&C11.check_line(&pool, None).expect("check"));
        check_against(state, &acked, C11.slack, false, &format!("kill {kill}"));
        acked.cover(&state);
    }
    assert!(
        mid_run * 4 >= kills * 3,
        "most kills must land while the threads run: {mid_run} of {kills}"
    );
    let state = parse_state(&C11.check_line(&pool, None).expect("final check"));
    assert!(state.seq > 0, "no C11 section ever committed");
}

/// Runs `tests/c/forked.c` in `mode` on `pool`; returns its stdout lines and stderr.
fn forked(pool: &Path, mode: &str) -> (Vec<String>, String) {
    let mut forked = command(&program("forked").linked, pool, &[mode]);
    forked.stderr(Stdio::piped());
    let output = forked.output().expect("spawn forked");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{mode}: {output:?}");
    (stdout.lines().map(str::to_owned).collect(), stderr)
}

/// A child of `fork()` outside `pthread_create` that goes on without `exec` (a daemonising
/// server) is ended with status 70 and a message at its first pthread call; the pool is left
/// as the parent closed it.
#[test]
fn a_forked_child_that_does_not_exec_is_refused_with_status_70() {
    let (_dir, pool) = pool_path("forked");
    let (lines, stderr) = forked(&pool, "daemon");
    assert_eq!(lines, ["STATE cnt=0 crashed=0"], "{stderr}");
    assert!(
        stderr.contains("made by fork()") && stderr.contains("exiting with status 70"),
        "{stderr}"
    );
    let (lines, stderr) = forked(&pool, "wait");
    assert_eq!(
        lines,
        ["STATE cnt=0 crashed=0", "CHILD status=70", "DONE cnt=200"],
        "the daemon's child must neither change the pool nor close it: {stderr}"
    );
    let (lines, _) = forked(&pool, "exec");
    assert_eq!(lines[0], "STATE cnt=200 crashed=0");
}

/// A child of `fork()` that only calls `exit` does not close the parent's pool: a crash of
/// the parent afterwards is seen as a crash by the next run, with its sections kept.
#[test]
fn a_forked_child_exit_does_not_close_the_parents_pool() {
    let (_dir, pool) = pool_path("forkexit");
    let mut killed = command(&program("forked").linked, &pool, &["exit-kill"]);
    killed.stderr(Stdio::piped());
    let output = killed.output().expect("spawn forked");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("DONE cnt=200"), "{output:?}");
    let (lines, stderr) = forked(&pool, "exec");
    assert_eq!(lines[0], "STATE cnt=200 crashed=1", "{stderr}");
}

/// `fork()` then `exec`, or a child that only exits, leaves the parent's run intact.
#[test]
fn fork_then_exec_or_exit_leaves_the_run_intact() {
    let (_dir, pool) = pool_path("forkexec");
    for (mode, before) in [("exec", 0), ("exit", 200), ("exec", 400)] {
        let (lines, stderr) = forked(&pool, mode);
        assert_eq!(
            lines,
            [
                format!("STATE cnt={before} crashed=0"),
                "CHILD status=0".to_owned(),
                format!("DONE cnt={}", before + 200)
            ],
            "{mode}: {stderr}"
        );
    }
}

/// `nvmalloc` refuses a size of 0, bad names and a too-small existing object with NULL, the
/// documented errno and a reason, with the runtime running and dormant alike.
#[test]
fn nvmalloc_error_contract_holds_running_and_dormant() {
    for dormant in [false, true] {
        let (_dir, pool) = pool_path("contract");
        let mut contract = command(&program("contract").linked, &pool, &["common"]);
        if dormant {
            contract.env("NVT_DISABLE", "1");
        }
        assert_eq!(run(contract), ["CONTRACT ok"], "dormant: {dormant}");
        assert_eq!(pool.exists(), !dormant);
    }
}

/// The name table holds 63 names; with `NVT_MALLOC=persistent` the arena takes one, and
/// the message says so.
#[test]
fn the_full_name_table_message_counts_the_arenas_name() {
    for (mode, made, arena) in [("shared", 63, false), ("persistent", 62, true)] {
        let (_dir, pool) = pool_path("names");
        let mut names = command(&program("contract").linked, &pool, &["names"]);
        names.env("NVT_MALLOC", mode);
        let lines = run(names);
        let line = &lines[0];
        assert!(
            line.starts_with(&format!("NAMES made={made} errno={} ", libc::ENOSPC)),
            "{mode}: {line}"
        );
        assert!(line.contains("all 63 names"), "{mode}: {line}");
        assert_eq!(
            line.contains("62 by the program, 1 by the persistent malloc arena"),
            arena,
            "{mode}: {line}"
        );
    }
}

/// Lines longer than 4 KiB printed by several threads to a file stay whole (one `write` per
/// line, up to stdout's 64 KiB line buffer).
#[test]
fn long_stdout_lines_to_a_file_never_tear() {
    for len in [6_000usize, 60_000] {
        let (_dir, pool) = pool_path("longlines");
        let out_dir = tempfile::tempdir().expect("tempdir");
        let out = out_dir.path().join("out.txt");
        let file = std::fs::File::create(&out).expect("create output");
        let lines = "100";
        let len_arg = len.to_string();
        let mut printer = command(&program("longlines").linked, &pool, &[lines, &len_arg]);
        printer.stdout(file);
        let status = printer.status().expect("spawn longlines");
        assert!(status.success(), "{status:?}");
        let text = std::fs::read_to_string(&out).expect("read output");
        let pad = "x".repeat(len);
        let mut seen = std::collections::HashSet::new();
        for line in text.lines() {
            let mut words = line.split(' ');
            let (thread, number) = (words.next(), words.next());
            let whole = words.next() == Some(pad.as_str()) && words.next() == Some("END");
            assert!(
                whole && words.next().is_none(),
                "len {len}: a torn line: {}",
                &line[..line.len().min(80)]
            );
            assert!(seen.insert((thread, number)), "len {len}: a line twice");
        }
        assert_eq!(seen.len(), 400, "len {len}: every line once");
    }
}

/// Runs `surprises MODE` linked and preloaded; each must print "MODE ok".
fn surprises_hold(mode: &str) {
    let library = library_dir().join("libnvthreads_rt.so");
    let built = program("surprises");
    for (binary, preload) in [(&built.linked, false), (&built.preload, true)] {
        let (_dir, pool) = pool_path("surprises");
        let mut surprises = command(binary, &pool, &[mode]);
        if preload {
            surprises.env("LD_PRELOAD", &library);
        }
        assert_eq!(
            run(surprises),
            [format!("{mode} ok")],
            "preloaded: {preload}"
        );
    }
}

/// A contended lock, a condition wait, a barrier and a join leave `errno` as it was (the
/// runtime's futex waits would set `EAGAIN`).
#[test]
fn waiting_pthread_calls_leave_errno_alone() {
    surprises_hold("errno");
}

/// A new thread starts with `errno` 0 and null thread-specific data, not its creator's.
#[test]
fn a_new_thread_has_no_thread_specific_data() {
    surprises_hold("tsd");
}

/// Strings libc allocates for a thread (`asprintf`, `getline`, `realpath`, ...) are
/// readable and freeable by main: they come from the shared arena, not the thread's glibc.
#[test]
fn strings_libc_allocates_for_a_thread_are_shared() {
    surprises_hold("allocs");
}

/// Lists and buffers libc allocates for a thread (`scandir`, `scandirat`, `getaddrinfo`,
/// `open_memstream`) are readable and freeable by main.
#[test]
fn lists_libc_allocates_for_a_thread_are_shared() {
    surprises_hold("lists");
}

#[test]
fn joining_the_calling_thread_is_edeadlk() {
    surprises_hold("joinself");
}

#[test]
fn a_stdout_the_program_made_unbuffered_stays_unbuffered() {
    surprises_hold("buffering");
}

/// `wait()` returns the program's own child, not a thread's process, and fails with
/// `ECHILD` while only threads are left (it would block on them).
#[test]
fn wait_sees_the_programs_children_not_its_threads() {
    surprises_hold("wait");
}

/// A `SIGCHLD` handler runs for the program's own children only, never when a thread ends
/// (a thread's process is a child of its creator): installed with `sigaction` or `signal`,
/// reported back as the program's handler, and called for a child whose exit merged with a
/// thread's end while the signal was blocked.
#[test]
fn a_sigchld_handler_sees_the_programs_children_not_its_threads() {
    surprises_hold("sigchld");
}

/// Every condition signal and broadcast reaches a waiting thread at once, made with the
/// mutex held or not: a signal takes the threads it wakes off the count of waiters, and a
/// lost wake-up would show as a round that waits out the watchdog period.
#[test]
fn condition_signals_reach_their_waiters_at_once() {
    surprises_hold("wakeups");
}

/// A timed mutex lock that an unlock woke as its deadline passed, and that finds the mutex
/// taken again by a thread that had not waited, passes the wake-up on: the thread asleep
/// behind it has the mutex at the next unlock, not after the watchdog period.
#[test]
fn a_timed_lock_that_times_out_after_its_wake_up_passes_it_on() {
    surprises_hold("timedhandoff");
}

/// Deadlines before the clock's epoch have passed: timed condition waits, a timed lock of
/// a held mutex and a timed join of a running thread return `ETIMEDOUT` at once (the kernel
/// refuses such times with `EINVAL`; the waits used to retry for ever).
#[test]
fn deadlines_before_the_epoch_time_out_at_once() {
    surprises_hold("pasttimes");
}

/// Killing the main process ends a thread made by a thread too: nothing is left running
/// that would hold the pool.
#[test]
fn a_thread_made_by_a_thread_dies_with_the_main_process() {
    use std::io::BufRead;
    let (_dir, pool) = pool_path("orphan");
    let mut orphan = command(&program("surprises").linked, &pool, &["orphan"]);
    let mut child = orphan
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn surprises");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the grandchild's pid");
    let grandchild: u32 = line
        .strip_prefix("PID ")
        .and_then(|pid| pid.trim().parse().ok())
        .unwrap_or_else(|| panic!("no PID line: {line:?}"));
    child.kill().expect("kill main");
    child.wait().expect("reap main");
    // The grandchild sleeps for ever unless it is ended with main: the bound only stops
    // the wait, and is generous for a loaded machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while process_runs(grandchild) {
        assert!(
            std::time::Instant::now() < deadline,
            "thread-process {grandchild} outlived the main process"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether `pid` exists and is not a zombie.
fn process_runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    })
}
