//! C programs crashed with power-failure images (`NVT_PFAIL`, `docs/nvthreads.md` §7): the
//! every-step test of `c_programs.rs`, but at each crash point the pool's lines that were
//! not yet durable (stored, or flushed but not fenced) are rolled back as a power failure
//! just before that fence would leave them — all of them (`all`), or each line kept,
//! reverted or torn at random (`random:<seed>`) — before the process group is killed. A
//! `SIGKILL` alone leaves every store in the pool file, so it cannot tell a missing flush
//! from a correct protocol; the `no-log-flush` mutant shows that these tests can.
//!
//! Needs `cc` and the runtime library `libnvthreads_rt.so` (built by `cargo test`).

mod common;

use common::*;
use std::os::unix::process::CommandExt;
use std::process::Stdio;

const ALL: &[(&str, &str)] = &[("NVT_PFAIL", "all")];
const SEEDS: [&[(&str, &str)]; 3] = [
    &[("NVT_PFAIL", "random:1")],
    &[("NVT_PFAIL", "random:2")],
    &[("NVT_PFAIL", "random:3")],
];

/// Crashes `spec` at every persistence step with mode `all`, then with each of the first
/// `seeds` random seeds; every recovery is crashed at each of its fences in turn with mode
/// `all` (double crash). The pass criteria are those of the every-step test of
/// `c_programs.rs`: nothing acknowledged lost, at most `slack` unacknowledged sections,
/// invariants held, `crashed()` true, every completed recovery the same.
fn power_fails_at_every_step(spec: &Spec, minimum: u64, seeds: usize) {
    let mut runs = vec![("all", ALL)];
    runs.extend(SEEDS[..seeds].iter().map(|env| (env[0].1, *env)));
    for (name, env) in runs {
        let report = crash_every_step_with(
            spec,
            None,
            true,
            CrashEnv {
                run: env,
                recovery: ALL,
            },
        )
        .unwrap_or_else(|p| panic!("{} with NVT_PFAIL={name}: {p}", spec.name));
        eprintln!(
            "{} NVT_PFAIL={name}: power failure at each of {} persistence steps; {} \
             recoveries failed and redone",
            spec.name, report.crashed_runs, report.recovery_crashes
        );
        report.assert_covers(spec.name, minimum);
    }
}

#[test]
fn counter_survives_power_failures_at_every_step() {
    power_fails_at_every_step(&COUNTER, 20, 3);
}

#[test]
fn bank_survives_power_failures_at_every_step() {
    power_fails_at_every_step(&BANK, 15, 3);
}

#[test]
fn list_survives_power_failures_at_every_step() {
    power_fails_at_every_step(&LIST, 15, 3);
}

/// Concurrent commits: a power failure between one thread's log append and another's.
#[test]
fn ledger_survives_power_failures_at_every_step() {
    power_fails_at_every_step(&LEDGER, 20, 2);
}

#[test]
fn condvar_survives_power_failures_at_every_step() {
    power_fails_at_every_step(&CONDVAR_LOOP, 8, 3);
}

/// Concurrent readers' commits under a read-write lock, between a writer's.
#[test]
fn rwlock_readers_and_writers_survive_power_failures_at_every_step() {
    power_fails_at_every_step(&RWBANK, 10, 1);
}

#[test]
fn phases_stress_and_persistent_globals_survive_power_failures_at_every_step() {
    power_fails_at_every_step(&PHASES, 10, 1);
    power_fails_at_every_step(&STRESS, 8, 1);
    power_fails_at_every_step(&GCOUNTER, 15, 1);
}

/// What the rollback at crash point `step` reported (`NVT_STATS=1`): pending, kept,
/// reverted, torn, and pending lines of another process's append.
fn rollback_at(spec: &Spec, mode: &str, step: u64) -> Option<[u64; 5]> {
    let (_dir, pool) = pool_path("rollback");
    let mut command = spec.command(&pool, spec.args);
    command
        .env("NVT_PFAIL", mode)
        .env("NVT_STATS", "1")
        .env("NVT_CRASH_AT", step.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    let output = command.output().expect("spawn");
    let text = String::from_utf8_lossy(&output.stderr);
    let line = text
        .lines()
        .find(|line| line.starts_with("nvthreads-pfail "))?;
    let get = |name: &str| field(line, name).unwrap_or_else(|| panic!("no {name} in {line}"));
    Some([
        get("pending"),
        get("kept"),
        get("reverted"),
        get("torn"),
        get("foreign"),
    ])
}

/// The rollback is not vacuous: at the fences of a run's appends and checkpoints, lines are
/// pending (the record, the home image, the lap word) and are reverted, kept or torn as the
/// mode says.
#[test]
fn crash_points_have_pending_lines_to_roll_back() {
    let mut totals = [[0u64; 4]; 3];
    for step in 1..=12 {
        for (mode, total) in ["all", "none", "random:3"].iter().zip(&mut totals) {
            let [pending, kept, reverted, torn, _] = rollback_at(&COUNTER, mode, step)
                .unwrap_or_else(|| panic!("no rollback reported at step {step}"));
            assert_eq!(pending, kept + reverted + torn);
            for (sum, value) in total.iter_mut().zip([pending, kept, reverted, torn]) {
                *sum += value;
            }
        }
    }
    let [all, none, random] = totals;
    eprintln!(
        "pending/kept/reverted/torn over 12 steps: all {all:?} none {none:?} random {random:?}"
    );
    assert!(
        all[0] >= 12,
        "every crash point has something pending: {all:?}"
    );
    assert_eq!(all[2], all[0], "mode all reverts everything");
    assert_eq!(none[1], none[0], "mode none keeps everything");
    assert!(
        random[1] > 0 && random[2] > 0 && random[3] > 0,
        "mode random keeps, reverts and tears lines: {random:?}"
    );
}

/// Concurrent commits are what the ledger's crash points hit: at some of them another
/// thread's record is written but not yet fenced (its lines pending, last stored to by
/// another process than the one failing), and a power failure loses it while the failing
/// thread's own fenced record survives.
#[test]
fn ledger_crash_points_fall_between_two_threads_appends() {
    let mut between = 0;
    let mut steps = 0;
    for step in 1..=24 {
        let Some([pending, .., foreign]) = rollback_at(&LEDGER, "all", step) else {
            continue;
        };
        steps += 1;
        assert!(foreign <= pending);
        between += u64::from(foreign > 0);
    }
    eprintln!("ledger: {between} of {steps} crash points with another thread's append pending");
    assert!(
        between >= 2,
        "three threads appending at once must leave another's append pending at some crash \
         points: {between} of {steps}"
    );
}

/// `no-log-flush` (records fenced but never flushed, so a record that commits by its fence
/// can still be lost after its section was acknowledged): invisible to `SIGKILL`s, which leave every store in the
/// pool file, and caught by the same test with power failures.
#[test]
fn missing_log_flush_is_caught_by_power_failures_only() {
    let killed = crash_every_step(&COUNTER, Some("no-log-flush"), false);
    assert!(
        killed.is_ok(),
        "a SIGKILL keeps unflushed stores, so it should not see the mutant: {killed:?}"
    );
    let problem = crash_every_step_with(
        &COUNTER,
        Some("no-log-flush"),
        false,
        CrashEnv {
            run: ALL,
            recovery: &[],
        },
    )
    .expect_err("a record that was never flushed must be lost by a power failure");
    eprintln!("no-log-flush caught by power failures: {problem}");
}
