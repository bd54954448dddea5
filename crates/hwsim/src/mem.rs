//! The memory controller and the PCM behind it.
//!
//! * **Write queue** (`write_queue` entries) inside the ADR persistence domain: a write is
//!   persistent once accepted. Writes leave it FR-FCFS: the oldest *ready* write goes first
//!   (ready = its 256 B line is in the on-PM buffer or the buffer can take it now, i.e. has a
//!   free slot or some buffered line's bank is idle so that line can be evicted; without a
//!   buffer: its own bank is idle).
//! * **Read priority with drain watermarks**: writes are held while a read waits for a bank,
//!   unless the queue reached `drain_high`, after which writes drain until `drain_low`.
//! * **Reads** reserve their bank when they reach the controller (FCFS per bank, banks in
//!   parallel: a later read to an idle bank finishes before an earlier one to a busy bank) and
//!   take `read_ns` plus one burst; a read of a 64 B line fully held by the on-PM buffer takes
//!   one burst.
//! * **Write merging** (`merge_writes`): a write of at most one 64 B block that finds a queued,
//!   not yet issued write of the same block merges into it (one entry and one bus burst for
//!   both; the merged entry writes the union of their words), as gem5's memory controller
//!   merges writes to a queued burst. It still needs a free entry to be accepted.
//! * **Data bus**: a write holds it for one burst per 64 B (at least one).
//! * **Banks**: 256 B-line interleaved; a media write (an on-PM-buffer eviction — of the least
//!   recently used line whose bank is idle —, or every write without a buffer) holds its bank
//!   as the media model says ([`MediaModel`]: one write pulse per row, per changed 64 B block
//!   after a comparison read, or in proportion to the bytes written). Which words of a write
//!   are changed is the caller's to say ([`MemCtrl::accept_changed`]; [`MemCtrl::accept`]
//!   treats every written word as changed); the changed words that reach the cells are the
//!   *bytes programmed*.
//! * **Write pausing** (option): a read finding its bank programming pauses the write.
//! * **Final drain**: [`MemCtrl::final_writeback`] charges a line the caches still hold dirty
//!   at the end of a run (traffic, media work and bytes programmed; no time).

use crate::config::{Config, MediaModel};
use crate::onpm::{MediaWrite, OnPmBuffer, line_bank, word_mask};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// "Never".
pub const NEVER: u64 = u64::MAX;

/// What a write request carries, for traffic accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WriteKind {
    /// A dirty line evicted from the LLC (a "cache-line eviction", CE).
    WriteBack,
    /// A line written back on purpose by a design (`clwb`-like flush).
    Flush,
    /// A word or line written in place by a design from its log (Silo's LU).
    InPlace,
    /// A write to a design's PM log region.
    Log,
}

/// Word values carried by a data write (value-tracking runs only): `words[i]` is the word at
/// `line_base + 8 i`, present iff bit `i` of `mask` is set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Payload {
    /// Which of the line's eight words are carried.
    pub mask: u8,
    /// The words.
    pub words: [u64; 8],
}

/// A handle on the data words a write carries (value-tracking runs only; timing runs
/// carry none, which keeps requests small). The words live in the engine's payload
/// arena, see [`crate::engine::Ctx::attach`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DataRef(pub u32);

impl DataRef {
    /// No data.
    pub const NONE: DataRef = DataRef(0);

    /// Whether the request carries data.
    pub fn is_some(self) -> bool {
        self != DataRef::NONE
    }
}

/// One write request to the memory controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteReq {
    /// Byte address (data region or a log region).
    pub addr: u64,
    /// Bytes written (8, 32, 64, 256 …; never crossing a 256 B line).
    pub bytes: u64,
    /// Traffic class.
    pub kind: WriteKind,
    /// Core the request belongs to.
    pub core: usize,
    /// Global order stamp of the moment the data was captured (see `Ctx::next_seq`).
    pub seq: u64,
    /// Data words (`WriteBack`, `Flush`, `InPlace` in value-tracking runs).
    pub data: DataRef,
    /// The data are words taken from a design's log (Silo's in-place updates, one or a
    /// coalesced line of them): every word carried is new to PM, whatever the size. A
    /// whole-line data write without it carries a line that left the caches, whose changed
    /// words the engine tracks.
    pub log_words: bool,
}

impl WriteReq {
    /// A request without data.
    pub fn new(addr: u64, bytes: u64, kind: WriteKind, core: usize) -> Self {
        WriteReq {
            addr,
            bytes,
            kind,
            core,
            seq: 0,
            data: DataRef::NONE,
            log_words: false,
        }
    }
}

/// Requests and bytes of one traffic class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    /// Write requests accepted by the MC.
    pub requests: u64,
    /// Bytes of those requests.
    pub bytes: u64,
}

