//! NVthreads for Ferrite: a drop-in pthreads runtime that makes unmodified lock-based C
//! programs crash-consistent on persistent memory.
//!
//! Design: `docs/nvthreads.md`. Layers, bottom-up:
//! - [`record`], [`journal`]: the persistent redo log, the commit and lap words
//!   (`pmem::checked` words),
//!   compaction, checkpoint and recovery, pure Rust over `pmem::Persist` (crash-tested with
//!   `crashsim`);
//! - [`diff`]: byte-precise runs between a page and its twin;
//! - [`pages`]: the page tracker (private copy-on-write views, `mprotect`, a `SIGSEGV`
//!   handler on an alternate stack, fault windows, twins);
//! - [`alloc`], [`globals`], [`heapmeta`]: the allocator behind the interposed `malloc`
//!   family, the program's globals and what the loader writes there, the persistent heap's
//!   metadata;
//! - [`shared`], [`runtime`] (and the private `malloc` module): the C runtime (threads as
//!   processes, futex-based locks in a shared mapping, sections, merges, commits); the C ABI
//!   itself is the `cdylib` example target `nvthreads_rt` (`ffi/`), with
//!   `include/nvthreads.h`;
//! - [`pfail`]: power-failure images of whole runs for the tests (`NVT_PFAIL`): the native
//!   backend with a shared table of pending lines, rolled back at the crash point;
//! - [`stats`]: the counters a run prints with `NVT_STATS=1`.
//!
//! Building C programs against the runtime (its tests, its evaluation in `bench`) is the
//! crate `nvthreads-programs`; the runtime itself never runs a compiler or cargo.

pub mod alloc;
pub mod check;
pub mod diff;
mod error;
pub mod faultprobe;
pub mod globals;
pub mod groups;
pub mod heapmeta;
pub mod imports;
pub mod journal;
mod malloc;
pub mod pages;
pub mod pfail;
pub mod profile;
pub mod record;
pub mod runtime;
pub mod shared;
pub mod stats;

pub use error::NvtError;
pub use journal::{Config, Geometry, Journal, JournalState, Recovery};
pub use record::Run;

/// Default virtual address of the persistent heap: far from the executable, the brk heap
/// and the mmap area of x86-64 Linux, so `MAP_FIXED_NOREPLACE` succeeds in practice.
pub const DEFAULT_BASE_ADDR: u64 = 0x6000_0000_0000;
