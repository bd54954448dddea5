//! Tests of Silo's data structures: the hash map, B+tree and red-black tree against a std
//! `BTreeMap` (random operation sequences), and the array, queue and map workloads against
//! their models, sequentially and from two threads.

use proptest::prelude::*;
use std::collections::{BTreeMap, HashSet};
use tx::{Engine, MemEngine, PPtr, Tx, TxError, TxResult};
use workloads::array::ArrayWorkload;
use workloads::btree::{BTree, silo_btree};
use workloads::hash::{HashMap, silo_hash};
use workloads::queue::QueueWorkload;
use workloads::rbtree::{RbTree, silo_rbtree};
use workloads::{Params, PersistentMap, Workload, value_for};

#[derive(Clone, Debug)]
enum Op {
    Put(u64, u64),
    Remove(u64),
    Get(u64),
    Scan(u64, usize),
}

fn ops(keys: u64, max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        4 => (0..keys, 0..1000u64).prop_map(|(k, v)| Op::Put(k, v)),
        3 => (0..keys).prop_map(Op::Remove),
        2 => (0..keys).prop_map(Op::Get),
        1 => (0..keys + 4, 0usize..24).prop_map(|(s, c)| Op::Scan(s, c)),
    ];
    proptest::collection::vec(op, 0..max_len)
}

fn value_sizes() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0u32), Just(1), Just(8), Just(24), Just(100)]
}

type Content = BTreeMap<u64, Vec<u8>>;

fn check_map<M: PersistentMap>(engine: &MemEngine, map: PPtr) -> Result<Content, String> {
    engine
        .read_only(|tx| Ok::<_, TxError>(M::check(tx, map)))
        .map_err(|e| e.to_string())?
}

/// Checks a scan result against the model: exact prefix for ordered maps; for unordered ones,
/// distinct keys `>= start` with the model's values, as many as available up to `count`.
fn check_scan<M: PersistentMap>(
    got: &[(u64, Vec<u8>)],
    model: &Content,
    start: u64,
    count: usize,
) -> Result<(), TestCaseError> {
    let expected: Vec<(u64, Vec<u8>)> = model
        .range(start..)
        .take(count)
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    if M::ORDERED {
        prop_assert_eq!(got, &expected[..]);
        return Ok(());
    }
    prop_assert_eq!(got.len(), expected.len());
    let mut seen = HashSet::new();
    for (key, value) in got {
        prop_assert!(*key >= start && seen.insert(*key), "key {}", key);
        prop_assert_eq!(model.get(key), Some(value));
    }
    Ok(())
}

/// Runs `ops` on a fresh map, comparing every result with a `BTreeMap`, the length after every
/// operation and the checked content periodically and at the end.
fn exercise<M: PersistentMap>(
    ops: &[Op],
    value_size: u32,
    capacity: u64,
) -> Result<(), TestCaseError> {
    let engine = MemEngine::new(16 << 20);
    let map = engine
        .transaction(|tx| M::create(tx, capacity, value_size))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut model = Content::new();
    for (i, op) in ops.iter().enumerate() {
        let outcome = engine.transaction(|tx| {
            let mut value = vec![0u8; value_size as usize];
            let outcome = match *op {
                Op::Put(key, version) => {
                    let new = M::put(tx, map, key, &value_for(key, version, value_size))?;
                    (Some(new), None)
                }
                Op::Remove(key) => (Some(M::remove(tx, map, key)?), None),
                Op::Get(key) => {
                    let found = M::get(tx, map, key, &mut value)?;
                    (Some(found), found.then_some(vec![(key, value)]))
                }
                Op::Scan(start, count) => (None, Some(M::scan(tx, map, start, count)?)),
            };
            Ok::<_, TxError>((outcome, M::len(tx, map)?))
        });
        let ((flag, entries), len) = outcome.map_err(|e| TestCaseError::fail(e.to_string()))?;
        match *op {
            Op::Put(key, version) => {
                let old = model.insert(key, value_for(key, version, value_size));
                prop_assert_eq!(flag, Some(old.is_none()));
            }
            Op::Remove(key) => prop_assert_eq!(flag, Some(model.remove(&key).is_some())),
            Op::Get(key) => {
                prop_assert_eq!(flag, Some(model.contains_key(&key)));
                if let Some(entries) = entries {
                    prop_assert_eq!(Some(&entries[0].1), model.get(&key));
                }
            }
            Op::Scan(start, count) => {
                check_scan::<M>(&entries.unwrap_or_default(), &model, start, count)?;
            }
        }
        prop_assert_eq!(len, model.len() as u64);
        if i % 16 == 15 {
            prop_assert_eq!(check_map::<M>(&engine, map), Ok(model.clone()));
        }
    }
    prop_assert_eq!(check_map::<M>(&engine, map), Ok(model));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn hash_matches_a_btreemap(
        ops in ops(64, 300),
        value_size in value_sizes(),
        capacity in prop_oneof![Just(1u64), Just(16), Just(1 << 14)],
    ) {
        exercise::<HashMap>(&ops, value_size, capacity)?;
    }

    #[test]
    fn btree_matches_a_btreemap(ops in ops(64, 300), value_size in value_sizes()) {
        exercise::<BTree>(&ops, value_size, 64)?;
    }

    #[test]
    fn rbtree_matches_a_btreemap(ops in ops(64, 300), value_size in value_sizes()) {
        exercise::<RbTree>(&ops, value_size, 64)?;
    }
}

