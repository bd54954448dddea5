//! Ferrite's trace generator for the Silo (HPCA'23) hardware-logging simulator.
//!
//! Silo's workloads (Array, B+tree, Hash, Queue, RB-tree, TPC-C New-Order, YCSB 20/80) run
//! unchanged — the shared `workloads` code, written against `tx::Engine` — on a recording
//! engine ([`Recorder`]) that wraps the volatile [`tx::MemEngine`] and turns every committed
//! transaction into a per-core stream of [`trace::Event`]s. The simulator (`hwsim`) reads
//! only the [`trace::Trace`], never this crate.
//!
//! - [`recorder`]: the recording engine, its rules and the compute model; [`pmdk`]: the
//!   allocator metadata of the PMDK store discipline.
//! - [`spec`]: the workloads by name ([`SiloWorkload`]) and the trace parameters
//!   ([`TraceSpec`]).
//! - [`generate()`]: one independent instance per simulated core, spread over host threads;
//!   [`group_transactions`] merges consecutive transactions (large-transaction traces).
//! - [`calibration`]: the statistics compared with the paper's workload facts.
//!
//! ```no_run
//! use tracegen::{SiloWorkload, TraceSpec, calibrate, generate};
//! let spec = TraceSpec::new(SiloWorkload::Hash).with_cores(2).with_transactions(1000);
//! let trace = generate(&spec)?;
//! let report = calibrate(&trace);
//! println!("{}", serde_json::to_string_pretty(&report)?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Byte layout, event semantics, the recorder's rules and the measured calibration are in
//! `docs/trace-format.md`.

#![forbid(unsafe_code)]

pub mod calibration;
pub mod generate;
pub mod pmdk;
pub mod recorder;
pub mod spec;

pub use calibration::{CalibrationReport, calibrate};
pub use generate::{CoreStream, GenError, generate, generate_with_threads, group_transactions};
pub use recorder::{ComputeModel, Recorder, core_base};
pub use spec::{SiloWorkload, StoreDiscipline, TraceSpec};
pub use workloads::array::ElementFill;
