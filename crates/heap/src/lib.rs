//! Ferrite's persistent heap: a crash-safe allocator over a region of a pool.
//!
//! Small objects come from runs (a chunk split into units of one size class, with a
//! persistent allocation bitmap); large objects are spans of whole chunks. Allocation and free
//! are two-phase ([`Heap::reserve`] / [`Heap::prepare_free`] in DRAM, then persistent
//! [`Action`]s committed with the transaction), so an abort or a crash never leaks a block and
//! never hands one out twice.

#![forbid(unsafe_code)]

mod action;
mod alloc;
pub mod check;
pub mod layout;
mod scan;

pub use action::{ACTION_LEN, Action, apply_durably};
pub use alloc::{Freeing, Heap, Reservation, SystemCommit, Usage};
pub use check::{HeapCheck, check_heap};
pub use layout::{Descriptor, Layout, SIZE_CLASSES};

/// Errors of the heap.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HeapError {
    /// No free block of the requested size.
    #[error("out of persistent memory allocating {size} bytes")]
    OutOfSpace {
        /// Requested size.
        size: u64,
    },
    /// `free` of something that is not an allocated block.
    #[error("free of {0:#x}, which is not an allocated block")]
    InvalidFree(u64),
    /// `free` of a block that a free not yet finished already covers: one prepared by a
    /// running transaction, or committed and not yet reusable. An engine that isolates its
    /// transactions itself treats another transaction's free as a conflict.
    #[error("free of {0:#x}, which is already being freed")]
    BeingFreed(u64),
    /// Persistent heap state is inconsistent.
    #[error("corrupt heap: {0}")]
    Corrupted(String),
    /// A parameter is out of range.
    #[error("invalid heap argument: {0}")]
    InvalidArgument(String),
}
