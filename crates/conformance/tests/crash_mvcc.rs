//! The MVCC engine through the crash simulator: TimeStone's list, hash and BST with their
//! operations logged and re-executed at recovery, and the other workloads with their
//! commits logged as data. A crash before every fence, recovery, the invariant checker,
//! the model of durable operations, the heap's block count, and a second crash during
//! recovery.

use conformance::{EngineScenario, Factory, MvccFactory};
use crashsim::{Config, SimMode, check};
use mvcc::Mutant;
use tx::NoReplay;
use workloads::btree::{BTree, silo_btree};
use workloads::hash::{HashMap, silo_hash};
use workloads::list::{LoadOrder, TimestoneMap, timestone_list};
use workloads::ycsb::{Ycsb, YcsbMix};
use workloads::{Params, Workload, bst::timestone_bst};

const POOL: u64 = 512 * 1024;

fn params(update_percent: u32) -> Params {
    Params {
        keys: 12,
        value_size: 16,
        update_percent,
        threads: 1,
        seed: 5,
    }
}

fn run<F: Factory + Clone, W: Workload>(factory: &F, workload: W, ops: usize, mode: SimMode) {
    let scenario = EngineScenario::new(factory.clone(), workload, ops, POOL);
    let report = check(&scenario, &Config::thorough(mode, 11));
    eprintln!("{report}");
    report.assert_passed();
    assert!(report.crash_points >= 3, "too few crash points: {report}");
}

#[test]
fn mvcc_list_survives_a_crash_at_every_fence() {
    let workload = timestone_list(params(80));
    run(
        &MvccFactory::small(workload.ops()),
        workload,
        12,
        SimMode::Adr,
    );
}

#[test]
fn mvcc_hash_survives_a_crash_at_every_fence() {
    let workload = TimestoneMap::<HashMap>::new(params(80), LoadOrder::Shuffled);
    run(
        &MvccFactory::small(workload.ops()),
        workload,
        12,
        SimMode::Adr,
    );
}

#[test]
fn mvcc_bst_survives_a_crash_at_every_fence() {
    let workload = timestone_bst(params(80));
    run(
        &MvccFactory::small(workload.ops()),
        workload,
        12,
        SimMode::Adr,
    );
}

#[test]
fn mvcc_under_eadr_and_with_physical_records() {
    let workload = TimestoneMap::<HashMap>::new(params(80), LoadOrder::Shuffled);
    run(
        &MvccFactory::small(workload.ops()),
        workload,
        8,
        SimMode::Eadr,
    );
    let factory = MvccFactory::small(NoReplay);
    run(&factory, silo_hash(params(80)), 8, SimMode::Adr);
    run(
        &factory,
        silo_btree(Params {
            keys: 40,
            ..params(80)
        }),
        8,
        SimMode::Adr,
    );
    run(
        &factory,
        Ycsb::<BTree>::new(params(0), YcsbMix::A).with_max_scan(4),
        8,
        SimMode::Adr,
    );
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
        let report = check(&scenario, &Config::thorough(SimMode::Adr, 11));
        eprintln!("{mutant:?}: {report}");
        assert!(!report.passed(), "{mutant:?} was not caught: {report}");
    }
}
