//! The timing engine: cores consume their trace streams, shared resources are used in global
//! time order.
//!
//! Actors are the cores (each with a local clock), the memory controller (its next issue or
//! admission time) and the design (its optional wakeup time). The engine always advances the
//! actor with the smallest time; a core runs a batch of events while its clock stays below
//! every other actor's time, so it never touches a shared resource "in the past" of another
//! actor. Ties go to the memory controller, then the design, then the lowest core index, which
//! makes runs deterministic.

use crate::cache::{Hierarchy, Level};
use crate::config::{Config, ConfigError};
use crate::design::{Design, Evict, Stall, Step, StoreInfo, Wake};
use crate::mem::{DataRef, MemCtrl, NEVER, Payload, WriteKind, WriteReq};
use crate::metrics::{CoreMetrics, Metrics};
use crate::pm::{PmImage, Values, initial_words, merge_piece, piece_mask};
use crate::util::FastMap;
use std::collections::VecDeque;
use trace::{Decoder, Event, Trace};

/// Calls a design hook with a context at the current global time (the design and the world
/// are disjoint fields, so both can be borrowed).
macro_rules! hook {
    ($sim:ident, $method:ident, $($arg:expr),*) => {{
        let now = $sim.time;
        $sim.design.$method(&mut Ctx { w: &mut $sim.w, now }, $($arg),*)
    }};
}

/// Base of the PM log regions (far above any data address a trace uses).
const LOG_BASE: u64 = 0xF000_0000_0000;
/// Bytes of one core's log region (a ring).
const LOG_REGION: u64 = 1 << 24;

/// "1 stream", "3 streams".
fn streams(n: usize) -> String {
    match n {
        1 => "1 stream".to_owned(),
        n => format!("{n} streams"),
    }
}

/// Why a simulation cannot start, or cannot finish.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The trace has fewer streams than the configuration has cores.
    #[error(
        "the trace has {}, fewer than the {} to simulate (a core runs one stream)",
        streams(*.have),
        if *.need == 1 { "1 core".to_owned() } else { format!("{need} cores") }
    )]
    TooFewStreams {
        /// Cores configured.
        need: usize,
        /// Streams in the trace.
        have: usize,
    },
    /// Some cores wait for a condition nothing pending can bring about. Which traces do this
    /// depends on the configuration *and* the trace (a transaction with more log records than
    /// an FWB or MorLog circular log holds), so it cannot be refused before the run.
    #[error(
        "the {design} run deadlocked at cycle {cycle}: cores {cores:?} wait for room that can \
         never free (e.g. an FWB or MorLog circular log smaller than one transaction's records: \
         fwb.log_bytes, morlog.log_bytes)"
    )]
    Deadlock {
        /// Design name.
        design: String,
        /// The cycle at which nothing was left to happen.
        cycle: u64,
        /// The cores that had not finished their traces.
        cores: Vec<usize>,
    },
}

/// How to run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Track word values (architectural, PM image, log records, the committed-state model).
    /// Needed for crash checks; costs memory proportional to the words the trace stores to.
    pub track_values: bool,
    /// Stop every actor after this cycle (crash injection).
    pub crash_at: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
struct Outgoing {
    arrive: u64,
    req: WriteReq,
}

/// Everything the engine shares with designs through [`Ctx`].
#[derive(Debug)]
pub struct World {
    cfg: Config,
    hier: Hierarchy,
    mc: MemCtrl,
    outbox: Vec<VecDeque<Outgoing>>,
    /// Cores whose outbox is not empty, one bit each.
    outbox_busy: u64,
    /// Per core: when the oldest request on its path reaches the MC (`NEVER` when none);
    /// the path is a FIFO, so this is when the core's next request can be admitted.
    heads: Vec<u64>,
    values: Option<Values>,
    pm: PmImage,
    seq: u64,
    mem_dirty: bool,
    log_cursor: Vec<u64>,
    /// Data words of write requests (value-tracking runs; entry 0 is unused, `DataRef`
    /// indexes it).
    payloads: Vec<Payload>,
    /// Changed words (see `cache::Victim::words`) of line data that left the caches for PM
    /// (write-backs on a path, flushed or staged lines) and has not been accepted yet.
    inflight: FastMap<u64, u8>,
}

impl World {
    fn accept(&mut self, now: u64, req: &WriteReq) {
        self.mc.advance(now);
        let changed = self.changed_words(req);
        self.mc.accept_changed(*req, changed);
        if req.data.is_some() {
            self.pm.apply(req.addr, &self.payloads[req.data.0 as usize]);
        }
        self.mem_dirty = true;
    }

    /// Stores `p` in the payload arena (value-tracking runs; `DataRef::NONE` otherwise).
    fn attach(&mut self, p: Payload) -> DataRef {
        if self.values.is_none() {
            return DataRef::NONE;
        }
        self.payloads.push(p);
        DataRef(u32::try_from(self.payloads.len() - 1).expect("payload arena overflow"))
    }