proptest! {
    // Wider key ranges and longer runs: B+trees three levels deep (inner splits, merges and
    // borrows), deeper red-black trees.
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn wide_key_ranges_match_a_btreemap(ops in ops(1500, 3000), value_size in prop_oneof![Just(8u32), Just(40)]) {
        exercise::<BTree>(&ops, value_size, 1500)?;
        exercise::<RbTree>(&ops, value_size, 1500)?;
        exercise::<HashMap>(&ops, value_size, 256)?;
    }
}

/// Inserting every key then deleting every key, in shuffled orders, through a tall B+tree.
#[test]
fn btree_grows_and_shrinks_through_every_rebalancing_case() {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut keys: Vec<u64> = (0..3000).collect();
    keys.shuffle(&mut rng);
    let mut ops: Vec<Op> = keys.iter().map(|&k| Op::Put(k, 1)).collect();
    keys.shuffle(&mut rng);
    ops.extend(keys.iter().map(|&k| Op::Remove(k)));
    exercise::<BTree>(&ops, 16, 3000).expect("model");
}

fn params(keys: u64, value_size: u32) -> Params {
    Params {
        keys,
        value_size,
        update_percent: 50,
        threads: 2,
        seed: 9,
        locks_at_one_thread: false,
    }
}

/// Setup plus `n` operations of thread 0 match the model built from the same operations.
fn sequential_matches_model<W: Workload>(workload: &W, n: u64) {
    let engine = MemEngine::new(32 << 20);
    workload.setup(&engine).expect("setup");
    let mut model = workload.initial_model();
    assert_eq!(workload.check(&engine).expect("check after setup"), model);
    for index in 0..n {
        workload.run_op(&engine, 0, index).expect("op");
        workload.apply_to_model(&mut model, 0, index);
    }
    assert_eq!(workload.check(&engine).expect("check"), model);
}

/// Two threads run `n` operations each concurrently; the structure stays valid.
fn concurrent_stays_valid<W: Workload>(workload: &W, n: u64) {
    let engine = MemEngine::new(32 << 20);
    workload.setup(&engine).expect("setup");
    std::thread::scope(|scope| {
        for thread in 0..2 {
            let (engine, workload) = (&engine, workload);
            scope.spawn(move || {
                for index in 0..n {
                    workload.run_op(engine, thread, index).expect("op");
                }
            });
        }
    });
    workload.check(&engine).expect("check");
}

#[test]
fn array_matches_its_model() {
    sequential_matches_model(&ArrayWorkload::new(params(1000, 64)), 3000);
    sequential_matches_model(&ArrayWorkload::new(params(1, 8)), 10);
}

#[test]
fn queue_matches_its_model() {
    sequential_matches_model(&QueueWorkload::new(params(100, 24)), 3000);
    sequential_matches_model(&QueueWorkload::new(params(0, 8)), 200);
}

#[test]
fn silo_maps_match_their_models() {
    sequential_matches_model(&silo_hash(params(500, 32)), 2000);
    sequential_matches_model(&silo_btree(params(500, 32)), 2000);
    sequential_matches_model(&silo_rbtree(params(500, 32)), 2000);
}

#[test]
fn workloads_stay_valid_under_two_threads() {
    concurrent_stays_valid(&ArrayWorkload::new(params(1000, 64)), 2000);
    concurrent_stays_valid(&QueueWorkload::new(params(100, 24)), 2000);
    concurrent_stays_valid(&silo_hash(params(500, 32)), 2000);
    concurrent_stays_valid(&silo_btree(params(500, 32)), 2000);
    concurrent_stays_valid(&silo_rbtree(params(500, 32)), 2000);
}

