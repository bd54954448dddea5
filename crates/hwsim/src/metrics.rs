//! What a run reports (all serde).

use crate::cache::HierarchyStats;
use crate::design::Stall;
use crate::mem::MemStats;
use serde::{Deserialize, Serialize};

/// Stall cycles by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StallCycles {
    /// Loads beyond an L1 hit (blocking loads, or a full MLP window).
    pub load: u64,
    /// Full store buffer.
    pub store_buffer: u64,
    /// Full write-back buffer (write queue congested).
    pub writeback: u64,
    /// Waiting for writes to persist (log records, line flushes).
    pub persist: u64,
    /// Waiting for log-buffer room (including overflow retirement).
    pub log_buffer: u64,
    /// Commit handshake.
    pub commit: u64,
    /// Store-buffer drain before commit.
    pub drain: u64,
    /// Misses waiting for the memory controller's write drain (reads held by FR-FCFS).
    #[serde(default)]
    pub mem_drain: u64,
}

impl StallCycles {
    /// Adds `cycles` to `cause`.
    pub fn add(&mut self, cause: Stall, cycles: u64) {
        let slot = match cause {
            Stall::StoreBuffer => &mut self.store_buffer,
            Stall::WriteBack => &mut self.writeback,
            Stall::Persist => &mut self.persist,
            Stall::LogBuffer => &mut self.log_buffer,
            Stall::Commit => &mut self.commit,
            Stall::Drain => &mut self.drain,
            Stall::MemDrain => &mut self.mem_drain,
        };
        *slot += cycles;
    }

    /// Component-wise sum.
    pub fn merge(&mut self, o: &StallCycles) {
        self.load += o.load;
        self.store_buffer += o.store_buffer;
        self.writeback += o.writeback;
        self.persist += o.persist;
        self.log_buffer += o.log_buffer;
        self.commit += o.commit;
        self.drain += o.drain;
        self.mem_drain += o.mem_drain;
    }

    /// All causes.
    pub fn total(&self) -> u64 {
        self.load
            + self.store_buffer
            + self.writeback
            + self.persist
            + self.log_buffer
            + self.commit
            + self.drain
            + self.mem_drain
    }
}

/// One core's run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CoreMetrics {
    /// Cycle at which the core finished its trace.
    pub cycles: u64,
    /// Trace events consumed.
    pub events: u64,
    /// Committed transactions.
    pub committed_tx: u64,
    /// Load events.
    pub loads: u64,
    /// Store events (pieces).
    pub stores: u64,
    /// Stores inside transactions.
    pub tx_stores: u64,
    /// Stall cycles by cause.
    pub stalls: StallCycles,
}

/// Log statistics of a logging design (fields a design does not use stay 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LogStats {
    /// Transactional store pieces seen by the log generator.
    pub tx_stores: u64,
    /// Silent stores ignored (no entry).
    pub silent_ignored: u64,
    /// Entries generated (non-silent stores).
    pub generated: u64,
    /// Generated entries merged into an entry of the same transaction and word.
    pub merged: u64,
    /// Entries that took a buffer slot (generated − merged).
    pub appended: u64,
    /// Largest number of slots one transaction took (its distinct modified words).
    pub max_entries_per_tx: u64,
    /// Transactions that needed overflow retirement.
    pub overflow_tx: u64,
    /// Overflow batches written.
    pub overflow_batches: u64,
    /// Entries retired by overflow.
    pub overflowed_entries: u64,
    /// Undo records written to the PM log during execution.
    pub undo_records: u64,
    /// In-place updates written.
    pub in_place_updates: u64,
    /// In-place updates skipped because an eviction had written the line (flush-bit 1).
    pub updates_skipped: u64,
    /// Records written by failure flushes.
    pub failure_records: u64,
    /// Redo records written to the PM log during execution (MorLog).
    pub redo_records: u64,
    /// Force-write-back scans of the caches (FWB, MorLog: the circular log wrapped).
    pub scans: u64,
    /// Lines written back by those scans.
    pub scan_flushes: u64,
    /// Speculative lines staged in the MC's write queue (LAD).
    pub speculative_lines: u64,
    /// Stalls of a store because the circular PM log was full (FWB, MorLog).
    pub log_full_waits: u64,
}

impl LogStats {
    /// Fraction of transactional stores that did not take a buffer slot (ignored + merged).
    pub fn reduction(&self) -> f64 {
        if self.tx_stores == 0 {
            0.0
        } else {
            1.0 - self.appended as f64 / self.tx_stores as f64
        }
    }

    /// Fraction of transactional stores that were silent.
    pub fn silent_fraction(&self) -> f64 {
        if self.tx_stores == 0 {
            0.0
        } else {
            self.silent_ignored as f64 / self.tx_stores as f64
        }
    }
}

/// The result of one run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Design name.
    pub design: String,
    /// Workload name from the trace metadata.
    pub workload: String,
    /// Simulated cores.
    pub cores: usize,
    /// Core clock (GHz).
    pub freq_ghz: f64,
    /// Cycles until the last core finished its trace.
    pub cycles: u64,
    /// Cycles until the memory system was idle too (background writes drained).
    pub drained_cycles: u64,
    /// Committed transactions.
    pub committed_tx: u64,
    /// Committed transactions per second of simulated time.
    pub throughput_tx_per_s: f64,
    /// Trace events consumed.
    pub events: u64,
    /// Stall cycles summed over cores.
    pub stalls: StallCycles,
    /// Per core.
    pub per_core: Vec<CoreMetrics>,
    /// PM traffic and memory-controller counters.
    pub pm: MemStats,
    /// Cache counters.
    pub caches: HierarchyStats,
    /// Log statistics (logging designs).
    pub log: Option<LogStats>,
    /// Host seconds the simulation took.
    pub host_seconds: f64,
    /// Trace events per host second.
    pub events_per_host_second: f64,
}

impl Metrics {
    /// PM bytes written per committed transaction.
    pub fn write_bytes_per_tx(&self) -> f64 {
        self.pm.writes.bytes as f64 / self.committed_tx.max(1) as f64
    }
}
