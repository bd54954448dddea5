//! The PMFS (EuroSys'14) measurements behind the `pmfs` section of `ferrite eval`:
//! per-operation latency of the library against system calls on tmpfs ([`latency`]), the
//! same library runs under each write protection, fio jobs ([`fio`]) and the sqlite
//! workload ([`sqlite`]) on the library, the direct-access preload, the FUSE mount (durable
//! on return, and with the write-back cache), tmpfs and ext4 on a loop device
//! ([`targets`]). Parts that need fio, sqlite3, FUSE or loop devices are skipped with the
//! reason when unavailable.

pub mod fio;
pub mod latency;
pub mod sqlite;
pub mod targets;

use crate::measure::Summary;
use fio::{FioJob, FioNumbers, FioSettings};
use latency::Costs;
use pmem::{Pool, Protection};
use pmfs::{Fs, MkfsOptions, MountOptions, Posix};
use serde::Serialize;
use sqlite::SqliteSettings;
use std::path::Path;
use targets::FioTarget;

/// Where the sqlite workload runs (the library has no sqlite: that needs a VFS).
pub const SQLITE_TARGETS: [FioTarget; 4] = [
    FioTarget::Preload,
    FioTarget::Fuse,
    FioTarget::FuseWriteback,
    FioTarget::Tmpfs,
];

/// The protections measured after the unprotected baseline.
pub const GUARDS: [Protection; 2] = [Protection::Mprotect, Protection::Mpk];

/// How much to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Settings {
    /// Runs per latency measurement (the median is reported).
    pub runs: usize,
    /// One latency run.
    pub latency: latency::Settings,
    /// One fio job.
    pub fio: FioSettings,
    /// The sqlite workload.
    pub sqlite: SqliteSettings,
    /// Only 4 KiB fio jobs.
    pub quick: bool,
}

impl Settings {
    /// The full evaluation.
    pub const DEFAULT: Settings = Settings {
        runs: 5,
        latency: latency::Settings::DEFAULT,
        fio: FioSettings::DEFAULT,
        sqlite: SqliteSettings::DEFAULT,
        quick: false,
    };
    /// Small and fast: numbers are indicative only.
    pub const QUICK: Settings = Settings {
        runs: 3,
        latency: latency::Settings::QUICK,
        fio: FioSettings::QUICK,
        sqlite: SqliteSettings::QUICK,
        quick: true,
    };

    /// The fio jobs of these settings.
    pub fn fio_jobs(&self) -> Vec<FioJob> {
        fio::jobs(self.quick)
    }

    /// Progress steps [`run`] reports.
    pub fn steps(&self) -> usize {
        self.runs * (2 + GUARDS.len())
            + self.fio_jobs().len() * FioTarget::ALL.len()
            + SQLITE_TARGETS
                .iter()
                .map(|&t| sqlite_runs_on(&self.sqlite, t))
                .sum::<usize>()
    }
}

/// The library's latency under one write protection.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Guarded {
    /// The protection.
    pub mode: Protection,
    /// Medians per operation, or why the protection is unavailable here.
    pub result: Result<Costs, String>,
}

/// One fio job on one target.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FioResult {
    /// The job.
    pub job: FioJob,
    /// Where it ran.
    pub target: FioTarget,
    /// What it measured.
    pub numbers: FioNumbers,
}

/// The sqlite workload on one target.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SqliteResult {
    /// Where it ran.
    pub target: FioTarget,
    /// Seconds per run.
    pub seconds: Summary,
}

/// Everything the `pmfs` section reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PmfsResults {
    /// What was measured.
    pub settings: Settings,
    /// System calls on tmpfs: medians per operation.
    pub kernel_tmpfs: Costs,
    /// The library API, unprotected: medians per operation.
    pub library: Costs,
    /// The library API under each of [`GUARDS`].
    pub protection: Vec<Guarded>,
    /// fio jobs that ran (the library's: the same pattern in this process).
    pub fio: Vec<FioResult>,
    /// The sqlite workload where it ran.
    pub sqlite: Vec<SqliteResult>,
    /// Why parts were skipped or failed.
    pub notes: Vec<String>,
}

