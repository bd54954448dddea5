//! Where a section's time goes (`NVT_PROFILE=1`, `docs/nvthreads.md` §10): wall-clock
//! nanoseconds and counts of each step the runtime takes, summed over every thread-process
//! of the run and printed at exit as one line,
//! `nvthreads-profile sections=… fault=count/ns …`.
//!
//! Off by default: a disabled timer costs one relaxed load. On, each timed step costs two
//! `clock_gettime` calls (vDSO, tens of nanoseconds), so the profile slightly inflates what
//! it measures; the benchmark harness measures throughput without it.

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// The timed steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A write fault: signal, `mprotect`, forcing the private copies, twins.
    Fault,
    /// Committing the writes made outside sections at a synchronisation point (depth 0).
    Interval,
    /// Taking into account others' publishes: dropping kept copies, rebasing dirty pages.
    CatchUp,
    /// Diffing the dirty pages against their twins into entries (and publishing the
    /// unlogged ones).
    Diff,
    /// Appending a record: gate, sequence number, lane, encode, write, flush, fence (and
    /// any checkpoint the append runs: [`Step::Checkpoint`] is part of this step's time).
    Append,
    /// Emptying the log into the home image (run by an append that found its lane half
    /// full or full; counted inside [`Step::Append`] too).
    Checkpoint,
    /// Publishing the logged pages into the shared view.
    Publish,
    /// Ending the interval: write-protecting the dirty pages, keeping or dropping copies.
    Reset,
    /// Waiting for a mutex another thread holds (the program's contention, not the
    /// runtime's cost).
    Blocked,
    /// The runtime's part of a lock's hold time: from the start of an outermost unlock (or
    /// of a condition wait that ends a section) until its mutexes are about to be released
    /// — the section's diff, append, group close and publish (the release's own futex wake
    /// is not counted). The next holder waits for it.
    Handover,
}

impl Step {
    /// Every step, in line order.
    pub const ALL: [Step; 10] = [
        Step::Fault,
        Step::Interval,
        Step::CatchUp,
        Step::Diff,
        Step::Append,
        Step::Checkpoint,
        Step::Publish,
        Step::Reset,
        Step::Blocked,
        Step::Handover,
    ];

    /// Name in the line.
    pub fn name(self) -> &'static str {
        match self {
            Step::Fault => "fault",
            Step::Interval => "interval",
            Step::CatchUp => "catch_up",
            Step::Diff => "diff",
            Step::Append => "append",
            Step::Checkpoint => "checkpoint",
            Step::Publish => "publish",
            Step::Reset => "reset",
            Step::Blocked => "blocked",
            Step::Handover => "handover",
        }
    }

    fn index(self) -> usize {
        Step::ALL
            .iter()
            .position(|&step| step == self)
            .expect("every step is in ALL")
    }
}

/// Counts and nanoseconds of every step (in the control block shared by the run).
#[repr(C)]
#[derive(Debug)]
pub struct Profile {
    /// Sections ended (outermost unlocks, and condition waits that end one).
    pub sections: AtomicU64,
    counts: [AtomicU64; Step::ALL.len()],
    nanos: [AtomicU64; Step::ALL.len()],
}

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns the profile on (at start-up, before any fork).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether the profile is on.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A running timer of one step; adds itself to the profile when dropped.
#[derive(Debug)]
#[must_use = "the step is timed until the timer is dropped"]
pub struct Timer<'a> {
    started: Option<(Instant, &'a Profile, Step)>,
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        if let Some((started, profile, step)) = self.started.take() {
            profile.add(step, 1, started.elapsed().as_nanos() as u64);
        }
    }
}

impl Profile {
    /// Times `step` until the returned timer is dropped (nothing when the profile is off).
    pub fn time(&self, step: Step) -> Timer<'_> {
        Timer {
            started: enabled().then(|| (Instant::now(), self, step)),
        }
    }

    /// Adds `count` events of `step` taking `nanos` in all.
    pub fn add(&self, step: Step, count: u64, nanos: u64) {
        let index = step.index();
        self.counts[index].fetch_add(count, Ordering::Relaxed);
        self.nanos[index].fetch_add(nanos, Ordering::Relaxed);
    }

    /// The line printed at exit.
    pub fn line(&self) -> String {
        let mut line = format!(
            "nvthreads-profile sections={}",
            self.sections.load(Ordering::Relaxed)
        );
        for step in Step::ALL {
            let index = step.index();
            line.push_str(&format!(
                " {}={}/{}",
                step.name(),
                self.counts[index].load(Ordering::Relaxed),
                self.nanos[index].load(Ordering::Relaxed)
            ));
        }
        line
    }
}

/// One step of a profile line: how many times, and nanoseconds in all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepTotal {
    /// Events.
    pub count: u64,
    /// Nanoseconds in all.
    pub nanos: u64,
}

/// A parsed profile line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProfileLine {
    /// Sections ended.
    pub sections: u64,
    /// Each step's totals, in [`Step::ALL`] order.
    pub steps: Vec<(Step, StepTotal)>,
}

impl ProfileLine {
    /// The first profile line of `text` (a program's stderr).
    pub fn parse(text: &str) -> Option<ProfileLine> {
        let line = text
            .lines()
            .find(|line| line.starts_with("nvthreads-profile"))?;
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
        };
        let sections = field("sections")?.parse().ok()?;
        let steps = Step::ALL
            .iter()
            .map(|&step| {
                let (count, nanos) = field(step.name())
                    .and_then(|v| v.split_once('/'))
                    .unwrap_or(("0", "0"));
                let total = StepTotal {
                    count: count.parse().unwrap_or(0),
                    nanos: nanos.parse().unwrap_or(0),
                };
                (step, total)
            })
            .collect();
        Some(ProfileLine { sections, steps })
    }

    /// The totals of `step`.
    pub fn step(&self, step: Step) -> StepTotal {
        self.steps
            .iter()
            .find(|(s, _)| *s == step)
            .map(|(_, total)| *total)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_parses_back_and_a_disabled_timer_records_nothing() {
        let profile = Profile {
            sections: AtomicU64::new(3),
            counts: Default::default(),
            nanos: Default::default(),
        };
        drop(profile.time(Step::Diff));
        assert!(profile.line().contains(" diff=0/0"), "disabled");
        profile.add(Step::Fault, 2, 900);
        let parsed = ProfileLine::parse(&format!("x\n{}\n", profile.line())).expect("line");
        assert_eq!(parsed.sections, 3);
        assert_eq!(
            parsed.step(Step::Fault),
            StepTotal {
                count: 2,
                nanos: 900
            }
        );
        assert_eq!(parsed.step(Step::Append), StepTotal::default());
    }
}
