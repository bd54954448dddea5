//! fio jobs on a directory (pmemfile-style: append and random read/write at 64 B, 4 KiB and
//! 64 KiB, one job at a time, `psync` engine, buffered I/O), parsed from fio's JSON output.

use pmem::Persist;
use pmfs::posix::{O_CREAT, O_RDWR, O_TRUNC};
use pmfs::{Errno, Posix};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// What a job does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum FioKind {
    /// Sequential writes growing a new file.
    #[serde(rename = "append")]
    Append,
    /// Random reads of a file laid out beforehand.
    #[serde(rename = "randread")]
    RandRead,
    /// Random overwrites of a file laid out beforehand.
    #[serde(rename = "randwrite")]
    RandWrite,
}

impl FioKind {
    /// Every kind, in report order.
    pub const ALL: [FioKind; 3] = [FioKind::Append, FioKind::RandRead, FioKind::RandWrite];

    /// The kind's name in tables.
    pub fn label(self) -> &'static str {
        match self {
            FioKind::Append => "append",
            FioKind::RandRead => "randread",
            FioKind::RandWrite => "randwrite",
        }
    }

    /// The side of fio's JSON report that holds the job's numbers.
    fn side(self) -> &'static str {
        match self {
            FioKind::RandRead => "read",
            FioKind::Append | FioKind::RandWrite => "write",
        }
    }
}

/// A fio job of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct FioJob {
    /// What the job does.
    pub kind: FioKind,
    /// Block size in bytes.
    pub bs: u64,
}

/// The job matrix: every kind at 64 B, 4 KiB and 64 KiB (only 4 KiB when `quick`).
pub fn jobs(quick: bool) -> Vec<FioJob> {
    let sizes: &[u64] = if quick { &[4096] } else { &[64, 4096, 65536] };
    FioKind::ALL
        .iter()
        .flat_map(|&kind| sizes.iter().map(move |&bs| FioJob { kind, bs }))
        .collect()
}

/// What one fio job measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FioNumbers {
    /// Operations per second.
    pub iops: f64,
    /// Mean completion latency, ns.
    pub mean_ns: f64,
    /// Bytes per second.
    pub bytes_per_s: f64,
}

/// How long and how big each job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FioSettings {
    /// Random jobs run this long (ms) on a file of `file_bytes`.
    pub runtime_ms: u64,
    /// File size of the random jobs.
    pub file_bytes: u64,
    /// Appends per append job (capped at `file_bytes * 2` bytes).
    pub appends: u64,
}

impl FioSettings {
    /// About a second per job.
    pub const DEFAULT: FioSettings = FioSettings {
        runtime_ms: 1000,
        file_bytes: 16 << 20,
        appends: 20_000,
    };
    /// A fraction of a second per job.
    pub const QUICK: FioSettings = FioSettings {
        runtime_ms: 200,
        file_bytes: 4 << 20,
        appends: 2_000,
    };

    /// Bytes a target needs to hold every job's file at once, with room to spare.
    pub fn target_bytes(&self) -> u64 {
        self.file_bytes * 4 + (128 << 20)
    }
}

/// fio, if installed.
pub fn fio_path() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("fio"))
            .find(|p| p.is_file())
    })
}

