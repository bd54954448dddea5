//! Base: naive hardware undo+redo logging, as the Silo paper defines its baseline. Every
//! transactional store (silent or not) first sends an undo+redo record to the core's PM log
//! region and waits until it is persistent (accepted by the MC, plus the acknowledgement's
//! trip back); then the store updates the L1 and the modified line is flushed to PM, again
//! waited for. Commit is a message to the MC that sets the core's persistent commit register
//! (the data are already in place), after which the log is truncated.
//!
//! Recovery: the undo words of every record of an uncommitted transaction (txid above the
//! core's commit register) are written back, newest record first.

use super::{Design, Stall, Step, StoreInfo, Wake};
use crate::config::Config;
use crate::engine::Ctx;
use crate::mem::{WriteKind, WriteReq};
use crate::metrics::LogStats;
use crate::pm::{LogRecord, PmImage, RecordKind};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Stage {
    #[default]
    Idle,
    /// Waiting for the log record to persist.
    Log,
    /// Waiting for the line flush to persist.
    Flush,
    /// Commit message in flight.
    Commit,
}

#[derive(Clone, Debug, Default)]
struct BaseCore {
    txid: u64,
    stage: Stage,
    /// The record in flight to the log (persistent once its write is accepted).
    staged: Option<LogRecord>,
}

/// The Base design.
#[derive(Clone, Debug)]
pub struct Base {
    record_bytes: u64,
    path: u64,
    cores: Vec<BaseCore>,
    stats: LogStats,
}

impl Base {
    /// Base for `cfg`.
    pub fn new(cfg: &Config) -> Self {
        Base {
            record_bytes: cfg.base.record_bytes,
            path: cfg.path_cycles,
            cores: vec![BaseCore::default(); cfg.cores],
            stats: LogStats::default(),
        }
    }

    fn persist_wait(&self) -> Step {
        Step::block(Wake::OutboxDrained { extra: self.path }, Stall::Persist)
    }
}

impl Design for Base {
    fn name(&self) -> &'static str {
        "base"
    }

    fn tx_begin(&mut self, _ctx: &mut Ctx<'_>, core: usize) -> Step {
        self.cores[core].txid += 1;
        Step::Done
    }

    fn pre_store(&mut self, ctx: &mut Ctx<'_>, core: usize, st: &StoreInfo) -> Step {
        self.stats.tx_stores += 1;
        self.stats.generated += 1;
        self.stats.appended += 1;
        let c = &mut self.cores[core];
        c.staged = Some(LogRecord {
            kind: RecordKind::UndoRedo,
            txid: c.txid,
            word: st.word,
            old: st.old,
            new: st.new,
        });
        c.stage = Stage::Log;
        let addr = ctx.log_addr(core, self.record_bytes);
        let req = WriteReq::new(addr, self.record_bytes, WriteKind::Log, core);
        let now = ctx.now();
        ctx.send(req, now + self.path);
        self.persist_wait()
    }

    fn post_store(&mut self, ctx: &mut Ctx<'_>, core: usize, st: &StoreInfo) -> Step {
        let line = st.line();
        if !ctx.clean_line(line) {
            return Step::Done;
        }
        let req = WriteReq {
            seq: ctx.next_seq(),
            data: ctx.capture_line(line),
            ..WriteReq::new(line << 6, 64, WriteKind::Flush, core)
        };
        let leave = ctx.now().max(st.perform_at);
        ctx.send(req, leave + self.path);
        self.cores[core].stage = Stage::Flush;
        self.persist_wait()
    }

    fn on_accepted(&mut self, ctx: &mut Ctx<'_>, req: &WriteReq) {
        if req.kind == WriteKind::Log
            && let Some(record) = self.cores[req.core].staged.take()
        {
            self.stats.undo_records += 1;
            ctx.pm().append(req.core, record);
        }
    }

    fn tx_end(&mut self, ctx: &mut Ctx<'_>, core: usize) -> Step {
        self.cores[core].stage = Stage::Commit;
        Step::block(Wake::At(ctx.now() + self.path), Stall::Commit)
    }

    fn resume(&mut self, ctx: &mut Ctx<'_>, core: usize) -> Step {
        let c = &mut self.cores[core];
        if std::mem::take(&mut c.stage) == Stage::Commit {
            let pm = ctx.pm();
            pm.committed[core] = c.txid;
            pm.logs[core].clear(); // truncation: every record belongs to a committed tx now
        }
        Step::Done
    }

    fn recover(&self, pm: &mut PmImage) {
        for core in 0..pm.logs.len() {
            let committed = pm.committed[core];
            let undo: Vec<LogRecord> = pm.logs[core]
                .iter()
                .rev()
                .filter(|r| r.txid > committed)
                .copied()
                .collect();
            for r in undo {
                pm.write(r.word, r.old);
            }
        }
    }

    fn log_stats(&self) -> Option<LogStats> {
        Some(self.stats)
    }
}
