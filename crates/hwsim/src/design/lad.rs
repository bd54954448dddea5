//! LAD — Logless Atomic Durability (Gupta, Daglis, Falsafi, MICRO'19).
//!
//! * **No log in the common case.** Stores mark their L1 lines transaction-dirty (the design
//!   keeps the per-transaction dirty set: the L1 bitmap plus lines that left the L1 during the
//!   transaction).
//! * **Commit**: the core drains its store buffer, walks the L1 and sends every tx-dirty line
//!   still dirty through L2 → LLC → MC (one line per `issue_interval` cycles, each taking the
//!   whole path), where it is staged as a *speculative* entry of the persistent (ADR) write
//!   queue: it holds a queue entry but is not written to PCM. When every line is staged, the
//!   acknowledgements return (one path trip) and a commit round trip with the MC (2PC with
//!   one MC: two trips) clears the speculative bits; at that instant the transaction commits
//!   and its entries become ordinary 64 B writes that drain to PCM.
//! * **Evictions** of tx-dirty lines during the transaction go to the MC as speculative
//!   entries too.
//! * **Overflow**: a speculative line that finds no entry (the queue is full, or speculative
//!   lines already hold `spec_limit` entries — the rest stays for ordinary writes so that
//!   this path can always progress) is undo-logged by the MC: it reads the old line from PCM,
//!   writes an undo record (old line + metadata) to the core's log, then writes the new line
//!   in place.
//! * **Failure**: speculative entries of uncommitted transactions are discarded (committed ones
//!   are already ordinary writes). **Recovery**: roll back the undo records of uncommitted
//!   transactions, newest first.

use super::fwb::replay_then_undo;
use super::{Design, Evict, Stall, Step, StoreInfo, Wake};
use crate::config::{Config, LINE_BYTES, LadConfig};
use crate::engine::Ctx;
use crate::mem::{NEVER, Payload, WriteKind, WriteReq};
use crate::metrics::LogStats;
use crate::pm::{LogRecord, PmImage, RecordKind};
use crate::util::{FastMap, FastSet};
use std::collections::VecDeque;

/// A line on its way to the MC, or waiting there for the undo-logging path.
#[derive(Clone, Copy, Debug)]
struct Line {
    line: u64,
    data: Payload,
    /// Arrival at the MC (in flight) or completion of the old line's read (overflow).
    at: u64,
    /// Overflow: the undo record is persistent (the in-place write may go).
    logged: bool,
    /// Order stamp of the data's capture.
    seq: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    #[default]
    Running,
    /// Commit walk: waiting for every line to be staged or undo-logged.
    Pushing,
    /// Acknowledgements and the commit round trip.
    Acking,
}

#[derive(Clone, Debug, Default)]
struct LadCore {
    txid: u64,
    phase: Phase,
    /// Lines the running transaction stored to, in first-store order.
    tx_lines: Vec<u64>,
    tx_set: FastSet<u64>,
    /// Lines travelling to the MC, by arrival time.
    arriving: VecDeque<Line>,
    /// Lines waiting for the undo-logging path (old line being read, or queue room).
    overflow: VecDeque<Line>,
    /// Staged speculative lines (each holds one write-queue entry).
    staged: Vec<(u64, Payload)>,
    staged_at: FastMap<u64, usize>,
    /// When the last line of the commit walk was staged or undo-logged.
    last_done: u64,
    overflowed: bool,
}

/// The LAD design.
#[derive(Clone, Debug)]
pub struct Lad {
    cfg: LadConfig,
    path: u64,
    /// Cycles from the L1 to the MC for a written-back line.
    walk_latency: u64,
    cores: Vec<LadCore>,
    staged_total: usize,
    wakeup: u64,
    stats: LogStats,
}

impl Lad {
    /// LAD for `cfg`.
    pub fn new(cfg: &Config) -> Self {
        Lad {
            // At least one write-queue entry stays for ordinary writes, so the undo-logging
            // path (one entry at a time) always progresses.
            cfg: LadConfig {
                spec_limit: cfg.lad.spec_limit.min(cfg.mem.write_queue - 1),
                ..cfg.lad.clone()
            },
            path: cfg.path_cycles,
            walk_latency: cfg.l1.latency + cfg.l2.latency + cfg.llc.latency + cfg.path_cycles,
            cores: vec![LadCore::default(); cfg.cores],
            staged_total: 0,
            wakeup: NEVER,
            stats: LogStats::default(),
        }
    }

