//! Programs of many short critical sections, the case NVthreads' design pays most for
//! (every section is a merge: faults, twins, a diff, a log append with its fence, a
//! publish):
//!
//! - [`bank`]: a lock-heavy kernel of our own (`eval/bank.c`): a producer fills a bounded
//!   work queue (mutex and two condition variables), workers apply transfers under two
//!   striped locks and journal them in the persistent ledger; plain pthreads beside the
//!   runtime at several thread counts.
//! - [`section_cost`]: one-line sections (`eval/sections.c`), one thread on its own mutex,
//!   the page written kept hot or a new page every section, with the runtime's per-step
//!   profile (`NVT_PROFILE=1`): what a section costs, step by step.

use super::{
    PoolSizes, ProgramError, Programs, Settings, Stats, median, run, runtime_env, seconds, value,
};
use crate::scratch::child_command;
use nvthreads::profile::{ProfileLine, Step};
use nvthreads_programs::Link;

/// The lock-heavy kernel's program.
pub(super) const BANK_PROGRAM: &str = "bank";
/// The one-line-section program.
pub(super) const SECTIONS_PROGRAM: &str = "sections";

/// Worker thread counts of the lock-heavy kernel (each plus the producer).
pub const BANK_THREADS: [usize; 3] = [1, 2, 4];

/// Thousands (Ki) of transfers of a run.
fn bank_size(quick: bool) -> u64 {
    if quick { 2 } else { 16 }
}

/// Runs of each point (the runtime's take seconds each).
fn bank_runs(settings: &Settings) -> usize {
    if settings.quick { 1 } else { 5 }
}

/// The lock-heavy kernel at one thread count.
#[derive(Clone, Debug)]
pub struct BankPoint {
    /// Worker threads.
    pub threads: usize,
    /// Transfers per run.
    pub transfers: u64,
    /// Plain pthreads, seconds per run (each run's compute phase).
    pub pthreads_s: Vec<f64>,
    /// The runtime (defaults; the ledger nvmalloc'd), seconds per run.
    pub nvthreads_s: Vec<f64>,
    /// The runtime with `NVT_ISOLATE_VOLATILE=1` (the `malloc`'d queue tracked and merged
    /// at every synchronisation point, as before volatile memory was written in place),
    /// seconds per run.
    pub isolated_s: Vec<f64>,
    /// Every runtime run printed the pthreads digest.
    pub digests_match: bool,
    /// The runtime's counters of one run.
    pub stats: Stats,
}

impl BankPoint {
    /// Median seconds of plain pthreads.
    pub fn pthreads(&self) -> f64 {
        median(&self.pthreads_s)
    }

    /// Median seconds of the runtime.
    pub fn nvthreads(&self) -> f64 {
        median(&self.nvthreads_s)
    }

    /// The runtime's slowdown against pthreads (medians).
    pub fn slowdown(&self) -> f64 {
        self.nvthreads() / self.pthreads()
    }

    /// Median seconds of the runtime with isolated volatile memory.
    pub fn isolated(&self) -> f64 {
        median(&self.isolated_s)
    }

    /// The slowdown with isolated volatile memory against pthreads (medians).
    pub fn isolated_slowdown(&self) -> f64 {
        self.isolated() / self.pthreads()
    }

    /// Transfers per second of pthreads and of the runtime (medians).
    pub fn rates(&self) -> (f64, f64) {
        let n = self.transfers as f64;
        (n / self.pthreads(), n / self.nvthreads())
    }
}

/// How the bank kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BankRun {
    /// Plain pthreads.
    Pthreads,
    /// The runtime's defaults.
    Runtime,
    /// The runtime with `NVT_ISOLATE_VOLATILE=1`.
    Isolated,
}

/// One run of the bank kernel; returns its compute seconds, digest and counters.
fn run_bank(
    programs: &Programs,
    settings: &Settings,
    threads: usize,
    how: BankRun,
) -> Result<(f64, String, Stats), ProgramError> {
    let link = if how == BankRun::Pthreads {
        Link::Pthreads
    } else {
        Link::Runtime
    };
    let size = bank_size(settings.quick);
    let mut command = child_command(programs.path(BANK_PROGRAM, link, false));
    command.args([threads.to_string(), size.to_string()]);
    let pool = programs.pool(BANK_PROGRAM);
    if link == Link::Runtime {
        let sizes = PoolSizes {
            malloc_bytes: 1 << 20,
            persistent: false,
            ns_per_page: 0,
            log_mb: None,
        };
        runtime_env(&mut command, &pool, sizes);
        if how == BankRun::Isolated {
            command.env("NVT_ISOLATE_VOLATILE", "1");
        }
    }
    let what = format!("bank {threads} workers ({how:?})");
    let output = run(command, &what);
    let _ = std::fs::remove_file(&pool);
    let output = output?;
    let digest = value(&output.lines, "RESULT", &what)?.to_owned();
    Ok((seconds(&output.lines, &what)?, digest, output.stats))
}

