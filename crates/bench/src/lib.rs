//! Ferrite's benchmarks.
//!
//! - [`measure`]: timing helpers shared by every benchmark (median of repeated runs).
//! - [`substrate`]: the substrate micro-benchmark — what a persist, a non-temporal copy and a
//!   fence cost on this machine through the persistence seam of a native pool.
//! - [`runner`]: engines × workloads ([`choice`]), including the PMDK peer and the [`ideal`]
//!   reference, with throughput, latency and PM traffic per operation.
//! - [`raw`]: the raw reference — Array swap and hash upsert straight on the seam, the floor
//!   the engines are measured against.
//! - [`logstudy`]: seed 001's cacheable vs non-temporal vs packed log writes.

#![forbid(unsafe_code)]

pub mod choice;
pub mod ideal;
pub mod logstudy;
pub mod measure;
pub mod raw;
pub mod runner;
pub mod substrate;

pub use measure::Summary;
