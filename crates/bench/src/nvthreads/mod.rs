//! The evaluation of NVthreads (EuroSys'17) as typed results for `ferrite eval --only
//! nvthreads` (`docs/nvthreads.md` §10): C programs built at run time with the system
//! compiler, each from one source against plain pthreads and against `libnvthreads_rt.so`.
//!
//! - [`kernels`]: our own C implementations of eight Phoenix kernels, run with plain
//!   pthreads, with the runtime's defaults (`malloc` shared, not persistent) and with every
//!   `malloc` persistent plus emulated NVM write latency (the paper's worst-case setting);
//!   medians of interleaved runs; every run's result digest must equal the pthreads one.
//! - [`pages`]: the paper's page micro-benchmark, NVthreads (page tracking, one redo record
//!   per section) against the fine-grained `undo` engine of `tx` (every 8-byte store logged
//!   and persisted before it is made).
//! - [`recovery`]: the crash-tolerant k-means killed after iteration *n*, restarted, and
//!   continued to convergence, against a run from scratch.
//! - [`lockheavy`]: a lock-heavy kernel of short sections (bank transfers through a work
//!   queue) beside plain pthreads at 1, 2 and 4 threads, and the cost of a one-line section
//!   step by step.

pub mod kernels;
pub mod lockheavy;
pub mod pages;
pub mod recovery;
#[cfg(test)]
mod tests;

pub use kernels::{KERNELS, Kernel, KernelId, KernelResult, RunTimes, Variant, kernels};
pub use lockheavy::{BANK_THREADS, BankPoint, SectionCost, SectionShape, bank, section_cost};
pub use nvthreads::profile::Step;
pub use nvthreads::stats::Stats;
pub use nvthreads_programs::{ProgramError, find_cc};
pub use pages::{PAGE_BENCH, PAGE_PERCENTS, PageBench, PagePoint, page_benchmark};
pub use recovery::{CrashPoint, KmeansRecovery, kmeans_recovery};

use crate::measure::Summary;
use nvthreads_programs::{EVAL_SOURCES, Link, Toolchain};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// How the evaluation runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Small inputs and one run: seconds, numbers indicative only.
    pub quick: bool,
    /// Threads of every kernel.
    pub threads: usize,
    /// Runs per measurement (the median is reported).
    pub runs: usize,
    /// Runs of each kernel with plain pthreads and with the runtime's defaults (the
    /// persistent-`malloc` setting, slower, runs `runs` times): more than `runs`, because
    /// their ratio is the goal and the machine is shared and noisy.
    pub kernel_runs: usize,
    /// Scratch directory for programs and pools (tmpfs).
    pub scratch: PathBuf,
    /// Emulated NVM latency of the persistent-`malloc` setting, in ns per 4 KiB written.
    pub nvm_ns_per_page: u64,
}

impl Settings {
    /// Defaults: 2 threads (the machine's cores), 3 runs (11 of the kernels' pthreads and
    /// runtime-default settings), 1000 ns per page (the paper's).
    pub fn new(scratch: PathBuf, quick: bool) -> Settings {
        Settings {
            quick,
            threads: 2,
            runs: if quick { 1 } else { 3 },
            kernel_runs: if quick { 1 } else { 11 },
            scratch,
            nvm_ns_per_page: 1000,
        }
    }
}

/// The built evaluation programs.
#[derive(Debug)]
pub struct Programs {
    toolchain: Toolchain,
    built: HashMap<(&'static str, Link, bool), PathBuf>,
    scratch: PathBuf,
}

/// The programs of the evaluation besides the kernels.
const PAGE_BENCH_PROGRAM: &str = "pagebench";

impl Programs {
    /// Writes the sources into `settings.scratch` and builds every program in both links
    /// (the runtime library found next to the running executable, or built with cargo).
    pub fn build(settings: &Settings) -> Result<Programs, ProgramError> {
        let dir = settings.scratch.join("programs");
        let library = nvthreads_programs::runtime_library()?;
        let toolchain = Toolchain::prepare(&dir, &EVAL_SOURCES, library)?;
        let mut built = HashMap::new();
        let names = KERNELS.iter().map(|k| k.name).chain([
            PAGE_BENCH_PROGRAM,
            lockheavy::BANK_PROGRAM,
            lockheavy::SECTIONS_PROGRAM,
        ]);
        for name in names {
            for (link, suffix) in [(Link::Pthreads, "pthreads"), (Link::Runtime, "nvthreads")] {
                let path = toolchain.build(name, link, &[], suffix)?;
                built.insert((name, link, false), path);
            }
        }
        let kmeans = KernelId::Kmeans.kernel().name;
        let path = toolchain.build(kmeans, Link::Runtime, &["NVTHREADS"], "crash-tolerant")?;
        built.insert((kmeans, Link::Runtime, true), path);
        Ok(Programs {
            toolchain,
            built,
            scratch: settings.scratch.clone(),
        })
    }

