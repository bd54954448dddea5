//! The crash-test harness: run a workload on the simulator, and at every crash point build
//! crash images, recover each, and let the oracle judge the result.
//!
//! Oracle, for a crash during operation `i` (0-based) of a sequential workload:
//! - recovery must not panic and must not report an error (its own invariant checks);
//! - the recovered logical state must equal the model after `i` operations or after `i + 1`
//!   (the in-flight operation is all or nothing); once the operation has declared its
//!   durability point, only `i + 1` is allowed; at the end of the run only the final state;
//! - double crash: a crash at any point of recovery, followed by a second recovery, must give
//!   the same state as the first recovery (which also covers idempotence: the end of the
//!   first recovery is one of those points).

use crate::image::{Budget, Choice, Snapshot, SnapshotKind, choices};
use crate::sim::{SimConfig, SimMode, SimPm};
use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::time::Instant;

/// A crash-testable workload: a structure on a pool, a sequence of operations, a model.
pub trait Scenario {
    /// Logical state of the structure, compared with the model.
    type Model: Clone + PartialEq + fmt::Debug;
    /// The structure under test while the workload runs (pool, engine, handles).
    type Live;

    /// Name for reports.
    fn name(&self) -> String;
    /// Pool size in bytes (keep it small: every crash image is a copy).
    fn pool_size(&self) -> u64;
    /// Number of operations.
    fn op_count(&self) -> usize;
    /// The model before any operation.
    fn initial_model(&self) -> Self::Model;
    /// Applies operation `op` to the model.
    fn apply_to_model(&self, model: &mut Self::Model, op: usize);
    /// Formats the pool on `pm` and builds the empty structure (not crash-tested).
    fn setup(&self, pm: SimPm) -> Self::Live;
    /// Runs operation `op` against the structure, through the seam. It declares at most one
    /// durability point, once the whole operation is durable: from then on only the model
    /// after `op` is accepted.
    fn run_op(&self, live: &mut Self::Live, op: usize);
    /// Opens the crashed pool on `pm`, recovers it, checks the structure's invariants and
    /// reads back its logical state. An `Err` is a consistency violation.
    fn recover(&self, pm: SimPm) -> Result<Self::Model, String>;
}

/// Which crash points to test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Points {
    /// Before every fence, at every durability point, and at the end.
    All,
    /// Only at durability points and at the end, with only the nothing-more-persisted image:
    /// the cheap check that what an operation declared durable is not still pending.
    DurabilityOnly,
}

/// Double-crash settings: how much of each recovery run is itself crash-tested.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DoubleCrash {
    /// Recovery crash points sampled per first-level image (evenly spaced, end included).
    pub points: usize,
    /// Images per sampled recovery crash point.
    pub budget: Budget,
}

/// Harness configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Config {
    /// Simulated platform.
    #[serde(skip)]
    pub sim: SimConfig,
    /// Crash points to test.
    pub points: Points,
    /// Images per crash point.
    pub budget: Budget,
    /// Seed of the random image choices.
    pub seed: u64,
    /// Crash during recovery, `None` to skip.
    pub double_crash: Option<DoubleCrash>,
    /// Stop after this many failures; `0` means no limit (check every selected image).
    pub max_failures: usize,
    /// Most seam calls one recovery may make before it is stopped and reported as
    /// [`Problem::RecoveryPanicked`] (see [`SimPm::set_step_limit`]): a recovery that loops
    /// forever over PM then fails the check instead of hanging it. `None`: no limit.
    pub recovery_step_limit: Option<u64>,
}

/// The presets' [`Config::recovery_step_limit`]: far more seam calls than any recovery of a
/// small pool makes, and reached in about ten seconds by one that loops.
pub const DEFAULT_RECOVERY_STEP_LIMIT: u64 = 200_000_000;

impl Config {
    /// Every fence, structured plus random images, double crash on.
    pub fn thorough(mode: SimMode, seed: u64) -> Self {
        Config {
            sim: SimConfig {
                mode,
                ..SimConfig::default()
            },
            points: Points::All,
            budget: Budget::default(),
            seed,
            double_crash: Some(DoubleCrash {
                points: 8,
                budget: Budget {
                    exhaustive_max: 8,
                    random: 2,
                },
            }),
            max_failures: 5,
            recovery_step_limit: Some(DEFAULT_RECOVERY_STEP_LIMIT),
        }
    }

    /// Durability points only, nothing-persisted images only, no double crash.
    pub fn quick(mode: SimMode) -> Self {
        Config {
            sim: SimConfig {
                mode,
                ..SimConfig::default()
            },
            points: Points::DurabilityOnly,
            budget: Budget {
                exhaustive_max: 1,
                random: 0,
            },
            seed: 0,
            double_crash: None,
            max_failures: 5,
            recovery_step_limit: Some(DEFAULT_RECOVERY_STEP_LIMIT),
        }
    }

