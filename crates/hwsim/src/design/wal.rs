//! The per-core write-ahead log shared by FWB and MorLog: records packed into log writes that
//! travel the core's path to the MC, a circular PM log region, and the force-write-back scan
//! that lets it wrap.
//!
//! Invariants (what crash consistency rests on):
//!
//! * **Log before data.** A record is *pending* from its creation until the MC accepts the
//!   write carrying it. While a core has a pending record of a line, that line's data must
//!   not reach PM first: evictions of such lines are sent on the owner's path behind the
//!   records ([`Wal::owner_of_pending`] + [`Wal::send_writeback`]), and scans skip them.
//! * **Truncation only behind persistent data.** A scan starts at a commit, when every record
//!   is accepted; it writes back every line logged since the previous scan start that is
//!   still dirty, and waits for lines whose write-back is still on the way. Only then are the
//!   records older than the scan start dropped (prefix of the log, in acceptance order).

use crate::config::LINE_BYTES;
use crate::engine::Ctx;
use crate::mem::{WriteKind, WriteReq};
use crate::pm::LogRecord;
use std::collections::VecDeque;

/// A record not yet accepted by the MC.
#[derive(Clone, Copy, Debug)]
struct Pending {
    record: LogRecord,
    bytes: u64,
}

/// A running force-write-back scan.
#[derive(Clone, Debug, Default)]
struct Scan {
    /// Lines still to check, and lines waiting for a pending record or write-back.
    lines: VecDeque<u64>,
    /// Records and bytes in the log when the scan started (dropped when it ends).
    records_before: usize,
    bytes_before: u64,
}

/// One core's log.
#[derive(Clone, Debug, Default)]
pub(crate) struct CoreWal {
    /// Pending records: first those in flight (in `flights` order), then the open pack.
    pending: VecDeque<Pending>,
    /// Records per sent, not yet accepted write, oldest first.
    flights: VecDeque<usize>,
    /// Records in the open (unsent) pack, at the back of `pending`.
    open: usize,
    open_bytes: u64,
    /// Earliest time the open pack may leave (its records exist).
    open_ready: u64,
    /// When the open pack must leave (MorLog's coalescing window), `NEVER` if no deadline.
    pub(crate) open_deadline: u64,
    /// Identifies the open pack (bumped whenever a pack leaves).
    pub(crate) pack_id: u64,
    /// Bytes of the pending records.
    pending_bytes: u64,
    /// Lines of the pending records, in the same order (a short list: at most a log
    /// buffer's worth plus the open pack).
    pending_lines: VecDeque<u64>,
    /// Accepted records and bytes since the last truncation.
    records: usize,
    bytes: u64,
    /// Lines of records created since the last scan start (with repeats; a scan sorts and
    /// dedups them).
    logged_lines: Vec<u64>,
    scan: Option<Scan>,
}

impl CoreWal {
    /// Records not yet accepted (log-buffer occupancy).
    pub(crate) fn unaccepted(&self) -> usize {
        self.pending.len()
    }

    /// Bytes the PM log holds or will hold (accepted since truncation, plus pending).
    pub(crate) fn live_bytes(&self) -> u64 {
        self.bytes + self.pending_bytes
    }

    /// Whether `line` has a pending record.
    pub(crate) fn has_pending(&self, line: u64) -> bool {
        self.pending_lines.contains(&line)
    }

    /// Whether the open pack holds records.
    pub(crate) fn has_open(&self) -> bool {
        self.open > 0
    }

    /// Bytes in the open pack.
    pub(crate) fn open_bytes(&self) -> u64 {
        self.open_bytes
    }

    /// Whether a scan is running.
    pub(crate) fn scanning(&self) -> bool {
        self.scan.is_some()
    }
}

/// The logs of every core.
#[derive(Clone, Debug)]
pub(crate) struct Wal {
    pub(crate) cores: Vec<CoreWal>,
    path: u64,
    log_bytes: u64,
    /// Scans and their write-backs (for `LogStats`).
    pub(crate) scans: u64,
    pub(crate) scan_flushes: u64,
}

impl Wal {
    pub(crate) fn new(cores: usize, path: u64, log_bytes: u64) -> Self {
        let idle = CoreWal {
            open_deadline: crate::mem::NEVER,
            ..CoreWal::default()
        };
        Wal {
            cores: vec![idle; cores],
            path,
            log_bytes,
            scans: 0,
            scan_flushes: 0,
        }
    }

    /// Adds a record of `bytes` to `core`'s open pack; it exists from `ready` on.
    pub(crate) fn push(&mut self, core: usize, record: LogRecord, bytes: u64, ready: u64) {
        let c = &mut self.cores[core];
        let line = record.word >> 6;
        c.pending.push_back(Pending { record, bytes });
        c.pending_bytes += bytes;
        c.open += 1;
        c.open_bytes += bytes;
        c.open_ready = c.open_ready.max(ready);
        c.pending_lines.push_back(line);
        if c.logged_lines.last() != Some(&line) {
            c.logged_lines.push(line);
        }
    }

    /// A store coalesced into `word`'s record in the open pack (its coalescing window is
    /// still open): the record's redo part takes `new`, and the record is now `bytes` long.
    pub(crate) fn update_open(&mut self, core: usize, word: u64, new: u64, bytes: u64) {
        let c = &mut self.cores[core];
        let open = c.pending.len() - c.open..;
        let Some(p) = c
            .pending
            .range_mut(open)
            .rev()
            .find(|p| p.record.word == word)
        else {
            debug_assert!(false, "no record of the word in the open pack");
            return;
        };
        p.record.new = new;
        let (was, now) = (p.bytes, bytes);
        p.bytes = now;
        c.open_bytes = c.open_bytes + now - was;
        c.pending_bytes = c.pending_bytes + now - was;
    }

