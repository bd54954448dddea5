//! MorLog — morphable hardware logging (Wei et al., ISCA'20).
//!
//! * **Morphable logging**: the first non-silent store of a transaction to a word makes one
//!   *undo+redo* entry (old and new word) in the mixed log buffer, written eagerly: it waits
//!   for the coalescing window (the minimum L1→NVM traversal time), during which later
//!   stores to the word update its redo part, then leaves in a packed log write. A word
//!   stored again after its entry left *morphs* to redo-only: its newest value lives in a
//!   volatile redo buffer (updated in place by later stores) and only that newest redo
//!   reaches PM, at commit. A full redo buffer writes its oldest entry to the log early.
//! * **Selective log data encoding**: each data part of a record carries only the word's
//!   dirty bytes (old ≠ new: DLDC) or, when smaller, the word in frequent-pattern
//!   compression (FPC, Alameldeen & Wood, 2004) — computed from the real values — plus the
//!   metadata. Silent stores make nothing.
//! * **Redo dropping**: when a write-back of a line that carries a word's newest value
//!   becomes persistent before commit, the word's redo entry is dropped, unless an older
//!   redo record of that word (an undo+redo entry's redo part included) is still live in the
//!   log (replaying it would then overwrite the newer data).
//! * **Ordering and log** as FWB (`wal`): lines with pending records are written back behind
//!   them; a force-write-back scan lets the circular log wrap.
//! * **Commit**: every remaining redo entry is written; the transaction commits when all its
//!   records are accepted and the acknowledgement is back.
//! * **Failure**: buffers are volatile; nothing is flushed. **Recovery**: redo records of
//!   committed transactions in log order, then undo records of uncommitted ones newest first.

use super::fwb::replay_then_undo;
use super::wal::Wal;
use super::{Design, Evict, Stall, Step, StoreInfo, Wake};
use crate::config::{Config, LogEncoding, MorLogConfig};
use crate::engine::Ctx;
use crate::mem::{NEVER, WriteKind, WriteReq};
use crate::metrics::LogStats;
use crate::pm::{LogRecord, PmImage, RecordKind};
use crate::util::FastMap;
use std::collections::VecDeque;

/// A word the running transaction changed.
#[derive(Clone, Copy, Debug)]
struct WordLog {
    old: u64,
    new: u64,
    /// Bytes changed so far (DLDC's dirty-byte mask).
    dirty: u8,
    /// The pack that holds this word's undo+redo entry (while it is the open pack, the
    /// coalescing window is open and stores update the entry).
    entry_pack: u64,
    /// Order stamp of the last store.
    seq: u64,
    /// Whether the word's newest redo is in the redo buffer (it morphed to redo-only).
    in_redo: bool,
}

#[derive(Clone, Debug, Default)]
struct MorCore {
    txid: u64,
    committing: bool,
    waiting: bool,
    words: FastMap<u64, WordLog>,
    /// The distinct lines of `words` (a write-back looks here before looking up its words).
    lines: Vec<u64>,
    /// Words in the redo buffer, oldest first (entries no longer `in_redo` are skipped).
    redo: VecDeque<u64>,
    redo_len: usize,
    /// Log position (record count) of the newest live redo record per word.
    redo_logged: RedoLog,
    records_made: u64,
    /// `records_made` when the running scan started (its truncation drops those records).
    scan_cut: u64,
}

/// The words of the redo records live in a core's PM log, in log order with their positions
/// (record counts). Appends are the common operation (one per redo record); the question
/// "does this word have a live redo record?" is asked only when a write-back becomes
/// persistent while the word's newest redo is still on chip, so it scans.
#[derive(Clone, Debug, Default)]
struct RedoLog {
    records: VecDeque<(u64, u64)>,
}

impl RedoLog {
    fn push(&mut self, word: u64, position: u64) {
        self.records.push_back((word, position));
    }

    fn holds(&self, word: u64) -> bool {
        self.records.iter().any(|&(w, _)| w == word)
    }

    /// The log was truncated: records at positions up to `position` are gone.
    fn truncate_through(&mut self, position: u64) {
        while self.records.front().is_some_and(|&(_, at)| at <= position) {
            self.records.pop_front();
        }
    }
}

/// The MorLog design.
#[derive(Clone, Debug)]
pub struct MorLog {
    cfg: MorLogConfig,
    path: u64,
    window: u64,
    cores: Vec<MorCore>,
    wal: Wal,
    stats: LogStats,
    wakeup: u64,
}

