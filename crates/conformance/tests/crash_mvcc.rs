//! The MVCC engine through the crash simulator: TimeStone's list, hash and BST with their
//! operations logged and re-executed at recovery, and every other workload of the catalogue
//! with its commits logged as data. A crash before every fence, recovery, the invariant checker,
//! the model of durable operations, the heap's block count, and a second crash during
//! recovery.

use conformance::{CrashCase, CrashEngine, CrashWorkload, EngineScenario, Factory, MvccFactory};
use crashsim::{Config, SimMode, check};
use mvcc::Mutant;
use workloads::hash::HashMap;
use workloads::list::{LoadOrder, TimestoneMap};
use workloads::{Params, Workload};

const POOL: u64 = conformance::catalogue::POOL;
/// Seed of the random image choices.
const SEED: u64 = 11;

/// TimeStone's own structures, whose operations are logged and re-executed at recovery.
const OPERATION_LOGGED: [CrashWorkload; 3] = [
    CrashWorkload::List,
    CrashWorkload::TimestoneHash,
    CrashWorkload::Bst,
];

fn params(update_percent: u32) -> Params {
    Params {
        keys: 12,
        value_size: 16,
        update_percent,
        threads: 1,
        seed: 5,
        locks_at_one_thread: false,
    }
}

fn run_case(case: CrashCase) {
    let report = case.check(SEED);
    eprintln!("{report}");
    report.assert_passed();
    assert!(report.crash_points >= 3, "too few crash points: {report}");
}

fn run<F: Factory + Clone, W: Workload>(factory: &F, workload: W, ops: usize, mode: SimMode) {
    let scenario = EngineScenario::new(factory.clone(), workload, ops, POOL);
    let report = check(&scenario, &Config::thorough(mode, SEED));
    eprintln!("{report}");
    report.assert_passed();
    assert!(report.crash_points >= 3, "too few crash points: {report}");
}

#[test]
fn mvcc_structures_with_logged_operations_survive_a_crash_at_every_fence() {
    for workload in OPERATION_LOGGED {
        run_case(CrashCase::new(CrashEngine::Mvcc, workload).with_ops(12));
    }
    run_case(CrashCase::new(CrashEngine::Mvcc, CrashWorkload::TimestoneHash).under(SimMode::Eadr));
}

#[test]
fn mvcc_with_physical_records_on_every_other_workload() {
    for workload in CrashWorkload::ALL {
        if !OPERATION_LOGGED.contains(&workload) {
            run_case(CrashCase::new(CrashEngine::Mvcc, workload));
        }
    }
}

/// Few keys, all updates: the same chunks stay hot across checkpoints, so write-backs
/// rewrite masters that still have versions, and freed blocks come back for reuse.
#[test]
fn mvcc_hot_keys_survive_a_crash_at_every_fence() {
    let workload = TimestoneMap::<HashMap>::new(
        Params {
            keys: 3,
            ..params(100)
        },
        LoadOrder::Shuffled,
    );
    run(
        &MvccFactory::small(workload.ops()),
        workload,
        24,
        SimMode::Adr,
    );
}

/// The lanes' own reclamation (the background reclaimer off; every other test runs with it
/// on, the default, so its checkpoints and write-backs land at whatever fences its thread
/// reaches): TimeStone's hash and the hot keys, crashed at every fence.
#[test]
fn mvcc_with_inline_reclamation_survives_a_crash_at_every_fence() {
    let hash = TimestoneMap::<HashMap>::new(params(80), LoadOrder::Shuffled);
    let mut factory = MvccFactory::small(hash.ops());
    factory.options.background = false;
    run(&factory, hash, 12, SimMode::Adr);
    let hot = TimestoneMap::<HashMap>::new(
        Params {
            keys: 3,
            ..params(100)
        },
        LoadOrder::Shuffled,
    );
    let mut factory = MvccFactory::small(hot.ops());
    factory.options.background = false;
    run(&factory, hot, 24, SimMode::Adr);
}

/// The crash test is not vacuous: an engine that skips the fence of its commit record, or
/// that lets a checkpoint cover blocks written in place before they are written back,
/// fails. (An early write-back watermark and eager reuse of freed blocks need crafted
/// sequences: `mvcc/tests/engine.rs`.)
#[test]
fn mvcc_mutants_are_caught() {
    for mutant in [Mutant::NoCommitFence, Mutant::NoFreshFlush] {
        let workload = TimestoneMap::<HashMap>::new(params(80), LoadOrder::Shuffled);
        let mut factory = MvccFactory::small(workload.ops());
        factory.options.mutant = mutant;
        let scenario = EngineScenario::new(factory, workload, 12, POOL);
        let report = check(&scenario, &Config::thorough(SimMode::Adr, SEED));
        eprintln!("{mutant:?}: {report}");
        assert!(!report.passed(), "{mutant:?} was not caught: {report}");
    }
}
