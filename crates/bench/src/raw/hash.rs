//! Silo's Hash benchmark on the raw reference: an open-addressing table with linear probing,
//! sized for half the key space, so no operation allocates or resizes.
//!
//! A table slot is `key + 1` (u64, 0 = empty) followed by the value padded to 8 bytes. An
//! update logs and writes the value; an insert logs and writes key and value together (one
//! range); a lookup copies the value out and stores nothing. Operations are drawn exactly as
//! the engines' `hash` workload draws those of its thread 0 (`workloads::map`): the same
//! `params.update_percent` share of upserts, the rest lookups, keys uniform over twice the
//! initial keys, which are the even ones; values are [`workloads::fill_value`] of (key,
//! version). So `raw` and an engine in one `hash-N%` table run the same operations.

use super::log::{RawLog, record_len};
use super::{Durability, Geometry, Structure};
use pmem::{Persist, Pool, Region, WriteClass};
use rand::Rng;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use tx::TxResult;
use workloads::{OpKind, Params, fill_value, op_rng};

/// Slots up to this size are built on the stack.
const STACK_SLOT: usize = 256;
/// Bytes of a slot's key word.
const KEY_LEN: u64 = 8;

/// The raw hash table.
#[derive(Debug)]
pub struct RawHash<P: Persist> {
    pool: Pool<P>,
    params: Params,
    geometry: Geometry,
    log: RawLog,
    durability: Durability,
    /// One past the highest operation index run (the check replays them).
    ops: AtomicU64,
}

/// Fibonacci hashing of a key to a slot of a table of `2^bits` slots.
fn home(key: u64, bits: u32) -> u64 {
    key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - bits)
}

/// The key of operation `index` and, for an upsert, its value's version (`None`: a lookup).
/// Drawn as `workloads::map` draws operation `index` of thread 0 of Silo's Hash: first
/// whether it updates (`params.update_percent`), then the key.
fn operation(params: &Params, index: u64) -> (u64, Option<u64>) {
    let key_space = 2 * params.keys.max(1);
    let mut rng = op_rng(params.seed, 0, index);
    let is_update = rng.random_range(0..100) < params.update_percent;
    let key = rng.random_range(0..key_space);
    (key, is_update.then_some(index + 1))
}

/// The content after the initial load and operations `0..ops`.
fn model(params: &Params, ops: u64) -> HashMap<u64, Vec<u8>> {
    let mut versions: HashMap<u64, u64> = (0..params.keys).map(|i| (2 * i, 0)).collect();
    for index in 0..ops {
        if let (key, Some(version)) = operation(params, index) {
            versions.insert(key, version);
        }
    }
    let size = params.value_size as usize;
    versions
        .into_iter()
        .map(|(key, version)| {
            let mut value = vec![0u8; size];
            fill_value(key, version, &mut value);
            (key, value)
        })
        .collect()
}

/// Where a table of `params` goes in `arena`, with about `log_bytes` of log.
pub(crate) fn plan(arena: Region, params: &Params, log_bytes: u64) -> TxResult<Geometry> {
    let value = u64::from(params.value_size).next_multiple_of(8);
    let slots = (4 * params.keys.max(1)).next_power_of_two();
    let record = record_len([(KEY_LEN + value) as usize]);
    Geometry::plan(arena, (slots, KEY_LEN + value), record, log_bytes)
}

impl<P: Persist> RawHash<P> {
    fn plan(pool: &Pool<P>, params: &Params, log_bytes: u64) -> TxResult<Geometry> {
        plan(pool.arena(), params, log_bytes)
    }

    /// Lays the table out in `pool`'s arena and inserts the initial keys, durably.
    pub fn format(
        pool: Pool<P>,
        params: &Params,
        durability: Durability,
        log_bytes: u64,
    ) -> TxResult<Self> {
        let geometry = Self::plan(&pool, params, log_bytes)?;
        geometry.format(pool.pm(), Structure::Hash);
        pool.pm()
            .fill(geometry.data.offset, geometry.data.len, 0, WriteClass::User);
        let table = Self::open(pool, params, durability, log_bytes)?;
        for key in (0..params.keys).map(|i| 2 * i) {
            let (at, _) = table.find(key);
            table.store_slot(at, key, 0);
        }
        let pm = table.pool.pm();
        pm.persist(geometry.data.offset, geometry.data.len);
        Ok(table)
    }

