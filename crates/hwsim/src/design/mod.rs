//! Hardware persistence designs plug into the engine through [`Design`].
//!
//! # Contract
//!
//! The engine owns time, the cores, the cache hierarchy, the memory controller and the
//! persistent image; a design owns its own structures (log buffers, per-core transaction
//! state) and reacts to hooks. Every hook runs at the current global time `ctx.now()`; hooks
//! are called in global time order, so a design may use shared resources through `ctx` freely.
//!
//! * **Per-core hooks** (`tx_begin`, `load`, `pre_store`, `post_store`, `tx_end`, `resume`)
//!   return a [`Step`]. `Step::Done` lets the core go on; `Step::Block` stops it until the
//!   [`Wake`] condition holds, after which the engine calls `resume` for that core (repeatedly,
//!   while it keeps blocking). What happens after a `Done` from `resume` depends on which hook
//!   blocked first: after `pre_store` the store is performed (then `post_store` runs); after
//!   `tx_end` the transaction counts as committed at that instant.
//! * **Stores** inside a transaction: `pre_store` runs before the store touches the L1 (block
//!   here if the store must not become visible yet, e.g. while the log has no room or an undo
//!   record is not persistent), `post_store` after it (with `StoreInfo::seq` and
//!   `perform_at` set). Stores outside transactions reach no hook.
//! * **Commit**: `tx_end` runs once the store buffer has drained; the transaction is committed
//!   when `tx_end` (or the `resume` after it) returns `Done`. The design must make the commit
//!   durable at that moment (typically `ctx.pm().committed[core] = txid`), because a crash
//!   injected before it treats the transaction as uncommitted, and one after it as committed.
//! * **Writes**: `ctx.send` puts a request on the core's path to the MC (FIFO per core, shared
//!   with cache write-backs); when the MC accepts it the engine calls `on_accepted`. `ctx.try_write`
//!   is for structures at the MC (e.g. Silo's log controller): it is accepted at once or refused
//!   when the write queue is full, and then no callback follows. Accepted = persistent (ADR).
//!   The engine calls `background` whenever write-queue space may have appeared, and at the
//!   time `next_wakeup` names.
//! * **Evictions**: `on_evict` sees each dirty line leaving the LLC before it is written back;
//!   the write-back itself is reported to `on_accepted` (kind `WriteBack`) once persistent.
//! * **Failure**: `failure_flush` runs at the crash instant on the running instance (drain
//!   battery-backed or ADR structures into the image); `recover` runs on a *fresh* instance
//!   built from the configuration and may only use the image.
//!
//! Adding a design: implement the trait in a new module here, add a [`DesignKind`] variant and
//! its `build` arm. Nothing in the engine changes.

use crate::config::Config;
use crate::engine::Ctx;
use crate::mem::WriteReq;
use crate::metrics::LogStats;
use crate::pm::PmImage;
use serde::{Deserialize, Serialize};

mod base;
mod fwb;
mod ideal;
mod lad;
mod morlog;
mod silo;
mod wal;

pub use base::Base;
pub use fwb::Fwb;
pub use ideal::Ideal;
pub use lad::Lad;
pub use morlog::MorLog;
pub use silo::Silo;

/// What a blocked core waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Until this cycle.
    At(u64),
    /// Until every request on the core's path to the MC (`ctx.send`) has been accepted, then
    /// `extra` more cycles (e.g. the acknowledgement's trip back).
    OutboxDrained {
        /// Cycles after the last acceptance.
        extra: u64,
    },
    /// Until something changes at the memory controller (an acceptance or issue) or the
    /// design's wakeup time; then `resume` is called to re-check.
    Poll,
}

/// Why a core is stalled (for the per-cause stall counters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stall {
    /// The store buffer was full.
    StoreBuffer,
    /// The write-back buffer to the MC was full.
    WriteBack,
    /// Waiting for writes to become persistent (log records, line flushes).
    Persist,
    /// Waiting for the log buffer to have room.
    LogBuffer,
    /// Commit handshake.
    Commit,
    /// Draining the store buffer before commit.
    Drain,
    /// A miss waiting for the memory controller's write drain to end.
    MemDrain,
}

/// A hook's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The core proceeds.
    Done,
    /// The core stops until `wake`; the time counts as a stall of kind `cause`.
    Block {
        /// Condition.
        wake: Wake,
        /// Stall class.
        cause: Stall,
    },
}

impl Step {
    /// Shorthand for `Step::Block { wake, cause }`.
    pub fn block(wake: Wake, cause: Stall) -> Step {
        Step::Block { wake, cause }
    }
}

/// A store piece as the L1 controller sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreInfo {
    /// Byte address.
    pub addr: u64,
    /// Bytes (1..=8, within one word).
    pub size: u8,
    /// The 8-byte-aligned word.
    pub word: u64,
    /// The whole word before the store (value-tracking runs; otherwise the piece's old bytes
    /// in place and zeros elsewhere).
    pub old: u64,
    /// The whole word after the store (same convention).
    pub new: u64,
    /// The store does not change memory.
    pub silent: bool,
    /// Global order stamp of the moment the store updated the L1 (0 in `pre_store`). A
    /// write-back whose `WriteReq::seq` is larger carries this store's data.
    pub seq: u64,
    /// Cycle at which the store updates the L1 (it drains from the store buffer; 0 in
    /// `pre_store`).
    pub perform_at: u64,
}

