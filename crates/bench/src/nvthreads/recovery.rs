//! K-means recovery (NVthreads, EuroSys'17, §5): the crash-tolerant k-means (`-DNVTHREADS`:
//! the centroids and iteration number in an `nvmalloc`'d object) killed right after
//! iteration *n*, restarted on the same pool, and run to convergence.

use super::{
    KernelId, PoolSizes, ProgramError, Programs, Settings, median, number, run, runtime_env, value,
};
use crate::scratch::child_command;
use nvthreads_programs::Link;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

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

impl KmeansRecovery {
    /// Whether every resumed run resumed at or after its crash point and converged to the
    /// uninterrupted run's centroids.
    pub fn all_resumed(&self) -> bool {
        self.points
            .iter()
            .all(|p| p.same_result && p.resumed_from >= p.killed_after)
    }
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
    let kernel = KernelId::Kmeans.kernel();
    let size = kernel.size_for(settings.quick);
    let binary = programs.path(kernel.name, Link::Runtime, true);
    let pool = programs.pool("kmeans-crash");
    let command = |fresh: bool| {
        let mut command = child_command(binary);
        command.args([
            settings.threads.to_string(),
            size.to_string(),
            "verbose".into(),
        ]);
        if fresh {
            let sizes = PoolSizes {
                malloc_bytes: (kernel.malloc_bytes)(size),
                persistent: false,
                ns_per_page: 0,
                log_mb: None,
            };
            runtime_env(&mut command, &pool, sizes);
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
        let iterations: u64 = number(&output.lines, "ITERATIONS", "kmeans")?;
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
        // A run that finds no recovered iteration prints no RESUME line: it resumed at 0.
        let resumed_from: u64 = number(&output.lines, "RESUME", "resumed kmeans").unwrap_or(0);
        let total: u64 = number(&output.lines, "ITERATIONS", "resumed kmeans")?;
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
    let mut child = command
        .spawn()
        .map_err(nvthreads_programs::io("starting kmeans"))?;
    let Some(stdout) = child.stdout.take() else {
        return Err(ProgramError::Run {
            name: "kmeans".into(),
            detail: "no stdout".into(),
        });
    };
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
                let _ = nvthreads::shared::kill_process_group(child.id());
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
