//! Ferrite's trace-driven architectural simulator of hardware logging designs: the
//! reproduction of Silo (Zhang & Hua, "Speculative Hardware Logging for Atomic Durability in
//! Persistent Memory", HPCA 2023) and its baselines.
//!
//! # Model
//!
//! Per core a simple in-order core (CPI 1 for `Compute`, blocking loads or a small MLP window,
//! a store buffer draining to the L1); private L1D and L2 and a shared LLC (64 B lines,
//! write-back, write-allocate, LRU, inclusive); a memory controller with a write queue inside
//! the ADR persistence domain (FR-FCFS, read priority, drain watermarks) in front of PCM banks
//! and a 256 B-line on-PM buffer that coalesces writes. See [`config::Config`] for every
//! parameter and `docs/hwsim.md` for sources and simplifications.
//!
//! # Designs
//!
//! Designs implement [`Design`] (the contract is documented in [`design`]): [`design::Ideal`],
//! [`design::Base`], [`design::Fwb`], [`design::MorLog`], [`design::Lad`] and [`design::Silo`].
//! Add one by implementing the trait and a [`DesignKind`] variant; the engine does not change.
//! [`battery`] computes the battery/energy table (eADR, BBB, Silo) of a configuration.
//!
//! # Use
//!
//! * [`simulate`] runs a design over a trace and returns [`Metrics`].
//! * [`crash_check`] injects a crash at any cycle, runs the design's failure flush and
//!   recovery, and checks the recovered image is all-or-nothing per transaction.
//! * [`synth`] builds synthetic traces resembling the paper's workloads.

#![forbid(unsafe_code)]

pub mod battery;
pub mod cache;
pub mod config;
pub mod crash;
pub mod design;
pub mod engine;
pub mod mem;
pub mod metrics;
pub mod onpm;
pub mod pm;
pub mod synth;
pub mod util;

pub use config::Config;
pub use crash::{CrashReport, Violation, crash_check, crash_check_with};
pub use design::{Design, DesignKind};
pub use engine::{Ctx, RunOptions, Sim, SimError};
pub use metrics::Metrics;

/// Runs `design` over the first `config.cores` streams of `trace` (timing only, no value
/// tracking) and returns its metrics.
pub fn simulate(
    config: &Config,
    design: DesignKind,
    trace: &trace::Trace,
) -> Result<Metrics, SimError> {
    let mut sim = Sim::new(config, design.build(config), trace, RunOptions::default())?;
    sim.run()?;
    Ok(sim.metrics())
}
