//! Ferrite transactions: the interface workloads are written against, and its engines.
//!
//! - [`api`]: [`Engine`] and [`Tx`], typed persistent pointers, errors.
//! - [`Redo`]: redo logging, one fence per transaction, lazy in-place apply.
//! - [`Undo`]: undo logging (PMDK-style), old values persisted before each in-place write.
//! - [`MemEngine`]: volatile reference (no persistence).
//! - [`logwriter`]: the cacheable / non-temporal / packed log writes studied by "Logging in persistent memory:
//!   to cache, or not to cache?" (MemSys 2017).

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
