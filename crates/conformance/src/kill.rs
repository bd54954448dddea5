//! Crash tests with real processes: a child runs a workload on a pool file and acknowledges
//! every committed operation on stdout; the parent sends it `SIGKILL` after a random delay,
//! sometimes kills a recovery run too (double crash), then recovers the file itself and checks
//! that the content equals the model after the acknowledged operations, or after one more (the
//! operation in flight when the kill landed). Nothing acknowledged may be lost.
//!
//! The child is the test binary itself, started again with environment variables naming the
//! case ([`ChildSpec`]); a test registers a hidden entry point that calls [`child_main`].

use crate::{Factory, LAYOUT};
use pmem::{CreateOptions, NativeOptions, Pool};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use workloads::Workload;

const ENV_CASE: &str = "FERRITE_KILL_CASE";
const ENV_POOL: &str = "FERRITE_KILL_POOL";
const ENV_START: &str = "FERRITE_KILL_START";
const ENV_MODE: &str = "FERRITE_KILL_MODE";

/// What a child process is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildSpec {
    /// Which engine × workload (interpreted by the test).
    pub case: String,
    /// The pool file.
    pub pool: PathBuf,
    /// Index of the first operation to run.
    pub start: u64,
    /// Run operations until killed, or only recover.
    pub recover_only: bool,
}

impl ChildSpec {
    /// The spec this process was started with, if it is a child.
    pub fn from_env() -> Option<Self> {
        let case = std::env::var(ENV_CASE).ok()?;
        let pool = PathBuf::from(std::env::var_os(ENV_POOL)?);
        let start = std::env::var(ENV_START).ok()?.parse().ok()?;
        let recover_only = std::env::var(ENV_MODE).is_ok_and(|m| m == "recover");
        Some(ChildSpec {
            case,
            pool,
            start,
            recover_only,
        })
    }

    fn command(&self, exe: &Path, entry: &str) -> Command {
        let mut command = Command::new(exe);
        command
            .args(["--exact", entry, "--nocapture", "--test-threads=1"])
            .env(ENV_CASE, &self.case)
            .env(ENV_POOL, &self.pool)
            .env(ENV_START, self.start.to_string())
            .env(ENV_MODE, if self.recover_only { "recover" } else { "run" })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }
}

