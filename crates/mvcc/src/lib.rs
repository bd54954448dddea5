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
//! - **Reclamation** (module `reclaim`), watermark-driven: best-effort trims, checkpoints of the
//!   newest version of every changed chunk to the checkpoint log (CLog), and **write-back**
//!   to the masters delayed until the CLog fills, with grace periods from a quiescence
//!   detector.
//! - **Recovery** replays the CLog, then re-executes the logged operations after the newest
//!   checkpoint in timestamp order through the registered [`tx::Replay`] handler.
//!
//! Formats, protocols and the recovery argument: `docs/mvcc-format.md`.
//!
//! # Using it
//!
//! [`Mvcc::create`] formats a fresh [`pmem::Pool`] and [`Mvcc::open`] recovers one; the
//! third argument is the [`tx::Replay`] handler that re-executes registered operations
//! ([`tx::NoReplay`] when every transaction logs its data). Transactions run through
//! [`tx::Engine`] (`transaction`, `read_only`, `transaction_op`) or
//! [`Mvcc::transaction_with`] for another isolation [`Level`]; no caller locks are needed,
//! but at the default [`Level::Snapshot`] two transactions that each read what the other
//! writes may both commit (write skew): a structure whose updates rely on something they
//! only read needs [`Level::Serializable`]. The engine's shared state, [`Core`], is reached
//! through `Deref`: [`Core::pool`], [`Core::heap`], [`Core::stats`],
//! [`Core::allocated_blocks`] and [`Core::quiesce`].
//!
//! A transaction's record — its written bytes when it is not a registered operation, the
//! blocks it allocated included — must fit its lane's operation log
//! ([`MvccOptions::olog_size`]); a larger one fails with [`tx::TxError::LogFull`].
//!
//! ```
//! use mvcc::{Level, Mvcc, MvccOptions};
//! use pmem::{CreateOptions, Pool};
//! use tx::{Engine, NoReplay, Tx, TxError};
//!
//! # fn main() -> Result<(), TxError> {
//! # let dir = tempfile::tempdir().expect("temporary directory");
//! let pool = Pool::create(dir.path().join("counters.pool"), &CreateOptions::new("app", 64 << 20))?;
//! let engine = Mvcc::create(pool, &MvccOptions::default(), NoReplay)?;
//! std::thread::scope(|scope| {
//!     for _ in 0..2 {
//!         scope.spawn(|| {
//!             for _ in 0..100 {
//!                 // A conflict runs the body again; the caller sees only the outcome.
//!                 engine
//!                     .transaction_with(Level::Serializable, |tx| {
//!                         let root = tx.root::<()>();
//!                         let count = tx.read_u64(root, 0)?;
//!                         tx.write_u64(root, 0, count + 1)
//!                     })
//!                     .expect("increment");
//!             }
//!         });
//!     }
//! });
//! let count = engine.read_only(|tx| tx.read_u64(tx.root::<()>(), 0))?;
//! assert_eq!(count, 200);
//! assert_eq!(engine.stats().commits_physical, 200);
//! engine.quiesce()?; // optional: dropping the engine also writes everything back
//! # Ok(())
//! # }
//! ```

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
    CLOG_BYTES_EVENT, Core, Mvcc, MvccStats, NEW_OBJECT_BYTES_EVENT, OLOG_BYTES_EVENT,
    TLOG_BYTES_EVENT, WRITEBACK_BYTES_EVENT,
};
pub use options::{Level, Mutant, MvccOptions};
pub use txn::MvccTx;
