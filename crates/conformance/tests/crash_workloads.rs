//! The redo and undo engines × every workload of the catalogue through the crash simulator
//! (the MVCC engine's suite is `crash_mvcc.rs`): a crash
//! before every fence (structured plus random images), recovery, the workload's invariant
//! checker, the model of durable operations, the heap's block count, and a second crash
//! during recovery.

use conformance::{CrashCase, CrashEngine, CrashWorkload};
use crashsim::SimMode;
use tx::LogMode;

/// Seed of the random image choices.
const SEED: u64 = 11;

fn run(case: CrashCase) {
    let report = case.check(SEED);
    eprintln!("{report}");
    report.assert_passed();
    // Read-only operations have no crash points; every scenario must still have some.
    assert!(report.crash_points >= 3, "too few crash points: {report}");
}

/// Every workload; YCSB B, D and E write in 5 % of their operations, so they run more of
/// them. (C never writes, so it has no crash point but the end; the others' read paths
/// cover it.)
fn every_workload(engine: CrashEngine) {
    for workload in CrashWorkload::ALL {
        run(CrashCase::new(engine, workload));
    }
}

#[test]
fn undo_engine_on_every_workload() {
    every_workload(CrashEngine::Undo);
}

#[test]
fn redo_engine_on_every_workload() {
    every_workload(CrashEngine::Redo);
}

#[test]
fn both_engines_under_eadr_and_other_log_modes() {
    for log_mode in [LogMode::Cacheable, LogMode::NonTemporal, LogMode::Packed] {
        for engine in [CrashEngine::Undo, CrashEngine::Redo] {
            run(CrashCase::new(engine, CrashWorkload::BTree).with_log_mode(log_mode));
        }
    }
    for engine in [CrashEngine::Undo, CrashEngine::Redo] {
        run(CrashCase::new(engine, CrashWorkload::Hash).under(SimMode::Eadr));
    }
}
