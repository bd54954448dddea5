//! The runtime's evaluation (`docs/nvthreads.md` §10), as data for `ferrite eval`:
//!
//! - **Kernels**: our own C implementations of eight Phoenix kernels, each built from one
//!   source against plain pthreads and against the runtime, run with the runtime's default
//!   (`malloc` shared, not persistent) and with every `malloc` persistent plus emulated NVM
//!   write latency (the paper's worst-case setting). Medians of several interleaved runs;
//!   every run's result digest must equal the pthreads one.
//! - **Page micro-benchmark**, the NVthreads side: threads modifying a percentage of each of
//!   their pages per critical section (the fine-grained peer is measured by the caller).
//! - **K-means crash and recovery**: the crash-tolerant k-means (`-DNVTHREADS`) killed after
//!   iteration *n*, restarted, and continued to convergence, against a run from scratch.

#![forbid(unsafe_code)]

use crate::programs::{EVAL_SOURCES, Link, ProgramError, Toolchain};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
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

/// A kernel: its name and input sizes.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    /// Program name.
    pub name: &'static str,
    /// `SIZE` argument of the full run.
    pub size: u64,
    /// `SIZE` of the quick run.
    pub quick_size: u64,
    /// What `SIZE` means.
    pub input: &'static str,
    /// Bytes the program mallocs at `SIZE` (bounds the pool for persistent `malloc`).
    malloc_bytes: fn(u64) -> u64,
}

/// The kernels, in report order.
pub const KERNELS: [Kernel; 8] = [
    Kernel {
        name: "histogram",
        size: 512,
        quick_size: 16,
        input: "SIZE × 64 Ki RGB pixels",
        malloc_bytes: |s| s * 3 * 65536 + 8192,
    },
    Kernel {
        name: "kmeans",
        size: 64,
        quick_size: 4,
        input: "SIZE × 4 Ki points, 16 clusters",
        malloc_bytes: |s| s * 4096 * 16 + 4096,
    },
    Kernel {
        name: "linear_regression",
        size: 512,
        quick_size: 16,
        input: "SIZE × 64 Ki points",
        malloc_bytes: |s| s * 2 * 65536 + 4096,
    },
    Kernel {
        name: "matrix_multiply",
        size: 640,
        quick_size: 96,
        input: "SIZE × SIZE matrices",
        malloc_bytes: |s| s * s * 12,
    },
    Kernel {
        name: "pca",
        size: 320,
        quick_size: 48,
        input: "SIZE × 8·SIZE matrix",
        malloc_bytes: |s| s * s * 8 * 4 + s * s * 8 + s * 8,
    },
    Kernel {
        name: "string_match",
        size: 128,
        quick_size: 8,
        input: "SIZE × 64 Ki words",
        malloc_bytes: |s| s * 65536 * 12,
    },
    Kernel {
        name: "word_count",
        size: 64,
        quick_size: 4,
        input: "SIZE × 64 Ki words",
        malloc_bytes: |s| s * 65536 * 10 + (24 << 20),
    },
    Kernel {
        name: "reverse_index",
        size: 4,
        quick_size: 1,
        input: "SIZE × 1 Ki documents",
        malloc_bytes: |s| s * 1024 * 2600 + s * 1024 * 13 * 48 + (1 << 20),
    },
];

impl Kernel {
    /// The `SIZE` argument in use.
    pub fn size_for(&self, quick: bool) -> u64 {
        if quick { self.quick_size } else { self.size }
    }
}

/// The configurations a kernel runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Plain pthreads and glibc (the baseline).
    Pthreads,
    /// The runtime with its defaults (`malloc` shared, not persistent; nothing but the
    /// runtime's own metadata is logged).
    Nvthreads,
    /// The runtime with every `malloc` persistent and emulated NVM write latency (the
    /// paper's worst-case setting).
    PersistentMalloc,
}

impl Variant {
    /// Every variant, in report order.
    pub const ALL: [Variant; 3] = [
        Variant::Pthreads,
        Variant::Nvthreads,
        Variant::PersistentMalloc,
    ];

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Pthreads => "pthreads",
            Variant::Nvthreads => "nvthreads",
            Variant::PersistentMalloc => "nvthreads-persistent-malloc",
        }
    }
}

