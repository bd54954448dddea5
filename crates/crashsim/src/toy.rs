//! A toy redo-log engine over a small array of 8-byte slots, plus deliberately broken
//! variants ("mutants"). The correct engine must pass the harness at every fence; every mutant
//! must be caught. Together they prove that the harness is not vacuous.
//!
//! Layout in the pool arena (offsets from the arena start):
//! - `0`: commit word, the number of valid log entries (0 = nothing to redo);
//! - `64`: log entries, 16 bytes each: slot index, new value (little-endian `u64`s);
//! - `SLOTS_AT`: the slot array, [`SLOTS`] `u64`s over two cache lines.
//!
//! Correct commit: write the entries, flush them, fence; set the commit word, persist it
//! (the durability point); apply the values in place and persist them; clear the commit word
//! and persist it. Recovery applies the entries if the commit word is set, then clears it.

use crate::harness::Scenario;
use crate::sim::{SimMode, SimPm};
use pmem::{CreateOptions, Persist, Pool, WriteClass};

/// Slots in the array.
pub const SLOTS: usize = 16;
/// Most entries in one transaction.
pub const MAX_ENTRIES: usize = 8;
const LAYOUT: &str = "ferrite-toy-redo";
const POOL_SIZE: u64 = 32 * 1024;
const COMMIT_AT: u64 = 0;
const ENTRIES_AT: u64 = 64;
const SLOTS_AT: u64 = 256;

/// How the log entries are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum LogWrites {
    /// Ordinary stores, then flush.
    Cacheable,
    /// Non-temporal stores (no flush needed before the fence).
    NonTemporal,
}

/// A deliberate bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Mutation {
    /// The correct engine.
    None,
    /// The log entries are never flushed before the commit word is persisted.
    MissingLogFlush,
    /// The commit word is persisted before the log entries are written.
    CommitBeforeLog,
    /// The commit word is cleared before the in-place updates are persisted.
    EarlyCommitClear,
    /// Two adjacent slots are updated in place by one 16-byte store, assumed atomic, with
    /// no log.
    Torn16ByteUpdate,
    /// Non-temporal log entries with no fence before the commit word is written.
    NtLogWithoutFence,
}

impl Mutation {
    /// Every mutant (not the correct engine).
    pub const MUTANTS: [Mutation; 5] = [
        Mutation::MissingLogFlush,
        Mutation::CommitBeforeLog,
        Mutation::EarlyCommitClear,
        Mutation::Torn16ByteUpdate,
        Mutation::NtLogWithoutFence,
    ];

    /// The log-write mode the mutant applies to.
    pub fn log_writes(self) -> LogWrites {
        match self {
            Mutation::NtLogWithoutFence => LogWrites::NonTemporal,
            _ => LogWrites::Cacheable,
        }
    }

    /// Whether the bug can lose data under `mode`. With persistent caches (eADR) stores
    /// persist in program order, so forgetting a flush, or clearing the commit word before
    /// flushing data written earlier, is harmless there.
    pub fn is_bug_under(self, mode: SimMode) -> bool {
        match self {
            Mutation::None => false,
            Mutation::MissingLogFlush | Mutation::EarlyCommitClear => mode == SimMode::Adr,
            Mutation::CommitBeforeLog
            | Mutation::Torn16ByteUpdate
            | Mutation::NtLogWithoutFence => true,
        }
    }
}

/// The toy engine.
#[derive(Debug)]
pub struct ToyRedo<P: Persist> {
    pool: Pool<P>,
    mutation: Mutation,
    log: LogWrites,
}

impl<P: Persist> ToyRedo<P> {
    /// Formats a fresh pool on `pm` (which must be [`ToyRedo::POOL_SIZE`] bytes).
    pub fn create(pm: P, mutation: Mutation, log: LogWrites) -> Self {
        let pool =
            Pool::format(pm, &CreateOptions::new(LAYOUT, POOL_SIZE)).expect("format toy pool");
        ToyRedo {
            pool,
            mutation,
            log,
        }
    }

    /// Pool size the engine uses.
    pub const POOL_SIZE: u64 = POOL_SIZE;

    /// Opens a pool and runs recovery.
    pub fn open(pm: P) -> Result<Self, String> {
        let pool = Pool::attach(pm, LAYOUT).map_err(|e| e.to_string())?;
        let engine = ToyRedo {
            pool,
            mutation: Mutation::None,
            log: LogWrites::Cacheable,
        };
        engine.recover()?;
        Ok(engine)
    }

    fn at(&self, offset: u64) -> u64 {
        self.pool.arena().offset + offset
    }

    fn slot_at(&self, slot: usize) -> u64 {
        self.at(SLOTS_AT + 8 * slot as u64)
    }

    /// Current slot values.
    pub fn slots(&self) -> Vec<u64> {
        (0..SLOTS)
            .map(|slot| self.pool.pm().read_u64(self.slot_at(slot)))
            .collect()
    }

    /// Atomically sets `slot = value` for every pair in `updates`.
    pub fn commit(&self, updates: &[(usize, u64)]) {
        assert!(updates.len() <= MAX_ENTRIES && updates.iter().all(|&(s, _)| s < SLOTS));
        if self.mutation == Mutation::Torn16ByteUpdate {
            return self.commit_without_log(updates);
        }
        let pm = self.pool.pm();
        let commit = self.at(COMMIT_AT);
        if self.mutation == Mutation::CommitBeforeLog {
            pm.write_u64(commit, updates.len() as u64, WriteClass::Log);
            pm.persist(commit, 8);
        }
        self.write_entries(updates);
        if self.mutation != Mutation::NtLogWithoutFence {
            pm.fence();
        }
        pm.write_u64(commit, updates.len() as u64, WriteClass::Log);
        pm.persist(commit, 8);
        pm.durability_point();
        self.apply(updates);
    }

