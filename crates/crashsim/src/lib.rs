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
//!
//! # Crash-testing a structure of your own
//!
//! Implement [`Scenario`] for the structure: its stores go through the seam
//! ([`pmem::Persist`]) of the [`SimPm`] it is given, an operation declares itself durable
//! with [`pmem::Persist::durability_point`], and `recover` reads a crashed image back (an
//! `Err` or a panic is a failure). [`check`] then tests every crash image it selects, and
//! [`replay`] rebuilds a reported one. A two-word record whose second word is written
//! before the first is persisted:
//!
//! ```
//! use crashsim::{Config, Problem, Scenario, SimMode, SimPm, check, replay};
//! use pmem::{Persist, WriteClass};
//!
//! /// Operation `i` stores `i + 1` in word 0 (a value) and in word 8 (its copy, on
//! /// another line); recovery requires the two to agree.
//! struct Pair {
//!     persist_value_first: bool,
//! }
//!
//! impl Scenario for Pair {
//!     type Model = u64;
//!     type Live = SimPm;
//!     fn name(&self) -> String {
//!         "pair".into()
//!     }
//!     fn pool_size(&self) -> u64 {
//!         128
//!     }
//!     fn op_count(&self) -> usize {
//!         3
//!     }
//!     fn initial_model(&self) -> u64 {
//!         0
//!     }
//!     fn apply_to_model(&self, model: &mut u64, op: usize) {
//!         *model = op as u64 + 1;
//!     }
//!     fn setup(&self, pm: SimPm) -> SimPm {
//!         pm
//!     }
//!     fn run_op(&self, pm: &mut SimPm, op: usize) {
//!         let value = op as u64 + 1;
//!         pm.write_u64(0, value, WriteClass::User);
//!         if self.persist_value_first {
//!             pm.persist(0, 8);
//!         }
//!         pm.write_u64(64, value, WriteClass::User);
//!         pm.persist(0, 8);
//!         pm.persist(64, 8);
//!         pm.durability_point();
//!     }
//!     fn recover(&self, pm: SimPm) -> Result<u64, String> {
//!         let (value, copy) = (pm.read_u64(0), pm.read_u64(64));
//!         // The copy is written second: it may lag, never lead.
//!         if copy != value && copy + 1 != value {
//!             return Err(format!("copy {copy} ahead of value {value}"));
//!         }
//!         Ok(copy)
//!     }
//! }
//!
//! let config = Config::thorough(SimMode::Adr, 1);
//! check(&Pair { persist_value_first: true }, &config).assert_passed();
//!
//! let buggy = Pair { persist_value_first: false };
//! let report = check(&buggy, &config);
//! let failure = &report.failures[0];
//! // The report names the seed, the crash point and the image; replay rebuilds it.
//! assert!(failure.to_string().contains("seed 1"));
//! let Problem::RecoveryFailed(message) = &failure.problem else { panic!("{failure}") };
//! assert_eq!(replay(&buggy, &config, failure).unwrap_err(), *message);
//! ```

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
