//! FWB — "Steal but no force" (Ogleari, Miller, Zhao, HPCA'18).
//!
//! * **Logging**: every transactional store (silent or not: the cache controller does not
//!   compare values) makes an undo+redo record (tid, txid, address, old word, new word; 32 B)
//!   in the core's log buffer (15 entries). Records leave in packs of two (one 64 B write)
//!   over the bypass path to the core's circular PM log; the store does not wait for them.
//!   A store stalls only when the log buffer (records not yet accepted by the MC) is full.
//! * **Ordering**: no fences. FWB relies on a dirty line needing longer to reach PM than its
//!   log record; the model enforces it: a line with a pending record is written back on its
//!   core's path *behind* the record (`wal`).
//! * **Commit**: the open pack leaves; the transaction commits once all its records are
//!   accepted and the acknowledgement is back (the core's persistent commit register is set
//!   then). Data are never forced ("no force"): they reach PM by normal eviction.
//! * **Force write-back**: when half of the circular log holds live records, a scan writes
//!   back every line logged since the previous scan that is still dirty (in the background,
//!   using the write queue only while it is more than half free); then the older half of the
//!   log is free again. A store stalls when the log is full.
//! * **Failure**: the log buffer is volatile; nothing is flushed (records not yet accepted are
//!   lost, and so is data, which cannot have reached PM before them).
//! * **Recovery**: replay the new words of committed transactions' records in log order, then
//!   undo uncommitted ones' records newest first.

use super::wal::Wal;
use super::{Design, Evict, Stall, Step, StoreInfo, Wake};
use crate::config::{Config, FwbConfig};
use crate::engine::Ctx;
use crate::mem::{WriteKind, WriteReq};
use crate::metrics::LogStats;
use crate::pm::{LogRecord, PmImage, RecordKind};

/// Per-core transaction state.
#[derive(Clone, Copy, Debug, Default)]
struct FwbCore {
    txid: u64,
    committing: bool,
    /// A store waits for log-buffer or log room.
    waiting: bool,
}

/// The FWB design.
#[derive(Clone, Debug)]
pub struct Fwb {
    cfg: FwbConfig,
    path: u64,
    cores: Vec<FwbCore>,
    wal: Wal,
    stats: LogStats,
}

impl Fwb {
    /// FWB for `cfg`.
    pub fn new(cfg: &Config) -> Self {
        Fwb {
            cfg: cfg.fwb.clone(),
            path: cfg.path_cycles,
            cores: vec![FwbCore::default(); cfg.cores],
            wal: Wal::new(cfg.cores, cfg.path_cycles, cfg.fwb.log_bytes),
            stats: LogStats::default(),
        }
    }

    /// Whether one more record can be created now; otherwise pushes the log buffer out so
    /// that room appears.
    fn has_room(&mut self, ctx: &mut Ctx<'_>, core: usize) -> bool {
        let c = &self.wal.cores[core];
        if c.unaccepted() < self.cfg.log_buffer
            && self.wal.log_has_room(core, self.cfg.record_bytes)
        {
            return true;
        }
        self.wal.send_open(ctx, core);
        self.wal.run_scans(ctx);
        false
    }
}

impl Design for Fwb {
    fn name(&self) -> &'static str {
        "fwb"
    }

    fn tx_begin(&mut self, _ctx: &mut Ctx<'_>, core: usize) -> Step {
        self.cores[core].txid += 1;
        Step::Done
    }

    fn pre_store(&mut self, ctx: &mut Ctx<'_>, core: usize, _st: &StoreInfo) -> Step {
        if self.has_room(ctx, core) {
            return Step::Done;
        }
        if !self.wal.log_has_room(core, self.cfg.record_bytes) {
            self.stats.log_full_waits += 1;
        }
        self.cores[core].waiting = true;
        Step::block(Wake::Poll, Stall::LogBuffer)
    }

    fn post_store(&mut self, ctx: &mut Ctx<'_>, core: usize, st: &StoreInfo) -> Step {
        self.stats.tx_stores += 1;
        self.stats.generated += 1;
        self.stats.appended += 1;
        let record = LogRecord {
            kind: RecordKind::UndoRedo,
            txid: self.cores[core].txid,
            word: st.word,
            old: st.old,
            new: st.new,
        };
        self.wal
            .push(core, record, self.cfg.record_bytes, st.perform_at);
        let c = &self.wal.cores[core];
        if c.open_bytes() >= self.cfg.record_bytes * self.cfg.records_per_write as u64 {
            self.wal.send_open(ctx, core);
        }
        Step::Done
    }

    fn tx_end(&mut self, ctx: &mut Ctx<'_>, core: usize) -> Step {
        self.wal.send_open(ctx, core);
        self.cores[core].committing = true;
        Step::block(Wake::OutboxDrained { extra: self.path }, Stall::Commit)
    }

    fn resume(&mut self, ctx: &mut Ctx<'_>, core: usize) -> Step {
        let c = &mut self.cores[core];
        if std::mem::take(&mut c.committing) {
            debug_assert_eq!(self.wal.cores[core].unaccepted(), 0);
            ctx.pm().committed[core] = c.txid;
            self.wal.maybe_scan(core);
            self.wal.run_scans(ctx);
            return Step::Done;
        }
        if c.waiting {
            if !self.has_room(ctx, core) {
                return Step::block(Wake::Poll, Stall::LogBuffer);
            }
            self.cores[core].waiting = false;
        }
        Step::Done
    }

    fn on_evict(&mut self, ctx: &mut Ctx<'_>, _core: usize, line: u64) -> Evict {
        match self.wal.owner_of_pending(line) {
            Some(owner) => {
                self.wal.send_writeback(ctx, owner, line);
                Evict::Absorbed
            }
            None => Evict::WriteBack,
        }
    }

    fn on_accepted(&mut self, ctx: &mut Ctx<'_>, req: &WriteReq) {
        if req.kind == WriteKind::Log {
            let n = self.wal.accepted(ctx, req.core);
            self.stats.undo_records += n as u64;
        }
    }

    fn background(&mut self, ctx: &mut Ctx<'_>) {
        if self.wal.any_scan() {
            self.wal.run_scans(ctx);
        }
    }

    fn recover(&self, pm: &mut PmImage) {
        replay_then_undo(pm);
    }

    fn log_stats(&self) -> Option<LogStats> {
        Some(LogStats {
            scans: self.wal.scans,
            scan_flushes: self.wal.scan_flushes,
            ..self.stats
        })
    }
}

/// Recovery shared by the redo-capable logs (FWB, MorLog): per core, the new words of
/// committed transactions' `Redo`/`UndoRedo` records in log order, then the old words of
/// uncommitted ones' `Undo`/`UndoRedo` records newest first (so the oldest old value wins).
pub(crate) fn replay_then_undo(pm: &mut PmImage) {
    for core in 0..pm.logs.len() {
        let committed = pm.committed[core];
        let redo: Vec<(u64, u64)> = pm.logs[core]
            .iter()
            .filter(|r| r.kind != RecordKind::Undo && r.txid <= committed)
            .map(|r| (r.word, r.new))
            .collect();
        redo.into_iter().for_each(|(w, v)| pm.write(w, v));
    }
    for core in 0..pm.logs.len() {
        let committed = pm.committed[core];
        let undo: Vec<(u64, u64)> = pm.logs[core]
            .iter()
            .rev()
            .filter(|r| r.kind != RecordKind::Redo && r.txid > committed)
            .map(|r| (r.word, r.old))
            .collect();
        undo.into_iter().for_each(|(w, v)| pm.write(w, v));
    }
}
