//! The YCSB core workloads A-F (plus Silo's 20/80 read/update mix) over any
//! [`PersistentMap`].
//!
//! # Records and keys
//!
//! Record number `r` (`0..records`) has key [`record_key`]`(r)`, a bijective scramble of `r`
//! (YCSB's default `insertorder=hashed`), so keys are unique and spread over the key space:
//! scans start at scattered places, and an unbalanced tree stays shallow. The initial records
//! are `0..params.keys` with values `value_for(key, 0, value_size)`; `value_size` comes from
//! the parameters (YCSB's record is [`YCSB_VALUE_SIZE`] = 1000 bytes, 10 fields × 100 B).
//!
//! # Insert keys (D and E)
//!
//! YCSB never deletes, so the records are always exactly `0..len` where `len` is the map's
//! persistent record count ([`PersistentMap::len`]). An insert reads `len` inside its own
//! transaction and inserts record `len`; reads and scans draw their record number from
//! `0..len` read the same way. The insert key is thus a deterministic function of the
//! operation and the current content, with no DRAM counter to lose in a crash, and it is
//! unique under concurrency: under external isolation inserts hold the global write lock,
//! and under internal isolation two inserts that read the same `len` both write the count
//! word, so the engine serialises them. For crash tests the model is exact for
//! single-threaded runs (`apply_to_model` uses the model's length the same way). Mixes
//! without inserts use `params.keys` and do not read the count.
//!
//! # Operations
//!
//! Updates and read-modify-writes replace the whole value with `value_for(key, version)`
//! (YCSB's `writeallfields=true`: the map interface has no partial update). A read or update
//! of a missing record, or an insert of an existing one, means the structure lost or invented
//! a record: the operation fails with [`TxError::Corrupted`].

use crate::dist::KeyDist;
use crate::list::load_entries;
use crate::locks::StripedLocks;
use crate::{
    OpKind, OpRng, Params, PersistentMap, Workload, op_rng, root_link, set_root_link, value_for,
};
use rand::Rng;

use std::collections::BTreeMap;
use std::marker::PhantomData;
use tx::{Engine, PPtr, Tx, TxError, TxResult};

/// YCSB's record size: 10 fields of 100 bytes.
pub const YCSB_VALUE_SIZE: u32 = 1000;
/// YCSB's default longest scan (workload E), in records.
pub const DEFAULT_MAX_SCAN: usize = 100;

/// A YCSB core workload (or Silo's YCSB mix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum YcsbMix {
    /// 50 % read, 50 % update, zipfian.
    A,
    /// 95 % read, 5 % update, zipfian.
    B,
    /// 100 % read, zipfian.
    C,
    /// 95 % read, 5 % insert, "latest".
    D,
    /// 95 % scan (length uniform in `1..=max_scan`), 5 % insert, zipfian.
    E,
    /// 50 % read, 50 % read-modify-write, zipfian.
    F,
    /// Silo's YCSB: 20 % read, 80 % update, zipfian.
    Silo,
}

/// What one operation does, before its key is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
}

impl Step {
    fn writes(self) -> bool {
        matches!(self, Step::Update | Step::Insert | Step::ReadModifyWrite)
    }
}

impl YcsbMix {
    /// All mixes.
    pub const ALL: [YcsbMix; 7] = [
        YcsbMix::A,
        YcsbMix::B,
        YcsbMix::C,
        YcsbMix::D,
        YcsbMix::E,
        YcsbMix::F,
        YcsbMix::Silo,
    ];

    /// Percentage of the first step, the first step, the second step.
    fn split(self) -> (u32, Step, Step) {
        match self {
            YcsbMix::A => (50, Step::Read, Step::Update),
            YcsbMix::B => (95, Step::Read, Step::Update),
            YcsbMix::C => (100, Step::Read, Step::Read),
            YcsbMix::D => (95, Step::Read, Step::Insert),
            YcsbMix::E => (95, Step::Scan, Step::Insert),
            YcsbMix::F => (50, Step::Read, Step::ReadModifyWrite),
            YcsbMix::Silo => (20, Step::Read, Step::Update),
        }
    }

