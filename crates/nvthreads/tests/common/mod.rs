//! What the C-program tests share (`c_programs.rs`, `c_power_failure.rs`): building the
//! programs with the system C compiler against the runtime library, pools on tmpfs, the
//! programs' specifications, runs with acknowledgements over a pipe, and crashing a small
//! run at every persistence step (with its recoveries crashed at their fences).

#![allow(dead_code)]

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;

use nvthreads_programs::{Compiler, Link};

pub const ACK_FD: i32 = 3;

/// Panics with a clear message when there is no C compiler: these tests must not pass
/// without running.
pub fn require_cc() {
    assert!(
        nvthreads_programs::find_cc().is_some(),
        "the NVthreads C-program tests need a C compiler `cc` on PATH (apt-get install gcc)"
    );
}

/// The directory holding `libnvthreads_rt.so` (target/<profile>/examples), which must be
/// newer than every runtime source file.
pub fn library_dir() -> PathBuf {
    let library = nvthreads_programs::built_library().unwrap_or_else(|error| panic!("{error}"));
    library.parent().expect("library directory").to_path_buf()
}

pub struct Built {
    pub linked: PathBuf,
    pub preload: PathBuf,
}

/// Builds `tests/c/<name>.c` twice: linked against the runtime, and without it (the API as
/// weak references, bound at run time to the library given in `LD_PRELOAD`). Warnings are
/// errors. The programs go to Cargo's scratch directory for tests, one place per program
/// (a temporary directory kept for the test process's life was never removed: statics are
/// not dropped at exit); each is compiled beside its place and renamed into it, so test
/// processes building the same program at once each see a whole one.
pub fn build(name: &str) -> Built {
    require_cc();
    let library = nvthreads_programs::built_library().unwrap_or_else(|error| panic!("{error}"));
    // One directory per runtime library (the debug and release test profiles share
    // CARGO_TARGET_TMPDIR, and each links its own library).
    let profile = library
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .map_or_else(
            || "runtime".into(),
            |name| name.to_string_lossy().into_owned(),
        );
    let mut compiler = Compiler::new(library).unwrap_or_else(|error| panic!("{error}"));
    compiler.strict = true;
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let include = nvthreads_programs::include_dir();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("c-programs")
        .join(profile);
    std::fs::create_dir_all(&dir).expect("c-programs directory");
    let linked = dir.join(name);
    let preload = dir.join(format!("{name}-preload"));
    for (output, link) in [(&linked, Link::Runtime), (&preload, Link::Preload)] {
        let staged = tempfile::Builder::new()
            .prefix(&format!(".{name}"))
            .tempdir_in(&dir)
            .expect("staging directory");
        let compiled = staged.path().join(name);
        compiler
            .compile(&source, &compiled, &include, link, &[])
            .unwrap_or_else(|error| panic!("{error}"));
        std::fs::rename(&compiled, output).expect("rename the compiled program into place");
    }
    Built { linked, preload }
}

