//! Ferrite's crash simulator.
//!
//! - [`SimPm`] is a backend of the persistence seam that shadows PM under the Px86 model
//!   (8-byte failure atomicity, per-line store order, clwb/clflushopt/clflush, non-temporal
//!   stores, fences; ADR or eADR) and snapshots every crash point.
//! - [`image`] turns a snapshot into crash images, exhaustively within a budget, otherwise
//!   structured plus seeded random choices.
//! - [`harness`] runs a [`Scenario`] and, for every image, recovery plus an oracle, with
//!   double crash and exact replay of failures.
//! - [`toy`] holds a small redo-log engine and deliberately broken variants of it, which
//!   prove the harness is not vacuous.
//!
//! The model is specified in `docs/crash-model.md`.

#![forbid(unsafe_code)]

pub mod harness;
pub mod image;
mod sim;
pub mod toy;

pub use harness::{
    Config, DEFAULT_RECOVERY_STEP_LIMIT, DoubleCrash, Failure, Points, Problem, Report, Scenario,
    check, replay,
};
pub use image::{Budget, Choice, Snapshot, SnapshotKind};
pub use sim::{SimConfig, SimMode, SimPm};