/// Byte mask of the non-zero bytes of `x`.
fn byte_mask(x: u64) -> u8 {
    (0..8).fold(0u8, |m, i| m | (u8::from((x >> (8 * i)) & 0xFF != 0) << i))
}

/// Bits of one 32-bit word in frequent-pattern compression (Alameldeen & Wood, ISCA'04):
/// a 3-bit prefix naming the pattern, then its data.
fn fpc_bits32(x: u32) -> u32 {
    let signed = x as i32;
    let fits = |bits: u32| {
        let shift = 32 - bits;
        (signed << shift) >> shift == signed
    };
    let halves_fit = {
        let (lo, hi) = (x as u16 as i16, (x >> 16) as u16 as i16);
        i16::from(lo as i8) == lo && i16::from(hi as i8) == hi
    };
    let bytes = x.to_le_bytes();
    let data = if x == 0 {
        3 // a run of zero words (its length)
    } else if fits(4) {
        4
    } else if fits(8) {
        8
    } else if fits(16) || x & 0xFFFF == 0 || halves_fit {
        16 // a sign-extended halfword, a halfword padded with zeros, or two sign-extended bytes
    } else if bytes.iter().all(|&b| b == bytes[0]) {
        8 // one byte repeated
    } else {
        32
    };
    3 + data
}

/// Bytes of the 8 B word `x` in FPC (its two 32-bit halves).
fn fpc_bytes(x: u64) -> u64 {
    u64::from(fpc_bits32(x as u32) + fpc_bits32((x >> 32) as u32)).div_ceil(8)
}

impl MorLog {
    /// MorLog for `cfg`.
    pub fn new(cfg: &Config) -> Self {
        MorLog {
            cfg: cfg.morlog.clone(),
            path: cfg.path_cycles,
            window: cfg.morlog_window(),
            cores: vec![MorCore::default(); cfg.cores],
            wal: Wal::new(cfg.cores, cfg.path_cycles, cfg.morlog.log_bytes),
            stats: LogStats::default(),
            wakeup: NEVER,
        }
    }

    /// Bytes of one data part of a record: the word `value` whose bytes in `dirty` changed,
    /// as DLDC (the dirty bytes) or, with SLDE, FPC when that is smaller.
    fn data_bytes(&self, value: u64, dirty: u8) -> u64 {
        let dldc = u64::from(dirty.count_ones());
        match self.cfg.encoding {
            LogEncoding::Dldc => dldc,
            LogEncoding::Slde => dldc.min(fpc_bytes(value)),
        }
    }

    /// Bytes of an undo+redo entry of a word changed from `old` to `new` in bytes `dirty`.
    fn undo_redo_bytes(&self, old: u64, new: u64, dirty: u8) -> u64 {
        self.cfg.meta_bytes + self.data_bytes(old, dirty) + self.data_bytes(new, dirty)
    }

    /// Bytes of a redo-only record of a word now `new`, changed in bytes `dirty`.
    fn redo_bytes(&self, new: u64, dirty: u8) -> u64 {
        self.cfg.meta_bytes + self.data_bytes(new, dirty)
    }

    fn refresh_wakeup(&mut self) {
        self.wakeup = self
            .wal
            .cores
            .iter()
            .map(|c| c.open_deadline)
            .min()
            .unwrap_or(NEVER);
    }

    /// Adds a record of `bytes` that exists from `ready` on to `core`'s open pack; the pack
    /// leaves when it is full, at commit, or `wait` cycles after its first record exists.
    fn log(
        &mut self,
        ctx: &mut Ctx<'_>,
        core: usize,
        record: LogRecord,
        (bytes, ready, wait): (u64, u64, u64),
    ) {
        if self.wal.cores[core].open_bytes() + bytes > self.cfg.write_bytes {
            self.wal.send_open(ctx, core);
            self.refresh_wakeup();
        }
        let c = &mut self.wal.cores[core];
        let opens = !c.has_open();
        if opens {
            c.open_deadline = ready + wait;
        }
        self.wal.push(core, record, bytes, ready);
        let m = &mut self.cores[core];
        m.records_made += 1;
        // Both kinds carry a redo part that recovery would replay.
        m.redo_logged.push(record.word, m.records_made);
        if record.kind == RecordKind::Redo {
            self.stats.redo_records += 1;
        } else {
            self.stats.undo_records += 1;
        }
        if opens {
            self.wakeup = self.wakeup.min(ready + wait);
        }
    }

