//! C programs on the runtime, built with the system C compiler (`docs/nvthreads.md` §7):
//! results equal to plain pthreads without crashes (linked and `LD_PRELOAD`), deterministic
//! crashes at every persistence step of small runs with the recovery of each crash crashed
//! again at every one of its fences, campaigns of random `SIGKILL`s of the whole process
//! group spread over whole runs with acknowledgements over a pipe, the condition-variable
//! dependence case, mutants that the tests must catch, and the rest of the pthread and
//! `malloc` API.
//!
//! Needs `cc` and the runtime library `libnvthreads_rt.so`, which `cargo test` builds as an
//! example target. Without `cc` every test fails and says so (CI must install gcc).
//! `NVT_KILLS=n` sets the kills of every campaign (default 200).

use rand::{Rng, SeedableRng};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

const ACK_FD: i32 = 3;

/// Panics with a clear message when there is no C compiler: these tests must not pass
/// without running.
fn require_cc() {
    let found = Command::new("cc")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    assert!(
        found,
        "the NVthreads C-program tests need a C compiler `cc` on PATH (apt-get install gcc)"
    );
}

/// The directory holding `libnvthreads_rt.so` (target/<profile>/examples).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let dir = profile_dir.join("examples");
    let library = dir.join("libnvthreads_rt.so");
    assert!(
        library.exists(),
        "{} missing: build it with `cargo build -p nvthreads --examples` (plain `cargo test` does)",
        library.display()
    );
    let built = modified(&library);
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

fn compile(source: &Path, output: &Path, extra: &[String]) {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let status = Command::new("cc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(output)
        .arg(source)
        .arg("-I")
        .arg(&include)
        .args(extra)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed: {}", output.display());
}

/// Builds `tests/c/<name>.c` twice: linked against the runtime, and without it (the API as
/// weak references, bound at run time to the library given in `LD_PRELOAD`).
fn build(name: &str) -> Built {
    require_cc();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = manifest.join(format!("tests/c/{name}.c"));
    let lib = library_dir();
    let dir = tempfile::tempdir().expect("tempdir");
    let linked = dir.path().join(name);
    let preload = dir.path().join(format!("{name}-preload"));
    compile(
        &source,
        &linked,
        &[
            format!("-L{}", lib.display()),
            "-lnvthreads_rt".into(),
            format!("-Wl,-rpath,{}", lib.display()),
        ],
    );
    compile(
        &source,
        &preload,
        &["-DNVT_WEAK_API".into(), "-pthread".into()],
    );
    Built {
        _dir: dir,
        linked,
        preload,
    }
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
        .env("NVT_MALLOC_MB", "256")
        .env_remove("NVT_CRASH_AT")
        .env_remove("NVT_ACTIVE")
        .env_remove("NVT_DISABLE")
        .env_remove("NVT_MALLOC")
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

fn field(line: &str, name: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
        .and_then(|value| value.parse().ok())
}

fn try_parse_state(line: &str) -> Result<State, String> {
    let need = |name: &str| field(line, name).ok_or_else(|| format!("no {name} in {line:?}"));
    if !line.starts_with("STATE ") {
        return Err(format!("not a state line: {line:?}"));
    }
    let a_matches = !line.contains(" a=") || need("a")? == need("seq")?;
    if need("ok")? != 1 || !a_matches {
        return Err(format!("invariant violated after recovery: {line}"));
    }
    Ok(State {
        run: need("run")?,
        seq: need("seq")?,
        crashed: need("crashed")? == 1,
    })
}

fn parse_state(line: &str) -> State {
    try_parse_state(line).unwrap_or_else(|problem| panic!("{problem}"))
}

/// A state line without its `crashed=` flag (a completed recovery closes the pool cleanly,
/// so the flag of the next check differs; everything else must not).
fn state_key(line: &str) -> String {
    line.split_whitespace()
        .filter(|word| !word.starts_with("crashed="))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs to completion; returns stdout lines.
fn run(mut command: Command) -> Vec<String> {
    let output = command.output().expect("spawn");
    let text = String::from_utf8(output.stdout).expect("utf8");
    assert!(
        output.status.success(),
        "program failed: {:?}\n{text}",
        output.status
    );
    text.lines().map(str::to_owned).collect()
}

/// A C test program with its arguments for a run and for a check run (which prints the
/// recovered state and exits).
#[derive(Clone, Copy)]
struct Spec {
    name: &'static str,
    args: &'static [&'static str],
    check: &'static [&'static str],
    /// Unacknowledged sections that may additionally appear after a crash.
    slack: u64,
    env: &'static [(&'static str, &'static str)],
}

impl Spec {
    fn path(&self) -> &'static Path {
        &program(self.name).linked
    }

    fn command(&self, pool: &Path, args: &[&str]) -> Command {
        let mut command = command(self.path(), pool, args);
        command.envs(self.env.iter().copied());
        command
    }

    fn check_line(&self, pool: &Path, crash_at: Option<u64>) -> Option<String> {
        let mut command = self.command(pool, self.check);
        command.process_group(0);
        if let Some(step) = crash_at {
            command.env("NVT_CRASH_AT", step.to_string());
        }
        let output = command.output().expect("spawn check");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let line = text.lines().next().map(str::to_owned);
        if crash_at.is_none() {
            assert!(
                line.is_some(),
                "{}: check run printed nothing: {:?}",
                self.name,
                output.status
            );
        }
        line
    }
}