    /// The next arrival or overflow read completion after `now` (an overflow line whose read
    /// is done waits for write-queue room, which the MC's activity reports).
    fn refresh_wakeup(&mut self, now: u64) {
        let next = |c: &LadCore| {
            let a = c.arriving.front().map_or(NEVER, |l| l.at);
            let o = c.overflow.iter().map(|l| l.at).find(|&t| t > now);
            a.min(o.unwrap_or(NEVER))
        };
        self.wakeup = self.cores.iter().map(next).min().unwrap_or(NEVER);
    }

    /// Inserts a line travelling to the MC, keeping arrival order.
    fn travel(&mut self, now: u64, core: usize, line: Line) {
        let q = &mut self.cores[core].arriving;
        let at = q.partition_point(|l| l.at <= line.at);
        q.insert(at, line);
        self.refresh_wakeup(now);
    }

    /// A speculative line reached the MC: stage it, or start undo-logging it.
    fn arrive(&mut self, ctx: &mut Ctx<'_>, core: usize, line: Line) {
        let now = ctx.now();
        let c = &mut self.cores[core];
        c.last_done = c.last_done.max(now);
        if let Some(&i) = c.staged_at.get(&line.line) {
            c.staged[i].1 = line.data; // a newer copy of a staged line takes its entry
            return;
        }
        if self.staged_total < self.cfg.spec_limit && ctx.reserve_wq() {
            c.staged_at.insert(line.line, c.staged.len());
            c.staged.push((line.line, line.data));
            self.staged_total += 1;
            self.stats.speculative_lines += 1;
            return;
        }
        let read_done = ctx.mem_read(line.line * LINE_BYTES);
        c.overflow.push_back(Line {
            at: read_done,
            logged: false,
            ..line
        });
        self.stats.overflowed_entries += 1;
        if !std::mem::replace(&mut c.overflowed, true) {
            self.stats.overflow_tx += 1;
        }
    }

    /// Undo-logs the lines whose old data has been read, one write-queue entry at a time:
    /// first the undo record, then (once it is persistent) the line in place.
    fn drain_overflow(&mut self, ctx: &mut Ctx<'_>, core: usize) {
        let now = ctx.now();
        while let Some(&l) = self.cores[core].overflow.front() {
            if l.at > now || ctx.wq_free() == 0 {
                return;
            }
            if !l.logged {
                self.write_undo(ctx, core, &l);
                self.cores[core].overflow[0].logged = true;
                continue;
            }
            self.cores[core].overflow.pop_front();
            let data = WriteReq {
                data: ctx.attach(l.data),
                seq: l.seq,
                ..WriteReq::new(l.line * LINE_BYTES, LINE_BYTES, WriteKind::InPlace, core)
            };
            let ok = ctx.try_write(data);
            debug_assert!(ok, "an entry was free");
            let c = &mut self.cores[core];
            c.last_done = c.last_done.max(now);
        }
    }

    /// Writes the undo record of an overflowed line (its words' persistent values).
    fn write_undo(&mut self, ctx: &mut Ctx<'_>, core: usize, l: &Line) {
        let txid = self.cores[core].txid;
        for i in (0..8).filter(|i| l.data.mask & (1 << i) != 0) {
            let word = l.line * LINE_BYTES + 8 * i;
            let old = ctx.pm().read(word);
            let record = LogRecord {
                kind: RecordKind::Undo,
                txid,
                word,
                old,
                new: l.data.words[i as usize],
            };
            ctx.pm().append(core, record);
        }
        let bytes = self.cfg.undo_record_bytes;
        let undo = WriteReq::new(ctx.log_addr(core, bytes), bytes, WriteKind::Log, core);
        let ok = ctx.try_write(undo);
        debug_assert!(ok, "an entry was free");
        self.stats.undo_records += 1;
    }