/// Memory-side counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemStats {
    /// Reads served.
    pub reads: u64,
    /// Reads served from the on-PM buffer.
    pub reads_from_buffer: u64,
    /// Reads served from a queued write holding the whole 64 B line (as gem5's controller
    /// serves reads from its write queue).
    #[serde(default)]
    pub reads_from_write_queue: u64,
    /// Reads that found the read queue full (counted, not stalled).
    pub read_queue_overflows: u64,
    /// All writes accepted by the MC.
    pub writes: Traffic,
    /// Cache write-backs.
    pub writeback: Traffic,
    /// Design flushes of lines.
    pub flush: Traffic,
    /// In-place updates from logs.
    pub in_place: Traffic,
    /// Log-region writes.
    pub log: Traffic,
    /// Media (256 B line) writes after the on-PM buffer, including the final drain.
    pub media_writes: u64,
    /// Media writes with a changed 64 B block only partly written (a block-granular media
    /// without data comparison would read it first).
    pub media_rmw: u64,
    /// 64 B blocks holding a changed word, over all media writes.
    #[serde(default)]
    pub media_blocks: u64,
    /// Written 64 B blocks whose words all repeated the cells' data.
    #[serde(default)]
    pub media_redundant_blocks: u64,
    /// Bytes programmed: 8 B words reaching the cells with data they did not hold, final
    /// drain included (bit-level write reduction; compare `writes.bytes`, the bytes sent).
    #[serde(default)]
    pub programmed_bytes: u64,
    /// Write-backs of the lines the caches still held dirty at the end of the run
    /// (`MemConfig::final_drain`), not in `writes`.
    #[serde(default)]
    pub final_drain: Traffic,
    /// Bank-cycles of the media writes the end of the run still owes: the final drain's and
    /// the lines left in the on-PM buffer (not in `bank_write_cycles`, which is the run's).
    #[serde(default)]
    pub final_bank_cycles: u64,
    /// Reads that paused a media write (write pausing).
    #[serde(default)]
    pub paused_writes: u64,
    /// Write requests merged into a queued write of the same 64 B block (no entry, no burst
    /// of their own; still counted in `writes`).
    #[serde(default)]
    pub merged_writes: u64,
    /// Largest write-queue occupancy seen.
    pub max_write_queue: u64,
    /// Times the write queue reached the high watermark.
    pub drain_episodes: u64,
    /// Largest number of write-queue entries held by speculative lines (LAD) at once.
    #[serde(default)]
    pub max_reserved: u64,
    /// Cycles the data bus carried writes.
    #[serde(default)]
    pub bus_busy_cycles: u64,
    /// Bank-cycles spent on media writes (including read-modify-write reads).
    #[serde(default)]
    pub bank_write_cycles: u64,
    /// Cycles reads waited for their bank (busy with an earlier read or a media write).
    #[serde(default)]
    pub read_wait_cycles: u64,
    /// Cycles the write queue was full (entries held by speculative lines included).
    #[serde(default)]
    pub queue_full_cycles: u64,
    /// Cycles the controller was draining writes (high watermark reached, low not yet).
    #[serde(default)]
    pub drain_cycles: u64,
    /// Sum over time of the write queue's occupancy (divide by the run's cycles for the mean).
    #[serde(default)]
    pub queue_occupancy_integral: u64,
    /// Cycles core-side requests (write-backs, logs, flushes) waited on their path for
    /// write-queue room after arriving at the controller.
    #[serde(default)]
    pub admit_wait_cycles: u64,
}

/// A write in the queue.
#[derive(Clone, Copy, Debug)]
struct Queued {
    req: WriteReq,
    /// Words of the request's 256 B line it writes (merged writes add theirs).
    words: u32,
    /// Of those, words whose data the persistence domain did not have.
    dirty: u32,
    /// Data-bus bursts it takes.
    bursts: u64,
    /// The 64 B block it lies in, if it lies in one (a merge target).
    block: Option<u64>,
    /// Its 256 B line is in the on-PM buffer (it can leave at once).
    hit: bool,
    /// The bank of its line.
    bank: usize,
}

/// The memory controller with its PCM banks and on-PM buffer.
#[derive(Clone, Debug)]
pub struct MemCtrl {
    read_cycles: u64,
    /// One write pulse.
    write_cycles: u64,
    media: MediaModel,
    /// Reads pause media writes (`MemConfig::write_pausing`).
    pausing: bool,
    burst: u64,
    capacity: usize,
    high: usize,
    low: usize,
    read_queue: usize,
    merge: bool,
    /// Reads wait while writes drain (`MemConfig::reads_wait_for_drain`).
    hold_reads: bool,
    wq: VecDeque<Queued>,
    /// Entries held by a design's speculative lines (LAD): they count against the capacity
    /// but are not writes yet (they become writes, or vanish, when the design releases them).
    reserved: usize,
    draining: bool,
    bus_free: u64,
    bank_free: Vec<u64>,
    /// Per bank: when its last scheduled media write ends (write pausing).
    bank_write_end: Vec<u64>,
    /// Per bank: when its last read ends (reads that pause writes queue behind each other).
    bank_read_free: Vec<u64>,
    /// Start times of reads still waiting for their bank.
    waiting_reads: Vec<u64>,
    reads_waiting_until: u64,
    onpm: OnPmBuffer,
    /// Queued writes per 256 B line.
    wq_lines: LineFilter,
    /// Queued writes per 64 B block they touch (gates the merge and read-from-queue scans).
    wq_blocks: LineFilter,
    /// Queued writes whose line is in the on-PM buffer (ready at once).
    wq_hits: usize,
    /// Queued writes per bank (without a buffer a write waits for its own bank).
    wq_banks: Vec<u32>,
    /// Buffered lines per bank (which banks an eviction could use).
    bank_lines: Vec<u32>,
    /// `compute_evict_ready()`, kept up to date by `read` and `issue` (with a buffer only:
    /// without one nothing is evicted and it is never asked for).
    evict_ready_at: u64,
    /// Time up to which the occupancy counters are integrated.
    integrated_to: u64,
    stats: MemStats,
}

