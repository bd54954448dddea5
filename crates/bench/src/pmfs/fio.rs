//! fio jobs on a directory (pmemfile-style: append and random read/write at 64 B, 4 KiB and
//! 64 KiB, one job at a time, `psync` engine, buffered I/O), parsed from fio's JSON output.

use crate::scratch::child_command;
use pmem::Persist;
use pmfs::posix::{O_CREAT, O_RDWR, O_TRUNC};
use pmfs::{Errno, Posix};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::path::{Path, PathBuf};
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
    /// Operations per second: `ios` over `run_ms`.
    pub iops: f64,
    /// Mean completion latency, ns.
    pub mean_ns: f64,
    /// Bytes per second: the bytes moved over `run_ms`.
    pub bytes_per_s: f64,
    /// Operations the job completed.
    pub ios: u64,
    /// How long the job ran, ms. fio counts whole milliseconds, so its IOPS are exact to
    /// ±1 ms over this; the library job times itself to the nanosecond.
    pub run_ms: f64,
}

impl FioNumbers {
    /// Rates from a count of operations and bytes over a run of `run_ms`.
    pub fn over(ios: u64, bytes: u64, run_ms: f64, mean_ns: f64) -> FioNumbers {
        let secs = run_ms / 1000.0;
        FioNumbers {
            iops: ios as f64 / secs,
            mean_ns,
            bytes_per_s: bytes as f64 / secs,
            ios,
            run_ms,
        }
    }
}

/// How long and how big each job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FioSettings {
    /// Every job stops after this long (ms); the random jobs run exactly this long, on a
    /// file of `file_bytes`.
    pub runtime_ms: u64,
    /// File size of the random jobs.
    pub file_bytes: u64,
    /// Most appends per append job (at most `append_bytes_max` bytes); an append job stops
    /// at this count or at `runtime_ms`, whichever comes first.
    pub appends: u64,
    /// Most bytes one append job writes.
    pub append_bytes_max: u64,
}

impl FioSettings {
    /// About a second per job.
    pub const DEFAULT: FioSettings = FioSettings {
        runtime_ms: 1000,
        file_bytes: 16 << 20,
        appends: 200_000,
        append_bytes_max: 256 << 20,
    };
    /// A fraction of a second per job. The appends are enough that even tmpfs appends for
    /// well over 100 ms: fio times a job in whole milliseconds, so a job of a few
    /// milliseconds would report one of a handful of rates.
    pub const QUICK: FioSettings = FioSettings {
        runtime_ms: 200,
        file_bytes: 4 << 20,
        appends: 30_000,
        append_bytes_max: 128 << 20,
    };

    /// Bytes one append job of `bs`-byte blocks writes at most.
    pub fn append_bytes(&self, bs: u64) -> u64 {
        let blocks = (self.append_bytes_max / bs.max(1)).min(self.appends).max(1);
        blocks * bs
    }