/// `tests/c/<name>.c`, built once per test process.
pub fn program(name: &'static str) -> &'static Built {
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
pub fn pool_path(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("nvthreads-test")
        .tempdir_in(pmem::DEFAULT_POOL_DIR)
        .expect("tempdir on /dev/shm");
    let path = dir.path().join(format!("{name}.pool"));
    (dir, path)
}

pub fn command(program: &Path, pool: &Path, args: &[&str]) -> Command {
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
        .env_remove("NVT_PFAIL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

/// Threads whose acknowledgements are told apart (programs that acknowledge per thread).
pub const ACK_THREADS: usize = 8;

/// The recovered state a run printed: `seq` (the sum over threads for programs that count
/// per thread, whose `t0=`, `t1=`, … fields fill `threads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    pub run: u64,
    pub seq: u64,
    pub crashed: bool,
    pub threads: [u64; ACK_THREADS],
}

/// What a run acknowledged: the highest value, and per thread the highest count of the
/// values `(thread << 56) | count` (a program that acknowledges one counter is thread 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Acked {
    pub max: u64,
    pub threads: [u64; ACK_THREADS],
}

impl Acked {
    fn record(&mut self, value: u64) {
        self.max = self.max.max(value);
        let thread = (value >> 56) as usize;
        if thread < ACK_THREADS {
            let count = value & ((1 << 56) - 1);
            self.threads[thread] = self.threads[thread].max(count);
        }
    }

    /// Everything `other` acknowledged too.
    pub fn merge(&mut self, other: &Acked) {
        self.max = self.max.max(other.max);
        for (mine, theirs) in self.threads.iter_mut().zip(other.threads) {
            *mine = (*mine).max(theirs);
        }
    }

    /// A recovered state is as good as acknowledged for the runs after it.
    pub fn cover(&mut self, state: &State) {
        self.max = self.max.max(state.seq);
        for (mine, recovered) in self.threads.iter_mut().zip(state.threads) {
            *mine = (*mine).max(recovered);
        }
    }
}

pub fn field(line: &str, name: &str) -> Option<u64> {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
        .and_then(|value| value.parse().ok())
}

pub fn try_parse_state(line: &str) -> Result<State, String> {
    let need = |name: &str| field(line, name).ok_or_else(|| format!("no {name} in {line:?}"));
    if !line.starts_with("STATE ") {
        return Err(format!("not a state line: {line:?}"));
    }
    let a_matches = !line.contains(" a=") || need("a")? == need("seq")?;
    if need("ok")? != 1 || !a_matches {
        return Err(format!("invariant violated after recovery: {line}"));
    }
    let mut threads = [0u64; ACK_THREADS];
    for (t, count) in threads.iter_mut().enumerate() {
        *count = field(line, &format!("t{t}")).unwrap_or(0);
    }
    Ok(State {
        run: need("run")?,
        seq: need("seq")?,
        crashed: need("crashed")? == 1,
        threads,
    })
}

pub fn parse_state(line: &str) -> State {
    try_parse_state(line).unwrap_or_else(|problem| panic!("{problem}"))
}

/// A state line without its `crashed=` flag (a completed recovery closes the pool cleanly,
/// so the flag of the next check differs; everything else must not).
pub fn state_key(line: &str) -> String {
    line.split_whitespace()
        .filter(|word| !word.starts_with("crashed="))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs to completion; returns stdout lines.
pub fn run(mut command: Command) -> Vec<String> {
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
pub struct Spec {
    pub name: &'static str,
    pub args: &'static [&'static str],
    pub check: &'static [&'static str],
    /// Unacknowledged sections that may additionally appear after a crash.
    pub slack: u64,
    pub env: &'static [(&'static str, &'static str)],
    /// Whether it acknowledges per thread (`(thread << 56) | count`), each thread's count
    /// then checked on its own.
    pub per_thread: bool,
}

impl Spec {
    pub fn path(&self) -> &'static Path {
        &program(self.name).linked
    }

    pub fn command(&self, pool: &Path, args: &[&str]) -> Command {
        let mut command = command(self.path(), pool, args);
        command.envs(self.env.iter().copied());
        command
    }

    pub fn check_line(&self, pool: &Path, crash_at: Option<u64>) -> Option<String> {
        self.check_line_with(pool, crash_at, &[])
    }

    /// [`Spec::check_line`] with `env` added to the check run's environment.
    pub fn check_line_with(
        &self,
        pool: &Path,
        crash_at: Option<u64>,
        env: &[(&str, &str)],
    ) -> Option<String> {
        let mut command = self.command(pool, self.check);
        command.envs(env.iter().copied()).process_group(0);
        if let Some(step) = crash_at {
            command.env("NVT_CRASH_AT", step.to_string());
        }
        let output = command.output().expect("spawn check");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let line = text.lines().next().map(str::to_owned);
        if crash_at.is_none() {
            assert!(
                line.is_some(),
                "{}: check run printed nothing: {:?}\n{}",
                self.name,
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        line
    }
}

pub const COUNTER: Spec = Spec {
    name: "counter",
    args: &["2", "9"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[],
    per_thread: false,
};
pub const BANK: Spec = Spec {
    name: "bank",
    args: &["2", "7"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[],
    per_thread: false,
};
pub const LIST: Spec = Spec {
    name: "list",
    args: &["2", "8"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[("NVT_HEAP_MB", "16")],
    per_thread: false,
};
pub const PHASES: Spec = Spec {
    name: "phases",
    args: &["2", "3"],
    check: &["1", "1", "check"],
    slack: 1,
    env: &[],
    per_thread: false,
};
pub const CONDVAR_LOOP: Spec = Spec {
    name: "condvar",
    args: &["loop", "3"],
    check: &["loop", "1", "check"],
    slack: 1,
    env: &[],
    per_thread: false,
};
pub const STRESS: Spec = Spec {
    name: "stress",
    args: &["2", "3"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[],
    per_thread: false,
};
pub const GCOUNTER: Spec = Spec {
    name: "gcounter",
    args: &["2", "5"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[("NVT_GLOBALS", "persistent"), ("NVT_HEAP_MB", "16")],
    per_thread: false,
};
pub const LEDGER: Spec = Spec {
    name: "ledger",
    args: &["3", "6"],
    check: &["1", "1", "check"],
    slack: 3,
    env: &[],
    per_thread: true,
};
/// Transfers under a read-write lock's write lock, audits under its read lock by threads
/// holding it together, each counting its audits in persistent memory.
pub const RWBANK: Spec = Spec {
    name: "rwbank",
    args: &["2", "6"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[],
    per_thread: false,
};
pub const MALLOC_LIST: Spec = Spec {
    name: "list",
    args: &["2", "5"],
    check: &["1", "1", "check"],
    slack: 2,
    env: &[
        ("LIST_NODES", "malloc"),
        ("NVT_MALLOC", "persistent"),
        ("NVT_HEAP_MB", "64"),
    ],
    per_thread: false,
};

/// How many acknowledgements a running program has sent so far.
#[derive(Default)]
pub struct Progress {
    count: std::sync::Mutex<u64>,
    more: std::sync::Condvar,
}

impl Progress {
    fn add(&self) {
        *self.count.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.more.notify_all();
    }

    /// Waits until `count` acknowledgements arrived, or `limit` passed; returns the count.
    pub fn wait_for(&self, count: u64, limit: std::time::Duration) -> u64 {
        let guard = self.count.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = self
            .more
            .wait_timeout_while(guard, limit, |seen| *seen < count)
            .unwrap_or_else(|e| e.into_inner());
        *guard
    }

    /// Acknowledgements so far.
    pub fn count(&self) -> u64 {
        *self.count.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running program with its acknowledgements pipe.
pub struct Running {
    child: Child,
    acks: Option<thread::JoinHandle<Acked>>,
    /// Acknowledgements received so far.
    pub progress: std::sync::Arc<Progress>,
}

impl Running {
    /// The program's standard output, read by the caller from now on.
    pub fn stdout(&mut self) -> std::process::ChildStdout {
        self.child.stdout.take().expect("stdout not taken yet")
    }
}

pub fn start(mut command: Command, crash_at: Option<u64>, mutant: Option<&str>) -> Running {
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
    let progress = std::sync::Arc::new(Progress::default());
    let counted = progress.clone();
    let acks = thread::spawn(move || {
        let mut reader = std::fs::File::from(read_end);
        let mut acked = Acked::default();
        let mut word = [0u8; 8];
        while reader.read_exact(&mut word).is_ok() {
            acked.record(u64::from_le_bytes(word));
            counted.add();
        }
        acked
    });
    Running {
        child,
        acks: Some(acks),
        progress,
    }
}

/// Kills the whole process group (the program and its thread-processes), reaps it, and
/// returns what it acknowledged plus the program's output.
pub fn kill_and_collect(running: &mut Running, kill: bool) -> (Acked, Vec<String>) {
    let (acked, lines, _) = kill_and_reap(running, kill);
    (acked, lines)
}

/// [`kill_and_collect`], also telling whether the program exited by itself with status 0
/// (it was not killed, at a persistence step or otherwise).
pub fn kill_and_reap(running: &mut Running, kill: bool) -> (Acked, Vec<String>, bool) {
    let pid = running.child.id() as i32;
    if kill {
        // SAFETY: signalling the process group we created for the child.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let stdout = running.child.stdout.take();
    let exited = running.child.wait().is_ok_and(|status| status.success());
    // Thread-processes are children of the program, not ours: wait for the pipe to close.
    let acked = running
        .acks
        .take()
        .expect("collected once")
        .join()
        .expect("ack reader");
    let mut text = String::new();
    if let Some(mut stdout) = stdout {
        let _ = stdout.read_to_string(&mut text);
    }
    (acked, text.lines().map(str::to_owned).collect(), exited)
}

/// Checks the state printed at the start of a run against what earlier runs acknowledged:
/// nothing acknowledged is lost, and at most `slack` unacknowledged sections appear (for a
/// program acknowledging per thread, each thread's count is checked: at most its one
/// in-flight section more than it acknowledged).
pub fn check_against(state: State, acked: &Acked, slack: u64, per_thread: bool, context: &str) {
    if let Err(problem) = compare(state, acked, slack, per_thread) {
        panic!("{context}: {problem}");
    }
}

/// [`check_against`] as a result.
pub fn compare(state: State, acked: &Acked, slack: u64, per_thread: bool) -> Result<(), String> {
    if !per_thread {
        let ok = acked.max <= state.seq && state.seq <= acked.max + slack;
        return ok.then_some(()).ok_or_else(|| {
            format!(
                "recovered seq {} but {} acknowledged (slack {slack})",
                state.seq, acked.max
            )
        });
    }
    for (t, (&got, &want)) in state.threads.iter().zip(&acked.threads).enumerate() {
        if !(want <= got && got <= want + 1) {
            return Err(format!(
                "thread {t}: recovered {got} transfers but {want} acknowledged"
            ));
        }
    }
    let acked_total: u64 = acked.threads.iter().sum();
    if state.seq > acked_total + slack {
        return Err(format!(
            "recovered seq {} but {acked_total} acknowledged (slack {slack})",
            state.seq
        ));
    }
    Ok(())
}

/// What crashing every persistence step of a small run did.
#[derive(Debug, Default)]
pub struct StepReport {
    /// Runs crashed at a step (the last run finished).
    pub crashed_runs: u64,
    /// Recoveries crashed at one of their own fences (then recovered again).
    pub recovery_crashes: u64,
}

impl StepReport {
    /// Asserts the run was thorough: at least `minimum` persistence steps crashed, and the
    /// recovery of every crashed run crashed too (`what` names the run in the messages).
    pub fn assert_covers(&self, what: &str, minimum: u64) {
        assert!(
            self.crashed_runs >= minimum,
            "{what}: too few persistence steps: {}",
            self.crashed_runs
        );
        assert!(
            self.recovery_crashes >= self.crashed_runs,
            "{what}: every crashed run's recovery must be crashed too"
        );
    }
}

/// Crashes a small run of `spec` at persistence step 1, 2, … until a run finishes. After
/// each crash, with `double`, the recovery is crashed at each of its own fences in turn
/// (every one a fresh recovery of the pool the previous one left) until one completes;
/// every completed recovery must print the same state as an uninterrupted recovery of a copy
/// of the crashed pool, with nothing acknowledged lost and at most `slack` unacknowledged
/// sections. Returns the counts, or the first violation.
pub fn crash_every_step(
    spec: &Spec,
    mutant: Option<&str>,
    double: bool,
) -> Result<StepReport, String> {
    crash_every_step_with(spec, mutant, double, CrashEnv::default())
}

/// Environment added to the runs that are crashed (for instance `NVT_PFAIL`, to crash them
/// with power-failure images).
#[derive(Clone, Copy, Debug, Default)]
pub struct CrashEnv<'a> {
    /// For the run crashed at each persistence step.
    pub run: &'a [(&'a str, &'a str)],
    /// For the recoveries crashed at their fences (with `double`).
    pub recovery: &'a [(&'a str, &'a str)],
}

/// [`crash_every_step`] with `env` added to the crashed runs.
pub fn crash_every_step_with(
    spec: &Spec,
    mutant: Option<&str>,
    double: bool,
    env: CrashEnv<'_>,
) -> Result<StepReport, String> {
    let mut report = StepReport::default();
    for step in 1..5000u64 {
        let (dir, pool) = pool_path("steps");
        let mut run = spec.command(&pool, spec.args);
        run.envs(env.run.iter().copied());
        let mut running = start(run, Some(step), mutant);
        // Finished: exited by itself, so no crash point was left after this step (a run may
        // print DONE and still be killed on its way out, in the exit's checkpoint).
        let (acked, _, finished) = kill_and_reap(&mut running, false);
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
                let Some(line) = spec.check_line_with(&pool, Some(fence), env.recovery) else {
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
        compare(state, &acked, spec.slack, spec.per_thread)
            .map_err(|problem| format!("crash at step {step}: {problem}"))?;
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