impl MemCtrl {
    /// An idle controller; `onpm_buffer`: whether the writes go through the on-PM buffer
    /// (of `cfg.mem.onpm_lines` lines) or straight to the media.
    pub fn new(cfg: &Config, onpm_buffer: bool) -> Self {
        let m = &cfg.mem;
        let lines = if onpm_buffer { m.onpm_lines } else { 0 };
        MemCtrl {
            read_cycles: cfg.cycles(m.read_ns),
            write_cycles: cfg.cycles(m.write_ns),
            media: m.media,
            pausing: m.write_pausing,
            burst: cfg.cycles(m.burst_ns),
            capacity: m.write_queue,
            high: m.drain_high,
            low: m.drain_low,
            read_queue: m.read_queue,
            merge: m.merge_writes,
            hold_reads: m.reads_wait_for_drain && !m.write_pausing,
            wq: VecDeque::with_capacity(m.write_queue),
            reserved: 0,
            draining: false,
            bus_free: 0,
            bank_free: vec![0; m.banks],
            bank_write_end: vec![0; m.banks],
            bank_read_free: vec![0; m.banks],
            waiting_reads: Vec::new(),
            reads_waiting_until: 0,
            onpm: OnPmBuffer::new(lines, m.banks),
            wq_lines: LineFilter::default(),
            wq_blocks: LineFilter::default(),
            wq_hits: 0,
            wq_banks: vec![0; m.banks],
            bank_lines: vec![0; m.banks],
            evict_ready_at: 0,
            integrated_to: 0,
            stats: MemStats::default(),
        }
    }

    fn bank(&self, addr: u64) -> usize {
        line_bank(addr >> 8, self.bank_free.len())
    }

    /// A read of the 64 B line at `addr` reaching the controller at `now`; returns when its
    /// data is back at the controller.
    pub fn read(&mut self, now: u64, addr: u64) -> u64 {
        self.advance(now);
        self.stats.reads += 1;
        if self.queue_holds_line64(addr) {
            self.stats.reads_from_write_queue += 1;
            return now + self.burst;
        }
        if self.onpm.holds_line64(addr) {
            self.stats.reads_from_buffer += 1;
            return now + self.burst;
        }
        let bank = self.bank(addr);
        let start = self.bank_read_start(bank, now);
        if start > now {
            self.stats.read_wait_cycles += start - now;
            self.waiting_reads.retain(|&s| s > now);
            if self.waiting_reads.len() >= self.read_queue {
                self.stats.read_queue_overflows += 1;
            }
            self.waiting_reads.push(start);
            self.reads_waiting_until = self.reads_waiting_until.max(start);
        }
        if !self.direct() {
            self.refresh_evict_ready();
        }
        start + self.read_cycles + self.burst
    }

    /// When a read of `bank` arriving at `now` starts, reserving the bank for it. A read
    /// waits for the bank's earlier work; with write pausing it only waits for earlier reads
    /// and pushes a media write in progress (or scheduled) back by its own time.
    fn bank_read_start(&mut self, bank: usize, now: u64) -> u64 {
        let read = self.read_cycles;
        if self.pausing && self.bank_write_end[bank] > now {
            let start = now.max(self.bank_read_free[bank]);
            self.bank_read_free[bank] = start + read;
            self.bank_write_end[bank] += read;
            self.bank_free[bank] += read;
            self.stats.paused_writes += 1;
            return start;
        }
        let start = now.max(self.bank_free[bank]);
        self.bank_free[bank] = start + read;
        self.bank_read_free[bank] = start + read;
        start
    }

    /// Whether a queued write holds every word of the 64 B line at `addr`.
    fn queue_holds_line64(&self, addr: u64) -> bool {
        if !self.wq_blocks.may_hold(addr >> 6) {
            return false;
        }
        let block = 0xFFu32 << (8 * ((addr >> 6) & 3));
        self.wq
            .iter()
            .any(|q| q.req.addr >> 8 == addr >> 8 && q.words & block == block)
    }

    /// Whether the controller is draining writes (reads wait, if `reads_wait_for_drain`).
    #[inline]
    pub fn draining(&self) -> bool {
        self.draining
    }

    /// Whether a read of the 64 B line at `addr` arriving now must wait for the write drain
    /// to end: the controller is draining, holds reads while it does, and the read cannot be
    /// served from a queued write or the on-PM buffer.
    pub fn read_waits_for_drain(&self, addr: u64) -> bool {
        self.draining
            && self.hold_reads
            && !self.queue_holds_line64(addr)
            && !self.onpm.holds_line64(addr)
    }

    /// Whether the write queue can accept a request.
    #[inline]
    pub fn has_space(&self) -> bool {
        self.wq.len() + self.reserved < self.capacity
    }