    fn write_entries(&self, updates: &[(usize, u64)]) {
        let pm = self.pool.pm();
        let mut bytes = Vec::with_capacity(16 * updates.len());
        for &(slot, value) in updates {
            bytes.extend_from_slice(&(slot as u64).to_le_bytes());
            bytes.extend_from_slice(&value.to_le_bytes());
        }
        let entries = self.at(ENTRIES_AT);
        match self.log {
            LogWrites::NonTemporal => pm.write_nt(entries, &bytes, WriteClass::Log),
            LogWrites::Cacheable => {
                pm.write(entries, &bytes, WriteClass::Log);
                if self.mutation != Mutation::MissingLogFlush {
                    pm.flush(entries, bytes.len() as u64);
                }
            }
        }
    }

    /// Writes the values in place, persists them, then retires the log.
    fn apply(&self, updates: &[(usize, u64)]) {
        let pm = self.pool.pm();
        for &(slot, value) in updates {
            pm.write_u64(self.slot_at(slot), value, WriteClass::User);
        }
        let commit = self.at(COMMIT_AT);
        if self.mutation == Mutation::EarlyCommitClear {
            pm.write_u64(commit, 0, WriteClass::Log);
            pm.persist(commit, 8);
        }
        for &(slot, _) in updates {
            pm.flush(self.slot_at(slot), 8);
        }
        pm.fence();
        pm.write_u64(commit, 0, WriteClass::Log);
        pm.persist(commit, 8);
    }

    /// The Torn16ByteUpdate mutant: pairs of adjacent slots as single 16-byte stores.
    fn commit_without_log(&self, updates: &[(usize, u64)]) {
        let pm = self.pool.pm();
        for pair in updates.chunks(2) {
            let mut bytes = Vec::with_capacity(16);
            for &(_, value) in pair {
                bytes.extend_from_slice(&value.to_le_bytes());
            }
            let first = self.slot_at(pair[0].0);
            pm.write(first, &bytes, WriteClass::User);
            pm.flush(first, bytes.len() as u64);
        }
        pm.fence();
        pm.durability_point();
    }

    /// Redoes a committed transaction, if any. Idempotent.
    fn recover(&self) -> Result<(), String> {
        let pm = self.pool.pm();
        let commit = self.at(COMMIT_AT);
        let count = pm.read_u64(commit);
        if count == 0 {
            return Ok(());
        }
        if count > MAX_ENTRIES as u64 {
            return Err(format!("corrupt commit word {count:#x}"));
        }
        let mut updates = Vec::with_capacity(count as usize);
        for entry in 0..count {
            let at = self.at(ENTRIES_AT + 16 * entry);
            let slot = pm.read_u64(at);
            if slot >= SLOTS as u64 {
                return Err(format!("log entry {entry} names slot {slot}"));
            }
            updates.push((slot as usize, pm.read_u64(at + 8)));
        }
        self.apply(&updates);
        Ok(())
    }
}

/// A crash-test scenario over the toy engine: `ops` transactions, each setting a pair of
/// adjacent slots to fresh values.
#[derive(Clone, Copy, Debug)]
pub struct ToyScenario {
    /// Bug to inject.
    pub mutation: Mutation,
    /// Log-write mode.
    pub log: LogWrites,
    /// Number of transactions.
    pub ops: usize,
}

impl ToyScenario {
    /// The correct engine with `log` writes.
    pub fn correct(log: LogWrites, ops: usize) -> Self {
        ToyScenario {
            mutation: Mutation::None,
            log,
            ops,
        }
    }

    /// A mutant, with the log-write mode it applies to.
    pub fn mutant(mutation: Mutation, ops: usize) -> Self {
        ToyScenario {
            mutation,
            log: mutation.log_writes(),
            ops,
        }
    }

    fn updates(op: usize) -> [(usize, u64); 2] {
        let pair = (op * 5 + 3) % (SLOTS / 2);
        let value = (op as u64 + 1) << 8;
        [(2 * pair, value | 1), (2 * pair + 1, value | 2)]
    }
}

impl Scenario for ToyScenario {
    type Model = Vec<u64>;
    type Live = ToyRedo<SimPm>;

    fn name(&self) -> String {
        format!("toy-redo/{:?}/{:?}", self.log, self.mutation)
    }

    fn pool_size(&self) -> u64 {
        POOL_SIZE
    }

    fn op_count(&self) -> usize {
        self.ops
    }

    fn initial_model(&self) -> Vec<u64> {
        vec![0; SLOTS]
    }

    fn apply_to_model(&self, model: &mut Vec<u64>, op: usize) {
        for (slot, value) in Self::updates(op) {
            model[slot] = value;
        }
    }

    fn setup(&self, pm: SimPm) -> ToyRedo<SimPm> {
        ToyRedo::create(pm, self.mutation, self.log)
    }

    fn run_op(&self, live: &mut ToyRedo<SimPm>, op: usize) {
        live.commit(&Self::updates(op));
    }

    fn recover(&self, pm: SimPm) -> Result<Vec<u64>, String> {
        Ok(ToyRedo::open(pm)?.slots())
    }
}
