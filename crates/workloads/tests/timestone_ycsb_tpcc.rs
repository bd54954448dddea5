//! Tests of the sorted list, the BST, the TimeStone constructors, YCSB and TPC-C New-Order on
//! the volatile engine.

use proptest::prelude::*;
use std::collections::BTreeMap;
use tx::{Engine, MemEngine, PPtr, Tx, TxError, TxResult};
use workloads::bst::{self, Bst, timestone_bst};
use workloads::hash::HashMap;
use workloads::list::{self, LoadOrder, SortedList, TimestoneMap, timestone_list};
use workloads::tpcc::{self, TpccConfig, TpccNewOrder};
use workloads::ycsb::{Ycsb, YcsbMix, record_key};
use workloads::{OpKind, Params, PersistentMap, Workload, root_link, set_root_link, value_for};

const POOL: u64 = 1 << 24;

// ---------------------------------------------------------------------------------------
// Maps against a BTreeMap.
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum MapOp {
    Put(u64),
    Remove(u64),
    Get(u64),
    Scan(u64, usize),
}

fn map_op() -> impl Strategy<Value = MapOp> {
    prop_oneof![
        3 => (0..24u64).prop_map(MapOp::Put),
        2 => (0..24u64).prop_map(MapOp::Remove),
        1 => (0..24u64).prop_map(MapOp::Get),
        1 => (0..26u64, 0..6usize).prop_map(|(start, n)| MapOp::Scan(start, n)),
    ]
}

fn new_map<M: PersistentMap>(engine: &MemEngine, value_size: u32) -> PPtr {
    engine
        .transaction(|tx| {
            let map = M::create(tx, 16, value_size)?;
            set_root_link(tx, map)?;
            Ok::<_, TxError>(map)
        })
        .expect("create")
}

fn content<M: PersistentMap>(
    engine: &MemEngine,
    map: PPtr,
) -> Result<BTreeMap<u64, Vec<u8>>, String> {
    let mut out = Err("not run".to_string());
    engine
        .read_only(|tx| {
            out = M::check(tx, map);
            Ok::<_, TxError>(())
        })
        .expect("read-only transaction");
    out
}

/// Applies one operation to the map and the model; fails on any disagreement.
fn step<M: PersistentMap>(
    engine: &MemEngine,
    map: PPtr,
    model: &mut BTreeMap<u64, Vec<u8>>,
    op: &MapOp,
    version: u64,
    value_size: u32,
) -> Result<(), TestCaseError> {
    match *op {
        MapOp::Put(key) => {
            let value = value_for(key, version, value_size);
            let new = engine
                .transaction(|tx| M::put(tx, map, key, &value))
                .unwrap();
            prop_assert_eq!(new, model.insert(key, value).is_none());
        }
        MapOp::Remove(key) => {
            let removed = engine.transaction(|tx| M::remove(tx, map, key)).unwrap();
            prop_assert_eq!(removed, model.remove(&key).is_some());
        }
        MapOp::Get(key) => {
            let mut value = vec![0u8; value_size as usize];
            let found = engine
                .read_only(|tx| M::get(tx, map, key, &mut value))
                .unwrap();
            prop_assert_eq!(found.then_some(&value), model.get(&key));
        }
        MapOp::Scan(start, count) => {
            let got = engine
                .read_only(|tx| M::scan(tx, map, start, count))
                .unwrap();
            let want: Vec<_> = model
                .range(start..)
                .take(count)
                .map(|(k, v)| (*k, v.clone()))
                .collect();
            prop_assert_eq!(got, want);
        }
    }
    let len = engine.read_only(|tx| M::len(tx, map)).unwrap();
    prop_assert_eq!(len, model.len() as u64);
    Ok(())
}

fn run_against_model<M: PersistentMap>(
    ops: &[MapOp],
    value_size: u32,
) -> Result<(), TestCaseError> {
    let engine = MemEngine::new(1 << 20);
    let map = new_map::<M>(&engine, value_size);
    let mut model = BTreeMap::new();
    for (version, op) in ops.iter().enumerate() {
        step::<M>(&engine, map, &mut model, op, version as u64 + 1, value_size)?;
        prop_assert_eq!(content::<M>(&engine, map), Ok(model.clone()));
    }
    Ok(())
}