    /// Whether `failures` failures end the run (`max_failures == 0`: never).
    fn enough(&self, failures: usize) -> bool {
        self.max_failures != 0 && failures >= self.max_failures
    }
}

/// What went wrong with one crash image.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Problem {
    /// Recovery panicked.
    RecoveryPanicked(String),
    /// Recovery (or the invariant check after it) returned an error.
    RecoveryFailed(String),
    /// The recovered state is none of the allowed model states.
    WrongState {
        /// Recovered state.
        got: String,
        /// Allowed states.
        allowed: Vec<String>,
    },
    /// A second recovery, after a crash during the first, gave a different state.
    NotIdempotent {
        /// State after the first recovery.
        first: String,
        /// State after the second.
        second: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::RecoveryPanicked(message) => write!(f, "recovery panicked: {message}"),
            Problem::RecoveryFailed(message) => write!(f, "recovery failed: {message}"),
            Problem::WrongState { got, allowed } => {
                write!(
                    f,
                    "recovered state {got} is not one of {}",
                    allowed.join(" | ")
                )
            }
            Problem::NotIdempotent { first, second } => {
                write!(f, "second recovery gave {second}, first gave {first}")
            }
        }
    }
}

/// A crash image that failed the oracle, with everything needed to rebuild it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    /// Scenario name.
    pub scenario: String,
    /// Persistence domain.
    pub mode: SimMode,
    /// Harness seed.
    pub seed: u64,
    /// Operation in flight, `None` at the end of the run.
    pub op: Option<usize>,
    /// Crash point.
    pub point: SnapshotKind,
    /// Image at that point.
    pub choice: Choice,
    /// xxh3 of the image.
    pub image_hash: u64,
    /// For a double crash: the crash point and image within the first recovery.
    pub second_crash: Option<(SnapshotKind, Choice)>,
    /// The verdict.
    pub problem: Problem,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = self.op.map_or("after the last op".to_owned(), |op| {
            format!("during op {op}")
        });
        write!(
            f,
            "{} [{}, seed {}]: crash at {} {op}, image {} (hash {:016x})",
            self.scenario,
            self.mode.name(),
            self.seed,
            self.point,
            self.choice,
            self.image_hash
        )?;
        if let Some((point, choice)) = &self.second_crash {
            write!(f, ", then crash in recovery at {point}, image {choice}")?;
        }
        write!(f, ": {}", self.problem)
    }
}

/// The outcome of a harness run.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Operations run.
    pub ops: usize,
    /// Crash points examined.
    pub crash_points: u64,
    /// Crash images built (before de-duplication).
    pub images: u64,
    /// Recoveries run (distinct images, plus second-level ones).
    pub recoveries: u64,
    /// Second-level images (crash during recovery).
    pub second_crash_images: u64,
    /// Failures found, at most `max_failures`.
    pub failures: Vec<Failure>,
    /// Wall-clock time.
    pub elapsed_ms: u128,
}

impl Report {
    /// Whether no image failed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// Panics with every failure if any image failed.
    #[track_caller]
    pub fn assert_passed(&self) {
        if !self.passed() {
            let lines: Vec<String> = self.failures.iter().map(Failure::to_string).collect();
            panic!("crash test failed:\n{}", lines.join("\n"));
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ops, {} crash points, {} images, {} recoveries ({} after a second crash), {} failures, {} ms",
            self.scenario,
            self.ops,
            self.crash_points,
            self.images,
            self.recoveries,
            self.second_crash_images,
            self.failures.len(),
            self.elapsed_ms
        )
    }
}

/// Runs `scenario` under `config` and checks every selected crash image.
pub fn check<S: Scenario>(scenario: &S, config: &Config) -> Report {
    let start = Instant::now();
    let mut checker = Checker::new(scenario, config);
    let pm = SimPm::new(scenario.pool_size(), config.sim);
    let mut live = scenario.setup(pm.clone());
    pm.set_capture(true);
    for op in 0..scenario.op_count() {
        let points_before = pm.durability_points();
        scenario.run_op(&mut live, op);
        for snapshot in pm.take_snapshots() {
            checker.check_point(&snapshot, Some(op), points_before);
        }
        if config.enough(checker.report.failures.len()) {
            break;
        }
    }
    let end = pm.crash_now();
    checker.check_point(&end, None, 0);
    checker.report.elapsed_ms = start.elapsed().as_millis();
    checker.report
}

