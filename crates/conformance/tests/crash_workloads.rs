//! Every engine × every workload through the crash simulator: a crash before every fence
//! (structured plus random images), recovery, the workload's invariant checker, the model of
//! durable operations, the heap's block count, and a second crash during recovery.

use conformance::{EngineScenario, Factory, RedoFactory, UndoFactory};
use crashsim::{Config, SimMode, check};
use tx::LogMode;
use workloads::array::ArrayWorkload;
use workloads::btree::{BTree, silo_btree};
use workloads::hash::{HashMap, silo_hash};
use workloads::list::{LoadOrder, TimestoneMap};
use workloads::queue::QueueWorkload;
use workloads::rbtree::silo_rbtree;
use workloads::tpcc::{TpccConfig, TpccNewOrder};
use workloads::ycsb::{Ycsb, YcsbMix};
use workloads::{Params, Workload, bst::timestone_bst, list::timestone_list};

const POOL: u64 = 512 * 1024;
const OPS: usize = 8;

fn params(update_percent: u32) -> Params {
    Params {
        keys: 12,
        value_size: 16,
        update_percent,
        threads: 1,
        seed: 5,
    }
}

fn run<F: Factory + Clone, W: Workload>(factory: &F, workload: W, mode: SimMode) {
    run_ops(factory, workload, OPS, mode);
}

fn run_ops<F: Factory + Clone, W: Workload>(factory: &F, workload: W, ops: usize, mode: SimMode) {
    let scenario = EngineScenario::new(factory.clone(), workload, ops, POOL);
    let report = check(&scenario, &Config::thorough(mode, 11));
    eprintln!("{report}");
    report.assert_passed();
    // Read-only operations have no crash points; every scenario must still have some.
    assert!(report.crash_points >= 3, "too few crash points: {report}");
}

fn every_workload<F: Factory + Clone>(factory: &F, mode: SimMode) {
    run(
        factory,
        ArrayWorkload::new(Params {
            keys: 16,
            value_size: 64,
            ..params(100)
        }),
        mode,
    );
    run(factory, QueueWorkload::new(params(50)), mode);
    run(factory, silo_hash(params(80)), mode);
    run(
        factory,
        silo_btree(Params {
            keys: 40,
            ..params(80)
        }),
        mode,
    );
    run(factory, silo_rbtree(params(80)), mode);
    run(factory, timestone_list(params(80)), mode);
    run(factory, timestone_bst(params(80)), mode);
    run(
        factory,
        TimestoneMap::<HashMap>::new(params(80), LoadOrder::Shuffled),
        mode,
    );
    for mix in [YcsbMix::A, YcsbMix::F, YcsbMix::Silo] {
        run(
            factory,
            Ycsb::<BTree>::new(params(0), mix).with_max_scan(4),
            mode,
        );
    }
    // B, D and E write in 5 % of their operations: run more of them. (C never writes, so it
    // has no crash point but the end; it is covered by the others' read paths.)
    for mix in [YcsbMix::B, YcsbMix::D, YcsbMix::E] {
        run_ops(
            factory,
            Ycsb::<BTree>::new(params(0), mix).with_max_scan(4),
            60,
            mode,
        );
    }
    let tpcc = TpccConfig {
        warehouses: 1,
        districts: 2,
        customers: 4,
        items: 40,
        order_capacity: 6,
        seed: 3,
    };
    run(
        factory,
        TpccNewOrder::new(tpcc).expect("valid config"),
        mode,
    );
}

#[test]
fn undo_engine_on_every_workload() {
    every_workload(&UndoFactory::small(LogMode::Auto), SimMode::Adr);
}

#[test]
fn redo_engine_on_every_workload() {
    every_workload(&RedoFactory::small(LogMode::Auto), SimMode::Adr);
}

#[test]
fn both_engines_under_eadr_and_other_log_modes() {
    for mode in [LogMode::Cacheable, LogMode::NonTemporal, LogMode::Packed] {
        run(
            &UndoFactory::small(mode),
            silo_btree(Params {
                keys: 40,
                ..params(80)
            }),
            SimMode::Adr,
        );
        run(
            &RedoFactory::small(mode),
            silo_btree(Params {
                keys: 40,
                ..params(80)
            }),
            SimMode::Adr,
        );
    }
    run(
        &UndoFactory::small(LogMode::Auto),
        silo_hash(params(80)),
        SimMode::Eadr,
    );
    run(
        &RedoFactory::small(LogMode::Auto),
        silo_hash(params(80)),
        SimMode::Eadr,
    );
}