    /// The words of `req` (a mask over its 256 B line) whose data the persistence domain does
    /// not hold yet. A whole-line data write (write-back, flush, staged line) carries the
    /// changed words its line had when it left the caches; words from a log (in-place
    /// updates, partial or a coalesced whole line: `log_words`) and log writes are all new
    /// data.
    fn changed_words(&mut self, req: &WriteReq) -> u32 {
        if req.kind == WriteKind::Log || req.log_words || req.bytes < 64 {
            return u32::MAX;
        }
        let line = req.addr >> 6;
        let changed = self.inflight.remove(&line).unwrap_or(0);
        u32::from(changed) << (8 * (line & 3))
    }

    /// Line data leaves the caches for PM with these changed words.
    fn stash(&mut self, line: u64, words: u8) {
        if words != 0 {
            *self.inflight.entry(line).or_insert(0) |= words;
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Whether a request of a kind `kind` accepts, for 64 B line `line`, is on some core's
    /// path to the MC.
    fn any_outgoing(&self, line: u64, kind: impl Fn(WriteKind) -> bool) -> bool {
        let addr = line << 6;
        let mut bits = self.outbox_busy;
        while bits != 0 {
            let c = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if self.outbox[c]
                .iter()
                .any(|o| o.req.addr == addr && kind(o.req.kind))
            {
                return true;
            }
        }
        false
    }

    /// The oldest request on core `c`'s path leaves it.
    fn pop_outgoing(&mut self, c: usize) -> Outgoing {
        let out = self.outbox[c].pop_front().expect("head exists");
        self.sync_head(c);
        out
    }

    /// Core `c`'s path changed: refresh its head arrival and busy bit.
    fn sync_head(&mut self, c: usize) {
        match self.outbox[c].front() {
            Some(head) => self.heads[c] = head.arrive,
            None => {
                self.heads[c] = NEVER;
                self.outbox_busy &= !(1 << c);
            }
        }
    }

    /// Cores whose oldest request on the path has reached the MC by `now`, one bit each.
    fn arrived(&self, now: u64) -> u64 {
        let (mut bits, mut ready) = (self.outbox_busy, 0);
        while bits != 0 {
            let c = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            ready |= u64::from(self.heads[c] <= now) << c;
        }
        ready
    }
}

/// A design's view of the machine during a hook, at the current global time.
#[derive(Debug)]
pub struct Ctx<'a> {
    w: &'a mut World,
    now: u64,
}

impl Ctx<'_> {
    /// The current cycle.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.w.cfg
    }

    /// A fresh global order stamp (see [`StoreInfo::seq`]).
    pub fn next_seq(&mut self) -> u64 {
        self.w.next_seq()
    }

    /// Free write-queue entries at the MC.
    pub fn wq_free(&self) -> usize {
        self.w.mc.free_entries()
    }

    /// Writes waiting in the MC's write queue (entries held by speculative lines excluded).
    pub fn wq_queued(&self) -> usize {
        self.w.mc.queued()
    }

    /// A write issued by a structure at the MC: accepted (persistent) now if the write queue
    /// has room; `false` otherwise (retry from `Design::background`).
    pub fn try_write(&mut self, req: WriteReq) -> bool {
        if !self.w.mc.has_space() {
            return false;
        }
        self.w.accept(self.now, &req);
        true
    }

    /// A write sent from core `req.core` over the on-chip path, reaching the MC at `arrive`;
    /// it joins the core's FIFO to the MC, and `Design::on_accepted` reports its acceptance.
    pub fn send(&mut self, req: WriteReq, arrive: u64) {
        let path = &mut self.w.outbox[req.core];
        path.push_back(Outgoing { arrive, req });
        if path.len() == 1 {
            self.w.heads[req.core] = arrive;
        }
        self.w.outbox_busy |= 1 << req.core;
        self.w.mem_dirty = true;
    }

    /// Holds one write-queue entry for a speculative line staged at the MC (LAD); `false`
    /// when the queue has no free entry. Held entries count against the capacity for every
    /// other write until [`Ctx::release_wq`].
    pub fn reserve_wq(&mut self) -> bool {
        self.w.mem_dirty = true;
        self.w.mc.advance(self.now);
        self.w.mc.reserve()
    }

    /// Gives back `n` entries held with [`Ctx::reserve_wq`].
    pub fn release_wq(&mut self, n: usize) {
        self.w.mc.advance(self.now);
        self.w.mc.release(n);
        self.w.mem_dirty = true;
    }

    /// A read of the 64 B line at byte address `addr` issued by a structure at the MC now
    /// (e.g. LAD reading an old line for an undo record); returns when its data is back.
    pub fn mem_read(&mut self, addr: u64) -> u64 {
        self.w.mem_dirty = true;
        self.w.mc.read(self.now, addr)
    }

    /// Whether a write-back of 64 B line `line` is on some core's path to the MC (evicted,
    /// not yet persistent).
    pub fn writeback_in_flight(&self, line: u64) -> bool {
        self.w.any_outgoing(line, |k| {
            matches!(k, WriteKind::WriteBack | WriteKind::Flush)
        })
    }

    /// Requests of `core` not yet accepted by the MC.
    pub fn pending_sends(&self, core: usize) -> usize {
        self.w.outbox[core].len()
    }

    /// The current values of 64 B line `line` (empty unless values are tracked).
    pub fn line_values(&self, line: u64) -> Payload {
        self.w
            .values
            .as_ref()
            .map(|v| v.line(line))
            .unwrap_or_default()
    }

    /// The current values of 64 B line `line`, as the data of a write request.
    pub fn capture_line(&mut self, line: u64) -> DataRef {
        let p = self.line_values(line);
        self.w.attach(p)
    }

    /// `p` as the data of a write request (`DataRef::NONE` unless values are tracked).
    pub fn attach(&mut self, p: Payload) -> DataRef {
        self.w.attach(p)
    }

    /// The data words a request carries, to change them (`None` for no data).
    pub fn payload_mut(&mut self, data: DataRef) -> Option<&mut Payload> {
        data.is_some()
            .then(|| &mut self.w.payloads[data.0 as usize])
    }

    /// Cleans `line` everywhere in the hierarchy; returns whether a copy was dirty (the
    /// caller then writes its data to PM).
    pub fn clean_line(&mut self, line: u64) -> bool {
        let (dirty, words) = self.w.hier.clean_words(line);
        self.w.stash(line, words);
        dirty
    }

    /// PM received the newest data of the words in `mask` of 64 B line `line` by a partial
    /// write (an in-place update from a log): cached and in-flight copies of the line no
    /// longer differ from PM in those words (for data-comparison writes).
    pub fn persisted_words(&mut self, line: u64, mask: u8) {
        self.w.hier.persisted_words(line, mask);
        if let Some(w) = self.w.inflight.get_mut(&line) {
            *w &= !mask;
        }
    }

    /// The cache hierarchy (line tags for designs that keep per-line state).
    pub fn hierarchy(&mut self) -> &mut Hierarchy {
        &mut self.w.hier
    }

    /// The persistent image (commit registers, log regions, data words).
    pub fn pm(&mut self) -> &mut PmImage {
        &mut self.w.pm
    }

    /// Whether values and records are tracked (crash-check runs).
    pub fn tracking(&self) -> bool {
        self.w.pm.tracking()
    }

    /// Allocates `bytes` (≤ 256) in core `core`'s log region (a ring; a record never crosses
    /// a 256 B line) and returns its address.
    pub fn log_addr(&mut self, core: usize, bytes: u64) -> u64 {
        let cursor = &mut self.w.log_cursor[core];
        if *cursor % 256 + bytes > 256 {
            *cursor = (*cursor | 255) + 1;
        }
        if *cursor + bytes > LOG_REGION {
            *cursor = 0;
        }
        let addr = LOG_BASE + core as u64 * LOG_REGION + *cursor;
        *cursor += bytes;
        addr
    }
}