/// Rebuilds the image of a reported failure and recovers it again, returning the
/// recovered state, or the recovery's error: for [`Problem::RecoveryFailed`]`(m)` the same
/// `m`, for a panic `"recovery panicked: "` followed by the message (the `Display` of
/// [`Problem::RecoveryPanicked`]). For double-crash failures the second-level image is
/// rebuilt from the first recovery.
pub fn replay<S: Scenario>(
    scenario: &S,
    config: &Config,
    failure: &Failure,
) -> Result<S::Model, String> {
    if failure.mode != config.sim.mode {
        return Err(format!(
            "the failure was found under {}, but the replay config simulates {}",
            failure.mode.name(),
            config.sim.mode.name()
        ));
    }
    let recovery_pm = |image: Vec<u8>| {
        let pm = SimPm::from_image(image, config.sim);
        pm.set_step_limit(config.recovery_step_limit);
        pm
    };
    let pm = SimPm::new(scenario.pool_size(), config.sim);
    let mut live = scenario.setup(pm.clone());
    pm.set_capture(true);
    let snapshot = if failure.point == SnapshotKind::End {
        (0..scenario.op_count()).for_each(|op| scenario.run_op(&mut live, op));
        pm.crash_now()
    } else {
        let mut found = None;
        for op in 0..scenario.op_count() {
            scenario.run_op(&mut live, op);
            found = pm
                .take_snapshots()
                .into_iter()
                .find(|s| s.kind == failure.point);
            if found.is_some() {
                break;
            }
        }
        found.ok_or("crash point not reached on replay")?
    };
    if !snapshot.accepts(&failure.choice) {
        return Err("image choice does not fit the crash point on replay".into());
    }
    let image = snapshot.image(&failure.choice);
    let Some((point, choice)) = &failure.second_crash else {
        return recover_replayed(scenario, recovery_pm(image));
    };
    let first = recovery_pm(image);
    first.set_capture(true);
    recover_replayed(scenario, first.clone())?;
    let inner = match point {
        SnapshotKind::End => first.crash_now(),
        _ => first
            .take_snapshots()
            .into_iter()
            .find(|s| s.kind == *point)
            .ok_or("second crash point not reached on replay")?,
    };
    recover_replayed(scenario, recovery_pm(inner.image(choice)))
}

/// [`recover_caught`] for [`replay`]: a panic comes back as the text the report prints for
/// it, without the internal marker.
fn recover_replayed<S: Scenario>(scenario: &S, pm: SimPm) -> Result<S::Model, String> {
    recover_caught(scenario, pm).map_err(|message| match problem_of(message) {
        Problem::RecoveryFailed(message) => message,
        panicked => panicked.to_string(),
    })
}

struct Checker<'a, S: Scenario> {
    scenario: &'a S,
    config: &'a Config,
    /// `models[k]` is the model after `k` operations.
    models: Vec<S::Model>,
    /// Images (by hash) already found good for a given allowed set.
    passed: HashSet<(u64, usize, bool)>,
    report: Report,
}

impl<'a, S: Scenario> Checker<'a, S> {
    fn new(scenario: &'a S, config: &'a Config) -> Self {
        let mut model = scenario.initial_model();
        let mut models = vec![model.clone()];
        for op in 0..scenario.op_count() {
            scenario.apply_to_model(&mut model, op);
            models.push(model.clone());
        }
        let report = Report {
            scenario: scenario.name(),
            ops: scenario.op_count(),
            ..Report::default()
        };
        Checker {
            scenario,
            config,
            models,
            passed: HashSet::new(),
            report,
        }
    }

    /// Checks the images of one crash point. `op` is the operation in flight (`None` at the
    /// end); `points_before` the durability points declared before it started.
    fn check_point(&mut self, snapshot: &Snapshot, op: Option<usize>, points_before: u64) {
        let durability_only = self.config.points == Points::DurabilityOnly;
        if durability_only
            && matches!(
                snapshot.kind,
                SnapshotKind::Fence(_) | SnapshotKind::Clflush(_)
            )
        {
            return;
        }
        self.report.crash_points += 1;
        // Allowed model indexes: (lowest, whether the next one is allowed too).
        let allowed = match op {
            None => (self.scenario.op_count(), false),
            Some(op) if snapshot.durability_points > points_before => (op + 1, false),
            Some(op) => (op, true),
        };
        let picked = if durability_only {
            vec![snapshot.nothing()]
        } else {
            choices(snapshot, &self.config.budget, self.config.seed)
        };
        let mut image = Vec::new();
        for choice in picked {
            if self.config.enough(self.report.failures.len()) {
                return;
            }
            self.report.images += 1;
            snapshot.build(&choice, &mut image);
            let hash = xxhash_rust::xxh3::xxh3_64(&image);
            if self.passed.contains(&(hash, allowed.0, allowed.1)) {
                continue;
            }
            match self.verify(&image, allowed) {
                Ok(()) => {
                    self.passed.insert((hash, allowed.0, allowed.1));
                }
                Err((second_crash, problem)) => self.report.failures.push(Failure {
                    scenario: self.report.scenario.clone(),
                    mode: self.config.sim.mode,
                    seed: self.config.seed,
                    op,
                    point: snapshot.kind,
                    choice,
                    image_hash: hash,
                    second_crash,
                    problem,
                }),
            }
        }
    }