/// The runtime's counters of one run (`NVT_STATS=1`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Global commit points (epoch flips).
    pub commits: u64,
    /// Redo records written.
    pub records: u64,
    /// Bytes of runs logged.
    pub logged_bytes: u64,
    /// Dirty pages merged (each was a write fault and a twin).
    pub merged_pages: u64,
    /// Checkpoints (and compactions) of the log.
    pub checkpoints: u64,
    /// Bytes of records written to the log (headers and padding included).
    pub log_bytes: u64,
}

/// One run of a program.
#[derive(Clone, Copy, Debug)]
pub struct RunTimes {
    /// The program's own measurement (first `pthread_create` to last join), seconds.
    pub compute_s: f64,
    /// Process start to exit, seconds.
    pub wall_s: f64,
    /// The runtime's counters (zero for pthreads).
    pub stats: RuntimeStats,
}

/// A kernel's measurements.
#[derive(Clone, Debug)]
pub struct KernelResult {
    /// The kernel.
    pub kernel: Kernel,
    /// `SIZE` used.
    pub size: u64,
    /// Runs per variant.
    pub runs: HashMap<Variant, Vec<RunTimes>>,
    /// Every run printed the pthreads run's result digest.
    pub digests_match: bool,
    /// The pthreads digest.
    pub digest: String,
}

/// The median of `values` (0 for none).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

impl KernelResult {
    /// Median compute-phase seconds of `variant`.
    pub fn compute(&self, variant: Variant) -> f64 {
        median(&self.times(variant, |run| run.compute_s))
    }

    /// Median whole-program seconds of `variant`.
    pub fn wall(&self, variant: Variant) -> f64 {
        median(&self.times(variant, |run| run.wall_s))
    }

    fn times(&self, variant: Variant, pick: fn(&RunTimes) -> f64) -> Vec<f64> {
        self.runs
            .get(&variant)
            .map(|runs| runs.iter().map(pick).collect())
            .unwrap_or_default()
    }

    /// Compute-phase slowdown of `variant` against pthreads.
    pub fn slowdown(&self, variant: Variant) -> f64 {
        self.compute(variant) / self.compute(Variant::Pthreads)
    }

    /// Whole-program slowdown of `variant` against pthreads.
    pub fn wall_slowdown(&self, variant: Variant) -> f64 {
        self.wall(variant) / self.wall(Variant::Pthreads)
    }

    /// The counters of the first run of `variant`.
    pub fn stats(&self, variant: Variant) -> RuntimeStats {
        self.runs
            .get(&variant)
            .and_then(|runs| runs.first())
            .map(|run| run.stats)
            .unwrap_or_default()
    }
}

/// The built evaluation programs.
#[derive(Debug)]
pub struct Programs {
    toolchain: Toolchain,
    built: HashMap<(String, Link, bool), PathBuf>,
    scratch: PathBuf,
}