proptest! {
    #[test]
    fn sorted_list_matches_a_btreemap(
        ops in prop::collection::vec(map_op(), 1..60),
        size in 0..40u32,
    ) {
        run_against_model::<SortedList>(&ops, size)?;
    }

    #[test]
    fn bst_matches_a_btreemap(
        ops in prop::collection::vec(map_op(), 1..60),
        size in 0..40u32,
    ) {
        run_against_model::<Bst>(&ops, size)?;
    }
}

// ---------------------------------------------------------------------------------------
// Corruption: the checkers and the operations report it and never panic or hang.
// ---------------------------------------------------------------------------------------

fn filled<M: PersistentMap>(keys: &[u64]) -> (MemEngine, PPtr) {
    let engine = MemEngine::new(1 << 20);
    let map = new_map::<M>(&engine, 8);
    for &key in keys {
        engine
            .transaction(|tx| M::put(tx, map, key, &value_for(key, 0, 8)))
            .expect("put");
    }
    assert!(content::<M>(&engine, map).is_ok());
    (engine, map)
}

/// Runs `corrupt` in a committed transaction; then `check` must fail.
fn corrupt_and_check<M: PersistentMap>(
    engine: &MemEngine,
    map: PPtr,
    corrupt: impl Fn(&mut tx::mem::MemTx<'_>) -> TxResult<()>,
) -> String {
    engine
        .transaction(|tx| corrupt(tx))
        .expect("corrupting write");
    content::<M>(engine, map).expect_err("check accepted a corrupt structure")
}

/// The list nodes in order (read through the layout).
fn list_nodes(engine: &MemEngine, list: PPtr) -> Vec<PPtr> {
    engine
        .read_only(|tx| {
            let mut nodes = Vec::new();
            let mut cur: PPtr = tx.read_ptr(list, list::layout::HEADER_HEAD)?;
            while !cur.is_null() {
                nodes.push(cur);
                cur = tx.read_ptr(cur, list::layout::NODE_NEXT)?;
            }
            Ok::<_, TxError>(nodes)
        })
        .expect("walk")
}

#[test]
fn list_checker_rejects_broken_order_pointers_cycles_and_counts() {
    let keys = [10, 20, 30, 40];
    let (engine, list) = filled::<SortedList>(&keys);
    let nodes = list_nodes(&engine, list);
    let err = corrupt_and_check::<SortedList>(&engine, list, |tx| {
        tx.write_u64(nodes[2], list::layout::NODE_KEY, 5)
    });
    assert!(err.contains("out of order"), "{err}");

    let (engine, list) = filled::<SortedList>(&keys);
    let nodes = list_nodes(&engine, list);
    corrupt_and_check::<SortedList>(&engine, list, |tx| {
        tx.write_u64(nodes[1], list::layout::NODE_NEXT, 0xDEAD_BEEF)
    });

    let (engine, list) = filled::<SortedList>(&keys);
    let nodes = list_nodes(&engine, list);
    corrupt_and_check::<SortedList>(&engine, list, |tx| {
        tx.write_ptr(nodes[3], list::layout::NODE_NEXT, nodes[0])
    });
    // Operations on the cyclic list fail instead of looping.
    let mut value = [0u8; 8];
    let get = engine.read_only(|tx| SortedList::get(tx, list, 99, &mut value));
    assert!(matches!(get, Err(TxError::Corrupted(_))), "{get:?}");

    let (engine, list) = filled::<SortedList>(&keys);
    corrupt_and_check::<SortedList>(&engine, list, |tx| {
        tx.write_u64(list, list::layout::HEADER_COUNT, 3)
    });
    let (engine, list) = filled::<SortedList>(&keys);
    corrupt_and_check::<SortedList>(&engine, list, |tx| {
        tx.write_u64(list, list::layout::HEADER_MAGIC, 7)
    });
}

/// The BST node holding `key` (walking by key through the layout).
fn bst_node(engine: &MemEngine, tree: PPtr, key: u64) -> PPtr {
    engine
        .read_only(|tx| {
            let mut cur: PPtr = tx.read_ptr(tree, bst::layout::HEADER_ROOT)?;
            loop {
                let here = tx.read_u64(cur, bst::layout::NODE_KEY)?;
                if here == key {
                    return Ok::<_, TxError>(cur);
                }
                let field = if key < here {
                    bst::layout::NODE_LEFT
                } else {
                    bst::layout::NODE_RIGHT
                };
                cur = tx.read_ptr(cur, field)?;
            }
        })
        .expect("walk")
}

#[test]
fn bst_checker_rejects_broken_order_pointers_cycles_and_counts() {
    let keys = [50, 30, 70, 20, 40, 60, 80];
    let (engine, tree) = filled::<Bst>(&keys);
    let node = bst_node(&engine, tree, 20);
    let err = corrupt_and_check::<Bst>(&engine, tree, |tx| {
        tx.write_u64(node, bst::layout::NODE_KEY, 45)
    });
    assert!(err.contains("outside its interval"), "{err}");

    let (engine, tree) = filled::<Bst>(&keys);
    let node = bst_node(&engine, tree, 70);
    corrupt_and_check::<Bst>(&engine, tree, |tx| {
        tx.write_u64(node, bst::layout::NODE_LEFT, 0x1234)
    });

    let (engine, tree) = filled::<Bst>(&keys);
    let (leaf, root) = (bst_node(&engine, tree, 80), bst_node(&engine, tree, 50));
    corrupt_and_check::<Bst>(&engine, tree, |tx| {
        tx.write_ptr(leaf, bst::layout::NODE_RIGHT, root)
    });
    let mut value = [0u8; 8];
    let get = engine.read_only(|tx| Bst::get(tx, tree, 99, &mut value));
    assert!(matches!(get, Err(TxError::Corrupted(_))), "{get:?}");
    let scan = engine.read_only(|tx| Bst::scan(tx, tree, 0, 100));
    assert!(matches!(scan, Err(TxError::Corrupted(_))), "{scan:?}");

    let (engine, tree) = filled::<Bst>(&keys);
    corrupt_and_check::<Bst>(&engine, tree, |tx| {
        tx.write_u64(tree, bst::layout::HEADER_COUNT, 8)
    });
}

#[test]
fn bst_delete_of_a_node_with_two_children_keeps_order() {
    let keys = [50, 30, 70, 20, 40, 60, 80, 65, 75, 62];
    for victim in keys {
        let (engine, tree) = filled::<Bst>(&keys);
        assert!(
            engine
                .transaction(|tx| Bst::remove(tx, tree, victim))
                .unwrap()
        );
        let left = content::<Bst>(&engine, tree).expect("valid after delete");
        let want: Vec<u64> = keys.iter().copied().filter(|&k| k != victim).collect();
        let mut want = want;
        want.sort_unstable();
        assert_eq!(left.keys().copied().collect::<Vec<_>>(), want);
    }
}

// ---------------------------------------------------------------------------------------
// Workload runs: setup, operations, then check() must equal the model.
// ---------------------------------------------------------------------------------------

/// Runs `ops` operations of each listed thread, one after another (a serial history the
/// model can follow), and compares check() with the model.
fn run_serial<W: Workload>(workload: &W, threads: &[usize], ops: u64) -> Vec<OpKind> {
    let engine = MemEngine::new(POOL);
    workload.setup(&engine).expect("setup");
    assert_eq!(workload.check(&engine), Ok(workload.initial_model()));
    let mut model = workload.initial_model();
    let mut kinds = Vec::new();
    for index in 0..ops {
        for &thread in threads {
            kinds.push(workload.run_op(&engine, thread, index).expect("op"));
            workload.apply_to_model(&mut model, thread, index);
        }
    }
    assert_eq!(workload.check(&engine), Ok(model), "{}", workload.name());
    kinds
}

/// Runs `ops` operations on each of `threads` threads at once; check() must pass.
fn run_concurrent<W: Workload>(workload: &W, threads: usize, ops: u64) {
    let engine = MemEngine::new(POOL);
    workload.setup(&engine).expect("setup");
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let (engine, workload) = (&engine, workload);
            scope.spawn(move || {
                for index in 0..ops {
                    workload.run_op(engine, thread, index).expect("op");
                }
            });
        }
    });
    if let Err(e) = workload.check(&engine) {
        panic!("{} after a concurrent run: {e}", workload.name());
    }
}