impl PmfsResults {
    /// The fio numbers of `job` on `target`, if it ran.
    pub fn fio(&self, target: FioTarget, job: FioJob) -> Option<&FioNumbers> {
        self.fio
            .iter()
            .find(|r| r.target == target && r.job == job)
            .map(|r| &r.numbers)
    }

    /// The sqlite seconds on `target`, if it ran.
    pub fn sqlite(&self, target: FioTarget) -> Option<&Summary> {
        self.sqlite
            .iter()
            .find(|r| r.target == target)
            .map(|r| &r.seconds)
    }
}

/// Why the measurement could not be made at all.
#[derive(Debug, thiserror::Error)]
pub enum PmfsBenchError {
    /// The kernel baseline failed.
    #[error("tmpfs run in {dir}: {source}")]
    Kernel {
        /// The scratch directory's parent.
        dir: String,
        /// The failure.
        source: std::io::Error,
    },
    /// The unprotected library run failed.
    #[error("the unprotected library run: {0}")]
    Library(String),
}

/// Measures everything with scratch files in `dir`; `progress(what)` is called before each
/// of [`Settings::steps`] steps.
pub fn run(
    dir: &Path,
    settings: &Settings,
    progress: &dyn Fn(&str),
) -> Result<PmfsResults, PmfsBenchError> {
    let kernel_tmpfs = kernel_runs(dir, settings, progress)?;
    let library =
        library_runs(dir, Protection::None, settings, progress).map_err(PmfsBenchError::Library)?;
    let protection = GUARDS
        .iter()
        .map(|&mode| Guarded {
            mode,
            result: library_runs(dir, mode, settings, progress),
        })
        .collect();
    let mut notes = Vec::new();
    let fio = fio_matrix(dir, settings, progress, &mut notes);
    let sqlite = sqlite_runs(dir, settings, progress, &mut notes);
    Ok(PmfsResults {
        settings: *settings,
        kernel_tmpfs,
        library,
        protection,
        fio,
        sqlite,
        notes,
    })
}

fn kernel_runs(
    dir: &Path,
    settings: &Settings,
    progress: &dyn Fn(&str),
) -> Result<Costs, PmfsBenchError> {
    let failed = |source| PmfsBenchError::Kernel {
        dir: dir.display().to_string(),
        source,
    };
    let mut runs = Vec::new();
    for _ in 0..settings.runs {
        progress("tmpfs system calls");
        let scratch = tempfile::Builder::new()
            .prefix("ferrite-eval-pmfs-")
            .tempdir_in(dir)
            .map_err(failed)?;
        runs.push(latency::kernel_run(scratch.path(), &settings.latency).map_err(failed)?);
    }
    Ok(Costs::medians(&runs))
}

