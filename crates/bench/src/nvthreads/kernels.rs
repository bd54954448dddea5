//! Eight Phoenix-style kernels (our own C, `crates/nvthreads/eval/`), each run with plain
//! pthreads, with the runtime's defaults and with every `malloc` persistent.

use super::{
    PoolSizes, ProgramError, Programs, Settings, Stats, median, run, runtime_env, seconds, value,
};
use crate::scratch::child_command;
use nvthreads_programs::Link;
use std::collections::HashMap;

/// Which kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelId {
    /// Histogram of RGB pixels.
    Histogram,
    /// K-means clustering.
    Kmeans,
    /// Linear regression.
    LinearRegression,
    /// Matrix multiplication.
    MatrixMultiply,
    /// Principal component analysis (mean and covariance).
    Pca,
    /// String matching.
    StringMatch,
    /// Word count.
    WordCount,
    /// Reverse index: one short section per link.
    ReverseIndex,
}

impl KernelId {
    /// The kernel's description.
    pub fn kernel(self) -> &'static Kernel {
        KERNELS
            .iter()
            .find(|kernel| kernel.id == self)
            .expect("every kernel id is in KERNELS")
    }
}

/// A kernel: its program and input sizes.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    /// Which kernel.
    pub id: KernelId,
    /// Program name (`<name>.c`).
    pub name: &'static str,
    /// `SIZE` argument of the full run.
    pub size: u64,
    /// `SIZE` of the quick run.
    pub quick_size: u64,
    /// What `SIZE` means.
    pub input: &'static str,
    /// Bytes the program mallocs at `SIZE` (bounds the pool for persistent `malloc`).
    pub(super) malloc_bytes: fn(u64) -> u64,
}

/// The kernels, in report order.
pub const KERNELS: [Kernel; 8] = [
    Kernel {
        id: KernelId::Histogram,
        name: "histogram",
        size: 512,
        quick_size: 16,
        input: "SIZE × 64 Ki RGB pixels",
        malloc_bytes: |s| s * 3 * 65536 + 8192,
    },
    Kernel {
        id: KernelId::Kmeans,
        name: "kmeans",
        size: 64,
        quick_size: 4,
        input: "SIZE × 4 Ki points, 16 clusters",
        malloc_bytes: |s| s * 4096 * 16 + 4096,
    },
    Kernel {
        id: KernelId::LinearRegression,
        name: "linear_regression",
        size: 512,
        quick_size: 16,
        input: "SIZE × 64 Ki points",
        malloc_bytes: |s| s * 2 * 65536 + 4096,
    },
    Kernel {
        id: KernelId::MatrixMultiply,
        name: "matrix_multiply",
        size: 640,
        quick_size: 96,
        input: "SIZE × SIZE matrices",
        malloc_bytes: |s| s * s * 12,
    },
    Kernel {
        id: KernelId::Pca,
        name: "pca",
        size: 320,
        quick_size: 48,
        input: "SIZE × 8·SIZE matrix",
        malloc_bytes: |s| s * s * 8 * 4 + s * s * 8 + s * 8,
    },
    Kernel {
        id: KernelId::StringMatch,
        name: "string_match",
        size: 128,
        quick_size: 8,
        input: "SIZE × 64 Ki words",
        malloc_bytes: |s| s * 65536 * 12,
    },
    Kernel {
        id: KernelId::WordCount,
        name: "word_count",
        size: 64,
        quick_size: 4,
        input: "SIZE × 64 Ki words",
        malloc_bytes: |s| s * 65536 * 10 + (24 << 20),
    },
    Kernel {
        id: KernelId::ReverseIndex,
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

    fn link(self) -> Link {
        match self {
            Variant::Pthreads => Link::Pthreads,
            Variant::Nvthreads | Variant::PersistentMalloc => Link::Runtime,
        }
    }
}

/// One run of a program.
#[derive(Clone, Copy, Debug)]
pub struct RunTimes {
    /// The program's own measurement (first `pthread_create` to last join), seconds.
    pub compute_s: f64,
    /// Process start to exit, seconds.
    pub wall_s: f64,
    /// The runtime's counters (zero for pthreads).
    pub stats: Stats,
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
    pub fn stats(&self, variant: Variant) -> Stats {
        self.runs
            .get(&variant)
            .and_then(|runs| runs.first())
            .map(|run| run.stats)
            .unwrap_or_default()
    }
}

/// Runs one kernel in one variant once; returns its times and result digest.
fn run_kernel(
    programs: &Programs,
    settings: &Settings,
    kernel: &Kernel,
    variant: Variant,
) -> Result<(RunTimes, String), ProgramError> {
    let size = kernel.size_for(settings.quick);
    let link = variant.link();
    let mut command = child_command(programs.path(kernel.name, link, false));
    command
        .arg(settings.threads.to_string())
        .arg(size.to_string());
    let pool = programs.pool(kernel.name);
    if link == Link::Runtime {
        let sizes = PoolSizes {
            malloc_bytes: (kernel.malloc_bytes)(size),
            persistent: variant == Variant::PersistentMalloc,
            ns_per_page: settings.nvm_ns_per_page,
            log_mb: None,
        };
        runtime_env(&mut command, &pool, sizes);
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