    /// The runtime library the programs are linked with.
    pub fn library(&self) -> &Path {
        self.toolchain.library()
    }

    fn path(&self, name: &'static str, link: Link, tolerant: bool) -> &Path {
        &self.built[&(name, link, tolerant)]
    }

    fn pool(&self, name: &str) -> PathBuf {
        self.scratch.join(format!("{name}.pool"))
    }
}

/// Sizes of a runtime run's pool.
#[derive(Clone, Copy, Debug)]
struct PoolSizes {
    /// Bytes the program mallocs (bounds the pool for persistent `malloc`).
    malloc_bytes: u64,
    /// Every `malloc` persistent (else shared and volatile).
    persistent: bool,
    /// Emulated NVM latency, ns per 4 KiB written back.
    ns_per_page: u64,
    /// Log size in MiB (default: one and a half times the persistent `malloc` bytes).
    log_mb: Option<u64>,
}

/// The environment of a runtime run: a fresh pool (its file removed first) sized by
/// `sizes`, the counters printed at exit.
fn runtime_env(command: &mut Command, pool: &Path, sizes: PoolSizes) {
    let _ = std::fs::remove_file(pool);
    command
        .env("NVT_POOL", pool)
        .env("NVT_STATS", "1")
        .env_remove("NVT_CRASH_AT")
        .env_remove("NVT_ACTIVE")
        .env_remove("NVT_DISABLE");
    let mb = sizes.malloc_bytes.div_ceil(1 << 20);
    if sizes.persistent {
        command
            .env("NVT_MALLOC", "persistent")
            .env("NVT_PMALLOC_MB", (mb + mb / 4 + 16).to_string())
            .env("NVT_HEAP_MB", (mb + mb / 4 + 48).to_string())
            .env(
                "NVT_LOG_MB",
                sizes.log_mb.unwrap_or(mb + mb / 2 + 32).to_string(),
            )
            .env("NVT_NVM_NS_PER_PAGE", sizes.ns_per_page.to_string());
    } else {
        command
            .env("NVT_MALLOC", "shared")
            .env(
                "NVT_MALLOC_MB",
                (mb * 2 + 256).next_power_of_two().to_string(),
            )
            .env("NVT_HEAP_MB", "16")
            .env("NVT_LOG_MB", "16");
    }
}

/// Output of one run.
struct Output {
    lines: Vec<String>,
    stats: Stats,
    /// The per-step profile, when the run had `NVT_PROFILE=1`.
    profile: Option<nvthreads::profile::ProfileLine>,
    wall_s: f64,
}

/// Runs `command` to its end; a failure is an error with its output.
fn run(mut command: Command, what: &str) -> Result<Output, ProgramError> {
    command.stdin(Stdio::null());
    let started = Instant::now();
    let output = command
        .output()
        .map_err(nvthreads_programs::io(format!("starting {what}")))?;
    let wall_s = started.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        return Err(ProgramError::Run {
            name: what.to_owned(),
            detail: format!("{}: {stdout}{stderr}", output.status),
        });
    }
    Ok(Output {
        lines: stdout.lines().map(str::to_owned).collect(),
        stats: Stats::parse(&stderr).unwrap_or_default(),
        profile: nvthreads::profile::ProfileLine::parse(&stderr),
        wall_s,
    })
}

/// The value after `key` on the first output line that starts with it.
fn value<'a>(lines: &'a [String], key: &str, what: &str) -> Result<&'a str, ProgramError> {
    lines
        .iter()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(' '))
        .ok_or_else(|| ProgramError::Run {
            name: what.to_owned(),
            detail: format!("no {key} line in {lines:?}"),
        })
}

/// The number after `key` on the program's output.
fn number<T: std::str::FromStr>(
    lines: &[String],
    key: &str,
    what: &str,
) -> Result<T, ProgramError> {
    value(lines, key, what)?
        .trim()
        .parse()
        .map_err(|_| ProgramError::Run {
            name: what.to_owned(),
            detail: format!("bad {key} in {lines:?}"),
        })
}

/// The program's own measurement of its compute phase (`TIME` seconds).
fn seconds(lines: &[String], what: &str) -> Result<f64, ProgramError> {
    number(lines, "TIME", what)
}

/// The median of `samples` (0 for none).
fn median(samples: &[f64]) -> f64 {
    Summary::of(samples).map_or(0.0, |summary| summary.median)
}