impl StoreInfo {
    /// The store's 64 B line number.
    pub fn line(&self) -> u64 {
        self.word >> 6
    }
}

/// Whether a dirty LLC victim is written back normally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evict {
    /// The engine sends it to the MC as a `WriteBack`.
    WriteBack,
    /// The design took care of it (e.g. staged it elsewhere).
    Absorbed,
}

/// A hardware persistence design.
pub trait Design: std::fmt::Debug {
    /// Short name for reports.
    fn name(&self) -> &'static str;

    /// Whether the design promises atomic durability (crash checks apply).
    fn crash_consistent(&self) -> bool {
        true
    }

    /// Whether the design's writes go through the on-PM buffer. A baseline's do only with
    /// `MemConfig::baselines_use_onpm_buffer`; Silo, whose design the buffer is part of, and
    /// Ideal, the upper bound, override this.
    fn uses_onpm_buffer(&self, cfg: &Config) -> bool {
        cfg.mem.baselines_use_onpm_buffer
    }

    /// A transaction starts on `core`.
    fn tx_begin(&mut self, _ctx: &mut Ctx<'_>, _core: usize) -> Step {
        Step::Done
    }

    /// A transactional load (after the hierarchy served it).
    fn load(&mut self, _ctx: &mut Ctx<'_>, _core: usize, _addr: u64, _size: u8) -> Step {
        Step::Done
    }

    /// A transactional store is about to update the L1.
    fn pre_store(&mut self, _ctx: &mut Ctx<'_>, _core: usize, _store: &StoreInfo) -> Step {
        Step::Done
    }

    /// A transactional store has updated the L1.
    fn post_store(&mut self, _ctx: &mut Ctx<'_>, _core: usize, _store: &StoreInfo) -> Step {
        Step::Done
    }

    /// The running transaction asks to commit (store buffer drained). `Done` = committed now.
    fn tx_end(&mut self, ctx: &mut Ctx<'_>, core: usize) -> Step;

    /// A blocked core's condition may hold: continue or block again.
    fn resume(&mut self, _ctx: &mut Ctx<'_>, _core: usize) -> Step {
        Step::Done
    }

    /// A dirty line (64 B line number) is leaving the LLC because of `core`'s access.
    fn on_evict(&mut self, _ctx: &mut Ctx<'_>, _core: usize, _line: u64) -> Evict {
        Evict::WriteBack
    }

    /// A request from a core's path (`ctx.send` or a write-back) was accepted by the MC.
    fn on_accepted(&mut self, _ctx: &mut Ctx<'_>, _req: &WriteReq) {}

    /// Write-queue space may be available, or the wakeup time came.
    fn background(&mut self, _ctx: &mut Ctx<'_>) {}

    /// A cycle at which `background` must run even if nothing else happens.
    fn next_wakeup(&self) -> Option<u64> {
        None
    }

    /// Power fails now: move whatever the design's persistence domain holds into the image.
    fn failure_flush(&mut self, _pm: &mut PmImage) {}

    /// Recovery on the image after a failure (called on a fresh instance).
    fn recover(&self, pm: &mut PmImage);

    /// Log statistics, for designs that log.
    fn log_stats(&self) -> Option<LogStats> {
        None
    }
}

/// The designs this crate implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DesignKind {
    /// No persistence work (upper bound; not crash consistent).
    Ideal,
    /// Naive hardware undo+redo logging.
    Base,
    /// "Steal but no force" undo+redo logging (HPCA'18).
    Fwb,
    /// Morphable logging (ISCA'20).
    #[serde(rename = "morlog")]
    MorLog,
    /// Logless atomic durability (MICRO'19).
    Lad,
    /// Speculative hardware logging (HPCA'23).
    Silo,
}

impl DesignKind {
    /// Every design, in the paper's order (slowest baseline first).
    pub const ALL: [DesignKind; 6] = [
        DesignKind::Ideal,
        DesignKind::Base,
        DesignKind::Fwb,
        DesignKind::MorLog,
        DesignKind::Lad,
        DesignKind::Silo,
    ];

    /// A fresh instance for `cfg`.
    pub fn build(self, cfg: &Config) -> Box<dyn Design> {
        match self {
            DesignKind::Ideal => Box::new(Ideal),
            DesignKind::Base => Box::new(Base::new(cfg)),
            DesignKind::Fwb => Box::new(Fwb::new(cfg)),
            DesignKind::MorLog => Box::new(MorLog::new(cfg)),
            DesignKind::Lad => Box::new(Lad::new(cfg)),
            DesignKind::Silo => Box::new(Silo::new(cfg)),
        }
    }

    /// Name used in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            DesignKind::Ideal => "ideal",
            DesignKind::Base => "base",
            DesignKind::Fwb => "fwb",
            DesignKind::MorLog => "morlog",
            DesignKind::Lad => "lad",
            DesignKind::Silo => "silo",
        }
    }

    /// The spelling of the Silo paper (HPCA'23) and its tables: `Ideal`, `Base`, `FWB`,
    /// `MorLog`, `LAD`, `Silo`.
    pub fn label(self) -> &'static str {
        match self {
            DesignKind::Ideal => "Ideal",
            DesignKind::Base => "Base",
            DesignKind::Fwb => "FWB",
            DesignKind::MorLog => "MorLog",
            DesignKind::Lad => "LAD",
            DesignKind::Silo => "Silo",
        }
    }

    /// Parses a name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == name)
    }
}
