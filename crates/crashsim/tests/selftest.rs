//! The harness's self-test: a correct toy redo log passes at every fence, and every
//! deliberately broken variant is caught wherever its bug can lose data.

use crashsim::toy::{LogWrites, Mutation, ToyScenario};
use crashsim::{Config, Points, Problem, SimMode, check, replay};

const OPS: usize = 6;
const MODES: [SimMode; 2] = [SimMode::Adr, SimMode::Eadr];

#[test]
fn correct_toy_redo_log_passes_at_every_fence_with_double_crash() {
    for mode in MODES {
        for log in [LogWrites::Cacheable, LogWrites::NonTemporal] {
            let report = check(&ToyScenario::correct(log, OPS), &Config::thorough(mode, 1));
            report.assert_passed();
            // Every fence of every op, each durability point, and the end were examined.
            assert!(report.crash_points >= (OPS * 5) as u64, "{report}");
            assert!(report.second_crash_images > 0, "{report}");
        }
    }
}

#[test]
fn every_mutant_is_caught_where_its_bug_matters() {
    for mode in MODES {
        for mutation in Mutation::MUTANTS {
            let report = check(
                &ToyScenario::mutant(mutation, OPS),
                &Config::thorough(mode, 1),
            );
            assert_eq!(
                !report.passed(),
                mutation.is_bug_under(mode),
                "{mutation:?} under {mode:?}: {report}"
            );
        }
    }
}

#[test]
fn torn_sixteen_byte_update_is_reported_as_a_torn_state() {
    let report = check(
        &ToyScenario::mutant(Mutation::Torn16ByteUpdate, OPS),
        &Config::thorough(SimMode::Adr, 1),
    );
    let failure = report.failures.first().expect("caught");
    let Problem::WrongState { got, .. } = &failure.problem else {
        panic!("expected a wrong state, got {failure}");
    };
    assert!(
        got.contains("257") ^ got.contains("258"),
        "exactly one half of the pair: {failure}"
    );
}

#[test]
fn failures_replay_exactly() {
    for mutation in Mutation::MUTANTS {
        let scenario = ToyScenario::mutant(mutation, OPS);
        let config = Config::thorough(SimMode::Adr, 9);
        let report = check(&scenario, &config);
        for failure in &report.failures {
            let replayed = replay(&scenario, &config, failure);
            match (&failure.problem, replayed) {
                (Problem::WrongState { got, .. }, Ok(state)) => {
                    assert_eq!(&format!("{state:?}"), got)
                }
                (Problem::NotIdempotent { second, .. }, Ok(state)) => {
                    assert_eq!(&format!("{state:?}"), second)
                }
                (Problem::RecoveryFailed(a), Err(b)) => assert_eq!(a, &b),
                (Problem::RecoveryPanicked(_), Err(_)) => {}
                (problem, replayed) => panic!("{failure}: replay gave {replayed:?} for {problem}"),
            }
        }
    }
}

#[test]
fn failure_report_names_seed_point_and_image() {
    let report = check(
        &ToyScenario::mutant(Mutation::CommitBeforeLog, OPS),
        &Config::thorough(SimMode::Adr, 42),
    );
    let text = report.failures[0].to_string();
    for needle in ["seed 42", "crash at fence #", "prefixes=[", "nt=[", "hash "] {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
}

#[test]
fn quick_mode_checks_durability_points_only() {
    let report = check(
        &ToyScenario::correct(LogWrites::Cacheable, OPS),
        &Config::quick(SimMode::Adr),
    );
    report.assert_passed();
    assert_eq!(
        report.crash_points,
        OPS as u64 + 1,
        "one per commit plus the end"
    );
    let config = Config {
        points: Points::DurabilityOnly,
        ..Config::quick(SimMode::Adr)
    };
    // A missing log flush is visible even to the cheap check: at the durability point the
    // commit word is durable but the entries are still pending.
    assert!(
        !check(
            &ToyScenario::mutant(Mutation::MissingLogFlush, OPS),
            &config
        )
        .passed()
    );
}

#[test]
fn clflush_correct_engine_passes_and_ordering_mutants_are_caught() {
    let mut config = Config::thorough(SimMode::Adr, 3);
    config.sim.flush = pmem::FlushInstr::Clflush;
    check(&ToyScenario::correct(LogWrites::Cacheable, OPS), &config).assert_passed();
    // clflush orders write-backs, so a missing flush is still a bug but a missing fence
    // between flushed stores is not; ordering and atomicity bugs must still be caught.
    for mutation in [
        Mutation::CommitBeforeLog,
        Mutation::Torn16ByteUpdate,
        Mutation::MissingLogFlush,
    ] {
        let report = check(&ToyScenario::mutant(mutation, OPS), &config);
        assert!(
            !report.passed(),
            "{mutation:?} not caught with clflush: {report}"
        );
    }
}
