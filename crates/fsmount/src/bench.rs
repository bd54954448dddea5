//! fio on the FUSE mount against tmpfs and ext4 on a loop device (the `pmfs` section of
//! `ferrite eval`): pmemfile-style jobs, append and random read/write at 64 B, 4 KiB and
//! 64 KiB, one job at a time, `psync` engine, buffered I/O.
//!
//! The three targets sit on the same medium (DRAM): the pool and the ext4 image are files
//! in `/dev/shm`. Reads on all three are served by the kernel's page cache once a page has
//! been read (FUSE caches file data too); every write through FUSE reaches the file system
//! (write-through), where it is durable on return.

use crate::{MountConfig, Mounted};
use fs::{Fs, MkfsOptions, MountOptions};
use pmem::{Pool, Protection};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A fio job of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FioJob {
    /// `append`, `randread` or `randwrite`.
    pub kind: &'static str,
    /// Block size in bytes.
    pub bs: u64,
}

/// The job matrix: every kind at 64 B, 4 KiB and 64 KiB (only 4 KiB when `quick`).
pub fn jobs(quick: bool) -> Vec<FioJob> {
    let sizes: &[u64] = if quick { &[4096] } else { &[64, 4096, 65536] };
    ["append", "randread", "randwrite"]
        .iter()
        .flat_map(|&kind| sizes.iter().map(move |&bs| FioJob { kind, bs }))
        .collect()
}

/// What one fio job measured.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FioResult {
    /// The job.
    pub job: FioJob,
    /// Target name.
    pub target: String,
    /// Operations per second.
    pub iops: f64,
    /// Mean completion latency, ns.
    pub mean_ns: f64,
    /// Bytes per second.
    pub bytes_per_s: f64,
}

/// fio, if installed.
pub fn fio_path() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("fio"))
            .find(|p| p.is_file())
    })
}

/// How long and how big each job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
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
}

/// Runs one job in `dir` and parses fio's JSON output.
pub fn run_fio(
    fio: &Path,
    dir: &Path,
    target: &str,
    job: FioJob,
    settings: &FioSettings,
) -> Result<FioResult, String> {
    let name = format!("{}-{}", job.kind, job.bs);
    let mut command = Command::new(fio);
    command
        .arg(format!("--name={name}"))
        .arg(format!("--directory={}", dir.display()))
        .arg(format!("--filename={name}.dat"))
        .arg(format!("--bs={}", job.bs))
        .args([
            "--ioengine=psync",
            "--fallocate=none",
            "--output-format=json",
        ]);
    if job.kind == "append" {
        let bytes = (job.bs * settings.appends).min(settings.file_bytes * 2);
        command.args(["--rw=write", &format!("--size={bytes}")]);
    } else {
        command.args([
            &format!("--rw={}", job.kind),
            &format!("--size={}", settings.file_bytes),
            "--time_based",
            &format!("--runtime={}ms", settings.runtime_ms),
        ]);
    }
    let output = command.output().map_err(|e| format!("running fio: {e}"))?;
    let _ = std::fs::remove_file(dir.join(format!("{name}.dat")));
    if !output.status.success() {
        return Err(format!(
            "fio {name} on {target}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    parse_fio(&output.stdout, target, job)
}

fn parse_fio(json: &[u8], target: &str, job: FioJob) -> Result<FioResult, String> {
    let value: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("fio output is not JSON: {e}"))?;
    let side = if job.kind == "randread" {
        "read"
    } else {
        "write"
    };
    let stats = &value["jobs"][0][side];
    let number = |v: &serde_json::Value, what: &str| {
        v.as_f64()
            .ok_or_else(|| format!("fio output lacks {side}.{what}"))
    };
    Ok(FioResult {
        job,
        target: target.to_owned(),
        iops: number(&stats["iops"], "iops")?,
        mean_ns: number(&stats["clat_ns"]["mean"], "clat_ns.mean")?,
        bytes_per_s: number(&stats["bw_bytes"], "bw_bytes")?,
    })
}

/// A PMFS pool in `pool_dir` mounted on a fresh directory through FUSE, by this process.
#[derive(Debug)]
pub struct FuseTarget {
    mounted: Option<Mounted>,
    /// The mount point.
    pub dir: PathBuf,
    pool: PathBuf,
}

impl FuseTarget {
    /// Formats a pool of `size` bytes in `pool_dir` and mounts it.
    pub fn new(pool_dir: &Path, size: u64, protection: Protection) -> Result<Self, String> {
        if !Path::new("/dev/fuse").exists() {
            return Err("/dev/fuse does not exist".into());
        }
        let pool = pool_dir.join(format!("ferrite-eval-fuse-{}.pool", std::process::id()));
        let dir = std::env::temp_dir().join(format!("ferrite-eval-fuse-{}", std::process::id()));
        let _ = std::fs::remove_file(&pool);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let created = Pool::create(&pool, &fs::pool_options(size)).map_err(|e| e.to_string())?;
        created
            .pm()
            .protect(protection)
            .map_err(|e| e.to_string())?;
        let fs = Fs::mkfs(created, &MkfsOptions::default(), MountOptions::default())
            .map_err(|e| e.to_string())?;
        let mounted = crate::spawn(fs, &dir, &MountConfig::default()).map_err(|e| {
            let _ = std::fs::remove_file(&pool);
            e.to_string()
        })?;
        Ok(FuseTarget {
            mounted: Some(mounted),
            dir,
            pool,
        })
    }
}

impl Drop for FuseTarget {
    fn drop(&mut self) {
        if let Some(mounted) = self.mounted.take() {
            let _ = mounted.unmount();
        }
        let _ = std::fs::remove_dir(&self.dir);
        let _ = std::fs::remove_file(&self.pool);
    }
}

/// ext4 on a loop device over an image file in `image_dir`, mounted on a fresh directory.
/// Needs root, `losetup` and `mkfs.ext4`.
#[derive(Debug)]
pub struct Ext4Loop {
    image: PathBuf,
    device: String,
    /// The mount point.
    pub dir: PathBuf,
    mounted: bool,
}

fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

impl Ext4Loop {
    /// Creates the image, attaches it, formats and mounts it.
    pub fn new(image_dir: &Path, size: u64) -> Result<Self, String> {
        let id = std::process::id();
        let image = image_dir.join(format!("ferrite-eval-ext4-{id}.img"));
        let dir = std::env::temp_dir().join(format!("ferrite-eval-ext4-{id}"));
        let file =
            std::fs::File::create(&image).map_err(|e| format!("{}: {e}", image.display()))?;
        file.set_len(size).map_err(|e| e.to_string())?;
        drop(file);
        let image_text = image.display().to_string();
        let device = match run("losetup", &["--find", "--show", &image_text]) {
            Ok(device) => device,
            Err(e) => {
                let _ = std::fs::remove_file(&image);
                return Err(e);
            }
        };
        let mut target = Ext4Loop {
            image,
            device,
            dir,
            mounted: false,
        };
        run("mkfs.ext4", &["-q", "-F", &target.device])?;
        std::fs::create_dir_all(&target.dir).map_err(|e| e.to_string())?;
        let dir_text = target.dir.display().to_string();
        run("mount", &[&target.device, &dir_text])?;
        target.mounted = true;
        Ok(target)
    }
}

impl Drop for Ext4Loop {
    fn drop(&mut self) {
        if self.mounted {
            let _ = run("umount", &[&self.dir.display().to_string()]);
        }
        let _ = run("losetup", &["-d", &self.device]);
        let _ = std::fs::remove_dir(&self.dir);
        let _ = std::fs::remove_file(&self.image);
    }
}