    /// Bytes a target needs to hold every job's file at once, with room to spare.
    pub fn target_bytes(&self) -> u64 {
        self.append_bytes_max + self.file_bytes * 2 + (128 << 20)
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
    let mut command = child_command(fio);
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
    command.arg(format!("--runtime={}ms", settings.runtime_ms));
    if job.kind == FioKind::Append {
        // Not time-based: the job ends at its size or at the runtime, whichever is first.
        let bytes = settings.append_bytes(job.bs);
        command.args(["--rw=write", &format!("--size={bytes}")]);
    } else {
        command.args([
            &format!("--rw={}", job.kind.label()),
            &format!("--size={}", settings.file_bytes),
            "--time_based",
        ]);
    }
    let output = command.output().map_err(|e| format!("running fio: {e}"))?;
    // Removed through the same environment (a preloaded file is not in the kernel's view).
    let _ = child_command("rm")
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

/// The job's numbers from fio's exact fields: the count of operations (`total_ios`) and
/// bytes (`io_bytes`) over the run (`runtime`, whole ms). fio's own `iops` and `bw_bytes` are
/// the same quotients, the latter truncated to an integer; a run under a millisecond has no
/// rate and is refused.
fn parse_fio(json: &[u8], kind: FioKind) -> Result<FioNumbers, String> {
    let value: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("fio output is not JSON: {e}"))?;
    let side = kind.side();
    let stats = &value["jobs"][0][side];
    let missing = |what: &str| format!("fio output lacks {side}.{what}");
    let count = |what: &str| stats[what].as_u64().ok_or_else(|| missing(what));
    let (ios, bytes, run_ms) = (count("total_ios")?, count("io_bytes")?, count("runtime")?);
    if run_ms == 0 {
        return Err(format!(
            "fio's {side} side ran under a millisecond ({ios} operations): no rate"
        ));
    }
    let mean_ns = stats["clat_ns"]["mean"]
        .as_f64()
        .ok_or_else(|| missing("clat_ns.mean"))?;
    Ok(FioNumbers::over(ios, bytes, run_ms as f64, mean_ns))
}

/// The access pattern of `job` through the library API in this process, on a fresh file
/// in `px`'s root: a file of `file_bytes` laid out first, then random aligned reads or
/// overwrites for `runtime_ms`; an append job writes its bytes once, stopping early at
/// `runtime_ms` as fio's does.
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
            let most = settings.append_bytes(job.bs) / job.bs;
            let deadline = Duration::from_millis(settings.runtime_ms);
            let start = Instant::now();
            let mut ops = 0;
            while ops < most && start.elapsed() < deadline {
                px.write(fd, &block)?;
                ops += 1;
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
    let run_ms = (elapsed.as_secs_f64() * 1000.0).max(1e-6);
    let mean_ns = run_ms * 1e6 / ops.max(1) as f64;
    Ok(FioNumbers::over(ops, ops * job.bs, run_ms, mean_ns))
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
        let json = br#"{"jobs":[{"read":{"iops":10.0,"clat_ns":{"mean":5.0},"bw_bytes":40960,
            "total_ios":10,"io_bytes":40960,"runtime":1000},
            "write":{"iops":20.0,"clat_ns":{"mean":7.0},"bw_bytes":81920,
            "total_ios":20,"io_bytes":81920,"runtime":1000}}]}"#;
        let read = parse_fio(json, FioKind::RandRead).expect("read");
        assert_eq!((read.iops, read.mean_ns), (10.0, 5.0));
        let write = parse_fio(json, FioKind::RandWrite).expect("write");
        assert_eq!((write.iops, write.bytes_per_s), (20.0, 81920.0));
        assert_eq!((write.ios, write.run_ms), (20, 1000.0));
        assert!(parse_fio(b"{}", FioKind::Append).is_err());
        assert!(parse_fio(b"not json", FioKind::Append).is_err());
    }

    /// fio 3.33's report of a 4 KiB append job of 2,000 writes that ran 10 ms: its `iops`
    /// field is 2,000 / 10 ms, rounded to six decimals, and `bw_bytes` an integer. The rate
    /// comes from the counts, and the run length travels with it.
    #[test]
    fn rates_come_from_the_counts_over_the_run() {
        let json = br#"{"jobs":[{"write":{"io_bytes":8192000,"bw_bytes":819200000,
            "iops":200000.000000,"runtime":10,"total_ios":2000,"clat_ns":{"mean":4448.8}}}]}"#;
        let append = parse_fio(json, FioKind::Append).expect("append");
        assert_eq!(append.ios, 2000);
        assert_eq!(append.run_ms, 10.0);
        assert_eq!(append.iops, 200_000.0);
        assert_eq!(append.bytes_per_s, 819_200_000.0);
        let odd = br#"{"jobs":[{"write":{"io_bytes":12288,"bw_bytes":4096,"iops":1.0,
            "runtime":3,"total_ios":3,"clat_ns":{"mean":1.0}}}]}"#;
        let odd = parse_fio(odd, FioKind::Append).expect("odd");
        assert_eq!(
            odd.iops, 1000.0,
            "3 operations in 3 ms, not fio's rounded field"
        );
        let instant = br#"{"jobs":[{"write":{"io_bytes":4096,"runtime":0,"total_ios":1,
            "clat_ns":{"mean":1.0}}}]}"#;
        let refused = parse_fio(instant, FioKind::Append).expect_err("no rate");
        assert!(refused.contains("under a millisecond"), "{refused}");
    }

    #[test]
    fn appends_stop_at_their_count_or_their_byte_cap() {
        let quick = FioSettings::QUICK;
        assert_eq!(quick.append_bytes(4096), 30_000 * 4096);
        assert_eq!(quick.append_bytes(64), 30_000 * 64);
        let capped = FioSettings::DEFAULT.append_bytes(65536);
        assert_eq!(capped, 256 << 20, "the cap, in whole blocks");
        assert!(quick.target_bytes() >= quick.append_bytes(4096) + quick.file_bytes);
    }
}
