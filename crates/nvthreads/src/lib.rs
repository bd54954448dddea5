//! NVthreads for Ferrite: a drop-in pthreads runtime that makes unmodified lock-based C
//! programs crash-consistent on persistent memory.
//!
//! Design: `docs/nvthreads.md`. Layers, bottom-up:
//! - [`record`], [`word`], [`journal`]: the persistent redo log, the commit and lap words,
//!   checkpoint and recovery, pure Rust over `pmem::Persist` (crash-tested with `crashsim`);
//! - [`diff`]: byte-precise runs between a page and its twin;
//! - [`pages`]: the page tracker (private copy-on-write view, `mprotect`, a `SIGSEGV`
//!   handler on an alternate stack, twins);
//! - `futex`, `shared`, `runtime`, `ffi`: the C runtime (threads as processes, futex-based
//!   locks in a shared mapping, the C ABI exported by the `cdylib`, `include/nvthreads.h`).

pub mod diff;
mod error;
pub mod heapmeta;
pub mod journal;
pub mod pages;
pub mod record;
pub mod runtime;
pub mod shared;
pub mod word;

pub use error::NvtError;
pub use journal::{Config, Geometry, Journal, JournalState, Recovery};
pub use record::Run;

/// Default virtual address of the persistent heap: far from the executable, the brk heap
/// and the mmap area of x86-64 Linux, so `MAP_FIXED_NOREPLACE` succeeds in practice.
pub const DEFAULT_BASE_ADDR: u64 = 0x6000_0000_0000;
