//! Ferrite's benchmarks.
//!
//! - [`measure`]: timing helpers shared by every benchmark (median of repeated runs).
//! - [`substrate`]: the substrate micro-benchmark — what a persist, a non-temporal copy and a
//!   fence cost on this machine through the persistence seam of a native pool.
//! - [`runner`]: engines × workloads ([`choice`]), including the PMDK peer and the [`ideal`]
//!   reference, with throughput, latency and PM traffic per operation.
//! - [`nvthreads`]: NVthreads (EuroSys'17): Phoenix-style kernels, the page micro-benchmark
//!   against the fine-grained `undo` engine, k-means recovery, as C programs on the runtime.
//! - [`logstudy`]: seed 001's cacheable vs non-temporal vs packed log writes.

#![forbid(unsafe_code)]

pub mod choice;
pub mod ideal;
pub mod logstudy;
pub mod measure;
pub mod nvthreads;
pub mod runner;
pub mod substrate;

pub use measure::Summary;