    /// Free write-queue entries.
    pub fn free_entries(&self) -> usize {
        self.capacity - self.wq.len() - self.reserved
    }

    /// Holds one free entry for a speculative line; `false` if none is free.
    pub fn reserve(&mut self) -> bool {
        if !self.has_space() {
            return false;
        }
        self.reserved += 1;
        let held = (self.wq.len() + self.reserved) as u64;
        self.stats.max_write_queue = self.stats.max_write_queue.max(held);
        self.stats.max_reserved = self.stats.max_reserved.max(self.reserved as u64);
        true
    }

    /// Gives back `n` held entries.
    pub fn release(&mut self, n: usize) {
        debug_assert!(n <= self.reserved, "releasing entries never reserved");
        self.reserved -= n;
    }

    /// Entries held by speculative lines.
    pub fn reserved(&self) -> usize {
        self.reserved
    }

    /// Requests in the write queue.
    pub fn queued(&self) -> usize {
        self.wq.len()
    }

    /// Accepts a write at `now` (the caller checked `has_space`); from here it is persistent.
    /// Every word it writes counts as changed.
    pub fn accept(&mut self, req: WriteReq) {
        self.accept_changed(req, u32::MAX);
    }

    /// Accepts a write of which only the words in `changed` (a mask over the request's 256 B
    /// line) carry data the persistence domain does not hold yet.
    pub fn accept_changed(&mut self, req: WriteReq, changed: u32) {
        debug_assert!(self.has_space(), "accept into a full write queue");
        let t = Traffic {
            requests: 1,
            bytes: req.bytes,
        };
        add(&mut self.stats.writes, t);
        add(
            match req.kind {
                WriteKind::WriteBack => &mut self.stats.writeback,
                WriteKind::Flush => &mut self.stats.flush,
                WriteKind::InPlace => &mut self.stats.in_place,
                WriteKind::Log => &mut self.stats.log,
            },
            t,
        );
        let line = req.addr >> 8;
        let words = word_mask(req.addr, req.bytes);
        let dirty = words & changed;
        let block =
            (req.addr >> 6 == (req.addr + req.bytes.max(1) - 1) >> 6).then_some(req.addr >> 6);
        if self.merge && block.is_some_and(|b| self.wq_blocks.may_hold(b)) {
            // Writes of this 64 B block may be queued: look for one.
            if let Some(q) = self.wq.iter_mut().rev().find(|q| q.block == block) {
                q.words |= words;
                q.dirty |= dirty;
                self.stats.merged_writes += 1;
                return;
            }
        }
        self.wq_lines.add(line);
        for b in blocks_of(&req) {
            self.wq_blocks.add(b);
        }
        let bank = line_bank(line, self.bank_free.len());
        self.wq_banks[bank] += 1;
        let hit = self.onpm.contains(line);
        self.wq_hits += usize::from(hit);
        self.wq.push_back(Queued {
            req,
            words,
            dirty,
            bursts: req.bytes.div_ceil(64).max(1),
            block,
            hit,
            bank,
        });
        let held = (self.wq.len() + self.reserved) as u64;
        self.stats.max_write_queue = self.stats.max_write_queue.max(held);
        if !self.draining && self.wq.len() >= self.high {
            self.draining = true;
            self.stats.drain_episodes += 1;
        }
    }

    /// Earliest time some buffered line can start its media write (its bank idle); 0 when
    /// the buffer has a free slot. Cached: it changes only with reads and issues.
    #[inline]
    fn evict_ready(&self) -> u64 {
        self.evict_ready_at
    }

    fn refresh_evict_ready(&mut self) {
        self.evict_ready_at = self.compute_evict_ready();
    }

    fn compute_evict_ready(&self) -> u64 {
        if !self.onpm.is_full() {
            return 0;
        }
        (0..self.bank_free.len())
            .filter(|&b| self.bank_lines[b] > 0)
            .map(|b| self.bank_free[b])
            .min()
            .unwrap_or(0)
    }

    #[inline]
    fn direct(&self) -> bool {
        self.onpm.capacity() == 0
    }

    /// The earliest time a queued write could be issued (`NEVER` if the queue is empty).
    pub fn next_issue(&self) -> u64 {
        if self.wq.is_empty() {
            return NEVER;
        }
        let mut bound = self.bus_free;
        if !self.draining {
            bound = bound.max(self.reads_waiting_until);
        }
        let ready = if self.direct() {
            // Without a buffer a write waits for its own bank.
            self.earliest_queued_bank()
        } else {
            // With a buffer a write is ready if its line is buffered, or once a line can be
            // evicted; hits are looked for only when that matters.
            let evict = self.evict_ready();
            if evict <= bound || self.wq_hits > 0 {
                0
            } else {
                evict
            }
        };
        bound.max(ready)
    }

    /// When the first bank that some queued write waits for is free.
    fn earliest_queued_bank(&self) -> u64 {
        (0..self.bank_free.len())
            .filter(|&b| self.wq_banks[b] > 0)
            .map(|b| self.bank_free[b])
            .min()
            .unwrap_or(NEVER)
    }

