//! C programs on the runtime, built with the system C compiler: correctness without crashes
//! (link-time and `LD_PRELOAD`), deterministic crashes at every persistence step of a small
//! run, and a campaign of random `SIGKILL`s of the whole process group with
//! acknowledgements over a pipe (`docs/nvthreads.md` §7).
//!
//! Needs `cc` and the runtime library `libnvthreads_rt.so`, which `cargo test` builds as an
//! example target. Without `cc` the tests print why and pass (install gcc to run them).

use rand::{Rng, SeedableRng};
use std::io::{BufRead, BufReader, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

const ACK_FD: i32 = 3;

fn have_cc() -> bool {
    let found = Command::new("cc")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found {
        eprintln!("SKIPPED: no C compiler `cc` on PATH (apt-get install gcc)");
    }
    found
}

/// The directory holding `libnvthreads_rt.so` (target/<profile>/examples).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let dir = profile_dir.join("examples");
    assert!(
        dir.join("libnvthreads_rt.so").exists(),
        "{} missing: build it with `cargo build -p nvthreads --examples` (plain `cargo test` does)",
        dir.join("libnvthreads_rt.so").display()
    );
    let built = modified(&dir.join("libnvthreads_rt.so"));
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    for source_dir in ["src", "ffi"] {
        for entry in std::fs::read_dir(manifest.join(source_dir)).expect("source dir") {
            let path = entry.expect("dir entry").path();
            assert!(
                modified(&path) <= built,
                "libnvthreads_rt.so is older than {}: rebuild it with `cargo build -p nvthreads \
                 --examples` (a filtered `cargo test --test …` does not)",
                path.display()
            );
        }
    }
    dir
}

fn modified(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .expect("mtime")
}

struct Built {
    _dir: tempfile::TempDir,
    linked: PathBuf,
    preload: PathBuf,
}

/// Builds `tests/c/<name>.c` twice: linked against the runtime, and without it (the API as
/// weak references, bound at run time to the library given in `LD_PRELOAD`).
fn build(name: &str) -> Built {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = manifest.join(format!("tests/c/{name}.c"));
    let include = manifest.join("include");
    let lib = library_dir();
    let dir = tempfile::tempdir().expect("tempdir");
    let linked = dir.path().join(name);
    let preload = dir.path().join(format!("{name}-preload"));
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&linked)
        .arg(&source);
    cc.arg("-I").arg(&include);
    cc.arg(format!("-L{}", lib.display()))
        .arg("-lnvthreads_rt")
        .arg(format!("-Wl,-rpath,{}", lib.display()));
    assert!(
        cc.status().expect("run cc").success(),
        "cc failed: {name} (linked)"
    );
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&preload)
        .arg(&source);
    cc.arg("-I")
        .arg(&include)
        .args(["-DNVT_WEAK_API", "-pthread"]);
    assert!(
        cc.status().expect("run cc").success(),
        "cc failed: {name} (preload)"
    );
    Built {
        _dir: dir,
        linked,
        preload,
    }
}

fn counter() -> &'static Built {
    program("counter")
}

fn condvar() -> &'static Built {
    program("condvar")
}

/// `tests/c/<name>.c`, built once per test process.
fn program(name: &'static str) -> &'static Built {
    static BUILT: Mutex<Vec<(&'static str, &'static Built)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, found)) = built.iter().find(|(known, _)| *known == name) {
        return found;
    }
    let fresh: &'static Built = Box::leak(Box::new(build(name)));
    built.push((name, fresh));
    fresh
}

/// A fresh pool path on tmpfs (the file does not exist yet).
fn pool_path(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("nvthreads-test")
        .tempdir_in(pmem::DEFAULT_POOL_DIR)
        .expect("tempdir on /dev/shm");
    let path = dir.path().join(format!("{name}.pool"));
    (dir, path)
}