impl Programs {
    /// Writes the sources into `settings.scratch` and builds every program in both links.
    pub fn build(settings: &Settings) -> Result<Programs, ProgramError> {
        let dir = settings.scratch.join("programs");
        let toolchain = Toolchain::prepare(&dir, &EVAL_SOURCES)?;
        let mut built = HashMap::new();
        let names = KERNELS.iter().map(|k| k.name).chain(["pagebench"]);
        for name in names {
            for (link, suffix) in [(Link::Pthreads, "pthreads"), (Link::Runtime, "nvthreads")] {
                let path = toolchain.build(name, link, &[], suffix)?;
                built.insert((name.to_owned(), link, false), path);
            }
        }
        let path = toolchain.build("kmeans", Link::Runtime, &["NVTHREADS"], "crash-tolerant")?;
        built.insert(("kmeans".to_owned(), Link::Runtime, true), path);
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

    fn path(&self, name: &str, link: Link, tolerant: bool) -> &Path {
        &self.built[&(name.to_owned(), link, tolerant)]
    }

    fn pool(&self, name: &str) -> PathBuf {
        self.scratch.join(format!("{name}.pool"))
    }
}

/// The environment of a runtime run: a fresh pool (its file removed first) sized for
/// `malloc_bytes` of persistent `malloc` when `persistent`.
fn runtime_env(
    command: &mut Command,
    pool: &Path,
    malloc_bytes: u64,
    persistent: bool,
    ns_per_page: u64,
    log_mb: Option<u64>,
) {
    let _ = std::fs::remove_file(pool);
    command
        .env("NVT_POOL", pool)
        .env("NVT_STATS", "1")
        .env_remove("NVT_CRASH_AT")
        .env_remove("NVT_ACTIVE")
        .env_remove("NVT_DISABLE");
    let mb = malloc_bytes.div_ceil(1 << 20);
    if persistent {
        command
            .env("NVT_MALLOC", "persistent")
            .env("NVT_PMALLOC_MB", (mb + mb / 4 + 16).to_string())
            .env("NVT_HEAP_MB", (mb + mb / 4 + 48).to_string())
            .env("NVT_LOG_MB", log_mb.unwrap_or(mb + mb / 2 + 32).to_string())
            .env("NVT_NVM_NS_PER_PAGE", ns_per_page.to_string());
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
    stats: RuntimeStats,
    wall_s: f64,
}

fn run(mut command: Command, what: &str) -> Result<Output, ProgramError> {
    command.stdin(Stdio::null());
    let started = Instant::now();
    let output = command.output().map_err(|source| ProgramError::Io {
        context: format!("starting {what}"),
        source,
    })?;
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
        stats: parse_stats(&stderr),
        wall_s,
    })
}

fn parse_stats(stderr: &str) -> RuntimeStats {
    let Some(line) = stderr.lines().find(|l| l.starts_with("nvthreads-stats")) else {
        return RuntimeStats::default();
    };
    let get = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    RuntimeStats {
        commits: get("commits"),
        records: get("records"),
        logged_bytes: get("logged_bytes"),
        merged_pages: get("merged_pages"),
        checkpoints: get("checkpoints"),
        log_bytes: get("log_bytes"),
    }
}

fn value<'a>(lines: &'a [String], key: &str, what: &str) -> Result<&'a str, ProgramError> {
    lines
        .iter()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(' '))
        .ok_or_else(|| ProgramError::Run {
            name: what.to_owned(),
            detail: format!("no {key} line in {lines:?}"),
        })
}

fn seconds(lines: &[String], what: &str) -> Result<f64, ProgramError> {
    value(lines, "TIME", what)?
        .trim()
        .parse()
        .map_err(|_| ProgramError::Run {
            name: what.to_owned(),
            detail: format!("bad TIME in {lines:?}"),
        })
}

/// Runs one kernel in one variant once; returns its times and result digest.
fn run_kernel(
    programs: &Programs,
    settings: &Settings,
    kernel: &Kernel,
    variant: Variant,
) -> Result<(RunTimes, String), ProgramError> {
    let size = kernel.size_for(settings.quick);
    let link = match variant {
        Variant::Pthreads => Link::Pthreads,
        _ => Link::Runtime,
    };
    let mut command = Command::new(programs.path(kernel.name, link, false));
    command
        .arg(settings.threads.to_string())
        .arg(size.to_string());
    let pool = programs.pool(kernel.name);
    if link == Link::Runtime {
        runtime_env(
            &mut command,
            &pool,
            (kernel.malloc_bytes)(size),
            variant == Variant::PersistentMalloc,
            settings.nvm_ns_per_page,
            None,
        );
    }
    let what = format!("{} ({})", kernel.name, variant.name());
    let output = run(command, &what);
    let _ = std::fs::remove_file(&pool);
    let output = output?;
    let digest = value(&output.lines, "RESULT", &what)?.to_owned();
    let times = RunTimes {
        compute_s: seconds(&output.lines, &what)?,
        wall_s: output.wall_s,
        stats: output.stats,
    };
    Ok((times, digest))
}

