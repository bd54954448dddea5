//! Ferrite's measurements: the benchmarks, and the crash campaigns the evaluation reports.
//!
//! - [`amplification`]: write amplification by ours and TimeStone's definitions.
//! - [`measure`]: timing helpers shared by every benchmark (median of repeated runs).
//! - [`substrate`]: the substrate micro-benchmark — what a persist, a non-temporal copy and a
//!   fence cost on this machine through the persistence seam of a native pool.
//! - [`engines`]: the evaluation's engine comparison (plan, runs, typed results).
//! - [`crash`]: the evaluation's crash campaigns (the simulator's self-test, the engine
//!   scenarios of the conformance catalogue), with typed results.
//! - [`runner`]: engines × workloads ([`choice`]), including the PMDK peer and the [`ideal`]
//!   reference, with throughput, latency and PM traffic per operation.
//! - [`raw`]: the raw reference — Array swap and hash upsert straight on the seam, the floor
//!   the engines are measured against.
//! - [`space`]: the pool a configuration needs before its first operation (a lower bound
//!   from the formats), which `ferrite bench` checks before making any pool.
//! - [`logstudy`]: cacheable vs non-temporal vs packed log writes, after "Logging in persistent
//!   memory: to cache, or not to cache?" (MemSys 2017).
//! - [`pmfs`]: the PMFS library, its FUSE mount and the kernel side by side.
//! - [`nvthreads`]: NVthreads (EuroSys'17): Phoenix-style kernels, the page micro-benchmark
//!   against the fine-grained `undo` engine, k-means recovery, as C programs on the runtime.

#![forbid(unsafe_code)]

pub mod amplification;
pub mod choice;
pub mod crash;
pub mod engines;
pub mod ideal;
pub mod logstudy;
pub mod measure;
pub mod nvthreads;
pub mod pmfs;
pub mod raw;
pub mod runner;
pub mod scratch;
pub mod space;
pub mod substrate;

pub use measure::Summary;

/// Where a campaign of cases of type `C` is, for a progress display.
#[derive(Clone, Copy, Debug)]
pub enum Progress<'a, C> {
    /// The case started.
    Started(&'a C),
    /// The case ended.
    Finished(&'a C),
}