    /// Opens the table of `pool` (recovery: replays the newest intact record).
    pub fn open(
        pool: Pool<P>,
        params: &Params,
        durability: Durability,
        log_bytes: u64,
    ) -> TxResult<Self> {
        let geometry = Self::plan(&pool, params, log_bytes)?;
        geometry.verify(pool.pm(), Structure::Hash)?;
        let log = RawLog::recover(
            pool.pm(),
            geometry.log.offset,
            geometry.slot_len,
            geometry.slots(),
            geometry.data,
        )?;
        Ok(RawHash {
            pool,
            params: params.clone(),
            geometry,
            log,
            durability,
            ops: AtomicU64::new(0),
        })
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<P> {
        &self.pool
    }

    /// Whether operations are made durable.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    fn bits(&self) -> u32 {
        self.geometry.count.trailing_zeros()
    }

    fn slot_at(&self, slot: u64) -> u64 {
        self.geometry.data.offset + slot * self.geometry.item_len
    }

    /// The slot holding `key`, or the empty slot where it goes; and whether it holds it.
    fn find(&self, key: u64) -> (u64, bool) {
        let pm = self.pool.pm();
        let mask = self.geometry.count - 1;
        let mut slot = home(key, self.bits());
        loop {
            let at = self.slot_at(slot);
            match pm.read_u64(at) {
                0 => return (at, false),
                stored if stored == key + 1 => return (at, true),
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    /// Writes a slot directly (the initial load, not an operation).
    fn store_slot(&self, at: u64, key: u64, version: u64) {
        let mut slot = vec![0u8; self.geometry.item_len as usize];
        slot[..8].copy_from_slice(&(key + 1).to_le_bytes());
        fill_value(
            key,
            version,
            &mut slot[8..8 + self.params.value_size as usize],
        );
        self.pool.pm().write(at, &slot, WriteClass::User);
    }

    /// Operation `index`: inserts or overwrites its key with its value, or (the share of
    /// operations that are not updates) looks the key up and copies its value out.
    pub fn upsert(&self, index: u64) -> OpKind {
        self.ops.store(index + 1, Relaxed);
        let (key, version) = operation(&self.params, index);
        let (at, found) = self.find(key);
        let size = self.params.value_size as usize;
        let Some(version) = version else {
            if found {
                let mut value = [0u8; STACK_SLOT];
                if size <= STACK_SLOT {
                    self.pool.pm().read(at + KEY_LEN, &mut value[..size]);
                } else {
                    let mut heap = vec![0u8; size];
                    self.pool.pm().read(at + KEY_LEN, &mut heap);
                    std::hint::black_box(&heap);
                }
                std::hint::black_box(&value);
            }
            return OpKind::Read;
        };
        let mut stack = [0u8; STACK_SLOT];
        let mut heap = Vec::new();
        let slot = if 8 + size <= STACK_SLOT {
            &mut stack[..8 + size]
        } else {
            heap.resize(8 + size, 0);
            &mut heap[..]
        };
        slot[..8].copy_from_slice(&(key + 1).to_le_bytes());
        fill_value(key, version, &mut slot[8..]);
        let pm = self.pool.pm();
        if found {
            self.log
                .commit(pm, self.durability, &[(at + KEY_LEN, &slot[8..])]);
            OpKind::Update
        } else {
            self.log.commit(pm, self.durability, &[(at, slot)]);
            OpKind::Insert
        }
    }

    /// Every key with the version of its value: the table's content, probing invariant
    /// checked (each key is reachable from its home slot).
    pub fn content(&self) -> Result<HashMap<u64, Vec<u8>>, String> {
        let size = self.params.value_size as usize;
        let mut bytes = vec![0u8; self.geometry.data.len as usize];
        self.pool.pm().read(self.geometry.data.offset, &mut bytes);
        let mut content = HashMap::new();
        for (index, slot) in bytes
            .chunks_exact(self.geometry.item_len as usize)
            .enumerate()
        {
            let stored = u64::from_le_bytes(slot[..8].try_into().expect("8 bytes"));
            if stored == 0 {
                continue;
            }
            let key = stored - 1;
            if self.find(key) != (self.slot_at(index as u64), true) {
                return Err(format!(
                    "raw hash: key {key} is not reachable from its home"
                ));
            }
            content.insert(key, slot[8..8 + size].to_vec());
        }
        Ok(content)
    }

    /// Checks the table against the model of the operations run.
    pub fn check(&self) -> Result<(), String> {
        let expected = model(&self.params, self.ops.load(Relaxed));
        if self.content()? != expected {
            return Err("raw hash: the content differs from the operations' model".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choice::LAYOUT;
    use crashsim::{Config, Scenario, SimMode, SimPm, check};
    use pmem::CreateOptions;

    struct Upserts {
        params: Params,
        ops: usize,
    }

    const POOL: u64 = 64 << 10;
    /// A small log keeps crash images small (every image is a copy of the pool).
    const LOG: u64 = 1 << 10;

    impl Scenario for Upserts {
        type Model = Vec<(u64, Vec<u8>)>;
        type Live = RawHash<SimPm>;

        fn name(&self) -> String {
            "raw hash".into()
        }

        fn pool_size(&self) -> u64 {
            POOL
        }

        fn op_count(&self) -> usize {
            self.ops
        }

        fn initial_model(&self) -> Self::Model {
            sorted(model(&self.params, 0))
        }

        fn apply_to_model(&self, model: &mut Self::Model, op: usize) {
            *model = sorted(super::model(&self.params, op as u64 + 1));
        }

        fn setup(&self, pm: SimPm) -> RawHash<SimPm> {
            let pool = Pool::format(pm, &CreateOptions::new(LAYOUT, POOL)).expect("format");
            RawHash::format(pool, &self.params, Durability::Persistent, LOG).expect("raw hash")
        }

        fn run_op(&self, live: &mut RawHash<SimPm>, op: usize) {
            live.upsert(op as u64);
        }

        fn recover(&self, pm: SimPm) -> Result<Self::Model, String> {
            let pool = Pool::attach(pm, LAYOUT).map_err(|e| e.to_string())?;
            let table = RawHash::open(pool, &self.params, Durability::Persistent, LOG)
                .map_err(|e| e.to_string())?;
            table.content().map(sorted)
        }
    }

    fn sorted(content: HashMap<u64, Vec<u8>>) -> Vec<(u64, Vec<u8>)> {
        let mut entries: Vec<_> = content.into_iter().collect();
        entries.sort_unstable();
        entries
    }

    #[test]
    fn upserts_survive_a_crash_at_every_fence() {
        for (value_size, mode) in [(8, SimMode::Adr), (64, SimMode::Adr), (20, SimMode::Eadr)] {
            let scenario = Upserts {
                params: Params {
                    keys: 12,
                    value_size,
                    update_percent: 100,
                    ..Params::default()
                },
                ops: 24,
            };
            let report = check(&scenario, &Config::thorough(mode, 11));
            assert!(report.passed(), "{value_size} B, {mode:?}: {report}");
            assert!(report.crash_points >= 24, "{report}");
        }
    }

    #[test]
    fn the_check_catches_a_lost_update() {
        let scenario = Upserts {
            params: Params {
                keys: 12,
                value_size: 16,
                update_percent: 100,
                ..Params::default()
            },
            ops: 0,
        };
        let table = scenario.setup(SimPm::new(POOL, Default::default()));
        let mut kinds = Vec::new();
        for index in 0..30 {
            kinds.push(table.upsert(index));
        }
        assert!(kinds.contains(&OpKind::Insert) && kinds.contains(&OpKind::Update));
        table.check().expect("consistent");
        let (key, _) = operation(&table.params, 29);
        let (at, found) = table.find(key);
        assert!(found);
        table
            .pool
            .pm()
            .write(at + KEY_LEN, &[0xEE; 16], WriteClass::User);
        assert!(table.check().is_err());
    }

    /// `raw` and an engine share a `hash-N%` table, so they must run the same operations:
    /// the raw table once upserted on every operation whatever `--update` said.
    #[test]
    fn the_update_share_and_keys_are_those_of_the_engines_hash_workload() {
        use workloads::Workload;
        for update_percent in [0, 20, 100] {
            let params = Params {
                keys: 12,
                value_size: 16,
                update_percent,
                ..Params::default()
            };
            let pm = SimPm::new(POOL, Default::default());
            let pool = Pool::format(pm, &CreateOptions::new(LAYOUT, POOL)).expect("format");
            let table =
                RawHash::format(pool, &params, Durability::Persistent, LOG).expect("raw hash");
            let engine = tx::MemEngine::new(1 << 20);
            let hash = workloads::hash::silo_hash(params.clone());
            hash.setup(&engine).expect("setup");
            let before = table.pool.pm().stats().snapshot();
            for index in 0..200 {
                let raw = table.upsert(index);
                let on_engine = hash.run_op(&engine, 0, index).expect("operation");
                assert_eq!(raw, on_engine, "{update_percent} %: operation {index}");
            }
            table.check().expect("consistent");
            let stored = table.pool.pm().stats().snapshot().since(&before);
            if update_percent == 0 {
                assert_eq!(
                    stored.pm_bytes() + stored.fences,
                    0,
                    "lookups store nothing"
                );
            }
        }
    }
}