    fn dist(self) -> KeyDist {
        match self {
            YcsbMix::D => KeyDist::LATEST,
            _ => KeyDist::ZIPFIAN,
        }
    }

    /// The request distribution, as report titles name it.
    pub fn distribution(self) -> String {
        match self.dist() {
            KeyDist::Latest { theta } => format!("latest-skewed (Zipfian {theta})"),
            KeyDist::Zipfian { theta } => format!("scrambled Zipfian {theta}"),
            KeyDist::Uniform => "uniform".to_owned(),
        }
    }

    /// Whether the record count changes (and must be read by every operation).
    fn inserts(self) -> bool {
        matches!(self, YcsbMix::D | YcsbMix::E)
    }

    /// Short label for names: `a` ... `f`, `silo`.
    pub fn label(self) -> &'static str {
        match self {
            YcsbMix::A => "a",
            YcsbMix::B => "b",
            YcsbMix::C => "c",
            YcsbMix::D => "d",
            YcsbMix::E => "e",
            YcsbMix::F => "f",
            YcsbMix::Silo => "silo",
        }
    }
}

/// The key of record number `recno`: a bijection of `u64` (xor-shifts and multiplications by
/// odd constants are each invertible, as in SplitMix64's finaliser), so distinct records
/// never share a key and inserts land scattered over the key space, as YCSB's hashed insert
/// order does. It is a fixed permutation, not a random stream: the operation streams
/// themselves come from `rand` ([`crate::op_rng`]), which has no bijection to offer here.
pub fn record_key(recno: u64) -> u64 {
    let mut x = recno ^ 0x5851_F42D_4C95_7F2D;
    x = (x ^ (x >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 29)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 32)
}

/// One fully decided operation.
#[derive(Clone, Copy, Debug)]
enum Op {
    Read { key: u64 },
    Update { key: u64, version: u64 },
    Insert { key: u64, version: u64 },
    Scan { start: u64, len: usize },
    ReadModifyWrite { key: u64, version: u64 },
}

/// A YCSB workload over map `M`. `params.update_percent` is ignored (the mix decides).
#[derive(Debug)]
pub struct Ycsb<M: PersistentMap> {
    params: Params,
    mix: YcsbMix,
    max_scan: usize,
    lock: StripedLocks,
    _map: PhantomData<M>,
}

impl<M: PersistentMap> Ycsb<M> {
    /// Workload `mix` over `params.keys` records of `params.value_size` bytes.
    pub fn new(params: Params, mix: YcsbMix) -> Self {
        let lock = StripedLocks::for_workload(&params, 1);
        Ycsb {
            params,
            mix,
            max_scan: DEFAULT_MAX_SCAN,
            lock,
            _map: PhantomData,
        }
    }

    /// Sets the longest scan of workload E (at least 1).
    pub fn with_max_scan(mut self, max_scan: usize) -> Self {
        self.max_scan = max_scan.max(1);
        self
    }

    fn draw_step(&self, rng: &mut OpRng) -> Step {
        let (first_percent, first, second) = self.mix.split();
        if rng.random_range(0..100) < first_percent {
            first
        } else {
            second
        }
    }

    /// The step of operation `index` of `thread` (for choosing the lock).
    fn step(&self, thread: usize, index: u64) -> Step {
        self.draw_step(&mut op_rng(self.params.seed, thread, index))
    }

    /// Operation `index` of `thread` when the map holds records `0..records` (`records > 0`).
    fn plan(&self, thread: usize, index: u64, records: u64) -> Op {
        let mut rng = op_rng(self.params.seed, thread, index);
        let step = self.draw_step(&mut rng);
        let version = ((thread as u64) << 40) | (index + 1);
        match step {
            Step::Insert => Op::Insert {
                key: record_key(records),
                version,
            },
            Step::Read => Op::Read {
                key: self.draw_key(&mut rng, records),
            },
            Step::Update => Op::Update {
                key: self.draw_key(&mut rng, records),
                version,
            },
            Step::Scan => Op::Scan {
                start: self.draw_key(&mut rng, records),
                len: rng.random_range(1..=self.max_scan),
            },
            Step::ReadModifyWrite => Op::ReadModifyWrite {
                key: self.draw_key(&mut rng, records),
                version,
            },
        }
    }