/// Runs every kernel `settings.kernel_runs` times with pthreads and the runtime's defaults
/// and `settings.runs` times with persistent `malloc` (the variants interleaved run by run),
/// calling `progress` with a description before each run.
pub fn kernels(
    programs: &Programs,
    settings: &Settings,
    progress: &mut dyn FnMut(&str),
) -> Result<Vec<KernelResult>, ProgramError> {
    let mut results = Vec::new();
    for kernel in &KERNELS {
        let mut result = KernelResult {
            kernel: *kernel,
            size: kernel.size_for(settings.quick),
            runs: HashMap::new(),
            digests_match: true,
            digest: String::new(),
        };
        for round in 0..settings.kernel_runs.max(settings.runs) {
            for variant in Variant::ALL {
                let runs = match variant {
                    Variant::PersistentMalloc => settings.runs,
                    _ => settings.kernel_runs,
                };
                if round >= runs {
                    continue;
                }
                progress(&format!(
                    "{} {} run {}",
                    kernel.name,
                    variant.name(),
                    round + 1
                ));
                let (times, digest) = run_kernel(programs, settings, kernel, variant)?;
                if variant == Variant::Pthreads && result.digest.is_empty() {
                    result.digest = digest.clone();
                }
                result.digests_match &= digest == result.digest;
                result.runs.entry(variant).or_default().push(times);
            }
        }
        results.push(result);
    }
    Ok(results)
}

/// The page micro-benchmark's shape.
#[derive(Clone, Copy, Debug)]
pub struct PageBench {
    /// Threads (4 in the paper).
    pub threads: usize,
    /// Pages in all (1000 in the paper).
    pub pages: u64,
}

/// The paper's configuration.
pub const PAGE_BENCH: PageBench = PageBench {
    threads: 4,
    pages: 1000,
};

/// The percentages of each page modified, as in the paper's figure.
pub const PAGE_PERCENTS: [u64; 6] = [5, 10, 25, 50, 75, 100];

/// Median seconds per round of the C page benchmark (`rounds` rounds per run) under
/// `variant` (`Pthreads`, or `PersistentMalloc` with `ns_per_page` of emulated latency),
/// with the result digest of the first run.
pub fn page_round_time(
    programs: &Programs,
    settings: &Settings,
    variant: Variant,
    percent: u64,
    rounds: u64,
    ns_per_page: u64,
) -> Result<(f64, RuntimeStats), ProgramError> {
    let mut per_round = Vec::new();
    let mut stats = RuntimeStats::default();
    for _ in 0..settings.runs {
        let link = match variant {
            Variant::Pthreads => Link::Pthreads,
            _ => Link::Runtime,
        };
        let mut command = Command::new(programs.path("pagebench", link, false));
        command.args([
            PAGE_BENCH.threads.to_string(),
            PAGE_BENCH.pages.to_string(),
            percent.to_string(),
            rounds.to_string(),
        ]);
        let pool = programs.pool("pagebench");
        if link == Link::Runtime {
            // As in the paper (log truncation disabled), no checkpoint runs while the benchmark
            // is measured: the log holds twice the whole run (a checkpoint starts at half),
            // at most one page image per page and round.
            let log_mb = (2 * rounds * PAGE_BENCH.pages * 4200) >> 20;
            runtime_env(
                &mut command,
                &pool,
                PAGE_BENCH.pages * 4096 + (1 << 20),
                variant == Variant::PersistentMalloc,
                ns_per_page,
                Some(log_mb + 64),
            );
        }
        let what = format!("pagebench {percent}% ({})", variant.name());
        let output = run(command, &what);
        let _ = std::fs::remove_file(&pool);
        let output = output?;
        per_round.push(seconds(&output.lines, &what)? / rounds as f64);
        stats = output.stats;
    }
    Ok((median(&per_round), stats))
}

/// One crash point of the k-means experiment.
#[derive(Clone, Debug)]
pub struct CrashPoint {
    /// The iteration after which the run was killed (the last one it printed).
    pub killed_after: u64,
    /// The iteration the restarted run resumed from (recovered).
    pub resumed_from: u64,
    /// Iterations the restarted run still ran.
    pub iterations_after: u64,
    /// Wall-clock seconds of the restarted run (recovery included).
    pub resume_wall_s: f64,
    /// Whether the restarted run converged to the uninterrupted run's centroids.
    pub same_result: bool,
}