/// Medians of the library runs on a fresh pool with `guard`, or why they could not run.
fn library_runs(
    dir: &Path,
    guard: Protection,
    settings: &Settings,
    progress: &dyn Fn(&str),
) -> Result<Costs, String> {
    let path = dir.join(format!(
        "ferrite-eval-pmfs-{}-{}.pool",
        guard.name(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let options = pmfs::pool_options(settings.latency.pool_bytes());
    let pool = Pool::create(&path, &options).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&path);
    if let Err(error) = pool.pm().protect(guard) {
        for _ in 0..settings.runs {
            progress("library (protection unavailable)");
        }
        return Err(error.to_string());
    }
    let fs = Fs::mkfs(pool, &MkfsOptions::default(), MountOptions::default())
        .map_err(|e| e.to_string())?;
    let px = Posix::new(fs);
    let mut runs = Vec::new();
    for _ in 0..settings.runs {
        progress(&format!("library, protection {}", guard.name()));
        runs.push(latency::library_run(&px, &settings.latency).map_err(|e| e.to_string())?);
    }
    px.into_fs().unmount().map_err(|e| e.to_string())?;
    Ok(Costs::medians(&runs))
}

/// Runs every job on every target that can be set up; a target that cannot is noted.
fn fio_matrix(
    dir: &Path,
    settings: &Settings,
    progress: &dyn Fn(&str),
    notes: &mut Vec<String>,
) -> Vec<FioResult> {
    let jobs = settings.fio_jobs();
    let Some(fio) = fio::fio_path() else {
        for _ in 0..jobs.len() * FioTarget::ALL.len() {
            progress("fio skipped");
        }
        notes.push("fio skipped: fio is not installed (Debian package fio)".into());
        return Vec::new();
    };
    let mut results = Vec::new();
    for target in FioTarget::ALL {
        if target == FioTarget::Library {
            library_jobs(dir, settings, &jobs, progress, notes, &mut results);
            continue;
        }
        let set_up = match target.set_up(dir, settings.fio.target_bytes()) {
            Ok(set_up) => set_up,
            Err(why) => {
                for _ in &jobs {
                    progress("fio target skipped");
                }
                notes.push(format!("fio on {} skipped: {why}", target.label()));
                continue;
            }
        };
        for &job in &jobs {
            progress(&format!(
                "fio {} {} on {}",
                job.kind.label(),
                job.bs,
                target.label()
            ));
            match fio::run_fio(&fio, set_up.dir(), &set_up.env(), job, &settings.fio) {
                Ok(numbers) => results.push(FioResult {
                    job,
                    target,
                    numbers,
                }),
                Err(why) => notes.push(format!("{why} on {}", target.label())),
            }
        }
    }
    results
}

/// The fio jobs' access pattern through the library in this process, on a fresh pool.
fn library_jobs(
    dir: &Path,
    settings: &Settings,
    jobs: &[FioJob],
    progress: &dyn Fn(&str),
    notes: &mut Vec<String>,
    results: &mut Vec<FioResult>,
) {
    let path = dir.join(format!(
        "ferrite-eval-pmfs-jobs-{}.pool",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let made = Pool::create(&path, &pmfs::pool_options(settings.fio.target_bytes()))
        .map_err(|e| e.to_string())
        .and_then(|pool| {
            Fs::mkfs(pool, &MkfsOptions::default(), MountOptions::default())
                .map_err(|e| e.to_string())
        });
    let _ = std::fs::remove_file(&path);
    let px = match made {
        Ok(fs) => Posix::new(fs),
        Err(why) => {
            for _ in jobs {
                progress("library jobs skipped");
            }
            notes.push(format!("library jobs skipped: {why}"));
            return;
        }
    };
    for &job in jobs {
        progress(&format!("{} {} on the library", job.kind.label(), job.bs));
        match fio::library_job(&px, job, &settings.fio) {
            Ok(numbers) => results.push(FioResult {
                job,
                target: FioTarget::Library,
                numbers,
            }),
            Err(e) => notes.push(format!("library {} {}: {e}", job.kind.label(), job.bs)),
        }
    }
    let _ = px.into_fs().unmount();
}

/// Runs of the sqlite workload on `target`.
fn sqlite_runs_on(settings: &SqliteSettings, target: FioTarget) -> usize {
    match target {
        FioTarget::Fuse | FioTarget::FuseWriteback => settings.mount_runs,
        _ => settings.runs,
    }
}

/// The sqlite workload on each of [`SQLITE_TARGETS`] that can be set up.
fn sqlite_runs(
    dir: &Path,
    settings: &Settings,
    progress: &dyn Fn(&str),
    notes: &mut Vec<String>,
) -> Vec<SqliteResult> {
    let skip = |progress: &dyn Fn(&str), target| {
        for _ in 0..sqlite_runs_on(&settings.sqlite, target) {
            progress("sqlite skipped");
        }
    };
    let Some(sqlite) = sqlite::sqlite_path() else {
        for target in SQLITE_TARGETS {
            skip(progress, target);
        }
        notes.push("sqlite skipped: sqlite3 is not installed (Debian package sqlite3)".into());
        return Vec::new();
    };
    let mut results = Vec::new();
    for target in SQLITE_TARGETS {
        let set_up = match target.set_up(dir, settings.fio.target_bytes()) {
            Ok(set_up) => set_up,
            Err(why) => {
                skip(progress, target);
                notes.push(format!("sqlite on {} skipped: {why}", target.label()));
                continue;
            }
        };
        let mut seconds = Vec::new();
        for _ in 0..sqlite_runs_on(&settings.sqlite, target) {
            progress(&format!("sqlite on {}", target.label()));
            match sqlite::run_once(&sqlite, set_up.as_ref(), settings.sqlite.inserts) {
                Ok(s) => seconds.push(s),
                Err(why) => notes.push(why),
            }
        }
        if let Some(seconds) = Summary::of(&seconds) {
            results.push(SqliteResult { target, seconds });
        }
    }
    results
}