    /// The oldest write that can leave the queue at `now` (FR-FCFS).
    fn first_ready(&self, now: u64) -> Option<usize> {
        if self.direct() {
            if self.earliest_queued_bank() > now {
                return None;
            }
            return self.wq.iter().position(|q| self.bank_free[q.bank] <= now);
        }
        if self.evict_ready() <= now {
            return Some(0);
        }
        if self.wq_hits == 0 {
            return None;
        }
        self.wq.iter().position(|q| q.hit)
    }

    /// Issues the oldest ready write at `now`, if the bus and the read-priority rule allow;
    /// returns it (its queue entry is free from now on).
    pub fn issue(&mut self, now: u64) -> Option<WriteReq> {
        self.advance(now);
        if self.wq.is_empty()
            || self.bus_free > now
            || (!self.draining && self.reads_waiting_until > now)
        {
            return None;
        }
        let index = self.first_ready(now)?;
        let q = self.wq.remove(index).expect("index in range");
        let req = q.req;
        let bus_done = now + self.burst * q.bursts;
        self.bus_free = bus_done;
        self.stats.bus_busy_cycles += bus_done - now;
        let direct = self.direct();
        let line = req.addr >> 8;
        let was_buffered = q.hit;
        self.dequeued(line, q.bank, was_buffered);
        for b in blocks_of(&req) {
            self.wq_blocks.remove(b);
        }
        let idle = self
            .bank_free
            .iter()
            .enumerate()
            .fold(0u64, |m, (b, &free)| m | (u64::from(free <= now) << b));
        let media = self.onpm.write_words(line, q.words, q.dirty, idle);
        if !direct && !was_buffered {
            self.buffered(line, media.map(|m| m.line));
        }
        if let Some(mw) = media {
            let bank = self.bank(mw.line << 8);
            let start = self.bank_free[bank].max(if direct { bus_done } else { now });
            let busy = self.media_cycles(&mw);
            self.bank_free[bank] = start + busy;
            self.bank_write_end[bank] = start + busy;
            self.stats.bank_write_cycles += busy;
            count_media_write(&mut self.stats, &mw);
        }
        if self.draining && self.wq.len() <= self.low {
            self.draining = false;
        }
        if !direct {
            // Without a buffer nothing is evicted: the cached time is never asked for.
            self.refresh_evict_ready();
        }
        Some(req)
    }

    /// Integrates the occupancy counters up to `now` (state changes happen only at calls
    /// that pass the time, so the state since the last call was constant).
    pub fn advance(&mut self, now: u64) {
        if now <= self.integrated_to {
            return;
        }
        let dt = now - self.integrated_to;
        self.integrated_to = now;
        let held = self.wq.len() + self.reserved;
        self.stats.queue_occupancy_integral += dt * held as u64;
        if held >= self.capacity {
            self.stats.queue_full_cycles += dt;
        }
        if self.draining {
            self.stats.drain_cycles += dt;
        }
    }

    /// A core-side request waited `cycles` on its path for write-queue room.
    pub fn note_admit_wait(&mut self, cycles: u64) {
        self.stats.admit_wait_cycles += cycles;
    }

    /// Bank time of a media write under the media model.
    fn media_cycles(&self, mw: &MediaWrite) -> u64 {
        match self.media {
            MediaModel::NvmainRow => self.write_cycles,
            MediaModel::BlockDcw => {
                u64::from(mw.changed_blocks()) * self.write_cycles + self.read_cycles
            }
            MediaModel::Proportional => {
                (u64::from(mw.written_words()) * self.write_cycles).div_ceil(8)
            }
        }
    }

    /// Charges the write-back of the 64 B line at `addr` that the caches still hold dirty
    /// at the end of the run, `changed` (a mask over its 256 B line) of its words newer than
    /// PM: its traffic, its media work (in `final_bank_cycles`) and its bytes programmed. No
    /// time passes.
    pub fn final_writeback(&mut self, addr: u64, changed: u32) {
        add(
            &mut self.stats.final_drain,
            Traffic {
                requests: 1,
                bytes: 64,
            },
        );
        let words = word_mask(addr & !63, 64);
        if let Some(mw) = self
            .onpm
            .write_words(addr >> 8, words, changed & words, u64::MAX)
        {
            self.stats.final_bank_cycles += self.media_cycles(&mw);
            count_media_write(&mut self.stats, &mw);
        }
    }

    /// Bookkeeping for a write leaving the queue.
    fn dequeued(&mut self, line: u64, bank: usize, buffered: bool) {
        self.wq_lines.remove(line);
        self.wq_banks[bank] -= 1;
        self.wq_hits -= usize::from(buffered);
    }

    /// Bookkeeping for `line` entering the buffer, possibly in place of `evicted`: queued
    /// writes to the one become hits, to the other stop being hits.
    fn buffered(&mut self, line: u64, evicted: Option<u64>) {
        let filter = &self.wq_lines;
        if filter.may_hold(line) || evicted.is_some_and(|e| filter.may_hold(e)) {
            for q in &mut self.wq {
                let l = q.req.addr >> 8;
                if l == line && !q.hit {
                    q.hit = true;
                    self.wq_hits += 1;
                } else if Some(l) == evicted && q.hit {
                    q.hit = false;
                    self.wq_hits -= 1;
                }
            }
        }
        let banks = self.bank_lines.len() as u64;
        self.bank_lines[line_bank(line, banks as usize)] += 1;
        if let Some(e) = evicted {
            self.bank_lines[line_bank(e, banks as usize)] -= 1;
        }
    }

