//! Ferrite's substrate: pool files, the persistence seam, native backends and accounting.
//!
//! Everything above this crate writes persistent memory through [`Persist`]; this crate and
//! the crash simulator are the only places that turn pool offsets into memory accesses.

pub mod checked;
pub mod cpu;
mod error;
pub mod header;
pub mod integrity;
pub mod latency;
mod mapping;
mod memory;
mod native;
mod pool;
pub mod protect;
mod seam;
mod stats;

pub use cpu::{CpuFeatures, FlushInstr};
pub use error::PoolError;
pub use header::Header;
pub use latency::LatencyModel;
pub use memory::MemPm;
pub use native::{EnvOverrideError, Media, Native, NativeInfo, NativeOptions, PersistMode};
pub use pool::{
    CreateOptions, DEFAULT_POOL_DIR, FileReport, Pool, Region, flock_holders, inspect, read_header,
    read_image,
};
pub use protect::{Protection, mpk_supported};
pub use seam::{CACHE_LINE, Persist, WriteClass, assert_in_bounds, line_of, lines_covering};
pub use stats::{Counters, MAX_THREAD_SLOTS, Stats, thread_slot};