    /// The key of an existing record drawn from the mix's distribution.
    fn draw_key(&self, rng: &mut OpRng, records: u64) -> u64 {
        record_key(self.mix.dist().sample(rng, records))
    }

    /// Runs operation `index` of `thread` inside `tx`.
    fn execute<T: Tx>(&self, tx: &mut T, thread: usize, index: u64) -> TxResult<OpKind> {
        let map = root_link(tx)?;
        let records = self.records(tx, map)?;
        match self.plan(thread, index, records) {
            Op::Read { key } => self.read(tx, map, key).map(|_| OpKind::Read),
            Op::Update { key, version } => {
                self.overwrite(tx, map, key, version)?;
                Ok(OpKind::Update)
            }
            Op::Insert { key, version } => {
                if !M::put(tx, map, key, &self.value(key, version))? {
                    return Err(TxError::Corrupted(format!(
                        "record {key:#x} already exists"
                    )));
                }
                Ok(OpKind::Insert)
            }
            Op::Scan { start, len } => M::scan(tx, map, start, len).map(|_| OpKind::Scan),
            Op::ReadModifyWrite { key, version } => {
                self.read(tx, map, key)?;
                self.overwrite(tx, map, key, version)?;
                Ok(OpKind::ReadModifyWrite)
            }
        }
    }

    /// The current number of records (only mixes with inserts read it).
    fn records<T: Tx>(&self, tx: &mut T, map: PPtr) -> TxResult<u64> {
        let records = if self.mix.inserts() {
            M::len(tx, map)?
        } else {
            self.params.keys
        };
        if records == 0 {
            return Err(TxError::Corrupted("YCSB map has no records".into()));
        }
        Ok(records)
    }

    fn value(&self, key: u64, version: u64) -> Vec<u8> {
        value_for(key, version, self.params.value_size)
    }

    fn read<T: Tx>(&self, tx: &mut T, map: PPtr, key: u64) -> TxResult<Vec<u8>> {
        let mut value = vec![0u8; self.params.value_size as usize];
        if !M::get(tx, map, key, &mut value)? {
            return Err(TxError::Corrupted(format!("record {key:#x} missing")));
        }
        Ok(value)
    }

    fn overwrite<T: Tx>(&self, tx: &mut T, map: PPtr, key: u64, version: u64) -> TxResult<()> {
        if M::put(tx, map, key, &self.value(key, version))? {
            return Err(TxError::Corrupted(format!(
                "update created record {key:#x}"
            )));
        }
        Ok(())
    }

    /// Checks that the keys are exactly those of records `0..content.len()`.
    fn check_keys(&self, content: &BTreeMap<u64, Vec<u8>>) -> Result<(), String> {
        let records = content.len() as u64;
        if records < self.params.keys || (!self.mix.inserts() && records != self.params.keys) {
            return Err(format!(
                "{records} records, expected {} initial ones",
                self.params.keys
            ));
        }
        match (0..records).find(|&recno| !content.contains_key(&record_key(recno))) {
            Some(recno) => Err(format!("record {recno} missing among {records} records")),
            None => Ok(()),
        }
    }
}

impl<M: PersistentMap> Workload for Ycsb<M> {
    type Model = BTreeMap<u64, Vec<u8>>;

    fn name(&self) -> String {
        format!("ycsb-{}-{}", self.mix.label(), M::NAME)
    }

    fn setup<E: Engine>(&self, engine: &E) -> TxResult<()> {
        if self.params.keys == 0 {
            return Err(TxError::abort("YCSB needs at least one record"));
        }
        // Sized for the initial records plus as many inserts again.
        let capacity = self.params.keys.saturating_mul(2);
        engine.transaction(|tx| {
            let map = M::create(tx, capacity, self.params.value_size)?;
            set_root_link(tx, map)
        })?;
        let entries: Vec<_> = self.initial_model().into_iter().collect();
        load_entries::<M, E>(engine, &entries)
    }