/// Runs `job` in `dir` with environment `env` and parses fio's JSON output; the error says
/// why it could not run. Jobs run as threads of fio's process (the preload library serves
/// one process).
pub fn run_fio(
    fio: &Path,
    dir: &Path,
    env: &[(String, String)],
    job: FioJob,
    settings: &FioSettings,
) -> Result<FioNumbers, String> {
    let name = format!("{}-{}", job.kind.label(), job.bs);
    let mut command = Command::new(fio);
    command.envs(env.iter().map(|(k, v)| (k, v)));
    command
        .arg(format!("--name={name}"))
        .arg(format!("--directory={}", dir.display()))
        .arg(format!("--filename={name}.dat"))
        .arg(format!("--bs={}", job.bs))
        .args([
            "--ioengine=psync",
            "--thread",
            "--fallocate=none",
            "--output-format=json",
        ]);
    if job.kind == FioKind::Append {
        let bytes = (job.bs * settings.appends).min(settings.file_bytes * 2);
        command.args(["--rw=write", &format!("--size={bytes}")]);
    } else {
        command.args([
            &format!("--rw={}", job.kind.label()),
            &format!("--size={}", settings.file_bytes),
            "--time_based",
            &format!("--runtime={}ms", settings.runtime_ms),
        ]);
    }
    let output = command.output().map_err(|e| format!("running fio: {e}"))?;
    // Removed through the same environment (a preloaded file is not in the kernel's view).
    let _ = Command::new("rm")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .arg("-f")
        .arg(dir.join(format!("{name}.dat")))
        .status();
    if !output.status.success() {
        return Err(format!(
            "fio {name}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    parse_fio(&output.stdout, job.kind)
}

fn parse_fio(json: &[u8], kind: FioKind) -> Result<FioNumbers, String> {
    let value: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("fio output is not JSON: {e}"))?;
    let side = kind.side();
    let stats = &value["jobs"][0][side];
    let number = |v: &serde_json::Value, what: &str| {
        v.as_f64()
            .ok_or_else(|| format!("fio output lacks {side}.{what}"))
    };
    Ok(FioNumbers {
        iops: number(&stats["iops"], "iops")?,
        mean_ns: number(&stats["clat_ns"]["mean"], "clat_ns.mean")?,
        bytes_per_s: number(&stats["bw_bytes"], "bw_bytes")?,
    })
}

/// The access pattern of `job` through the library API in this process, on a fresh file
/// in `px`'s root: a file of `file_bytes` laid out first, then random aligned reads or
/// overwrites for `runtime_ms`; an append job writes its bytes once.
pub fn library_job<B: Persist>(
    px: &Posix<B>,
    job: FioJob,
    settings: &FioSettings,
) -> Result<FioNumbers, Errno> {
    let path = format!("/{}-{}.dat", job.kind.label(), job.bs);
    let fd = px.open(&path, O_CREAT | O_RDWR | O_TRUNC, 0o644)?;
    let block = vec![0x5au8; job.bs as usize];
    let measured = match job.kind {
        FioKind::Append => {
            let bytes = (job.bs * settings.appends).min(settings.file_bytes * 2);
            let ops = bytes / job.bs;
            let start = Instant::now();
            for _ in 0..ops {
                px.write(fd, &block)?;
            }
            (ops, start.elapsed())
        }
        kind => {
            let chunk = vec![7u8; 1 << 20];
            for off in (0..settings.file_bytes).step_by(chunk.len()) {
                px.pwrite(fd, &chunk, off)?;
            }
            let blocks = (settings.file_bytes / job.bs).max(1);
            let mut rng = ChaCha8Rng::seed_from_u64(job.bs);
            let mut buf = vec![0u8; job.bs as usize];
            let deadline = Duration::from_millis(settings.runtime_ms);
            let start = Instant::now();
            let mut ops = 0u64;
            while start.elapsed() < deadline {
                for _ in 0..64 {
                    let off = rng.random_range(0..blocks) * job.bs;
                    if kind == FioKind::RandRead {
                        px.pread(fd, &mut buf, off)?;
                    } else {
                        px.pwrite(fd, &block, off)?;
                    }
                }
                ops += 64;
            }
            (ops, start.elapsed())
        }
    };
    px.close(fd)?;
    px.unlink(&path)?;
    let (ops, elapsed) = measured;
    let secs = elapsed.as_secs_f64().max(1e-9);
    Ok(FioNumbers {
        iops: ops as f64 / secs,
        mean_ns: secs * 1e9 / ops.max(1) as f64,
        bytes_per_s: (ops * job.bs) as f64 / secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_matrix_covers_every_kind() {
        assert_eq!(jobs(true).len(), 3);
        assert_eq!(jobs(false).len(), 9);
        assert!(jobs(true).iter().all(|j| j.bs == 4096));
    }

    #[test]
    fn parses_the_side_of_the_job() {
        let json = br#"{"jobs":[{"read":{"iops":10.0,"clat_ns":{"mean":5.0},"bw_bytes":40960},
            "write":{"iops":20.0,"clat_ns":{"mean":7.0},"bw_bytes":81920}}]}"#;
        let read = parse_fio(json, FioKind::RandRead).expect("read");
        assert_eq!((read.iops, read.mean_ns), (10.0, 5.0));
        let write = parse_fio(json, FioKind::RandWrite).expect("write");
        assert_eq!((write.iops, write.bytes_per_s), (20.0, 81920.0));
        assert!(parse_fio(b"{}", FioKind::Append).is_err());
        assert!(parse_fio(b"not json", FioKind::Append).is_err());
    }
}