fn params(keys: u64, value_size: u32, update_percent: u32) -> Params {
    Params {
        keys,
        value_size,
        update_percent,
        threads: 2,
        seed: 7,
        locks_at_one_thread: false,
    }
}

#[test]
fn timestone_list_and_bst_follow_their_model() {
    for update_percent in [2, 20, 80] {
        let list = timestone_list(params(64, 16, update_percent));
        let kinds = run_serial(&list, &[0, 1], 150);
        assert_eq!(list.name(), format!("list-{update_percent}%"));
        let bst = timestone_bst(params(256, 16, update_percent));
        run_serial(&bst, &[0, 1], 300);
        assert_eq!(bst.name(), format!("bst-{update_percent}%"));
        let hash =
            TimestoneMap::<HashMap>::new(params(64, 16, update_percent), LoadOrder::Shuffled)
                .labelled("ts-hash");
        assert_eq!(hash.name(), format!("ts-hash-{update_percent}%"));
        if update_percent == 80 {
            assert!(kinds.contains(&OpKind::Insert) && kinds.contains(&OpKind::Delete));
        }
    }
}

#[test]
fn timestone_bst_is_shallow_after_setup() {
    let workload = timestone_bst(params(2000, 8, 20));
    let engine = MemEngine::new(POOL);
    workload.setup(&engine).expect("setup");
    let depth = engine
        .read_only(|tx| {
            let tree = root_link(tx)?;
            let mut stack = vec![(tx.read_ptr::<(), ()>(tree, bst::layout::HEADER_ROOT)?, 1u32)];
            let mut deepest = 0;
            while let Some((node, depth)) = stack.pop() {
                if node.is_null() {
                    continue;
                }
                deepest = deepest.max(depth);
                stack.push((tx.read_ptr(node, bst::layout::NODE_LEFT)?, depth + 1));
                stack.push((tx.read_ptr(node, bst::layout::NODE_RIGHT)?, depth + 1));
            }
            Ok::<_, TxError>(deepest)
        })
        .expect("walk");
    assert!(depth < 40, "depth {depth} for 2000 shuffled keys");
}