/// The child's side: open (recover) the pool, then run operations from `spec.start`,
/// printing `ACK <index>` after each commits, until killed.
pub fn child_main<F: Factory, W: Workload>(
    spec: &ChildSpec,
    factory: &F,
    workload: &W,
) -> Result<(), String> {
    let pool =
        Pool::open(&spec.pool, LAYOUT, &NativeOptions::default()).map_err(|e| e.to_string())?;
    let engine = factory.open(pool).map_err(|e| e.to_string())?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "READY").map_err(|e| e.to_string())?;
    if spec.recover_only {
        return Ok(());
    }
    for index in spec.start.. {
        workload
            .run_op(&engine, 0, index)
            .map_err(|e| e.to_string())?;
        writeln!(stdout, "ACK {index}").map_err(|e| e.to_string())?;
        stdout.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// How hard to kill.
#[derive(Clone, Copy, Debug)]
pub struct KillConfig {
    /// Kills of a running workload.
    pub kills: usize,
    /// Longest time a child runs before it is killed (the delay is uniform up to it).
    pub max_run: Duration,
    /// Every this many kills, a recovery run is killed too before the parent recovers.
    pub double_crash_every: usize,
    /// Seed of the delays.
    pub seed: u64,
}

/// What a campaign saw.
#[derive(Clone, Debug, Default)]
pub struct KillReport {
    /// Kills of running children.
    pub kills: usize,
    /// Kills of recovering children.
    pub recovery_kills: usize,
    /// Operations acknowledged in total.
    pub acknowledged: u64,
    /// Times the in-flight operation turned out durable.
    pub in_flight_durable: usize,
}

/// Runs a kill campaign for `factory` × `workload` on a pool file at `pool`. `exe` and
/// `entry` name the test binary and its hidden child test; `case` is passed to it.
#[allow(clippy::too_many_arguments)]
pub fn campaign<F: Factory, W: Workload>(
    exe: &Path,
    entry: &str,
    case: &str,
    factory: &F,
    workload: &W,
    pool: &Path,
    pool_size: u64,
    config: &KillConfig,
) -> Result<KillReport, String> {
    create_pool(factory, workload, pool, pool_size)?;
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let mut report = KillReport::default();
    let mut model = workload.initial_model();
    let mut durable = 0u64;
    for kill in 0..config.kills {
        let spec = ChildSpec {
            case: case.to_owned(),
            pool: pool.to_owned(),
            start: durable,
            recover_only: false,
        };
        let delay = Duration::from_micros(rng.random_range(0..=config.max_run.as_micros() as u64));
        let acked = run_and_kill(&spec, exe, entry, delay)?.map_or(durable, |last| last + 1);
        report.kills += 1;
        report.acknowledged += acked - durable;
        if config.double_crash_every > 0 && kill % config.double_crash_every == 0 {
            let spec = ChildSpec {
                recover_only: true,
                ..spec
            };
            let delay = Duration::from_micros(rng.random_range(0..=2_000));
            run_and_kill(&spec, exe, entry, delay)?;
            report.recovery_kills += 1;
        }
        let content = recover_and_check(factory, workload, pool)?;
        for op in durable..acked {
            workload.apply_to_model(&mut model, 0, op);
        }
        if content == model {
            durable = acked;
            continue;
        }
        let mut next = model.clone();
        workload.apply_to_model(&mut next, 0, acked);
        if content != next {
            return Err(format!(
                "kill {kill}: after {acked} acknowledged operations the pool holds {content:?}, \
                 expected {model:?} (or the in-flight operation {acked} applied)"
            ));
        }
        model = next;
        durable = acked + 1;
        report.in_flight_durable += 1;
    }
    Ok(report)
}

fn create_pool<F: Factory, W: Workload>(
    factory: &F,
    workload: &W,
    path: &Path,
    size: u64,
) -> Result<(), String> {
    let _ = std::fs::remove_file(path);
    let pool = Pool::create(path, &CreateOptions::new(LAYOUT, size)).map_err(|e| e.to_string())?;
    let engine = factory.create(pool).map_err(|e| e.to_string())?;
    workload.setup(&engine).map_err(|e| e.to_string())
}

fn recover_and_check<F: Factory, W: Workload>(
    factory: &F,
    workload: &W,
    path: &Path,
) -> Result<W::Model, String> {
    let pool = Pool::open(path, LAYOUT, &NativeOptions::default())
        .map_err(|e| format!("reopening: {e}"))?;
    let engine = factory.open(pool).map_err(|e| format!("recovery: {e}"))?;
    workload
        .check(&engine)
        .map_err(|e| format!("invariants after recovery: {e}"))
}

/// Starts the child, waits until it is ready, lets it run for `delay`, kills it, and returns
/// the last acknowledged operation index.
fn run_and_kill(
    spec: &ChildSpec,
    exe: &Path,
    entry: &str,
    delay: Duration,
) -> Result<Option<u64>, String> {
    let mut child = spec
        .command(exe, entry)
        .spawn()
        .map_err(|e| format!("spawning the child: {e}"))?;
    let output = ChildOutput::take(&mut child)?;
    if !output.became_ready() {
        kill(&mut child);
        let (_, errors) = output.finish();
        return Err(format!(
            "the child exited before it became ready; its stderr:\n{}",
            errors.trim_end()
        ));
    }
    std::thread::sleep(delay);
    kill(&mut child);
    let mut last = None;
    let (lines, _) = output.finish();
    for line in lines {
        note_ack(&line, &mut last);
    }
    Ok(last)
}

/// A child's output read while it runs: its stdout line by line and its stderr whole, each on
/// a thread of its own, so a child that writes much never blocks on a full pipe before the
/// kill.
#[derive(Debug)]
pub struct ChildOutput {
    lines: mpsc::Receiver<String>,
    reader: std::thread::JoinHandle<()>,
    errors: std::thread::JoinHandle<String>,
}

impl ChildOutput {
    /// Starts reading `child`'s piped stdout and stderr.
    pub fn take(child: &mut Child) -> Result<Self, String> {
        let stdout = child.stdout.take().ok_or("child has no stdout")?;
        let stderr = child.stderr.take().ok_or("child has no stderr")?;
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut text);
            text
        });
        let (sender, lines) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(ChildOutput {
            lines,
            reader,
            errors,
        })
    }

    /// Waits for the child's line ending in `READY` (the test harness prints its own lines
    /// first: up to 64 are looked at); false if the child ended without one.
    pub fn became_ready(&self) -> bool {
        self.lines
            .iter()
            .take(64)
            .any(|line| line.ends_with("READY"))
    }

    /// After the child ended: the stdout lines not read yet, and its whole stderr.
    pub fn finish(self) -> (Vec<String>, String) {
        let _ = self.reader.join();
        let errors = self.errors.join().unwrap_or_default();
        (self.lines.try_iter().collect(), errors)
    }
}

fn note_ack(line: &str, last: &mut Option<u64>) {
    if let Some(index) = line.strip_prefix("ACK ").and_then(|n| n.parse().ok()) {
        *last = Some(index);
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill(); // SIGKILL on Unix
    let _ = child.wait();
}
