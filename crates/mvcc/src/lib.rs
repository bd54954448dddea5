//! Ferrite's MVCC engine, after TimeStone (ASPLOS'20): durable transactions with
//! multi-version concurrency control and TOC logging.
//!
//! - **Versioning unit**: 64-byte aligned chunks of the pool. A chunk's DRAM control
//!   header ([`chunks`]) holds its version chain (the transient version log) and the bytes
//!   of its last checkpoint; the master is the chunk's bytes in the pool.
//! - **Reads** never wait for a transaction: a snapshot reads the newest version at or
//!   before its timestamp (waiting only for a commit whose timestamp it already covers to
//!   become durable).
//! - **Writes** try-lock the chunk (first committer wins) and change a private copy.
//! - **Commit** = one record appended to the lane's operation log (the registered operation
//!   and its arguments when the transaction declared one and its reads are still current at
//!   its commit timestamp, its written bytes otherwise) and **one fence**.
//! - **Checkpoints** write the changed bytes of the newest version of every chunk changed
//!   since the previous checkpoint to the checkpoint log; **write-back** to the masters is
//!   delayed until that log fills.
//! - **Recovery** replays the checkpoint log, then re-executes the logged operations after
//!   the newest checkpoint in timestamp order through the registered [`tx::Replay`] handler.
//!
//! Formats and the recovery argument: `docs/mvcc-format.md`.

#![forbid(unsafe_code)]

pub mod chunks;
mod engine;
pub mod layout;
mod options;
pub mod record;
mod txn;

pub use engine::{Mvcc, MvccStats};
pub use options::{Level, Mutant, MvccOptions};
pub use txn::MvccTx;
