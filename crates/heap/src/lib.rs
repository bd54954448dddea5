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
    /// Persistent heap state is inconsistent. The text says what; the "corrupt heap: "
    /// prefix is this variant's, and a text that already starts with it (a problem the
    /// rebuild at open recorded as a decoded word's `Corrupted` error, then refused the heap
    /// with) does not get it twice.
    #[error("corrupt heap: {}", without_prefix(.0))]
    Corrupted(String),
    /// A parameter is out of range.
    #[error("invalid heap argument: {0}")]
    InvalidArgument(String),
}

/// The prefix [`HeapError::Corrupted`] writes.
const CORRUPT_PREFIX: &str = "corrupt heap: ";

/// `text` without the prefix [`HeapError::Corrupted`] writes.
fn without_prefix(text: &str) -> &str {
    text.strip_prefix(CORRUPT_PREFIX).unwrap_or(text)
}

#[cfg(test)]
mod error_tests {
    use super::HeapError;

    /// A corrupt descriptor found at open read "corrupt heap: corrupt heap: descriptor of
    /// chunk 0 fails its check": the rebuild kept the decoding error's text and the open
    /// wrapped it again.
    #[test]
    fn a_corrupt_heap_is_said_once() {
        let decoded = HeapError::Corrupted("descriptor of chunk 0 fails its check".into());
        assert_eq!(
            decoded.to_string(),
            "corrupt heap: descriptor of chunk 0 fails its check"
        );
        let rewrapped = HeapError::Corrupted(decoded.to_string());
        assert_eq!(rewrapped.to_string(), decoded.to_string());
    }
}
