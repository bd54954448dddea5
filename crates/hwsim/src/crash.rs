//! Crash injection and the all-or-nothing checker.
//!
//! `crash_check` runs a design over a trace with value tracking, stops every actor after cycle
//! `C`, lets the design perform its failure-time flush (ADR: the write queue and the on-PM
//! buffer are already in the image, since a write is persistent once accepted; Silo: the
//! battery drains its log buffers), runs the design's recovery on a fresh instance, and
//! compares the recovered image with the model of committed transactions:
//!
//! * every word some transaction stored to before the crash must hold the new value of the
//!   last committed transaction that wrote it, or its value before the first transactional
//!   store if none committed (so nothing of an uncommitted transaction may remain);
//! * no other word may differ from its initial value.
//!
//! A transaction is committed iff the design's commit point (the `Done` of its `tx_end`) came
//! at or before `C`. Words written by transactions of several cores (no isolation) or by stores
//! outside transactions are not checked and are counted as such.

use crate::config::Config;
use crate::design::{Design, DesignKind};
use crate::engine::{Expect, Model, RunOptions, Sim, SimError};
use crate::pm::PmImage;
use serde::{Deserialize, Serialize};
use trace::Trace;

/// A passed crash check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashReport {
    /// Design name.
    pub design: String,
    /// The crash cycle.
    pub crash_cycle: u64,
    /// Whether every core had already finished its trace (the crash hit an idle machine).
    pub ran_to_completion: bool,
    /// Transactions committed before the crash.
    pub committed_tx: u64,
    /// Transactions open at the crash.
    pub open_tx: usize,
    /// Words compared with the model.
    pub words_checked: usize,
    /// Words not compared (shared between cores or written outside transactions).
    pub words_unchecked: usize,
    /// Log records in PM when recovery started (after the failure flush).
    pub log_records: usize,
}

/// A failed (or inapplicable) crash check.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Violation {
    /// The design promises no atomic durability (Ideal).
    #[error("crash checks do not apply to {design}: it promises no atomic durability")]
    NotApplicable {
        /// Design name.
        design: String,
    },
    /// The run could not be set up, or it deadlocked before the crash cycle.
    #[error("cannot simulate: {0}")]
    Setup(#[from] SimError),
    /// A word some transaction wrote was recovered with the wrong value.
    #[error(
        "crash at cycle {crash_cycle}: word {word:#x} recovered as {found:#x}, expected {expected:#x} \
         (core {core}, last committed writer: {committed:?})"
    )]
    WrongValue {
        /// Crash cycle.
        crash_cycle: u64,
        /// Word address.
        word: u64,
        /// Value the model requires.
        expected: u64,
        /// Value recovered.
        found: u64,
        /// Core whose transactions wrote the word.
        core: usize,
        /// Txid of the last committed transaction that wrote it, if any.
        committed: Option<u64>,
    },
    /// A word no transaction wrote changed.
    #[error(
        "crash at cycle {crash_cycle}: word {word:#x} changed from {initial:#x} to {found:#x} though no transaction wrote it"
    )]
    Stray {
        /// Crash cycle.
        crash_cycle: u64,
        /// Word address.
        word: u64,
        /// Its initial value.
        initial: u64,
        /// Its recovered value.
        found: u64,
    },
}

/// Crash-checks `design` on `trace` with a crash right after cycle `cycle`.
pub fn crash_check(
    config: &Config,
    design: DesignKind,
    trace: &Trace,
    cycle: u64,
) -> Result<CrashReport, Violation> {
    crash_check_with(config, &|cfg| design.build(cfg), trace, cycle)
}

/// [`crash_check`] for any design: `make` builds a fresh instance (called twice: one runs
/// and flushes, the other recovers).
pub fn crash_check_with(
    config: &Config,
    make: &dyn Fn(&Config) -> Box<dyn Design>,
    trace: &Trace,
    cycle: u64,
) -> Result<CrashReport, Violation> {
    let design = make(config);
    if !design.crash_consistent() {
        return Err(Violation::NotApplicable {
            design: design.name().to_string(),
        });
    }
    let name = design.name().to_string();
    let opts = RunOptions {
        track_values: true,
        crash_at: Some(cycle),
    };
    let mut sim = Sim::new(config, design, trace, opts)?;
    sim.run()?;
    let metrics = sim.metrics();
    let open_tx = sim.open_transactions();
    let ran_to_completion = sim.finished();
    let (mut pm, model, mut running) = sim.into_crash_parts();
    running.failure_flush(&mut pm);
    let log_records = pm.logs.iter().map(Vec::len).sum();
    make(config).recover(&mut pm);
    let model = model.expect("value tracking keeps a model");
    let (words_checked, words_unchecked) = compare(&pm, &model, cycle)?;
    Ok(CrashReport {
        design: name,
        crash_cycle: cycle,
        ran_to_completion,
        committed_tx: metrics.committed_tx,
        open_tx,
        words_checked,
        words_unchecked,
        log_records,
    })
}

fn compare(pm: &PmImage, model: &Model, cycle: u64) -> Result<(usize, usize), Violation> {
    let mut words: Vec<(&u64, &Expect)> = model.expect.iter().collect();
    words.sort_unstable_by_key(|(w, _)| **w);
    let (mut checked, mut unchecked) = (0, 0);
    for (&word, e) in words {
        if e.shared || e.plain {
            unchecked += 1;
            continue;
        }
        checked += 1;
        let found = pm.read(word);
        if found != e.value {
            return Err(Violation::WrongValue {
                crash_cycle: cycle,
                word,
                expected: e.value,
                found,
                core: e.core,
                committed: e.committed,
            });
        }
    }
    let mut stray: Vec<(u64, u64)> = pm
        .changed_words()
        .filter(|(w, _)| !model.expect.contains_key(w))
        .collect();
    stray.sort_unstable();
    if let Some(&(word, found)) = stray.first() {
        return Err(Violation::Stray {
            crash_cycle: cycle,
            word,
            initial: pm.initial(word),
            found,
        });
    }
    Ok((checked, unchecked))
}