    /// Sends `core`'s open pack (if any) as one log write leaving now (or when its records
    /// exist).
    pub(crate) fn send_open(&mut self, ctx: &mut Ctx<'_>, core: usize) {
        let c = &mut self.cores[core];
        if c.open == 0 {
            c.open_deadline = crate::mem::NEVER;
            return;
        }
        let bytes = c.open_bytes.next_multiple_of(8).min(256);
        let leave = ctx.now().max(c.open_ready);
        c.flights.push_back(c.open);
        c.open = 0;
        c.open_bytes = 0;
        c.open_ready = 0;
        c.open_deadline = crate::mem::NEVER;
        c.pack_id += 1;
        let addr = ctx.log_addr(core, bytes);
        ctx.send(
            WriteReq::new(addr, bytes, WriteKind::Log, core),
            leave + self.path,
        );
    }

    /// A log write of `core` was accepted: its records are persistent. Returns them.
    pub(crate) fn accepted(&mut self, ctx: &mut Ctx<'_>, core: usize) -> usize {
        let c = &mut self.cores[core];
        let n = c
            .flights
            .pop_front()
            .expect("an accepted log write was in flight");
        for _ in 0..n {
            let p = c.pending.pop_front().expect("flight records are pending");
            c.pending_lines.pop_front();
            c.records += 1;
            c.bytes += p.bytes;
            c.pending_bytes -= p.bytes;
            ctx.pm().append(core, p.record);
        }
        n
    }

    /// The core whose pending records cover `line`, if any.
    pub(crate) fn owner_of_pending(&self, line: u64) -> Option<usize> {
        self.cores.iter().position(|c| c.has_pending(line))
    }

    /// Sends the write-back of `line` on `owner`'s path behind its pending records.
    pub(crate) fn send_writeback(&mut self, ctx: &mut Ctx<'_>, owner: usize, line: u64) {
        self.send_open(ctx, owner);
        let req = WriteReq {
            seq: ctx.next_seq(),
            data: ctx.capture_line(line),
            ..WriteReq::new(line * LINE_BYTES, LINE_BYTES, WriteKind::WriteBack, owner)
        };
        let now = ctx.now();
        ctx.send(req, now + self.path);
    }

    /// Whether one more record of `bytes` fits the circular log.
    pub(crate) fn log_has_room(&self, core: usize, bytes: u64) -> bool {
        self.cores[core].live_bytes() + bytes <= self.log_bytes
    }

    /// At a commit (every record accepted): starts a scan when half the log is live.
    pub(crate) fn maybe_scan(&mut self, core: usize) {
        let c = &mut self.cores[core];
        if c.scan.is_some() || c.bytes < self.log_bytes / 2 {
            return;
        }
        debug_assert!(
            c.pending.is_empty(),
            "scans start when every record is accepted"
        );
        let mut lines = std::mem::take(&mut c.logged_lines);
        lines.sort_unstable();
        lines.dedup();
        c.scan = Some(Scan {
            lines: lines.into(),
            records_before: c.records,
            bytes_before: c.bytes,
        });
        self.scans += 1;
    }

    /// Advances every running scan: writes back dirty logged lines while the write queue is
    /// more than half free (background priority); finishes a scan by truncating the log.
    pub(crate) fn run_scans(&mut self, ctx: &mut Ctx<'_>) {
        for core in 0..self.cores.len() {
            if self.cores[core].scan.is_some() {
                self.scan_step(ctx, core);
            }
        }
    }

    fn scan_step(&mut self, ctx: &mut Ctx<'_>, core: usize) {
        let half = ctx.config().mem.write_queue / 2;
        let c = &mut self.cores[core];
        let scan = c.scan.as_mut().expect("scanning");
        let mut waits_for_open_pack = false;
        // Each line is looked at once per pass; waiting lines go to the back.
        let mut budget = scan.lines.len();
        while budget > 0 && ctx.wq_free() > half {
            budget -= 1;
            let line = scan.lines.pop_front().expect("budget ≤ len");
            let record_pending = c.pending_lines.contains(&line);
            if record_pending || ctx.writeback_in_flight(line) {
                waits_for_open_pack |= record_pending && c.open > 0;
                scan.lines.push_back(line); // its log record or data is still on the way
                continue;
            }
            if ctx.clean_line(line) {
                let req = WriteReq {
                    seq: ctx.next_seq(),
                    data: ctx.capture_line(line),
                    ..WriteReq::new(line * LINE_BYTES, LINE_BYTES, WriteKind::Flush, core)
                };
                let accepted = ctx.try_write(req);
                debug_assert!(accepted, "the write queue had room");
                self.scan_flushes += 1;
            }
        }
        if waits_for_open_pack {
            self.send_open(ctx, core); // a line waits for a record in the log buffer
            return;
        }
        if scan.lines.is_empty() {
            let scan = c.scan.take().expect("scanning");
            c.records -= scan.records_before;
            c.bytes -= scan.bytes_before;
            let pm = ctx.pm();
            if pm.tracking() {
                pm.logs[core].drain(..scan.records_before);
            }
        }
    }

    /// Whether some core has a scan with work that waits for write-queue room.
    pub(crate) fn any_scan(&self) -> bool {
        self.cores.iter().any(CoreWal::scanning)
    }
}
