//! Options of the MVCC engine.

pub use crate::clock::ClockMode;

/// How concurrent transactions are isolated (per engine, or per transaction with
/// [`crate::Mvcc::transaction_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Level {
    /// Snapshot isolation: reads see the snapshot at begin; only write–write conflicts abort.
    Snapshot,
    /// Snapshot reads plus read-set validation at commit: a transaction whose reads changed
    /// before it committed aborts and retries.
    Serializable,
    /// Serializable, and a read that is not of the newest version aborts at once.
    Linearizable,
}

/// A deliberately broken protocol step, for the crash tests' self-check (never use one
/// outside a test: each loses committed data in some crash).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum Mutant {
    /// The correct engine.
    #[default]
    None,
    /// The commit declares its durability point without fencing its OLog record.
    NoCommitFence,
    /// Write-back moves the watermark before the written-back masters are fenced.
    EarlyWatermark,
    /// Checkpoints do not write back the blocks written in place before their record, whose
    /// operations then leave the OLog.
    NoFreshFlush,
    /// A freed block is reusable at once, before a checkpoint covers its free.
    EagerFree,
    /// The heap may return an empty run while its lines still have a version header or bytes
    /// in a live CLog record (`Core::may_return_run` always allows).
    ReturnAnyRun,
}

/// Format-time and run-time options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MvccOptions {
    /// Lanes: the most transactions that run at once, each lane with its operation log.
    pub lanes: u32,
    /// Bytes per lane (its operation log), a multiple of 4 KiB. One transaction's record
    /// must fit: the bytes it writes (blocks it allocated included) when it is not a
    /// registered operation, otherwise `LogFull`.
    pub olog_size: u64,
    /// Bytes of the checkpoint log, a multiple of 4 KiB.
    pub clog_size: u64,
    /// log2 of the heap's chunk size.
    pub chunk_shift: u32,
    /// Default isolation level (run-time).
    pub isolation: Level,
    /// Where timestamps come from (run-time).
    pub clock: ClockMode,
    /// Versions in each lane's transient version log (run-time; DRAM, 80 bytes each: a
    /// 64-byte-aligned copy of the chunk in one slab, its 16-byte timestamp and link in
    /// another). Reclamation starts at half of them in use, checkpoints at three quarters.
    pub tlog_versions: u32,
    /// Most chunks with a control header at once (run-time; DRAM, about 100 bytes each).
    pub max_headers: u32,
    /// Headers in use above which a checkpoint cools (run-time): chunks whose chains stayed
    /// empty for a whole checkpoint go back to their masters and leave the table. At or
    /// below it, empty headers stay (a hot chunk that goes quiet for one checkpoint is not
    /// written to its master again and again) until the next write-back takes them out.
    pub cool_headers: u32,
    /// Run-time: a background reclaimer thread trims the version log, checkpoints and
    /// writes back, so committing threads only append (TimeStone's design); a lane
    /// reclaims by itself only when its version log or OLog is nearly full (7/8), or when
    /// this is off. `FERRITE_MVCC_BACKGROUND=0` turns it off for `ferrite bench`.
    pub background: bool,
    /// Run-time: a checkpoint that ends an interval in which at least 7 in 8 transactions
    /// only read writes everything back at once (§5.10): the masters get the content of
    /// the quiet chunks and their empty headers leave the table, so reads go to the masters
    /// directly instead of through headers. The write-back is the one the full checkpoint
    /// log would force later; a chunk written again after it is written back once more.
    /// `FERRITE_MVCC_READ_MOSTLY_WRITEBACK=0` turns it off for `ferrite bench`.
    pub read_mostly_writeback: bool,
    /// Test-only: a broken protocol step (see [`Mutant`]).
    #[doc(hidden)]
    pub mutant: Mutant,
}

impl Default for MvccOptions {
    fn default() -> Self {
        MvccOptions {
            lanes: 16,
            olog_size: 1 << 20,
            clog_size: 8 << 20,
            chunk_shift: 18,
            isolation: Level::Snapshot,
            clock: ClockMode::Auto,
            tlog_versions: 65_536,
            max_headers: 1 << 24,
            cool_headers: 1 << 16,
            background: true,
            read_mostly_writeback: true,
            mutant: Mutant::None,
        }
    }
}

impl MvccOptions {
    /// Small geometry for crash tests on pools of a few hundred KiB: checkpoints and
    /// write-backs happen every few operations.
    pub fn small() -> Self {
        MvccOptions {
            lanes: 2,
            olog_size: 8 << 10,
            clog_size: 8 << 10,
            chunk_shift: 12,
            isolation: Level::Snapshot,
            clock: ClockMode::Counter,
            tlog_versions: 48,
            max_headers: 1 << 16,
            // Cooling on every checkpoint, so the crash tests cover it.
            cool_headers: 0,
            background: true,
            read_mostly_writeback: true,
            mutant: Mutant::None,
        }
    }

    /// The same options with another default isolation level.
    pub fn with_isolation(self, isolation: Level) -> Self {
        MvccOptions { isolation, ..self }
    }

    /// The same options with the background reclaimer on or off.
    pub fn with_background(self, background: bool) -> Self {
        MvccOptions { background, ..self }
    }

    /// The same options with another clock.
    pub fn with_clock(self, clock: ClockMode) -> Self {
        MvccOptions { clock, ..self }
    }
}