    /// Writes the redo entry of `word` to the log now.
    fn log_redo(&mut self, ctx: &mut Ctx<'_>, core: usize, word: u64) {
        let m = &mut self.cores[core];
        let Some(w) = m.words.get_mut(&word) else {
            return;
        };
        w.in_redo = false;
        let (txid, old, new, dirty) = (m.txid, w.old, w.new, w.dirty);
        m.redo_len -= 1;
        let record = LogRecord {
            kind: RecordKind::Redo,
            txid,
            word,
            old,
            new,
        };
        let now = ctx.now();
        let bytes = self.redo_bytes(new, dirty);
        self.log(ctx, core, record, (bytes, now, 0));
    }

    /// Puts `word` into the redo buffer, writing the oldest entry out if it is full.
    fn enter_redo(&mut self, ctx: &mut Ctx<'_>, core: usize, word: u64) {
        if self.cores[core].redo_len >= self.cfg.redo_buffer {
            while let Some(oldest) = self.cores[core].redo.pop_front() {
                if self.cores[core]
                    .words
                    .get(&oldest)
                    .is_some_and(|w| w.in_redo)
                {
                    self.log_redo(ctx, core, oldest);
                    break;
                }
            }
        }
        let m = &mut self.cores[core];
        m.words.get_mut(&word).expect("logged word").in_redo = true;
        m.redo.push_back(word);
        m.redo_len += 1;
    }

    /// The transaction's first store to a word: one undo+redo entry, leaving after the
    /// coalescing window.
    fn first_update(&mut self, ctx: &mut Ctx<'_>, core: usize, st: &StoreInfo, mask: u8) {
        let m = &mut self.cores[core];
        if !m.lines.contains(&st.line()) {
            m.lines.push(st.line());
        }
        let record = LogRecord {
            kind: RecordKind::UndoRedo,
            txid: m.txid,
            word: st.word,
            old: st.old,
            new: st.new,
        };
        self.stats.appended += 1;
        self.stats.max_entries_per_tx = self.stats.max_entries_per_tx.max(m.words.len() as u64 + 1);
        let bytes = self.undo_redo_bytes(st.old, st.new, mask);
        let window = self.window;
        self.log(ctx, core, record, (bytes, st.perform_at, window));
        let pack = self.wal.cores[core].pack_id;
        self.cores[core].words.insert(
            st.word,
            WordLog {
                old: st.old,
                new: st.new,
                dirty: mask,
                entry_pack: pack,
                seq: st.seq,
                in_redo: false,
            },
        );
    }

    fn has_room(&mut self, ctx: &mut Ctx<'_>, core: usize) -> bool {
        let worst = self.cfg.meta_bytes + 8 * 3; // an undo+redo entry and an early redo
        let c = &self.wal.cores[core];
        if c.unaccepted() + 2 <= self.cfg.log_buffer && self.wal.log_has_room(core, worst) {
            return true;
        }
        self.wal.send_open(ctx, core);
        self.wal.run_scans(ctx);
        self.refresh_wakeup();
        false
    }

    /// A write-back of `line` captured at `seq` is persistent: redo entries of the words it
    /// carries are no longer needed, unless an older redo record of the word is live.
    fn line_persisted(&mut self, line: u64, seq: u64) {
        for m in &mut self.cores {
            if !m.lines.contains(&line) {
                continue;
            }
            for i in 0..8 {
                let word = (line << 6) + 8 * i;
                if let Some(w) = m.words.get_mut(&word)
                    && w.in_redo
                    && w.seq <= seq
                    && !m.redo_logged.holds(word)
                {
                    w.in_redo = false;
                    m.redo_len -= 1;
                }
            }
        }
    }

    /// The log was truncated: redo records older than the kept suffix are gone.
    fn forget_truncated(&mut self, core: usize, kept_from: u64) {
        self.cores[core].redo_logged.truncate_through(kept_from);
    }

    fn commit(&mut self, ctx: &mut Ctx<'_>, core: usize) {
        let m = &mut self.cores[core];
        ctx.pm().committed[core] = m.txid;
        m.words.clear();
        m.lines.clear();
        m.redo.clear();
        m.redo_len = 0;
        let before = self.wal.cores[core].scanning();
        self.wal.maybe_scan(core);
        if !before && self.wal.cores[core].scanning() {
            // Records made so far are dropped when this scan ends.
            let m = &mut self.cores[core];
            m.scan_cut = m.records_made;
        }
        self.run_scans(ctx);
    }