    /// Recovers one image and judges it, then crash-tests that recovery.
    fn verify(
        &mut self,
        image: &[u8],
        allowed: (usize, bool),
    ) -> Result<(), (Option<(SnapshotKind, Choice)>, Problem)> {
        let pm = SimPm::from_image(image.to_vec(), self.config.sim);
        pm.set_step_limit(self.config.recovery_step_limit);
        pm.set_capture(self.config.double_crash.is_some());
        self.report.recoveries += 1;
        let state = recover_caught(self.scenario, pm.clone()).map_err(|p| (None, problem_of(p)))?;
        let (low, next_too) = allowed;
        let ok = self.models[low] == state || (next_too && self.models[low + 1] == state);
        if !ok {
            let mut allowed_states = vec![format!("{:?}", self.models[low])];
            if next_too {
                allowed_states.push(format!("{:?}", self.models[low + 1]));
            }
            let got = format!("{state:?}");
            return Err((
                None,
                Problem::WrongState {
                    got,
                    allowed: allowed_states,
                },
            ));
        }
        let Some(double) = self.config.double_crash else {
            return Ok(());
        };
        let mut points = pm.take_snapshots();
        points.push(pm.crash_now());
        for snapshot in sample_evenly(points, double.points) {
            for choice in choices(&snapshot, &double.budget, self.config.seed) {
                self.report.second_crash_images += 1;
                self.report.recoveries += 1;
                let second_pm = SimPm::from_image(snapshot.image(&choice), self.config.sim);
                second_pm.set_step_limit(self.config.recovery_step_limit);
                let second = recover_caught(self.scenario, second_pm);
                let where_ = Some((snapshot.kind, choice));
                match second {
                    Err(message) => return Err((where_, problem_of(message))),
                    Ok(second) if second != state => {
                        let (first, second) = (format!("{state:?}"), format!("{second:?}"));
                        return Err((where_, Problem::NotIdempotent { first, second }));
                    }
                    Ok(_) => {}
                }
            }
        }
        Ok(())
    }
}

/// Picks at most `n` items spread evenly, always keeping the last.
fn sample_evenly<T>(items: Vec<T>, n: usize) -> Vec<T> {
    let len = items.len();
    if len <= n || n == 0 {
        return items;
    }
    let keep: HashSet<usize> = (0..n).map(|i| (i + 1) * len / n - 1).collect();
    items
        .into_iter()
        .enumerate()
        .filter(|(i, _)| keep.contains(i))
        .map(|(_, t)| t)
        .collect()
}

const PANIC_PREFIX: &str = "\u{1}panic: ";

fn problem_of(message: String) -> Problem {
    match message.strip_prefix(PANIC_PREFIX) {
        Some(panic) => Problem::RecoveryPanicked(panic.to_owned()),
        None => Problem::RecoveryFailed(message),
    }
}

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs recovery, turning a panic into an error message (marked so it can be told apart),
/// without printing the panic: an expected event in a crash test.
fn recover_caught<S: Scenario>(scenario: &S, pm: SimPm) -> Result<S::Model, String> {
    install_quiet_panic_hook();
    QUIET.with(|quiet| quiet.set(true));
    let result = panic::catch_unwind(AssertUnwindSafe(|| scenario.recover(pm)));
    QUIET.with(|quiet| quiet.set(false));
    result.unwrap_or_else(|_| {
        let message = LAST_PANIC
            .with(|last| last.borrow_mut().take())
            .unwrap_or_default();
        Err(format!("{PANIC_PREFIX}{message}"))
    })
}

fn install_quiet_panic_hook() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) {
                let location = info
                    .location()
                    .map(|l| format!(" at {l}"))
                    .unwrap_or_default();
                let payload = info.payload();
                let text = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic".into());
                LAST_PANIC.with(|last| *last.borrow_mut() = Some(format!("{text}{location}")));
            } else {
                previous(info);
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_sampling_keeps_the_last_item() {
        assert_eq!(sample_evenly((0..10).collect(), 3), vec![2, 5, 9]);
        assert_eq!(sample_evenly((0..2).collect(), 3), vec![0, 1]);
    }
}