/// What the core does when its clock comes, before reading its next event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    None,
    /// The store buffer was full when this store arrived.
    SbFull(StoreInfo),
    /// A hook blocked; call `resume`, then continue with `After`.
    Design(After),
    /// `TxEnd` waits for the store buffer.
    TxEndDrain,
    /// The write-back buffer is over its limit.
    WbFull,
    /// A miss waits for the memory controller's write drain to end (then retried).
    DrainWait(Retry),
}

/// An access retried once the memory controller stops draining writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Retry {
    Load { addr: u64, size: u8 },
    Store(StoreInfo),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Nothing,
    Perform(StoreInfo),
    Commit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Park {
    No,
    Outbox {
        extra: u64,
    },
    Poll,
    /// Until the memory controller leaves write-drain mode.
    Drain,
}

/// The fields the scheduler reads every step come first, in one host cache line
/// (`repr(C)` keeps the order).
#[derive(Debug)]
#[repr(C)]
struct Core<'t> {
    clock: u64,
    park: Park,
    done: bool,
    in_tx: bool,
    sb_last: u64,
    events: Decoder<'t>,
    pending: Pending,
    park_since: u64,
    park_cause: Stall,
    txid: u64,
    /// Drain-completion times of the stores in the store buffer, oldest first.
    sb: VecDeque<u64>,
    /// Completion times of outstanding loads (MLP window), oldest first.
    loads: VecDeque<u64>,
    m: CoreMetrics,
}

impl Core<'_> {
    fn runnable(&self) -> bool {
        !self.done && self.park == Park::No
    }
}

/// The committed-state model for crash checks: per word, the value a correct recovery must
/// produce.
#[derive(Debug, Default)]
pub(crate) struct Model {
    pub(crate) expect: FastMap<u64, Expect>,
    tx_words: Vec<Vec<u64>>,
}

/// Expected recovered value of one word.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Expect {
    /// New value of the last committed transaction that wrote it, else the value before the
    /// first transactional write.
    pub(crate) value: u64,
    /// Core whose transactions wrote it.
    pub(crate) core: usize,
    /// Transactions of several cores wrote it (no isolation: not checked).
    pub(crate) shared: bool,
    /// A store outside transactions wrote it (no atomicity promised: not checked).
    pub(crate) plain: bool,
    /// Transaction id of the last committed writer.
    pub(crate) committed: Option<u64>,
}

impl Model {
    fn tx_store(&mut self, core: usize, word: u64, before: u64) {
        let e = self.expect.entry(word).or_insert(Expect {
            value: before,
            core,
            shared: false,
            plain: false,
            committed: None,
        });
        e.shared |= e.core != core;
        self.tx_words[core].push(word);
    }

    fn plain_store(&mut self, core: usize, word: u64, before: u64) {
        self.expect
            .entry(word)
            .or_insert(Expect {
                value: before,
                core,
                shared: false,
                plain: false,
                committed: None,
            })
            .plain = true;
    }