    fn run_scans(&mut self, ctx: &mut Ctx<'_>) {
        if !self.wal.any_scan() {
            return;
        }
        // Cores are at most 64 (`Config::validate`): one bit each.
        let scanning = |wal: &Wal| {
            (wal.cores.iter().enumerate()).fold(0u64, |m, (i, c)| m | u64::from(c.scanning()) << i)
        };
        let before = scanning(&self.wal);
        self.wal.run_scans(ctx);
        let ended = before & !scanning(&self.wal);
        for core in 0..self.cores.len() {
            if ended & (1 << core) != 0 {
                let cut = self.cores[core].scan_cut;
                self.forget_truncated(core, cut);
            }
        }
        self.refresh_wakeup();
    }
}

impl Design for MorLog {
    fn name(&self) -> &'static str {
        "morlog"
    }

    fn tx_begin(&mut self, _ctx: &mut Ctx<'_>, core: usize) -> Step {
        self.cores[core].txid += 1;
        Step::Done
    }

    fn pre_store(&mut self, ctx: &mut Ctx<'_>, core: usize, st: &StoreInfo) -> Step {
        if st.silent || self.has_room(ctx, core) {
            return Step::Done;
        }
        if !self.wal.log_has_room(core, self.cfg.meta_bytes + 24) {
            self.stats.log_full_waits += 1;
        }
        self.cores[core].waiting = true;
        Step::block(Wake::Poll, Stall::LogBuffer)
    }

    fn post_store(&mut self, ctx: &mut Ctx<'_>, core: usize, st: &StoreInfo) -> Step {
        self.stats.tx_stores += 1;
        if st.silent {
            self.stats.silent_ignored += 1;
            return Step::Done;
        }
        self.stats.generated += 1;
        let mask = byte_mask(st.old ^ st.new);
        let open_pack = self.wal.cores[core]
            .has_open()
            .then_some(self.wal.cores[core].pack_id);
        let m = &mut self.cores[core];
        let Some(w) = m.words.get_mut(&st.word) else {
            self.first_update(ctx, core, st, mask);
            return Step::Done;
        };
        self.stats.merged += 1;
        w.new = st.new;
        w.seq = st.seq;
        w.dirty |= mask;
        let (old, new, dirty, in_redo) = (w.old, w.new, w.dirty, w.in_redo);
        if Some(w.entry_pack) == open_pack {
            // The coalescing window is open: the entry's redo part takes the new value.
            let bytes = self.undo_redo_bytes(old, new, dirty);
            self.wal.update_open(core, st.word, new, bytes);
        } else if !in_redo {
            // The entry has left: the word morphs to redo-only.
            self.enter_redo(ctx, core, st.word);
        }
        Step::Done
    }

    fn tx_end(&mut self, ctx: &mut Ctx<'_>, core: usize) -> Step {
        while let Some(word) = self.cores[core].redo.pop_front() {
            if self.cores[core].words.get(&word).is_some_and(|w| w.in_redo) {
                self.log_redo(ctx, core, word);
            }
        }
        self.wal.send_open(ctx, core);
        self.refresh_wakeup();
        self.cores[core].committing = true;
        Step::block(Wake::OutboxDrained { extra: self.path }, Stall::Commit)
    }

    fn resume(&mut self, ctx: &mut Ctx<'_>, core: usize) -> Step {
        if std::mem::take(&mut self.cores[core].committing) {
            self.commit(ctx, core);
            return Step::Done;
        }
        if self.cores[core].waiting {
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
                self.refresh_wakeup();
                Evict::Absorbed
            }
            None => Evict::WriteBack,
        }
    }

    fn on_accepted(&mut self, ctx: &mut Ctx<'_>, req: &WriteReq) {
        match req.kind {
            WriteKind::Log => {
                self.wal.accepted(ctx, req.core);
            }
            WriteKind::WriteBack | WriteKind::Flush => self.line_persisted(req.addr >> 6, req.seq),
            WriteKind::InPlace => {}
        }
    }

    fn background(&mut self, ctx: &mut Ctx<'_>) {
        let now = ctx.now();
        if self.wakeup <= now {
            for core in 0..self.cores.len() {
                if self.wal.cores[core].open_deadline <= now {
                    self.wal.send_open(ctx, core);
                }
            }
            self.refresh_wakeup();
        }
        if self.wal.any_scan() {
            self.run_scans(ctx);
        }
    }

    fn next_wakeup(&self) -> Option<u64> {
        (self.wakeup != NEVER).then_some(self.wakeup)
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