#[test]
fn timestone_maps_survive_a_concurrent_run() {
    run_concurrent(&timestone_bst(params(256, 16, 80)), 2, 300);
    run_concurrent(&timestone_list(params(64, 16, 80)), 2, 200);
}

/// The operation kinds each mix must produce in a few hundred operations.
fn expected_kinds(mix: YcsbMix) -> &'static [OpKind] {
    match mix {
        YcsbMix::A | YcsbMix::B | YcsbMix::Silo => &[OpKind::Read, OpKind::Update],
        YcsbMix::C => &[OpKind::Read],
        YcsbMix::D => &[OpKind::Read, OpKind::Insert],
        YcsbMix::E => &[OpKind::Scan, OpKind::Insert],
        YcsbMix::F => &[OpKind::Read, OpKind::ReadModifyWrite],
    }
}

#[test]
fn ycsb_mixes_over_the_bst_follow_their_model() {
    for mix in YcsbMix::ALL {
        let workload = Ycsb::<Bst>::new(params(300, 100, 0), mix).with_max_scan(20);
        let mut seen = run_serial(&workload, &[0], 400);
        seen.sort_unstable();
        seen.dedup();
        let mut expected = expected_kinds(mix).to_vec();
        expected.sort_unstable();
        assert_eq!(seen, expected, "{mix:?}");
    }
}

#[test]
fn ycsb_over_the_sorted_list_follows_its_model() {
    for mix in [YcsbMix::A, YcsbMix::D, YcsbMix::E, YcsbMix::F] {
        let workload = Ycsb::<SortedList>::new(params(100, 32, 0), mix).with_max_scan(10);
        run_serial(&workload, &[0, 1], 100);
    }
}