#[test]
fn a_value_of_the_wrong_size_is_rejected_and_changes_nothing() {
    fn reject<M: PersistentMap>() {
        let engine = MemEngine::new(1 << 20);
        let map = engine
            .transaction(|tx| M::create(tx, 16, 8))
            .expect("create");
        let put = engine.transaction(|tx| M::put(tx, map, 1, &[0u8; 9]));
        assert!(matches!(put, Err(TxError::Aborted(_))), "{}", M::NAME);
        assert_eq!(check_map::<M>(&engine, map), Ok(Content::new()));
    }
    reject::<HashMap>();
    reject::<BTree>();
    reject::<RbTree>();
}

/// A transaction that records the byte ranges its operations read and write.
struct Recording<'a, T: Tx> {
    inner: &'a mut T,
    reads: Vec<(u64, u64)>,
    writes: Vec<(u64, u64)>,
}

impl<T: Tx> Tx for Recording<'_, T> {
    fn read_raw(&mut self, addr: u64, dst: &mut [u8]) -> TxResult<()> {
        self.reads.push((addr, dst.len() as u64));
        self.inner.read_raw(addr, dst)
    }
    fn write_raw(&mut self, addr: u64, src: &[u8]) -> TxResult<()> {
        self.writes.push((addr, src.len() as u64));
        self.inner.write_raw(addr, src)
    }
    fn alloc_raw(&mut self, size: u64) -> TxResult<u64> {
        self.inner.alloc_raw(size)
    }
    fn free_raw(&mut self, addr: u64) -> TxResult<()> {
        self.inner.free_raw(addr)
    }
    fn pool_tag(&self) -> u16 {
        self.inner.pool_tag()
    }
    fn root_offset(&self) -> u64 {
        self.inner.root_offset()
    }
}

/// Whether two of the ranges share a byte.
fn overlap(ranges: &[(u64, u64)]) -> bool {
    let mut sorted: Vec<(u64, u64)> = ranges.iter().copied().filter(|r| r.1 > 0).collect();
    sorted.sort_unstable();
    sorted.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0)
}

/// Runs `ops` and checks the access discipline of every operation: no byte read twice, no byte
/// written twice, an overwrite is one write of the value, reads write nothing.
fn access_discipline<M: PersistentMap>(ops: &[Op], capacity: u64) -> Result<(), TestCaseError> {
    const SIZE: u32 = 24;
    let engine = MemEngine::new(8 << 20);
    let map = engine
        .transaction(|tx| M::create(tx, capacity, SIZE))
        .expect("create");
    let mut model = Content::new();
    for op in ops {
        let (reads, writes) = engine
            .transaction(|tx| {
                let mut tx = Recording {
                    inner: tx,
                    reads: Vec::new(),
                    writes: Vec::new(),
                };
                let mut value = vec![0u8; SIZE as usize];
                match *op {
                    Op::Put(key, version) => {
                        M::put(&mut tx, map, key, &value_for(key, version, SIZE))?;
                    }
                    Op::Remove(key) => {
                        M::remove(&mut tx, map, key)?;
                    }
                    Op::Get(key) => {
                        M::get(&mut tx, map, key, &mut value)?;
                    }
                    Op::Scan(start, count) => {
                        M::scan(&mut tx, map, start, count)?;
                    }
                }
                Ok::<_, TxError>((tx.reads, tx.writes))
            })
            .expect("op");
        prop_assert!(
            !overlap(&reads),
            "{} re-reads in {:?}: {:?}",
            M::NAME,
            op,
            reads
        );
        prop_assert!(
            !overlap(&writes),
            "{} re-writes in {:?}: {:?}",
            M::NAME,
            op,
            writes
        );
        match *op {
            Op::Put(key, version) => {
                if model.insert(key, value_for(key, version, SIZE)).is_some() {
                    prop_assert_eq!(&writes[..], &[(writes[0].0, u64::from(SIZE))][..]);
                }
            }
            Op::Remove(key) => {
                model.remove(&key);
            }
            Op::Get(_) | Op::Scan(..) => prop_assert!(writes.is_empty()),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn operations_touch_each_byte_once_and_overwrite_with_one_write(ops in ops(300, 1500)) {
        access_discipline::<HashMap>(&ops, 1 << 14)?;
        access_discipline::<RbTree>(&ops, 1 << 14)?;
        access_discipline::<BTree>(&ops, 1 << 14)?;
    }

    #[test]
    fn btree_cascades_touch_each_byte_once(ops in ops(1500, 4000)) {
        access_discipline::<BTree>(&ops, 1500)?;
    }
}
