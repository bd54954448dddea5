//! Ferrite transactions: the interface workloads are written against, and its engines.
//!
//! - [`api`]: [`Engine`] and [`Tx`], typed persistent pointers, errors.
//! - [`Redo`]: redo logging, one fence per transaction, lazy in-place apply.
//! - [`Undo`]: undo logging (PMDK-style), old values persisted before each in-place write.
//! - [`MemEngine`]: volatile reference (no persistence).
//! - [`logwriter`]: the cacheable / non-temporal / packed log writes studied by "Logging in persistent memory:
//!   to cache, or not to cache?" (MemSys 2017).
//!
//! # Getting started
//!
//! A pool file comes from [`pmem::Pool`]; an engine formats its area with `create` and
//! recovers it with `open` (the pool's geometry is recorded at `create`; at `open` only the
//! run-time fields of [`EngineOptions`] apply). Transactions go through the [`Engine`]
//! trait, objects through [`Tx`]. `undo` and `redo` leave isolation to the caller
//! ([`Isolation::External`]): hold a lock around every `transaction` call that may touch
//! what another thread's does. The MVCC engine (crate `mvcc`) isolates transactions itself.
//!
//! ```
//! use pmem::{CreateOptions, NativeOptions, Pool};
//! use tx::{Engine, EngineOptions, PPtr, Redo, Tx, TxError};
//!
//! # fn main() -> Result<(), TxError> {
//! # let dir = tempfile::tempdir().expect("temporary directory");
//! let path = dir.path().join("store.pool");
//! let pool = Pool::create(&path, &CreateOptions::new("my-app", 64 << 20))?;
//! let engine = Redo::create(pool, &EngineOptions::default())?;
//! // The root object is zeroed at creation; link a new block from its first word.
//! engine.transaction(|tx| {
//!     let block: PPtr = tx.alloc(64)?;
//!     tx.write_u64(block, 0, 42)?;
//!     tx.write_ptr(tx.root::<()>(), 0, block)
//! })?;
//! // An `Err` from the body (or a panic) rolls everything back.
//! let aborted: Result<(), TxError> = engine.transaction(|tx| {
//!     tx.write_ptr(tx.root::<()>(), 0, PPtr::<()>::null())?;
//!     Err(TxError::abort("changed my mind"))
//! });
//! assert!(matches!(aborted, Err(TxError::Aborted(_))));
//! drop(engine); // closes the pool cleanly
//!
//! // Later (or after a crash): open the pool with the same layout name and recover.
//! let pool = Pool::open(&path, "my-app", &NativeOptions::default())?;
//! let engine = Redo::open(pool, &EngineOptions::default())?;
//! let value = engine.read_only(|tx| {
//!     let block: PPtr = tx.read_ptr(tx.root::<()>(), 0)?;
//!     tx.read_u64(block, 0)
//! })?;
//! assert_eq!(value, 42);
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod api;
pub mod bytes;
pub mod check;
pub mod lanecheck;
pub mod lanes;
pub mod layout;
pub mod logwriter;
pub mod mem;
pub mod rangeset;
pub mod record;
pub mod record_search;
pub mod recovery;
mod redo;
pub mod ring;
mod undo;
mod undo_recovery;
pub mod writeset;

pub use api::{
    Engine, Isolation, NoReplay, Op, OpId, PPtr, Replay, Tx, TxError, TxResult, new_engine_id,
    pool_tag,
};
pub use lanes::EngineOptions;
pub use layout::EngineKind;
pub use logwriter::LogMode;
pub use mem::MemEngine;
pub use recovery::{RecoveryMode, RecoveryReport};
pub use redo::{Redo, RedoTx};
pub use undo::{Undo, UndoTx};
