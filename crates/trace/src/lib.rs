//! Ferrite traces: per-core streams of transactional memory events, in a compact versioned
//! binary format, produced by running the shared workloads on a recording engine and consumed
//! by the hardware simulator (`hwsim`), which knows nothing else of Ferrite.

#![forbid(unsafe_code)]

pub mod event;
pub mod format;
pub mod structure;

pub use event::{Event, store_pieces};
pub use format::{Decoder, Encoder, Trace, TraceError, TraceMeta};
pub use structure::{StructureError, Violation};