#[test]
fn ycsb_check_rejects_a_lost_record() {
    let workload = Ycsb::<Bst>::new(params(50, 16, 0), YcsbMix::D);
    let engine = MemEngine::new(POOL);
    workload.setup(&engine).expect("setup");
    let kinds: Vec<OpKind> = (0..200)
        .map(|index| workload.run_op(&engine, 0, index).expect("op"))
        .collect();
    assert!(kinds.contains(&OpKind::Insert));
    engine
        .transaction(|tx| {
            let map = root_link(tx)?;
            Bst::remove(tx, map, record_key(17))
        })
        .expect("remove");
    let err = workload.check(&engine).expect_err("lost record accepted");
    assert!(err.contains("record 17 missing"), "{err}");
}

#[test]
fn ycsb_inserts_survive_a_concurrent_run() {
    for mix in [YcsbMix::D, YcsbMix::E, YcsbMix::A] {
        let workload = Ycsb::<Bst>::new(params(200, 64, 0), mix).with_max_scan(10);
        run_concurrent(&workload, 2, 300);
    }
}

fn small_tpcc(warehouses: u32) -> TpccNewOrder {
    TpccNewOrder::new(TpccConfig {
        warehouses,
        districts: 3,
        customers: 10,
        items: 60,
        order_capacity: 8,
        seed: 11,
    })
    .expect("valid configuration")
}

#[test]
fn tpcc_new_order_follows_its_model_through_ring_wrap_around() {
    let workload = small_tpcc(2);
    run_serial(&workload, &[0, 1], 300);
    let engine = MemEngine::new(POOL);
    workload.setup(&engine).expect("setup");
    let mut model = workload.initial_model();
    for index in 0..300 {
        workload.apply_to_model(&mut model, 0, index);
    }
    let orders: u64 = model.orders.iter().sum();
    // About 1 % of New-Orders roll back; the 8-slot rings wrap many times.
    assert!((280..300).contains(&orders), "{orders} orders");
    assert!(
        model.stock_remote_cnt > 0,
        "no remote lines in {orders} orders"
    );
    assert!(model.orders.iter().any(|&n| n > 8));
}

#[test]
fn tpcc_default_scale_runs() {
    let workload = TpccNewOrder::new(TpccConfig::default()).expect("valid configuration");
    run_serial(&workload, &[0], 200);
}

#[test]
fn tpcc_check_rejects_a_stock_ytd_that_lines_do_not_explain() {
    let workload = small_tpcc(1);
    let engine = MemEngine::new(POOL);
    workload.setup(&engine).expect("setup");
    for index in 0..20 {
        workload.run_op(&engine, 0, index).expect("op");
    }
    engine
        .transaction(|tx| {
            let header = root_link(tx)?;
            let stock: PPtr = tx.read_ptr(header, tpcc::layout::H_STOCK_TABLE)?;
            let ytd = tx.read_u64(stock, tpcc::layout::S_YTD)?;
            tx.write_u64(stock, tpcc::layout::S_YTD, ytd + 1)
        })
        .expect("corrupt");
    let err = workload.check(&engine).expect_err("bad ytd accepted");
    assert!(err.contains("s_ytd"), "{err}");
}

#[test]
fn tpcc_check_rejects_a_dangling_new_order_entry() {
    let workload = small_tpcc(1);
    let engine = MemEngine::new(POOL);
    workload.setup(&engine).expect("setup");
    for index in 0..40 {
        workload.run_op(&engine, 0, index).expect("op");
    }
    engine
        .transaction(|tx| {
            let header = root_link(tx)?;
            let districts: PPtr = tx.read_ptr(header, tpcc::layout::H_DISTRICT_TABLE)?;
            let new_orders: PPtr = tx.read_ptr(districts, tpcc::layout::D_NEW_ORDERS)?;
            tx.write_u64(new_orders, tpcc::layout::NO_O_ID, 999)
        })
        .expect("corrupt");
    assert!(workload.check(&engine).is_err());
}

#[test]
fn tpcc_survives_a_concurrent_run() {
    run_concurrent(&small_tpcc(2), 2, 300);
    run_concurrent(&small_tpcc(1), 2, 300);
}