const COUNTER: Spec = Spec {
    name: "counter",
    args: &["2", "5"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[],
};
const BANK: Spec = Spec {
    name: "bank",
    args: &["2", "4"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[],
};
const LIST: Spec = Spec {
    name: "list",
    args: &["2", "5"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[("NVT_HEAP_MB", "16")],
};
const PHASES: Spec = Spec {
    name: "phases",
    args: &["2", "3"],
    check: &["1", "1", "check"],
    slack: 1,
    env: &[],
};
const CONDVAR_LOOP: Spec = Spec {
    name: "condvar",
    args: &["loop", "3"],
    check: &["loop", "1", "check"],
    slack: 1,
    env: &[],
};
const STRESS: Spec = Spec {
    name: "stress",
    args: &["2", "3"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[],
};
const GCOUNTER: Spec = Spec {
    name: "gcounter",
    args: &["2", "5"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[("NVT_GLOBALS", "persistent"), ("NVT_HEAP_MB", "16")],
};
const MALLOC_LIST: Spec = Spec {
    name: "list",
    args: &["2", "5"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[
        ("LIST_NODES", "malloc"),
        ("NVT_MALLOC", "persistent"),
        ("NVT_HEAP_MB", "64"),
    ],
};

/// A running program with its acknowledgements pipe.
struct Running {
    child: Child,
    acks: Option<thread::JoinHandle<u64>>,
}

fn start(mut command: Command, crash_at: Option<u64>, mutant: Option<&str>) -> Running {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 fills two descriptors, both close-on-exec.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both descriptors are fresh and owned here.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
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
    (acked, text.lines().map(str::to_owned).collect())
}

/// Checks the state printed at the start of a run against what earlier runs acknowledged:
/// nothing acknowledged is lost, and at most `slack` unacknowledged sections appear.
fn check_against(state: State, acked: u64, slack: u64, context: &str) {
    assert!(
        acked <= state.seq && state.seq <= acked + slack,
        "{context}: recovered seq {} but {acked} acknowledged (slack {slack})",
        state.seq
    );
}

/// What crashing every persistence step of a small run did.
#[derive(Debug, Default)]
struct StepReport {
    /// Runs crashed at a step (the last run finished).
    crashed_runs: u64,
    /// Recoveries crashed at one of their own fences (then recovered again).
    recovery_crashes: u64,
}

/// Crashes a small run of `spec` at persistence step 1, 2, … until a run finishes. After
/// each crash, with `double`, the recovery is crashed at each of its own fences in turn
/// (every one a fresh recovery of the pool the previous one left) until one completes;
/// every completed recovery must print the same state as an uninterrupted recovery of a copy
/// of the crashed pool, with nothing acknowledged lost and at most `slack` unacknowledged
/// sections. Returns the counts, or the first violation.
fn crash_every_step(spec: &Spec, mutant: Option<&str>, double: bool) -> Result<StepReport, String> {
    let mut report = StepReport::default();
    for step in 1..5000u64 {
        let (dir, pool) = pool_path("steps");
        let mut running = start(spec.command(&pool, spec.args), Some(step), mutant);
        let (acked, lines) = kill_and_collect(&mut running, false);
        let finished = lines.iter().any(|line| line.starts_with("DONE"));
        let reference = if double && !finished {
            let copy = dir.path().join("reference.pool");
            std::fs::copy(&pool, &copy).expect("copy pool");
            spec.check_line(&copy, None)
        } else {
            None
        };
        if let Some(reference) = &reference
            && !try_parse_state(reference).is_ok_and(|state| state.crashed)
        {
            return Err(format!(
                "step {step}: recovery of a crash says {reference:?}"
            ));
        }
        if let Some(reference) = &reference {
            for fence in 1..100u64 {
                let Some(line) = spec.check_line(&pool, Some(fence)) else {
                    report.recovery_crashes += 1;
                    continue;
                };
                if state_key(&line) != state_key(reference) {
                    return Err(format!(
                        "crash at step {step}, recovery crashed at fences 1..{fence}: \
                         {line:?} differs from {reference:?}"
                    ));
                }
                break;
            }
        }
        let line = spec.check_line(&pool, None).unwrap_or_default();
        let state = try_parse_state(&line).map_err(|p| format!("crash at step {step}: {p}"))?;
        if let Some(reference) = &reference
            && state_key(&line) != state_key(reference)
        {
            return Err(format!(
                "crash at step {step}: {line:?} differs from {reference:?}"
            ));
        }
        if !(acked <= state.seq && state.seq <= acked + spec.slack) {
            return Err(format!(
                "crash at step {step}: seq {} with {acked} acknowledged",
                state.seq
            ));
        }
        if reference.is_none() && state.crashed == finished {
            return Err(format!("step {step}: crashed() disagrees"));
        }
        if finished {
            report.crashed_runs = step - 1;
            return Ok(report);
        }
    }
    Err("run never finished".into())
}

fn every_step(spec: &Spec, minimum: u64) {
    let report =
        crash_every_step(spec, None, true).unwrap_or_else(|p| panic!("{}: {p}", spec.name));
    eprintln!(
        "{}: crashed at each of {} persistence steps; {} recoveries crashed and redone",
        spec.name, report.crashed_runs, report.recovery_crashes
    );
    assert!(
        report.crashed_runs >= minimum,
        "{}: too few persistence steps: {}",
        spec.name,
        report.crashed_runs
    );
    assert!(
        report.recovery_crashes >= report.crashed_runs,
        "{}: every crashed run's recovery must be crashed too",
        spec.name
    );
}

#[test]
fn counter_crashes_at_every_step_and_every_recovery_fence() {
    every_step(&COUNTER, 20);
}

#[test]
fn bank_crashes_at_every_step_and_every_recovery_fence() {
    every_step(&BANK, 15);
}

#[test]
fn list_crashes_at_every_step_and_every_recovery_fence() {
    every_step(&LIST, 15);
}

#[test]
fn phases_crash_at_every_step_and_every_recovery_fence() {
    every_step(&PHASES, 10);
}

#[test]
fn condvar_crashes_at_every_step_and_every_recovery_fence() {
    every_step(&CONDVAR_LOOP, 8);
}

#[test]
fn stress_crashes_at_every_step_and_every_recovery_fence() {
    every_step(&STRESS, 8);
}

#[test]
fn persistent_globals_crash_at_every_step_and_every_recovery_fence() {
    every_step(&GCOUNTER, 15);
}

#[test]
fn torn_commit_mutant_is_caught() {
    let problem = crash_every_step(&COUNTER, Some("commit-per-page"), false)
        .expect_err("committing each page on its own tears sections; the test must notice");
    eprintln!("mutant caught: {problem}");
}

/// What a campaign saw.
#[derive(Debug, Default)]
struct CampaignReport {
    /// Kills before the run printed its recovered state (start-up, recovery).
    before_state: usize,
    /// Kills while the workload ran.
    mid_run: usize,
    /// Runs that finished before the kill.
    finished: usize,
}

/// The median wall-clock time of three uninterrupted runs of `args` on `pool` (after one
/// that creates it), and the highest sequence number they reached.
fn full_run_time(spec: &Spec, args: &[&str], pool: &Path) -> (Duration, u64) {
    let mut seq = 0;
    let mut times: Vec<Duration> = (0..4)
        .map(|_| {
            let started = Instant::now();
            let lines = run(spec.command(pool, args));
            let elapsed = started.elapsed();
            if let Some(done) = lines.iter().find(|line| line.starts_with("DONE")) {
                seq = seq.max(field(done, "seq").unwrap_or(0));
            }
            elapsed
        })
        .collect();
    times.remove(0);
    times.sort();
    (times[1], seq)
}

/// Runs `spec` with `args` on one pool `kills` times, each time `SIGKILL`ing the process
/// group after a seeded random delay uniform over the whole run (up to 1.15 × an
/// uninterrupted run's time on the same pool): some kills land in start-up or in the
/// recovery of the previous crash (double crashes), most while the workload runs, some after
/// it finished. Each run's recovered state is checked against everything acknowledged
/// before it.
fn campaign(spec: &Spec, args: &[&str], seed: u64) -> CampaignReport {
    let kills = kills(200);
    let (_dir, pool) = pool_path("campaign");
    let (mut full, done_seq) = full_run_time(spec, args, &pool);
    let mut window_us = (full.as_micros() as u64 * 115 / 100).max(1000);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut acked = done_seq;
    let mut report = CampaignReport::default();
    for kill in 0..kills {
        if kill > 0 && kill % RECALIBRATE == 0 {
            // The persistent state grows run by run (and so does recovery): keep the window
            // at the length of a whole run now.
            let started = Instant::now();
            let lines = run(spec.command(&pool, args));
            full = started.elapsed();
            window_us = (full.as_micros() as u64 * 115 / 100).max(1000);
            if let Some(done) = lines.iter().find(|line| line.starts_with("DONE")) {
                acked = acked.max(field(done, "seq").unwrap_or(0));
            }
        }
        let mut running = start(spec.command(&pool, args), None, None);
        let delay_us = rng.random_range(0..window_us);
        thread::sleep(Duration::from_micros(delay_us));
        let (got, lines) = kill_and_collect(&mut running, true);
        match lines.iter().find(|line| line.starts_with("STATE")) {
            Some(line) => {
                let state = parse_state(line);
                check_against(
                    state,
                    acked,
                    spec.slack,
                    &format!("{} kill {kill} (after {delay_us} µs)", spec.name),
                );
                acked = acked.max(state.seq);
                if lines.iter().any(|line| line.starts_with("DONE")) {
                    report.finished += 1;
                } else {
                    report.mid_run += 1;
                }
            }
            None => report.before_state += 1,
        }
        acked = acked.max(got);
    }
    let line = spec.check_line(&pool, None).expect("final check");
    let state = parse_state(&line);
    check_against(state, acked, spec.slack, "final check");
    eprintln!(
        "{}: {kills} kills, each after a delay uniform over 1.15 × a whole run (last one \
         {full:?}): {} during start-up or recovery, {} mid-run, {} after the run finished; \
         final seq {}",
        spec.name, report.before_state, report.mid_run, report.finished, state.seq
    );
    assert!(
        report.mid_run * 2 >= kills,
        "{}: most kills must land while the workload runs: {report:?}",
        spec.name
    );
    assert!(
        (report.mid_run + report.finished) * 10 >= kills * 7,
        "{}: most runs must get past recovery: {report:?}",
        spec.name
    );
    if kills >= 100 {
        assert!(
            report.before_state > 0 && report.finished > 0,
            "{}: kills must also land in start-up/recovery and after the end: {report:?}",
            spec.name
        );
    }
    assert!(state.seq > 0, "{}: no section ever committed", spec.name);
    report
}

/// Kills between two measurements of the time of a whole run.
const RECALIBRATE: usize = 25;

fn kills(default: usize) -> usize {
    std::env::var("NVT_KILLS").map_or(default, |v| v.parse().expect("NVT_KILLS"))
}

#[test]
fn counter_survives_random_kills() {
    campaign(&COUNTER, &["3", "400"], 0x6e76_7468);
}

#[test]
fn bank_nested_locks_survive_random_kills() {
    campaign(&BANK, &["3", "400"], 0x6261_6e6b);
}

#[test]
fn list_with_persistent_pointers_survives_random_kills() {
    campaign(&LIST, &["3", "400"], 0x6c69_7374);
}

#[test]
fn barrier_phases_survive_random_kills() {
    campaign(&PHASES, &["3", "100"], 0x7068);
}

#[test]
fn condvar_dependences_survive_random_kills() {
    campaign(&CONDVAR_LOOP, &["loop", "250"], 0x636f_6e64);
}

#[test]
fn liveness_stress_survives_random_kills() {
    campaign(&STRESS, &["4", "60"], 0x7374_7265);
}

#[test]
fn persistent_malloc_list_survives_random_kills() {
    campaign(&MALLOC_LIST, &["3", "800"], 0x6d61_6c6c);
}

#[test]
fn persistent_globals_survive_random_kills() {
    campaign(&GCOUNTER, &["3", "400"], 0x676c_6f62);
}

#[test]
fn liveness_stress_finishes() {
    let (_dir, pool) = pool_path("stress");
    let mut child = command(&program("stress").linked, &pool, &["8", "40"])
        .spawn()
        .expect("spawn stress");
    let started = Instant::now();
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
    assert!(
        text.lines().any(|line| line == "COUNT 320"),
        "stress lost increments: {text}"
    );
    eprintln!(
        "stress: 8 threads x 40 sleeps+sections in {:?}",
        started.elapsed()
    );
}

/// The output lines a comparison with plain pthreads looks at.
fn result_lines(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|line| {
            line.starts_with("RESULT")
                || line.starts_with("COUNT")
                || line.ends_with(" ok")
                || line.starts_with("XY")
        })
        .cloned()
        .collect()
}

#[test]
fn results_equal_plain_pthreads() {
    let cases: &[(&str, &[&str])] = &[
        ("counter", &["4", "300"]),
        ("bank", &["3", "300"]),
        ("list", &["3", "300"]),
        ("phases", &["3", "20"]),
        ("condvar", &["loop", "40"]),
        ("condvar", &["commit"]),
        ("stress", &["4", "10"]),
        ("globals", &["4", "200"]),
        ("gcounter", &["4", "300"]),
        ("extras", &[]),
    ];
    for &(name, args) in cases {
        let built = program(name);
        let (_dir, pool) = pool_path("plain");
        let mut plain = command(&built.linked, &pool, args);
        plain.env("NVT_DISABLE", "1");
        let expected = result_lines(&run(plain));
        assert!(!expected.is_empty(), "{name}: no result line");
        assert!(
            !pool.exists(),
            "{name}: a dormant runtime must not make a pool"
        );
        let runtime = result_lines(&run(command(&built.linked, &pool, args)));
        assert_eq!(
            runtime, expected,
            "{name} {args:?}: runtime differs from pthreads"
        );
        let (_dir, pool) = pool_path("preload");
        let mut preloaded = command(&built.preload, &pool, args);
        preloaded.env("LD_PRELOAD", library_dir().join("libnvthreads_rt.so"));
        let preloaded = result_lines(&run(preloaded));
        assert_eq!(
            preloaded, expected,
            "{name} {args:?}: LD_PRELOAD differs from pthreads"
        );
        eprintln!("{name} {args:?}: {expected:?}");
    }
}

#[test]
fn malloc_family_is_shared_between_threads() {
    let built = program("malloc");
    let (dir, pool) = pool_path("malloc");
    let scratch = dir.path().join("scratch.txt");
    let scratch = scratch.to_str().expect("utf-8 path");
    let ok = vec!["MALLOC ok".to_owned()];
    assert_eq!(
        run(command(&built.linked, &pool, &["4", "2000", scratch])),
        ok
    );
    let mut preloaded = command(&built.preload, &pool, &["3", "500", scratch]);
    preloaded.env("LD_PRELOAD", library_dir().join("libnvthreads_rt.so"));
    assert_eq!(run(preloaded), ok, "LD_PRELOAD");
    let (_dir, persistent_pool) = pool_path("pmalloc");
    let mut persistent = command(&built.linked, &persistent_pool, &["2", "500", scratch]);
    persistent
        .env("NVT_MALLOC", "persistent")
        .env("NVT_HEAP_MB", "64");
    assert_eq!(run(persistent), ok, "NVT_MALLOC=persistent");
    let mut private = command(&built.linked, &pool, &["2", "100", scratch]);
    private.env("NVT_MALLOC", "private");
    let output = private.output().expect("spawn");
    assert!(
        !output.status.success(),
        "with NVT_MALLOC=private, malloc'd memory cannot be shared"
    );
}

#[test]
fn timed_waits_kinds_once_rwlocks_and_detached_threads() {
    let (_dir, pool) = pool_path("extras");
    let lines = run(command(&program("extras").linked, &pool, &[]));
    assert_eq!(lines, vec!["EXTRAS ok".to_owned()]);
}

/// The recovered `XY` line of the condvar program.
fn condvar_state(pool: &Path) -> [u64; 4] {
    let lines = run(command(&program("condvar").linked, pool, &["check"]));
    let line = &lines[0];
    let get = |name: &str| field(line, name).unwrap_or_else(|| panic!("no {name} in {line:?}"));
    [get("x"), get("y"), get("flag"), get("busy")]
}

/// Runs the dependence case in `mode`; returns the recovered [x, y, flag, busy].
fn condvar_case(mode: &str, mutant: Option<&str>) -> [u64; 4] {
    let (_dir, pool) = pool_path("condvar");
    let mut program = command(&program("condvar").linked, &pool, &[mode]);
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
    let caught = (0..4).any(|_| {
        let [x, y, ..] = condvar_case("crash", Some("no-dependence"));
        (x, y) != (0, 0)
    });
    assert!(
        caught,
        "committing a dependent section early must expose T1's open section"
    );
    let problem = crash_every_step(&CONDVAR_LOOP, Some("no-dependence"), false);
    eprintln!("no-dependence mutant at every step: {problem:?}");
}

#[test]
fn globals_are_shared_between_threads() {
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
    let (dir, pool) = pool_path("kernelio");
    let scratch = dir.path().join("scratch");
    let scratch = scratch.to_str().expect("utf-8 path");
    let lines = run(command(&program("kernelio").linked, &pool, &[scratch]));
    assert_eq!(lines, vec!["KERNELIO ok".to_owned()]);
}
