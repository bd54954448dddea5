//! Ferrite's MVCC engine, after TimeStone (ASPLOS'20): durable transactions with
//! multi-version concurrency control and TOC logging.
//!
//! - **Versioning unit**: 64-byte aligned chunks of the pool. A chunk's DRAM control
//!   header ([`chain::Header`], found through [`table::Table`]) holds its write lock, its
//!   chain of versions in the transient version log (TLog) and its base; the master is the
//!   chunk's bytes in the pool.
//! - **Reads** take no lock and write nothing shared: a snapshot copies the newest version
//!   at or before its timestamp, waiting only for a commit it must see to finish.
//! - **Writes** try-lock the chunk (first committer wins) and change a private copy; blocks
//!   the transaction allocated are written in place, as TimeStone does for new objects.
//! - **Commit** = push the copies, take a timestamp ([`clock`]: the invariant TSC with an
//!   uncertainty boundary, or a global counter), validate reads if needed, one record
//!   appended to the lane's operation log (the registered operation and its arguments when
//!   the reads are still current, the written bytes otherwise) and **one fence**.
//! - **Reclamation** ([`reclaim`]), watermark-driven: best-effort trims, checkpoints of the
//!   newest version of every changed chunk to the checkpoint log (CLog), and **write-back**
//!   to the masters delayed until the CLog fills, with grace periods from a quiescence
//!   detector.
//! - **Recovery** replays the CLog, then re-executes the logged operations after the newest
//!   checkpoint in timestamp order through the registered [`tx::Replay`] handler.
//!
//! Formats, protocols and the recovery argument: `docs/mvcc-format.md`.

#![forbid(unsafe_code)]

mod background;
pub mod chain;
pub mod check;
pub mod clock;
mod engine;
pub mod fence;
pub mod handoff;
mod lane;
pub mod layout;
mod options;
mod reclaim;
pub mod record;
mod recover;
mod sort;
mod sync;
pub mod table;
mod txn;

pub use clock::ClockMode;
pub use engine::{
    CLOG_BYTES_EVENT, Mvcc, MvccStats, NEW_OBJECT_BYTES_EVENT, OLOG_BYTES_EVENT, TLOG_BYTES_EVENT,
    WRITEBACK_BYTES_EVENT,
};
pub use options::{Level, Mutant, MvccOptions};
pub use txn::MvccTx;