    /// Counters so far, with the lines still in the on-PM buffer counted as the media writes
    /// their final drain will cost.
    pub fn stats(&self) -> MemStats {
        let mut s = self.stats;
        for mw in self.onpm.residual() {
            s.final_bank_cycles += self.media_cycles(&mw);
            count_media_write(&mut s, &mw);
        }
        s
    }

    /// The queued writes, oldest first (a merged entry shows its first request).
    pub fn queue(&self) -> impl Iterator<Item = &WriteReq> {
        self.wq.iter().map(|q| &q.req)
    }
}

/// Counts of queued writes per 256 B line, hashed into a small table: `may_hold` has no
/// false negatives (a line with queued writes always answers yes), so it gates the exact
/// scans of the queue (merging, reads served from the queue, buffer hits) cheaply.
#[derive(Clone, Debug)]
struct LineFilter(Vec<u16>);

impl Default for LineFilter {
    fn default() -> Self {
        LineFilter(vec![0; 1 << LineFilter::BITS])
    }
}

impl LineFilter {
    const BITS: u32 = 10;

    #[inline]
    fn slot(line: u64) -> usize {
        (line.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - Self::BITS)) as usize
    }

    #[inline]
    fn may_hold(&self, line: u64) -> bool {
        self.0[Self::slot(line)] > 0
    }

    #[inline]
    fn add(&mut self, line: u64) {
        self.0[Self::slot(line)] += 1;
    }

    #[inline]
    fn remove(&mut self, line: u64) {
        let n = &mut self.0[Self::slot(line)];
        debug_assert!(*n > 0, "removing a line never added");
        *n -= 1;
    }
}

/// The 64 B blocks a request writes.
fn blocks_of(req: &WriteReq) -> std::ops::RangeInclusive<u64> {
    (req.addr >> 6)..=((req.addr + req.bytes.max(1) - 1) >> 6)
}

/// Counts a media write (not its bank time).
fn count_media_write(stats: &mut MemStats, mw: &MediaWrite) {
    stats.media_writes += 1;
    stats.media_rmw += u64::from(mw.partial_blocks() > 0);
    stats.media_blocks += u64::from(mw.changed_blocks());
    stats.media_redundant_blocks += u64::from(mw.redundant_blocks());
    stats.programmed_bytes += 8 * u64::from(mw.changed_words());
}