/// The lock-heavy kernel at every thread count of [`BANK_THREADS`], pthreads, the runtime
/// and the runtime with isolated volatile memory interleaved run by run.
pub fn bank(
    programs: &Programs,
    settings: &Settings,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<BankPoint>, ProgramError> {
    let mut points = Vec::new();
    for threads in BANK_THREADS {
        let mut point = BankPoint {
            threads,
            transfers: bank_size(settings.quick) << 10,
            pthreads_s: Vec::new(),
            nvthreads_s: Vec::new(),
            isolated_s: Vec::new(),
            digests_match: true,
            stats: Stats::default(),
        };
        let mut digest = None;
        for round in 0..bank_runs(settings) {
            progress(&format!("bank {threads} workers run {}", round + 1));
            let (plain, expected, _) = run_bank(programs, settings, threads, BankRun::Pthreads)?;
            let (nvt, got, stats) = run_bank(programs, settings, threads, BankRun::Runtime)?;
            let (isolated, got_isolated, _) =
                run_bank(programs, settings, threads, BankRun::Isolated)?;
            let expected = digest.get_or_insert(expected);
            point.digests_match &= got == *expected && got_isolated == *expected;
            point.pthreads_s.push(plain);
            point.nvthreads_s.push(nvt);
            point.isolated_s.push(isolated);
            point.stats = stats;
        }
        points.push(point);
    }
    Ok(points)
}

/// The page a one-line section writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectionShape {
    /// The same word every time: the page stays hot (no fault).
    Hot,
    /// A word on another of 256 pages every time: a fault and a twin per section.
    Cold,
}

impl SectionShape {
    /// Both, in report order.
    pub const ALL: [SectionShape; 2] = [SectionShape::Hot, SectionShape::Cold];

    /// The program's argument and the report's name.
    pub fn name(self) -> &'static str {
        match self {
            SectionShape::Hot => "hot",
            SectionShape::Cold => "cold",
        }
    }
}

/// What a one-line section costs.
#[derive(Clone, Debug)]
pub struct SectionCost {
    /// Which page it writes.
    pub shape: SectionShape,
    /// Sections per run.
    pub sections: u64,
    /// Nanoseconds per section with plain pthreads (median).
    pub pthreads_ns: f64,
    /// Nanoseconds per section with the runtime, not profiled (median).
    pub nvthreads_ns: f64,
    /// Per step: (events per section, nanoseconds per section) of a profiled run.
    pub steps: Vec<(Step, f64, f64)>,
}

/// One run of the one-line-section program; returns seconds and the profile line.
fn run_sections(
    programs: &Programs,
    settings: &Settings,
    shape: SectionShape,
    link: Link,
    profile: bool,
) -> Result<(f64, Option<ProfileLine>), ProgramError> {
    let size = if settings.quick { 4 } else { 32 };
    let mut command = child_command(programs.path(SECTIONS_PROGRAM, link, false));
    command.args(["1".to_owned(), size.to_string(), shape.name().to_owned()]);
    let pool = programs.pool(SECTIONS_PROGRAM);
    if link == Link::Runtime {
        let sizes = PoolSizes {
            malloc_bytes: 2 << 20,
            persistent: false,
            ns_per_page: 0,
            log_mb: None,
        };
        runtime_env(&mut command, &pool, sizes);
        if profile {
            command.env("NVT_PROFILE", "1");
        }
    }
    let what = format!("sections {} ({link:?})", shape.name());
    let output = run(command, &what);
    let _ = std::fs::remove_file(&pool);
    let output = output?;
    Ok((seconds(&output.lines, &what)?, output.profile))
}

/// The cost of a one-line section, hot and cold, with the runtime's profile per step.
pub fn section_cost(
    programs: &Programs,
    settings: &Settings,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<SectionCost>, ProgramError> {
    let sections = (if settings.quick { 4 } else { 32 }) << 10;
    let mut costs = Vec::new();
    for shape in SectionShape::ALL {
        progress(&format!("one-line sections, {}", shape.name()));
        let mut plain = Vec::new();
        let mut nvt = Vec::new();
        for _ in 0..settings.runs {
            plain.push(run_sections(programs, settings, shape, Link::Pthreads, false)?.0);
            nvt.push(run_sections(programs, settings, shape, Link::Runtime, false)?.0);
        }
        let (_, profile) = run_sections(programs, settings, shape, Link::Runtime, true)?;
        let per_section = |seconds: f64| seconds * 1e9 / sections as f64;
        let steps = profile
            .map(|line| {
                line.steps
                    .iter()
                    .map(|&(step, total)| {
                        let n = sections as f64;
                        (step, total.count as f64 / n, total.nanos as f64 / n)
                    })
                    .collect()
            })
            .unwrap_or_default();
        costs.push(SectionCost {
            shape,
            sections,
            pthreads_ns: per_section(median(&plain)),
            nvthreads_ns: per_section(median(&nvt)),
            steps,
        });
    }
    Ok(costs)
}