/// The k-means crash experiment.
#[derive(Clone, Debug)]
pub struct KmeansRecovery {
    /// `SIZE` of the input.
    pub size: u64,
    /// Iterations of an uninterrupted run.
    pub iterations: u64,
    /// Wall-clock seconds of an uninterrupted run (median), i.e. of a restart from scratch.
    pub full_wall_s: f64,
    /// Crash points.
    pub points: Vec<CrashPoint>,
}

/// Runs the crash-tolerant k-means uninterrupted, then for each fraction of its iterations
/// kills it (the whole process group) right after that iteration, restarts it on the same
/// pool and lets it converge.
pub fn kmeans_recovery(
    programs: &Programs,
    settings: &Settings,
    fractions: &[f64],
    progress: &mut dyn FnMut(&str),
) -> Result<KmeansRecovery, ProgramError> {
    let kernel = KERNELS
        .iter()
        .find(|k| k.name == "kmeans")
        .expect("kmeans kernel");
    let size = kernel.size_for(settings.quick);
    let binary = programs.path("kmeans", Link::Runtime, true);
    let pool = programs.pool("kmeans-crash");
    let command = |fresh: bool| {
        let mut command = Command::new(binary);
        command.args([
            settings.threads.to_string(),
            size.to_string(),
            "verbose".into(),
        ]);
        if fresh {
            runtime_env(
                &mut command,
                &pool,
                (kernel.malloc_bytes)(size),
                false,
                0,
                None,
            );
        } else {
            command.env("NVT_POOL", &pool);
        }
        command
    };
    let mut walls = Vec::new();
    let mut reference = None;
    for round in 0..settings.runs {
        progress(&format!("kmeans uninterrupted run {}", round + 1));
        let output = run(command(true), "crash-tolerant kmeans")?;
        walls.push(output.wall_s);
        let iterations: u64 = value(&output.lines, "ITERATIONS", "kmeans")?
            .parse()
            .unwrap_or(0);
        let digest = value(&output.lines, "RESULT", "kmeans")?.to_owned();
        reference = Some((iterations, digest));
    }
    let (iterations, digest) = reference.ok_or_else(|| ProgramError::Run {
        name: "kmeans".into(),
        detail: "no run".into(),
    })?;
    let mut points = Vec::new();
    for &fraction in fractions {
        let target = ((iterations as f64 * fraction).round() as u64).clamp(1, iterations - 1);
        progress(&format!("kmeans killed after iteration {target}"));
        let killed_after = run_until_iteration(command(true), target)?;
        progress(&format!("kmeans resumed after iteration {killed_after}"));
        let output = run(command(false), "resumed kmeans")?;
        let resumed_from: u64 = output
            .lines
            .iter()
            .find_map(|line| line.strip_prefix("RESUME "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let total: u64 = value(&output.lines, "ITERATIONS", "kmeans")?
            .parse()
            .unwrap_or(0);
        points.push(CrashPoint {
            killed_after,
            resumed_from,
            iterations_after: total.saturating_sub(resumed_from),
            resume_wall_s: output.wall_s,
            same_result: value(&output.lines, "RESULT", "kmeans")? == digest,
        });
    }
    let _ = std::fs::remove_file(&pool);
    Ok(KmeansRecovery {
        size,
        iterations,
        full_wall_s: median(&walls),
        points,
    })
}

/// Starts `command` in its own process group and `SIGKILL`s the group as soon as it prints
/// `ITER n` with `n ≥ target`. Returns the last iteration printed.
fn run_until_iteration(mut command: Command, target: u64) -> Result<u64, ProgramError> {
    command
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .process_group(0);
    let mut child = command.spawn().map_err(|source| ProgramError::Io {
        context: "starting kmeans".into(),
        source,
    })?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut last = 0;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if let Some(n) = line
            .strip_prefix("ITER ")
            .and_then(|v| v.trim().parse().ok())
        {
            last = n;
            if n >= target {
                // The whole process group: the thread-processes too.
                let _ = crate::shared::kill_process_group(child.id());
                break;
            }
        }
    }
    let _ = child.wait();
    if last < target {
        return Err(ProgramError::Run {
            name: "kmeans".into(),
            detail: format!("ended after iteration {last}, before {target}"),
        });
    }
    Ok(last)
}