fn add(into: &mut Traffic, t: Traffic) {
    into.requests += t.requests;
    into.bytes += t.bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2 GHz: read 100 cycles, write 300 cycles, burst 10 cycles; 4 banks, a 4-entry queue
    /// draining at 4 down to 1; NVMain's row timing (one 300-cycle pulse per media write).
    fn mc(onpm_lines: usize) -> MemCtrl {
        let mut cfg = Config::default();
        cfg.mem.onpm_lines = onpm_lines;
        cfg.mem.banks = 4;
        cfg.mem.write_queue = 4;
        cfg.mem.drain_high = 4;
        cfg.mem.drain_low = 1;
        assert_eq!(cfg.mem.media, MediaModel::NvmainRow, "the default");
        MemCtrl::new(&cfg, onpm_lines > 0)
    }

    fn with_media(media: MediaModel) -> MemCtrl {
        let mut cfg = Config::default();
        cfg.mem.media = media;
        MemCtrl::new(&cfg, false)
    }

    /// Byte address of 256 B line `n` (bank = n % 4).
    fn at(n: u64) -> u64 {
        n << 8
    }

    fn write(n: u64, token: u64) -> WriteReq {
        WriteReq {
            seq: token,
            ..WriteReq::new(at(n), 64, WriteKind::WriteBack, 0)
        }
    }

    /// Issues every write at the earliest possible times; returns (token, issue time).
    fn drain(m: &mut MemCtrl) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        while m.queued() > 0 {
            let t = m.next_issue();
            let w = m.issue(t).expect("next_issue is an issue time");
            out.push((w.seq, t));
        }
        out
    }

    #[test]
    fn read_latency_and_bank_conflicts() {
        let mut m = mc(0);
        assert_eq!(m.read(0, at(0)), 110, "read 100 + burst 10");
        assert_eq!(m.read(0, at(1)), 110, "another bank in parallel");
        assert_eq!(m.read(0, at(4)), 210, "same bank as line 0: waits for it");
        assert_eq!(m.read(500, at(0)), 610);
    }

    #[test]
    fn write_latency_without_buffer_is_bus_plus_one_write_pulse() {
        let mut m = mc(0);
        m.accept(write(0, 1));
        assert_eq!(m.next_issue(), 0);
        m.issue(0).unwrap();
        // The bank holds the write pulse from 10 (after the burst) for 300 cycles, so a
        // read of the same bank starts at 310.
        assert_eq!(m.read(20, at(0)), 420);
        let s = m.stats();
        assert_eq!(
            (
                s.media_writes,
                s.media_rmw,
                s.media_blocks,
                s.writes.requests,
                s.writes.bytes
            ),
            (1, 0, 1, 1, 64)
        );
        // An 8 B write costs the same pulse (from 430, after the read 310..410 and its burst).
        m.accept(WriteReq::new(at(4), 8, WriteKind::InPlace, 0));
        m.issue(420).unwrap();
        assert_eq!(m.read(440, at(0)), 730 + 110);
        // So does a 256 B write: one row.
        m.accept(WriteReq::new(at(1), 256, WriteKind::Log, 0));
        m.issue(1000).unwrap();
        assert_eq!(m.read(1000, at(1)), 1040 + 300 + 110);
        let s = m.stats();
        assert_eq!(s.media_blocks, 1 + 1 + 4);
        assert_eq!(s.programmed_bytes, 64 + 8 + 256);
    }

    #[test]
    fn media_models_charge_a_write_differently() {
        // No buffer, an 8 B and a 256 B write, each on its own bank: NVMain's row timing is
        // one pulse whatever the size; per 64 B block with data comparison, a read then a
        // pulse per changed block; proportional, a pulse per 64 B written (300 / 8 = 37.5,
        // rounded up).
        for (media, small, large) in [
            (MediaModel::NvmainRow, 300, 300),
            (MediaModel::BlockDcw, 100 + 300, 100 + 4 * 300),
            (MediaModel::Proportional, 38, 1200),
        ] {
            let mut m = with_media(media);
            m.accept(WriteReq::new(at(1), 8, WriteKind::InPlace, 0));
            m.accept(WriteReq::new(at(2), 256, WriteKind::Log, 0));
            m.issue(0).unwrap();
            m.issue(10).unwrap();
            // Bus 10 (and 40) cycles, then the media write; a read of the bank waits for it.
            assert_eq!(m.read(10, at(1)), 10 + small + 110, "{media:?}");
            assert_eq!(m.read(50, at(2)), 50 + large + 110, "{media:?}");
            assert_eq!(m.stats().bank_write_cycles, small + large, "{media:?}");
        }
    }

    #[test]
    fn block_dcw_reads_before_every_media_write_and_skips_unchanged_blocks() {
        let mut m = with_media(MediaModel::BlockDcw);
        // A whole new 64 B block: the comparison read (100) then the write (300).
        m.accept(write(0, 1));
        m.issue(0).unwrap();
        assert_eq!(m.read(10, at(0)), 10 + 400 + 110);
        // A block the cells already hold: the comparison read only, nothing programmed.
        let mut m = with_media(MediaModel::BlockDcw);
        m.accept_changed(write(0, 1), 0);
        m.issue(0).unwrap();
        assert_eq!(m.read(10, at(0)), 10 + 100 + 110);
        let s = m.stats();
        assert_eq!((s.media_redundant_blocks, s.programmed_bytes), (1, 0));
        assert_eq!(s.writes.bytes, 64, "the 64 B were sent all the same");
    }

    #[test]
    fn write_pausing_lets_a_read_through_a_media_write() {
        let mut cfg = Config::default();
        cfg.mem.onpm_lines = 0;
        cfg.mem.write_pausing = true;
        let mut m = MemCtrl::new(&cfg, false);
        m.accept(write(0, 1));
        m.issue(0).unwrap(); // the pulse holds bank 0 from 10 to 310
        // Without pausing the read would start at 310; here it pauses the write at 20.
        assert_eq!(m.read(20, at(0)), 20 + 110);
        assert_eq!(m.stats().paused_writes, 1);
        // The write resumes: the bank is busy until 310 + 100, so a write behind it waits.
        m.accept(write(4, 2));
        assert_eq!(m.next_issue(), 410);
        m.issue(410).unwrap();
        assert_eq!(m.read(430, at(0)), 430 + 110, "pauses the second write too");
        assert!(
            !m.read_waits_for_drain(at(1)),
            "reads are never held by drains"
        );
        // Without pausing, a read waits for the pulse.
        let mut m = mc(0);
        m.accept(write(0, 1));
        m.issue(0).unwrap();
        assert_eq!(m.read(20, at(0)), 310 + 110);
    }

    #[test]
    fn the_final_drain_is_charged_to_traffic_and_media_work_not_time() {
        let mut m = mc(0);
        m.final_writeback(at(3) + 64, 0xFF << 8);
        m.final_writeback(at(5), 0);
        let s = m.stats();
        assert_eq!((s.final_drain.requests, s.final_drain.bytes), (2, 128));
        assert_eq!(s.writes.requests, 0, "not part of the run's writes");
        assert_eq!(
            s.programmed_bytes, 64,
            "the unchanged line programs nothing"
        );
        assert_eq!((s.media_writes, s.final_bank_cycles), (2, 600));
        assert_eq!(s.bank_write_cycles, 0);
        assert_eq!(m.next_issue(), NEVER, "nothing queued");
    }

    #[test]
    fn a_read_of_a_line_whose_whole_write_is_queued_is_served_from_the_queue() {
        let mut m = mc(0);
        m.accept(WriteReq::new(at(0), 8, WriteKind::InPlace, 0));
        assert_eq!(
            m.read(0, at(0)),
            110,
            "a partial write does not hold the line"
        );
        m.accept(WriteReq::new(at(1) + 64, 64, WriteKind::WriteBack, 0));
        assert_eq!(m.read(5, at(1) + 64), 15, "one burst");
        assert_eq!(m.read(5, at(1)), 115, "another line of the same 256 B line");
        assert_eq!(m.stats().reads_from_write_queue, 1);
    }

    #[test]
    fn writes_to_a_queued_block_merge() {
        let mut m = mc(0);
        m.accept(WriteReq::new(at(0), 8, WriteKind::InPlace, 0));
        m.accept(WriteReq::new(at(0) + 16, 8, WriteKind::InPlace, 0));
        m.accept(WriteReq::new(at(1), 8, WriteKind::InPlace, 0)); // another block
        m.accept(write(0, 9)); // the whole first block
        assert_eq!(m.queued(), 2);
        assert_eq!(m.stats().merged_writes, 2);
        assert_eq!(m.stats().writes.requests, 4, "merged writes still count");
        // One burst per entry; the first block is fully written (no read-modify-write).
        assert_eq!(drain(&mut m), vec![(0, 0), (0, 10)]);
        let s = m.stats();
        assert_eq!((s.media_blocks, s.bus_busy_cycles), (2, 20));
        // An issued write is no merge target.
        m.accept(WriteReq::new(at(0), 8, WriteKind::InPlace, 0));
        assert_eq!(m.queued(), 1);
        let mut off = {
            let mut cfg = Config::default();
            cfg.mem.merge_writes = false;
            MemCtrl::new(&cfg, true)
        };
        off.accept(WriteReq::new(at(0), 8, WriteKind::InPlace, 0));
        off.accept(WriteReq::new(at(0) + 8, 8, WriteKind::InPlace, 0));
        assert_eq!(off.queued(), 2);
    }

    #[test]
    fn fr_fcfs_issues_a_ready_younger_write_before_a_blocked_older_one() {
        let mut m = mc(0);
        m.accept(write(0, 1)); // bank 0
        m.accept(write(4, 2)); // bank 0 again: must wait for write 1's media write
        m.accept(write(1, 3)); // bank 1
        // 1 at 0 (bus to 10, bank 0 busy 10..310); 3 at 10 (bus free, bank 1 idle);
        // 2 at 310 when bank 0 frees.
        assert_eq!(drain(&mut m), vec![(1, 0), (3, 10), (2, 310)]);
    }

    #[test]
    fn reads_have_priority_until_the_high_watermark() {
        let mut m = mc(0);
        m.accept(write(0, 1));
        m.issue(0).unwrap(); // bank 0 busy until 310
        // A read to bank 0 at 20 waits until 310; meanwhile writes to other banks are held.
        assert_eq!(m.read(20, at(0)), 420);
        m.accept(write(1, 2));
        assert_eq!(m.next_issue(), 310, "held behind the waiting read");
        assert!(m.issue(100).is_none());
        // Filling the queue to the high watermark (4) switches to draining.
        m.accept(write(2, 3));
        m.accept(write(3, 4));
        m.accept(write(5, 5));
        assert_eq!(m.next_issue(), 10, "draining ignores the waiting read");
        assert_eq!(m.issue(100).map(|w| w.seq), Some(2));
    }

    #[test]
    fn write_queue_capacity() {
        let mut m = mc(0);
        for i in 0..4 {
            assert!(m.has_space());
            m.accept(write(i, i));
        }
        assert!(!m.has_space());
        assert_eq!(m.issue(0).map(|w| w.seq), Some(0));
        assert!(m.has_space(), "an issued write frees its entry");
    }

    #[test]
    fn on_pm_buffer_absorbs_writes_and_serves_reads() {
        let mut m = mc(2);
        // Two 8 B updates of one 256 B line (different 64 B blocks) and a full line
        // elsewhere: no media write yet.
        m.accept(WriteReq::new(at(0), 8, WriteKind::InPlace, 0));
        m.accept(WriteReq::new(at(0) + 64, 8, WriteKind::InPlace, 0));
        m.accept(WriteReq::new(at(1), 256, WriteKind::Log, 0));
        assert_eq!(
            drain(&mut m),
            vec![(0, 0), (0, 10), (0, 20)],
            "bursts: 1, 1, 4"
        );
        assert_eq!(m.stats.media_writes, 0);
        assert_eq!(m.read(100, at(1) + 64), 110, "served from the buffer");
        // A third line evicts the LRU (line 0: two partly written blocks, one row write) to
        // bank 0.
        m.accept(WriteReq::new(at(2), 64, WriteKind::WriteBack, 0));
        assert_eq!(drain(&mut m), vec![(0, 60)]);
        assert_eq!((m.stats.media_writes, m.stats.media_rmw), (1, 1));
        assert_eq!(m.stats.bank_write_cycles, 300, "one row write");
        // Final accounting adds the two lines still buffered (line 1 full: 4 blocks; line 2
        // one whole 64 B block), their media work apart from the run's.
        let s = m.stats();
        assert_eq!(
            (s.media_writes, s.media_rmw, s.media_blocks),
            (3, 1, 2 + 4 + 1)
        );
        assert_eq!((s.bank_write_cycles, s.final_bank_cycles), (300, 600));
        assert_eq!(s.programmed_bytes, 16 + 256 + 64);
        assert_eq!(s.in_place.requests, 2);
        assert_eq!(s.log.bytes, 256);
    }
}