fn command(program: &Path, pool: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .env("NVT_POOL", pool)
        .env("NVT_HEAP_MB", "8")
        .env("NVT_LOG_MB", "2")
        .env_remove("NVT_CRASH_AT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

/// The recovered state a run printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    run: u64,
    seq: u64,
    crashed: bool,
}

fn try_parse_state(line: &str) -> Result<State, String> {
    let field = |name: &str| -> Result<u64, String> {
        line.split_whitespace()
            .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| format!("no {name} in {line:?}"))
    };
    if !line.starts_with("STATE ") {
        return Err(format!("not a state line: {line:?}"));
    }
    let a_matches = !line.contains(" a=") || field("a")? == field("seq")?;
    if field("ok")? != 1 || !a_matches {
        return Err(format!("invariant violated after recovery: {line}"));
    }
    Ok(State {
        run: field("run")?,
        seq: field("seq")?,
        crashed: field("crashed")? == 1,
    })
}

fn parse_state(line: &str) -> State {
    try_parse_state(line).unwrap_or_else(|problem| panic!("{problem}"))
}

/// Runs to completion; returns stdout lines.
fn run(mut command: Command) -> Vec<String> {
    let output = command.output().expect("spawn");
    assert!(
        output.status.success(),
        "program failed: {:?}",
        output.status
    );
    String::from_utf8(output.stdout)
        .expect("utf8")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn check_state(program: &Path, pool: &Path) -> State {
    let lines = run(command(program, pool, &["1", "1", "check"]));
    parse_state(&lines[0])
}

#[test]
fn counter_without_crashes_linked_and_preloaded() {
    if !have_cc() {
        return;
    }
    let built = counter();
    let (_dir, pool) = pool_path("plain");
    let lines = run(command(&built.linked, &pool, &["4", "300"]));
    assert_eq!(parse_state(&lines[0]).seq, 0);
    assert!(lines[1].starts_with("DONE seq=1200 "), "{lines:?}");
    let state = check_state(&built.linked, &pool);
    assert_eq!((state.run, state.seq, state.crashed), (1, 1200, false));

    let mut preloaded = command(&built.preload, &pool, &["3", "100"]);
    preloaded.env("LD_PRELOAD", library_dir().join("libnvthreads_rt.so"));
    let lines = run(preloaded);
    assert_eq!(parse_state(&lines[0]).seq, 1200);
    assert!(lines[1].starts_with("DONE seq=1500 "), "{lines:?}");
}

/// A running program with its acknowledgements pipe.
struct Running {
    child: Child,
    acks: Option<thread::JoinHandle<u64>>,
}

fn start(
    program: &Path,
    pool: &Path,
    args: &[&str],
    crash_at: Option<u64>,
    mutant: Option<&str>,
) -> Running {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two descriptors, both close-on-exec.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors are fresh and owned here.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut command = command(program, pool, args);
    command.env("ACK_FD", ACK_FD.to_string()).process_group(0);
    if let Some(step) = crash_at {
        command.env("NVT_CRASH_AT", step.to_string());
    }
    if let Some(mutant) = mutant {
        command.env("NVT_MUTANT", mutant);
    }
    let write_raw = write_end.as_raw_fd();
    // SAFETY: between fork and exec only dup2 (async-signal-safe) runs; the duplicate at
    // ACK_FD is not close-on-exec, so the program inherits exactly that descriptor.
    unsafe {
        command.pre_exec(move || {
            if libc::dup2(write_raw, ACK_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn().expect("spawn");
    drop(write_end);
    let acks = thread::spawn(move || {
        let mut reader = std::fs::File::from(read_end);
        let mut best = 0u64;
        let mut word = [0u8; 8];
        while reader.read_exact(&mut word).is_ok() {
            best = best.max(u64::from_le_bytes(word));
        }
        best
    });
    Running {
        child,
        acks: Some(acks),
    }
}

/// Kills the whole process group (the program and its thread-processes), reaps it, and
/// returns the highest acknowledgement plus the program's output.
fn kill_and_collect(running: &mut Running, kill: bool) -> (u64, Vec<String>) {
    let pid = running.child.id() as i32;
    if kill {
        // SAFETY: signalling the process group we created for the child.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let mut stdout = running.child.stdout.take().expect("stdout");
    let _ = running.child.wait();
    // Thread-processes are children of the program, not ours: wait for the pipe to close.
    let acked = running
        .acks
        .take()
        .expect("collected once")
        .join()
        .expect("ack reader");
    let mut text = String::new();
    let _ = stdout.read_to_string(&mut text);
    let lines = BufReader::new(text.as_bytes())
        .lines()
        .map(|l| l.unwrap())
        .collect();
    (acked, lines)
}

/// Checks the state printed at the start of a run against what earlier runs acknowledged:
/// nothing acknowledged is lost, and at most one unacknowledged section per thread (done
/// but killed before its acknowledgement) appears.
fn check_against(state: State, acked: u64, threads: u64, context: &str) {
    assert!(
        acked <= state.seq && state.seq <= acked + threads,
        "{context}: recovered seq {} but {acked} acknowledged ({threads} threads)",
        state.seq
    );
}

/// Crashes a small run of `program` at persistence step 1, 2, … until a run finishes; after
/// each crash a check run must see a consistent state with nothing acknowledged lost and at
/// most `slack` unacknowledged sections. Returns the number of crashed runs, or the first
/// violation.
fn crash_every_step(
    program: &Path,
    args: &[&str],
    slack: u64,
    mutant: Option<&str>,
) -> Result<u64, String> {
    for step in 1..2000u64 {
        let (_dir, pool) = pool_path("steps");
        let mut running = start(program, &pool, args, Some(step), mutant);
        let (acked, lines) = kill_and_collect(&mut running, false);
        let finished = lines.iter().any(|line| line.starts_with("DONE"));
        let output = command(program, &pool, &["1", "1", "check"])
            .output()
            .expect("spawn check");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let state = match try_parse_state(text.lines().next().unwrap_or("")) {
            Ok(state) => state,
            Err(problem) => return Err(format!("crash at step {step}: {problem}")),
        };
        if !(acked <= state.seq && state.seq <= acked + slack) {
            return Err(format!(
                "crash at step {step}: seq {} with {acked} acknowledged",
                state.seq
            ));
        }
        assert_eq!(state.crashed, !finished, "step {step}: crashed() disagrees");
        if finished {
            return Ok(step - 1);
        }
    }
    panic!("run never finished");
}

#[test]
fn crash_at_every_persistence_step_of_a_small_run() {
    if !have_cc() {
        return;
    }
    let crashed_runs = crash_every_step(&counter().linked, &["2", "5"], 2, None)
        .unwrap_or_else(|problem| panic!("{problem}"));
    eprintln!("crashed at each of {crashed_runs} persistence steps");
    assert!(
        crashed_runs >= 20,
        "too few persistence steps: {crashed_runs}"
    );
}

#[test]
fn torn_commit_mutant_is_caught() {
    if !have_cc() {
        return;
    }
    let problem = crash_every_step(&counter().linked, &["2", "5"], 2, Some("commit-per-page"))
        .expect_err("committing each page on its own tears sections; the test must notice");
    eprintln!("mutant caught: {problem}");
}

/// Runs `program args` on one pool `kills` times, each time `SIGKILL`ing the process group
/// after a seeded random delay below `max_delay_ms` (some runs die during start-up or
/// recovery: double crashes). Each run's recovered state is checked against everything
/// acknowledged before it (at most `slack` unacknowledged sections may appear).
fn campaign(program: &Path, args: &[&str], slack: u64, kills: usize, seed: u64, max_delay_ms: u64) {
    let (_dir, pool) = pool_path("campaign");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut acked = 0u64;
    let mut checked = 0;
    for kill in 0..kills {
        let mut running = start(program, &pool, args, None, None);
        let delay_ms = rng.random_range(0..max_delay_ms);
        thread::sleep(Duration::from_millis(delay_ms));
        let (got, lines) = kill_and_collect(&mut running, true);
        if let Some(line) = lines.iter().find(|line| line.starts_with("STATE")) {
            let state = parse_state(line);
            check_against(
                state,
                acked,
                slack,
                &format!("kill {kill} (after {delay_ms} ms)"),
            );
            acked = acked.max(state.seq);
            checked += 1;
        }
        acked = acked.max(got);
    }
    let state = check_state(program, &pool);
    check_against(state, acked, slack, "final check");
    let name = program.file_name().unwrap_or_default().to_string_lossy();
    eprintln!(
        "{name}: {kills} kills, {checked} recovered states checked, final seq {}",
        state.seq
    );
    assert!(checked * 4 >= kills, "most runs must get past recovery");
    assert!(state.seq > 0, "no section ever committed");
}

fn kills(default: usize) -> usize {
    std::env::var("NVT_KILLS").map_or(default, |v| v.parse().expect("NVT_KILLS"))
}

#[test]
fn random_sigkill_campaign() {
    if !have_cc() {
        return;
    }
    campaign(
        &counter().linked,
        &["3", "100000"],
        3,
        kills(200),
        0x6e76_7468,
        60,
    );
}

#[test]
fn bank_nested_locks_survive_kills_and_every_step() {
    if !have_cc() {
        return;
    }
    let bank = &program("bank").linked;
    let steps = crash_every_step(bank, &["2", "4"], 2, None).unwrap_or_else(|p| panic!("{p}"));
    eprintln!("bank: crashed at each of {steps} persistence steps");
    campaign(bank, &["3", "100000"], 3, kills(200), 0x62616e6b, 60);
}

#[test]
fn list_with_persistent_pointers_survives_kills() {
    if !have_cc() {
        return;
    }
    campaign(
        &program("list").linked,
        &["3", "100000"],
        3,
        kills(200),
        0x6c697374,
        60,
    );
}

#[test]
fn barrier_phases_survive_kills() {
    if !have_cc() {
        return;
    }
    campaign(
        &program("phases").linked,
        &["3", "100000"],
        1,
        kills(200),
        0x7068,
        80,
    );
}

#[test]
fn liveness_stress_finishes() {
    if !have_cc() {
        return;
    }
    let (_dir, pool) = pool_path("stress");
    let mut child = command(&program("stress").linked, &pool, &["8", "40"])
        .spawn()
        .expect("spawn stress");
    let started = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("liveness stress did not finish within 60 s");
        }
        thread::sleep(Duration::from_millis(10));
    }
    let mut text = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut text)
        .expect("read");
    assert_eq!(text.trim(), "COUNT 320", "stress lost increments");
    eprintln!(
        "stress: 8 threads x 40 sleeps+sections in {:?}",
        started.elapsed()
    );
}

/// The recovered `XY` line of the condvar program.
fn condvar_state(pool: &Path) -> [u64; 4] {
    let lines = run(command(&condvar().linked, pool, &["check"]));
    let line = &lines[0];
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
    };
    [field("x"), field("y"), field("flag"), field("busy")]
}

/// Runs the dependence case in `mode`; returns the recovered [x, y, flag, busy].
fn condvar_case(mode: &str, mutant: Option<&str>) -> [u64; 4] {
    let (_dir, pool) = pool_path("condvar");
    let mut program = command(&condvar().linked, &pool, &[mode]);
    program.process_group(0);
    if let Some(mutant) = mutant {
        program.env("NVT_MUTANT", mutant);
    }
    let output = program.output().expect("spawn condvar");
    assert_eq!(
        output.status.success(),
        mode == "commit",
        "{mode}: {:?}",
        output.status
    );
    // The thread-processes were killed with the group; wait until the pool is free again.
    for _ in 0..200 {
        if !pmem::inspect(&pool).is_ok_and(|report| report.in_use) {
            break;
        }
        thread::sleep(Duration::from_millis(5));
    }
    condvar_state(&pool)
}

#[test]
fn dependent_section_dies_with_the_section_it_observed() {
    if !have_cc() {
        return;
    }
    for _ in 0..4 {
        let [x, y, flag, _] = condvar_case("crash", None);
        assert_eq!(
            (x, y, flag),
            (0, 0, 0),
            "T1 crashed in its section: neither T1's x nor T2's dependent section may survive"
        );
    }
    let [x, y, flag, busy] = condvar_case("commit", None);
    assert_eq!((x, y, flag), (42, 42, 1), "both sections committed");
    assert_eq!(
        busy, 1,
        "trylock of a mutex held by T1 must fail with EBUSY"
    );
}

#[test]
fn dependence_mutant_is_caught() {
    if !have_cc() {
        return;
    }
    let caught = (0..4).any(|_| {
        let [x, y, ..] = condvar_case("crash", Some("no-dependence"));
        (x, y) != (0, 0)
    });
    assert!(
        caught,
        "committing a dependent section early must expose T1's open section"
    );
}

#[test]
fn crash_inside_recovery_then_recover_again() {
    if !have_cc() {
        return;
    }
    let program = &counter().linked;
    // A crashed run leaves committed records in the log (no checkpoint yet at step 60).
    let (_dir, pool) = pool_path("recovery");
    let mut running = start(program, &pool, &["2", "40"], Some(60), None);
    let (acked, _) = kill_and_collect(&mut running, false);
    assert!(acked > 0, "nothing committed before the crash");
    let copy_of = |name: &str| {
        let copy = pool.with_file_name(format!("{name}.pool"));
        std::fs::copy(&pool, &copy).expect("copy pool");
        copy
    };
    let check_line = |path: &Path| {
        let lines = run(command(program, path, &["1", "1", "check"]));
        lines[0].clone()
    };
    let reference = check_line(&copy_of("reference"));
    check_against(parse_state(&reference), acked, 2, "reference recovery");
    // Recovery's fences are the first persistence steps: 1 after replaying into the home
    // image, 2 after advancing the lap. Crash at each, then recover again.
    for step in 1..=2 {
        let copy = copy_of(&format!("step{step}"));
        let mut crashed = command(program, &copy, &["1", "1", "check"]);
        crashed
            .env("NVT_CRASH_AT", step.to_string())
            .process_group(0);
        let output = crashed.output().expect("spawn");
        assert!(
            !output.status.success(),
            "step {step}: recovery was not interrupted"
        );
        assert!(
            output.stdout.is_empty(),
            "step {step}: killed after recovery finished"
        );
        assert_eq!(
            check_line(&copy),
            reference,
            "step {step}: second recovery differs"
        );
    }
}

#[test]
fn globals_are_shared_between_threads() {
    if !have_cc() {
        return;
    }
    let (_dir, pool) = pool_path("globals");
    let lines = run(command(&program("globals").linked, &pool, &["4", "200"]));
    assert_eq!(lines, vec!["GLOBALS ok".to_owned()]);
    // With NVT_GLOBALS=0 each thread-process has its own copy: the counter stays 0 in main.
    let mut private = command(&program("globals").linked, &pool, &["2", "10"]);
    private.env("NVT_GLOBALS", "0");
    let output = private.output().expect("spawn");
    assert!(
        !output.status.success(),
        "globals cannot be shared with NVT_GLOBALS=0"
    );
}

#[test]
fn kernel_writes_into_tracked_memory() {
    if !have_cc() {
        return;
    }
    let (dir, pool) = pool_path("kernelio");
    let scratch = dir.path().join("scratch");
    let scratch = scratch.to_str().expect("utf-8 path");
    let lines = run(command(&program("kernelio").linked, &pool, &[scratch]));
    assert_eq!(lines, vec!["KERNELIO ok".to_owned()]);
}