    fn commit(&mut self, core: usize, txid: u64, values: &Values) {
        for word in self.tx_words[core].drain(..) {
            let e = self
                .expect
                .get_mut(&word)
                .expect("stored word has an entry");
            e.value = values.get(word);
            e.committed = Some(txid);
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Lat {
    l1: u64,
    l2: u64,
    llc: u64,
    path: u64,
}

/// One simulation of a design over a trace.
#[derive(Debug)]
pub struct Sim<'t> {
    w: World,
    design: Box<dyn Design>,
    cores: Vec<Core<'t>>,
    model: Option<Model>,
    crash_at: u64,
    mem_next: u64,
    time: u64,
    /// Cores parked (waiting for the MC or the design), one bit each (at most 64 cores).
    parked: u64,
    /// Of the parked cores, those waiting for their path to the MC to drain, and those
    /// waiting for the MC's write drain to end.
    parked_outbox: u64,
    parked_drain: u64,
    /// Cores that finished their trace, one bit each.
    finished: u64,
    /// Each core's clock as of when it last stopped running or woke (the scheduler reads
    /// only runnable cores' entries, which are current; a compact copy of `Core::clock`).
    clocks: Vec<u64>,
    /// One bit per core.
    all: u64,
    last_mem_event: u64,
    rr: usize,
    lat: Lat,
    workload: String,
    host_seconds: f64,
}

impl<'t> Sim<'t> {
    /// A simulation of `design` on the first `cfg.cores` streams of `trace`.
    pub fn new(
        cfg: &Config,
        design: Box<dyn Design>,
        trace: &'t Trace,
        opts: RunOptions,
    ) -> Result<Self, SimError> {
        cfg.validate()?;
        if trace.cores() < cfg.cores {
            return Err(SimError::TooFewStreams {
                need: cfg.cores,
                have: trace.cores(),
            });
        }
        let initial = opts.track_values.then(|| initial_words(trace, cfg.cores));
        let values = initial.as_ref().map(Values::new);
        let model = opts.track_values.then(|| Model {
            expect: FastMap::default(),
            tx_words: vec![Vec::new(); cfg.cores],
        });
        let cores = (0..cfg.cores)
            .map(|i| Core {
                events: trace.events(i),
                clock: 0,
                done: false,
                pending: Pending::None,
                park: Park::No,
                park_since: 0,
                park_cause: Stall::Persist,
                in_tx: false,
                txid: 0,
                sb: VecDeque::with_capacity(cfg.core.store_buffer),
                sb_last: 0,
                loads: VecDeque::with_capacity(cfg.core.mlp),
                m: CoreMetrics::default(),
            })
            .collect();
        Ok(Sim {
            w: World {
                cfg: cfg.clone(),
                hier: Hierarchy::new(cfg),
                mc: MemCtrl::new(cfg, design.uses_onpm_buffer(cfg)),
                outbox: vec![VecDeque::new(); cfg.cores],
                outbox_busy: 0,
                heads: vec![NEVER; cfg.cores],
                values,
                pm: PmImage::new(cfg.cores, initial),
                seq: 0,
                mem_dirty: false,
                log_cursor: vec![0; cfg.cores],
                payloads: vec![Payload::default()],
                inflight: FastMap::default(),
            },
            design,
            cores,
            model,
            crash_at: opts.crash_at.unwrap_or(NEVER),
            mem_next: NEVER,
            time: 0,
            parked: 0,
            parked_outbox: 0,
            parked_drain: 0,
            finished: 0,
            clocks: vec![0; cfg.cores],
            all: if cfg.cores == 64 {
                u64::MAX
            } else {
                (1u64 << cfg.cores) - 1
            },
            last_mem_event: 0,
            rr: 0,
            lat: Lat {
                l1: cfg.l1.latency,
                l2: cfg.l2.latency,
                llc: cfg.llc.latency,
                path: cfg.path_cycles,
            },
            workload: trace.meta.workload.clone(),
            host_seconds: 0.0,
        })
    }

    /// Runs until every core finished and the memory system is idle, or until the crash cycle.
    /// A run in which cores still wait when nothing is left to happen is a
    /// [`SimError::Deadlock`] (its metrics cover the run up to that point).
    pub fn run(&mut self) -> Result<(), SimError> {
        let started = std::time::Instant::now();
        loop {
            self.refresh_mem_next();
            let design_next = self.design_next();
            let (core, core_time, others) = self.next_two_cores();
            let t = core_time.min(self.mem_next).min(design_next);
            if t == NEVER {
                let stuck = self.unfinished_cores();
                if !stuck.is_empty() {
                    self.host_seconds += started.elapsed().as_secs_f64();
                    return Err(SimError::Deadlock {
                        design: self.design.name().to_string(),
                        cycle: self.time,
                        cores: stuck,
                    });
                }
                if self.crash_at == NEVER && self.w.cfg.mem.final_drain {
                    self.final_drain();
                }
                break;
            }
            if t > self.crash_at {
                break;
            }
            if self.mem_next <= core_time && self.mem_next <= design_next {
                self.mem_step(t);
            } else if design_next <= core_time {
                self.design_wakeup(t);
            } else {
                self.run_core(core, others);
            }
        }
        self.host_seconds += started.elapsed().as_secs_f64();
        Ok(())
    }

    /// Charges the write-back of every line the caches still hold dirty (once: they are
    /// clean afterwards).
    fn final_drain(&mut self) {
        for (line, words) in self.w.hier.take_dirty_lines() {
            let changed = u32::from(words) << (8 * (line & 3));
            self.w.mc.final_writeback(line << 6, changed);
        }
    }

    fn design_next(&self) -> u64 {
        self.design.next_wakeup().unwrap_or(NEVER)
    }

    /// The runnable core with the smallest clock (lowest index on ties), its clock, and the
    /// smallest clock of the other runnable cores (one pass: this runs once per step).
    fn next_two_cores(&self) -> (usize, u64, u64) {
        let (mut best, mut best_t, mut second_t) = (usize::MAX, NEVER, NEVER);
        let mut bits = self.all & !(self.parked | self.finished);
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let t = self.clocks[i];
            if t < best_t {
                second_t = best_t;
                (best, best_t) = (i, t);
            } else if t < second_t {
                second_t = t;
            }
        }
        (best, best_t, second_t)
    }

    /// Cores that have not consumed their whole trace.
    fn unfinished_cores(&self) -> Vec<usize> {
        (0..self.cores.len())
            .filter(|&i| !self.cores[i].done)
            .collect()
    }

    fn refresh_mem_next(&mut self) {
        if !self.w.mem_dirty {
            return;
        }
        self.w.mem_dirty = false;
        let mut t = self.w.mc.next_issue();
        if self.w.mc.has_space() {
            let mut bits = self.w.outbox_busy;
            while bits != 0 {
                let c = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                t = t.min(self.w.heads[c]);
            }
        }
        self.mem_next = if t == NEVER { NEVER } else { t.max(self.time) };
    }

    /// Runs core `c` while its clock is below every other actor's time (`others`: the
    /// smallest clock of the other runnable cores, which cannot change meanwhile: only this
    /// core moves, and parked cores wake only in MC or design steps).
    fn run_core(&mut self, c: usize, others: u64) {
        loop {
            self.refresh_mem_next();
            let core = &self.cores[c];
            let limit = self.mem_next.min(self.design_next());
            if !core.runnable()
                || core.clock >= limit
                || core.clock > others
                || core.clock > self.crash_at
            {
                self.clocks[c] = core.clock;
                return;
            }
            self.time = self.time.max(core.clock);
            self.step_core(c);
        }
    }

    fn step_core(&mut self, c: usize) {
        match std::mem::replace(&mut self.cores[c].pending, Pending::None) {
            Pending::None => self.next_event(c),
            Pending::SbFull(info) => self.store_enter(c, info),
            Pending::TxEndDrain => self.tx_end(c),
            Pending::WbFull => self.check_writeback_buffer(c),
            Pending::DrainWait(Retry::Load { addr, size }) => self.load_lines(c, addr, size),
            Pending::DrainWait(Retry::Store(info)) => self.perform_store(c, info),
            Pending::Design(after) => {
                let now = self.time;
                let step = self.design.resume(
                    &mut Ctx {
                        w: &mut self.w,
                        now,
                    },
                    c,
                );
                self.after_step(c, step, after);
            }
        }
    }

    fn after_step(&mut self, c: usize, step: Step, after: After) {
        match step {
            Step::Done => match after {
                After::Nothing => {}
                After::Perform(info) => self.perform_store(c, info),
                After::Commit => self.commit(c),
            },
            Step::Block { wake, cause } => {
                self.cores[c].pending = Pending::Design(after);
                self.block(c, wake, cause);
            }
        }
    }

    fn block(&mut self, c: usize, wake: Wake, cause: Stall) {
        let empty = self.w.outbox[c].is_empty();
        let core = &mut self.cores[c];
        match wake {
            Wake::At(t) => {
                let t = t.max(core.clock);
                core.m.stalls.add(cause, t - core.clock);
                core.clock = t;
            }
            Wake::OutboxDrained { extra } if empty => {
                core.m.stalls.add(cause, extra);
                core.clock += extra;
            }
            Wake::OutboxDrained { extra } => {
                core.park(Park::Outbox { extra }, cause);
                self.parked |= 1 << c;
                self.parked_outbox |= 1 << c;
            }
            Wake::Poll => {
                core.park(Park::Poll, cause);
                self.parked |= 1 << c;
            }
        }
    }

    fn next_event(&mut self, c: usize) {
        let Some(event) = self.cores[c].events.next() else {
            self.finish_core(c);
            return;
        };
        self.cores[c].m.events += 1;
        match event {
            Event::Compute { instructions } => {
                self.cores[c].clock += u64::from(instructions) * self.w.cfg.core.cpi;
            }
            Event::Load { addr, size } => self.load(c, addr, size),
            Event::Store {
                addr,
                size,
                old,
                new,
            } => self.store(c, addr, size, old, new),
            Event::TxBegin => self.tx_begin(c),
            Event::TxEnd => self.tx_end_event(c),
        }
        if self.cores[c].pending == Pending::None {
            self.check_writeback_buffer(c);
        }
    }

    fn finish_core(&mut self, c: usize) {
        self.finished |= 1 << c;
        let core = &mut self.cores[c];
        core.done = true;
        let loads_done = core.loads.back().copied().unwrap_or(0);
        core.m.cycles = core.clock.max(core.sb_last).max(loads_done);
    }

    fn check_writeback_buffer(&mut self, c: usize) {
        if self.w.outbox[c].len() > self.w.cfg.core.writeback_buffer {
            self.cores[c].pending = Pending::WbFull;
            self.cores[c].park(Park::Poll, Stall::WriteBack);
            self.parked |= 1 << c;
        }
    }

    /// Accesses `line` for core `c` at the current time; returns the level and the latency
    /// until the data is in the L1. A dirty LLC victim is sent towards the MC.
    fn access(&mut self, c: usize, line: u64, write: bool, words: u8) -> (Level, u64) {
        let a = self.w.hier.access_words(c, line, write, words);
        let l = self.lat;
        let latency = match a.level {
            Level::L1 => l.l1,
            Level::L2 => l.l1 + l.l2,
            Level::Llc => l.l1 + l.l2 + l.llc,
            Level::Memory if self.reclaim_writeback(line) => l.l1 + l.l2 + l.llc,
            Level::Memory => {
                // The read reserves its bank as of now; the on-chip trips are added around it.
                let now = self.time;
                let done = self.w.mc.read(now, line << 6);
                self.w.mem_dirty = true;
                l.l1 + l.l2 + l.llc + 2 * l.path + (done - now)
            }
        };
        if let Some(victim) = a.writeback {
            self.w.stash(victim, a.writeback_words);
            self.writeback(c, victim);
        }
        (a.level, latency)
    }

    /// A miss to a line whose write-back has not reached the MC yet is served from the
    /// write-back buffer: the write-back is cancelled and the line comes back dirty. (Letting
    /// the stale write-back go on would let it overwrite newer data that reached PM by
    /// another path, e.g. Silo's in-place updates, which real hardware does not allow.)
    fn reclaim_writeback(&mut self, line: u64) -> bool {
        let addr = line << 6;
        let mut bits = self.w.outbox_busy;
        while bits != 0 {
            let c = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let ob = &mut self.w.outbox[c];
            if let Some(i) = ob
                .iter()
                .position(|o| o.req.kind == WriteKind::WriteBack && o.req.addr == addr)
            {
                ob.remove(i);
                self.w.sync_head(c);
                let words = self.w.inflight.remove(&line).unwrap_or(0);
                self.w.hier.mark_dirty_words(line, words);
                self.w.mem_dirty = true;
                return true;
            }
        }
        false
    }

    fn writeback(&mut self, c: usize, line: u64) {
        let now = self.time;
        let mut ctx = Ctx {
            w: &mut self.w,
            now,
        };
        if self.design.on_evict(&mut ctx, c, line) == Evict::Absorbed {
            return;
        }
        let req = WriteReq {
            seq: ctx.next_seq(),
            data: ctx.capture_line(line),
            ..WriteReq::new(line << 6, 64, WriteKind::WriteBack, c)
        };
        ctx.send(req, now + self.lat.path);
    }

    fn load(&mut self, c: usize, addr: u64, size: u8) {
        self.cores[c].m.loads += 1;
        self.load_lines(c, addr, size);
    }

    /// Whether a miss of core `c` to `line` now would be a PCM read that must wait for the
    /// memory controller's write drain (FR-FCFS with watermarks: while draining, the
    /// controller issues only writes).
    fn read_blocked(&self, c: usize, line: u64) -> bool {
        self.w.mc.draining()
            && self.w.hier.level(c, line) == Level::Memory
            && self.w.mc.read_waits_for_drain(line << 6)
            && !self.w.any_outgoing(line, |k| k == WriteKind::WriteBack)
    }

    /// Parks core `c` until the write drain ends; then `retry` runs again.
    fn wait_for_drain(&mut self, c: usize, retry: Retry) {
        let core = &mut self.cores[c];
        core.pending = Pending::DrainWait(retry);
        core.park(Park::Drain, Stall::MemDrain);
        self.parked |= 1 << c;
        self.parked_drain |= 1 << c;
    }

    fn load_lines(&mut self, c: usize, addr: u64, size: u8) {
        let first = addr >> 6;
        let last = (addr + u64::from(size.max(1)) - 1) >> 6;
        if (first..=last).any(|line| self.read_blocked(c, line)) {
            self.wait_for_drain(c, Retry::Load { addr, size });
            return;
        }
        let latency: u64 = (first..=last)
            .map(|line| self.access(c, line, false, 0).1)
            .sum();
        let mlp = self.w.cfg.core.mlp;
        let l1 = self.lat.l1;
        let core = &mut self.cores[c];
        if mlp == 1 {
            core.m.stalls.load += latency.saturating_sub(l1);
            core.clock += latency;
        } else {
            let now = core.clock;
            while core.loads.front().is_some_and(|&t| t <= now) {
                core.loads.pop_front();
            }
            if core.loads.len() >= mlp {
                let t = core.loads.pop_front().expect("window full");
                core.m.stalls.load += t - core.clock;
                core.clock = t;
            }
            core.loads.push_back(core.clock + latency);
            core.clock += 1;
        }
        if self.cores[c].in_tx {
            let step = hook!(self, load, c, addr, size);
            self.after_step(c, step, After::Nothing);
        }
    }

    fn store(&mut self, c: usize, addr: u64, size: u8, old: u64, new: u64) {
        let core = &mut self.cores[c];
        core.m.stores += 1;
        if core.in_tx {
            core.m.tx_stores += 1;
        }
        let word = addr & !7;
        let (old_word, new_word) = match &self.w.values {
            Some(v) => {
                let cur = v.get(word);
                (cur, merge_piece(cur, addr, size, new))
            }
            None => (
                merge_piece(0, addr, size, old),
                merge_piece(0, addr, size, new),
            ),
        };
        let info = StoreInfo {
            addr,
            size,
            word,
            old: old_word,
            new: new_word,
            silent: old_word == new_word,
            seq: 0,
            perform_at: 0,
        };
        self.store_enter(c, info);
    }

    /// The store enters the store buffer (or waits for room), then asks the design.
    fn store_enter(&mut self, c: usize, info: StoreInfo) {
        let core = &mut self.cores[c];
        let now = core.clock;
        while core.sb.front().is_some_and(|&t| t <= now) {
            core.sb.pop_front();
        }
        if core.sb.len() >= self.w.cfg.core.store_buffer {
            let t = *core.sb.front().expect("full buffer");
            core.m.stalls.store_buffer += t - now;
            core.clock = t;
            core.pending = Pending::SbFull(info);
            return;
        }
        if core.in_tx {
            let step = hook!(self, pre_store, c, &info);
            if step != Step::Done {
                self.after_step(c, step, After::Perform(info));
                return;
            }
        }
        self.perform_store(c, info);
    }

    /// The store updates the hierarchy (write-allocate; it drains from the store buffer in
    /// order), the values and the model, then `post_store` runs.
    fn perform_store(&mut self, c: usize, mut info: StoreInfo) {
        if self.read_blocked(c, info.word >> 6) {
            // The read-for-ownership would wait for the drain; the blocking core waits too.
            self.wait_for_drain(c, Retry::Store(info));
            return;
        }
        if let Some(v) = &self.w.values {
            // Refresh: the word may have changed while the store waited.
            let mask = piece_mask(info.addr, info.size);
            info.old = v.get(info.word);
            info.new = (info.old & !mask) | (info.new & mask);
        }
        info.seq = self.w.next_seq();
        let changed = if info.silent {
            0
        } else {
            1 << ((info.word >> 3) & 7)
        };
        let (level, latency) = self.access(c, info.word >> 6, true, changed);
        let core = &mut self.cores[c];
        let now = core.clock;
        let occupancy = if level == Level::L1 { 1 } else { latency };
        let done = now.max(core.sb_last) + occupancy;
        core.sb_last = done;
        core.sb.push_back(done);
        core.clock = now + 1;
        info.perform_at = done;
        let in_tx = core.in_tx;
        if let (Some(v), Some(m)) = (&mut self.w.values, &mut self.model) {
            if in_tx {
                m.tx_store(c, info.word, info.old);
            } else {
                m.plain_store(c, info.word, info.old);
            }
            v.set(info.word, info.new);
        }
        if in_tx {
            let step = hook!(self, post_store, c, &info);
            self.after_step(c, step, After::Nothing);
        }
    }

    fn tx_begin(&mut self, c: usize) {
        let core = &mut self.cores[c];
        if core.in_tx {
            return; // flat nesting: an inner begin is part of the outer transaction
        }
        core.in_tx = true;
        core.txid += 1;
        let step = hook!(self, tx_begin, c);
        self.after_step(c, step, After::Nothing);
    }

    fn tx_end_event(&mut self, c: usize) {
        let core = &mut self.cores[c];
        if !core.in_tx {
            return;
        }
        if core.sb_last > core.clock {
            core.m.stalls.drain += core.sb_last - core.clock;
            core.clock = core.sb_last;
            core.pending = Pending::TxEndDrain;
            return;
        }
        self.tx_end(c);
    }

    fn tx_end(&mut self, c: usize) {
        let step = hook!(self, tx_end, c);
        self.after_step(c, step, After::Commit);
    }

    fn commit(&mut self, c: usize) {
        let core = &mut self.cores[c];
        core.in_tx = false;
        core.m.committed_tx += 1;
        if let (Some(m), Some(v)) = (&mut self.model, &self.w.values) {
            m.commit(c, core.txid, v);
        }
    }

    /// The memory controller's turn at `t`: admit requests from the cores' paths, let the
    /// design use free entries, issue a write, repeat while something moved.
    fn mem_step(&mut self, t: u64) {
        self.time = self.time.max(t);
        let now = self.time;
        loop {
            self.admit(now);
            self.design.background(&mut Ctx {
                w: &mut self.w,
                now,
            });
            if self.w.mc.issue(now).is_none() {
                break;
            }
            self.last_mem_event = now;
        }
        self.unpark(now);
        self.w.mem_dirty = true;
    }

    fn admit(&mut self, now: u64) {
        let n = self.cores.len();
        while self.w.outbox_busy != 0 && self.w.mc.has_space() {
            // Round robin from `rr` over the cores whose next request has arrived.
            let ready = self.w.arrived(now);
            if ready == 0 {
                return;
            }
            let from_rr = ready & (u64::MAX << self.rr);
            let c = if from_rr != 0 { from_rr } else { ready }.trailing_zeros() as usize;
            let out = self.w.pop_outgoing(c);
            let req = out.req;
            self.rr = (c + 1) % n;
            self.w.mc.note_admit_wait(now - out.arrive);
            self.w.accept(now, &req);
            self.last_mem_event = now;
            self.design.on_accepted(
                &mut Ctx {
                    w: &mut self.w,
                    now,
                },
                &req,
            );
        }
    }

    fn design_wakeup(&mut self, t: u64) {
        self.time = self.time.max(t);
        let now = self.time;
        self.design.background(&mut Ctx {
            w: &mut self.w,
            now,
        });
        self.unpark(now);
        self.w.mem_dirty = true;
    }

    /// Wakes parked cores whose condition may hold at `now`.
    fn unpark(&mut self, now: u64) {
        // Cores waiting for their path to drain wake only once it has; cores waiting for the
        // write drain only once it is over; the others re-check at every change.
        let poll = self.parked & !(self.parked_outbox | self.parked_drain);
        let drained = self.parked_outbox & !self.w.outbox_busy;
        let undrained = if self.w.mc.draining() {
            0
        } else {
            self.parked_drain
        };
        let mut bits = poll | drained | undrained;
        while bits != 0 {
            let c = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let core = &mut self.cores[c];
            let wake_at = match core.park {
                Park::No => continue,
                Park::Outbox { extra } if self.w.outbox[c].is_empty() => now + extra,
                Park::Outbox { .. } => continue,
                Park::Poll => now,
                Park::Drain if !self.w.mc.draining() => now,
                Park::Drain => continue,
            };
            // A core may have parked with its clock ahead of the global time (the blocking
            // event advanced it first); it resumes no earlier than that.
            let wake_at = wake_at.max(core.clock);
            core.m
                .stalls
                .add(core.park_cause, wake_at - core.park_since);
            core.clock = wake_at;
            self.clocks[c] = wake_at;
            core.park = Park::No;
            self.parked &= !(1 << c);
            self.parked_outbox &= !(1 << c);
            self.parked_drain &= !(1 << c);
        }
    }

    /// The run's metrics.
    pub fn metrics(&self) -> Metrics {
        let per_core: Vec<CoreMetrics> = self
            .cores
            .iter()
            .map(|c| {
                let mut m = c.m.clone();
                if !c.done {
                    m.cycles = c.clock;
                }
                m
            })
            .collect();
        let cycles = per_core.iter().map(|m| m.cycles).max().unwrap_or(0);
        let committed: u64 = per_core.iter().map(|m| m.committed_tx).sum();
        let events: u64 = per_core.iter().map(|m| m.events).sum();
        let mut stalls = crate::metrics::StallCycles::default();
        per_core.iter().for_each(|m| stalls.merge(&m.stalls));
        let seconds = cycles as f64 / (self.w.cfg.freq_ghz * 1e9);
        Metrics {
            design: self.design.name().to_string(),
            workload: self.workload.clone(),
            cores: self.cores.len(),
            freq_ghz: self.w.cfg.freq_ghz,
            cycles,
            drained_cycles: cycles.max(self.last_mem_event),
            committed_tx: committed,
            throughput_tx_per_s: if seconds > 0.0 {
                committed as f64 / seconds
            } else {
                0.0
            },
            events,
            stalls,
            per_core,
            pm: self.w.mc.stats(),
            caches: self.w.hier.stats,
            log: self.design.log_stats(),
            host_seconds: self.host_seconds,
            events_per_host_second: if self.host_seconds > 0.0 {
                events as f64 / self.host_seconds
            } else {
                0.0
            },
        }
    }

    /// Whether every core has consumed its whole trace.
    pub fn finished(&self) -> bool {
        self.cores.iter().all(|c| c.done)
    }

    /// Cores inside a transaction now.
    pub(crate) fn open_transactions(&self) -> usize {
        self.cores.iter().filter(|c| c.in_tx).count()
    }

    /// Hands over the persistent image, the model and the running design (crash checks).
    pub(crate) fn into_crash_parts(self) -> (PmImage, Option<Model>, Box<dyn Design>) {
        (self.w.pm, self.model, self.design)
    }
}

impl Core<'_> {
    fn park(&mut self, park: Park, cause: Stall) {
        self.park = park;
        self.park_since = self.clock;
        self.park_cause = cause;
    }
}

#[cfg(test)]
mod error_tests {
    use super::SimError;

    #[test]
    fn too_few_streams_reads_as_a_sentence() {
        let one = SimError::TooFewStreams { need: 2, have: 1 };
        assert_eq!(
            one.to_string(),
            "the trace has 1 stream, fewer than the 2 cores to simulate (a core runs one stream)"
        );
        let none = SimError::TooFewStreams { need: 1, have: 0 };
        assert_eq!(
            none.to_string(),
            "the trace has 0 streams, fewer than the 1 core to simulate (a core runs one stream)"
        );
        let three = SimError::TooFewStreams { need: 8, have: 3 };
        assert!(
            three
                .to_string()
                .starts_with("the trace has 3 streams, fewer than the 8")
        );
    }
}