    fn run_op<E: Engine>(&self, engine: &E, thread: usize, index: u64) -> TxResult<OpKind> {
        let isolation = engine.isolation();
        if self.step(thread, index).writes() {
            let _held = self.lock.write(isolation, 0);
            engine.transaction(|tx| self.execute(tx, thread, index))
        } else {
            let _held = self.lock.read(isolation, 0);
            engine.read_only(|tx| self.execute(tx, thread, index))
        }
    }

    fn check<E: Engine>(&self, engine: &E) -> Result<Self::Model, String> {
        let mut content = Err("check did not run".to_string());
        engine
            .read_only(|tx| {
                let map = root_link(tx)?;
                content = M::check(tx, map);
                Ok::<_, TxError>(())
            })
            .map_err(|e| e.to_string())?;
        let content = content?;
        self.check_keys(&content)?;
        Ok(content)
    }

    fn initial_model(&self) -> Self::Model {
        (0..self.params.keys)
            .map(|recno| {
                let key = record_key(recno);
                (key, self.value(key, 0))
            })
            .collect()
    }

    fn apply_to_model(&self, model: &mut Self::Model, thread: usize, index: u64) {
        let records = if self.mix.inserts() {
            model.len() as u64
        } else {
            self.params.keys
        };
        if records == 0 {
            return;
        }
        match self.plan(thread, index, records) {
            Op::Update { key, version }
            | Op::Insert { key, version }
            | Op::ReadModifyWrite { key, version } => {
                model.insert(key, self.value(key, version));
            }
            Op::Read { .. } | Op::Scan { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each letter's mix is the one YCSB's core workloads define, and D draws its reads
    /// from the newest records while the others draw scattered Zipfian ones.
    #[test]
    fn mixes_are_the_letters_of_ycsb() {
        use crate::hash::HashMap;
        let draws = 40_000u64;
        let expected = [
            (YcsbMix::A, [50, 50, 0, 0, 0]),
            (YcsbMix::B, [95, 5, 0, 0, 0]),
            (YcsbMix::C, [100, 0, 0, 0, 0]),
            (YcsbMix::D, [95, 0, 5, 0, 0]),
            (YcsbMix::E, [0, 0, 5, 95, 0]),
            (YcsbMix::F, [50, 0, 0, 0, 50]),
            (YcsbMix::Silo, [20, 80, 0, 0, 0]),
        ];
        let records = 1000;
        for (mix, percent) in expected {
            let ycsb = Ycsb::<HashMap>::new(Params::default(), mix);
            let mut counts = [0u64; 5];
            let mut newest_reads = 0u64;
            for index in 0..draws {
                let slot = match ycsb.plan(0, index, records) {
                    Op::Read { key } => {
                        newest_reads += u64::from(key == record_key(records - 1));
                        0
                    }
                    Op::Update { .. } => 1,
                    Op::Insert { key, .. } => {
                        assert_eq!(key, record_key(records), "inserts append");
                        2
                    }
                    Op::Scan { len, .. } => {
                        assert!((1..=DEFAULT_MAX_SCAN).contains(&len));
                        3
                    }
                    Op::ReadModifyWrite { .. } => 4,
                };
                counts[slot] += 1;
            }
            for (slot, &want) in percent.iter().enumerate() {
                let got = counts[slot] as f64 * 100.0 / draws as f64;
                assert!(
                    (got - f64::from(want)).abs() < 1.0,
                    "{mix:?} slot {slot}: {got:.2}% for {want}%"
                );
            }
            // Latest: the newest record is Zipfian rank 0 (about 13 % of reads over 1000
            // records); no scrambled Zipfian puts it there more than rarely.
            let share = newest_reads as f64 / counts[0].max(1) as f64;
            if mix == YcsbMix::D {
                assert!(share > 0.10, "{mix:?}: newest record {share:.3} of reads");
            } else {
                assert!(share < 0.05, "{mix:?}: newest record {share:.3} of reads");
            }
        }
    }

    #[test]
    fn record_keys_are_distinct() {
        let keys: std::collections::HashSet<u64> = (0..100_000).map(record_key).collect();
        assert_eq!(keys.len(), 100_000);
    }
}