    /// The commit instant: staged lines become ordinary writes, the commit is durable.
    fn commit(&mut self, ctx: &mut Ctx<'_>, core: usize) {
        let c = &mut self.cores[core];
        let staged = std::mem::take(&mut c.staged);
        c.staged_at.clear();
        ctx.release_wq(staged.len());
        self.staged_total -= staged.len();
        for (line, data) in staged {
            let req = WriteReq {
                data: ctx.attach(data),
                seq: ctx.next_seq(),
                ..WriteReq::new(line * LINE_BYTES, LINE_BYTES, WriteKind::Flush, core)
            };
            let ok = ctx.try_write(req);
            debug_assert!(ok, "released entries take the writes");
        }
        let pm = ctx.pm();
        pm.committed[core] = c.txid;
        pm.logs[core].clear(); // undo records of this transaction are garbage now
        c.tx_lines.clear();
        c.tx_set.clear();
        c.overflowed = false;
        c.phase = Phase::Running;
    }

    /// The commit walk: every tx-dirty line still dirty leaves the L1 for the MC.
    fn walk(&mut self, ctx: &mut Ctx<'_>, core: usize) {
        let now = ctx.now();
        let lines = std::mem::take(&mut self.cores[core].tx_lines);
        let mut sent = 0;
        for &line in &lines {
            if !ctx.clean_line(line) {
                continue; // evicted (already sent as speculative) and not written since
            }
            let leave = now + sent * self.cfg.issue_interval;
            sent += 1;
            let data = ctx.line_values(line);
            let at = leave + self.walk_latency;
            let seq = ctx.next_seq();
            self.travel(
                now,
                core,
                Line {
                    line,
                    data,
                    at,
                    logged: false,
                    seq,
                },
            );
        }
        let c = &mut self.cores[core];
        c.tx_lines = lines;
        c.last_done = now;
        c.phase = Phase::Pushing;
    }
}

impl Design for Lad {
    fn name(&self) -> &'static str {
        "lad"
    }

    fn tx_begin(&mut self, _ctx: &mut Ctx<'_>, core: usize) -> Step {
        self.cores[core].txid += 1;
        Step::Done
    }

    fn post_store(&mut self, _ctx: &mut Ctx<'_>, core: usize, st: &StoreInfo) -> Step {
        self.stats.tx_stores += 1;
        let c = &mut self.cores[core];
        if c.tx_set.insert(st.line()) {
            c.tx_lines.push(st.line());
        }
        Step::Done
    }

    fn tx_end(&mut self, ctx: &mut Ctx<'_>, core: usize) -> Step {
        self.walk(ctx, core);
        self.resume(ctx, core)
    }

    fn resume(&mut self, ctx: &mut Ctx<'_>, core: usize) -> Step {
        let c = &mut self.cores[core];
        match c.phase {
            Phase::Running => Step::Done,
            Phase::Pushing if !c.arriving.is_empty() || !c.overflow.is_empty() => {
                Step::block(Wake::Poll, Stall::Commit)
            }
            Phase::Pushing => {
                c.phase = Phase::Acking;
                let ack = c.last_done.max(ctx.now()) + 3 * self.path;
                Step::block(Wake::At(ack), Stall::Commit)
            }
            Phase::Acking => {
                self.commit(ctx, core);
                Step::Done
            }
        }
    }

    fn on_evict(&mut self, ctx: &mut Ctx<'_>, _core: usize, line: u64) -> Evict {
        let Some(owner) = self.cores.iter().position(|c| c.tx_set.contains(&line)) else {
            return Evict::WriteBack;
        };
        let data = ctx.line_values(line);
        let now = ctx.now();
        let at = now + self.path;
        let seq = ctx.next_seq();
        self.travel(
            now,
            owner,
            Line {
                line,
                data,
                at,
                logged: false,
                seq,
            },
        );
        Evict::Absorbed
    }

    fn background(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        if self.wakeup > now && self.cores.iter().all(|c| c.overflow.is_empty()) {
            return;
        }
        for core in 0..self.cores.len() {
            while self.cores[core]
                .arriving
                .front()
                .is_some_and(|l| l.at <= now)
            {
                let line = self.cores[core].arriving.pop_front().expect("front");
                self.arrive(ctx, core, line);
            }
            self.drain_overflow(ctx, core);
        }
        self.refresh_wakeup(now);
    }

    fn next_wakeup(&self) -> Option<u64> {
        (self.wakeup != NEVER).then_some(self.wakeup)
    }

    fn recover(&self, pm: &mut PmImage) {
        replay_then_undo(pm);
    }

    fn log_stats(&self) -> Option<LogStats> {
        Some(self.stats)
    }
}
