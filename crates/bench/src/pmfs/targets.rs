//! The file systems the fio jobs and the sqlite workload run on, each set up fresh and torn
//! down when dropped: a PMFS pool served by the preload library, the same mounted through
//! FUSE by this process (durable on return, or with the kernel's write-back cache), tmpfs,
//! and ext4 on a loop device. All sit on the same medium (DRAM): the pools and the ext4
//! image are files in the pool directory (`/dev/shm` by default).

use crate::scratch::{
    ScratchDir, ScratchFile, Teardown, child_command, create_with_teardown, on_interrupt,
};
use fsmount::{MountConfig, Mounted};
use pmem::Pool;
use pmfs::{Fs, MkfsOptions, MountOptions};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where a fio job or the sqlite workload runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum FioTarget {
    /// The library API in this process (the jobs' access pattern, no fio).
    #[serde(rename = "library")]
    Library,
    /// The program with the direct-access preload library: the pool mapped in its own
    /// process, no kernel round trip (every write durable on return).
    #[serde(rename = "preload")]
    Preload,
    /// A PMFS pool mounted through FUSE (every write durable on return).
    #[serde(rename = "ferrite-fs (FUSE)")]
    Fuse,
    /// The FUSE mount with the kernel's write-back cache (durable at fsync only).
    #[serde(rename = "FUSE write-back")]
    FuseWriteback,
    /// The FUSE floor: a file system that keeps names and sizes and drops data
    /// (`fsmount::NullFs`), so its IOPS bound any FUSE file system's on this machine.
    #[serde(rename = "FUSE floor (no-op)")]
    FuseFloor,
    /// tmpfs (the kernel's page cache, nothing durable).
    #[serde(rename = "tmpfs")]
    Tmpfs,
    /// ext4 on a loop device over an image in the pool directory.
    #[serde(rename = "ext4 (loop)")]
    Ext4Loop,
}

impl FioTarget {
    /// Every target, in table order.
    pub const ALL: [FioTarget; 7] = [
        FioTarget::Library,
        FioTarget::Preload,
        FioTarget::Fuse,
        FioTarget::FuseWriteback,
        FioTarget::FuseFloor,
        FioTarget::Tmpfs,
        FioTarget::Ext4Loop,
    ];

    /// The target's name in tables.
    pub fn label(self) -> &'static str {
        match self {
            FioTarget::Library => "library",
            FioTarget::Preload => "preload",
            FioTarget::Fuse => "ferrite-fs (FUSE)",
            FioTarget::FuseWriteback => "FUSE write-back",
            FioTarget::FuseFloor => "FUSE floor (no-op)",
            FioTarget::Tmpfs => "tmpfs",
            FioTarget::Ext4Loop => "ext4 (loop)",
        }
    }

    /// Sets the target up in `pool_dir` with room for `size` bytes (not for
    /// [`FioTarget::Library`], which runs in this process).
    pub fn set_up(self, pool_dir: &Path, size: u64) -> Result<Box<dyn TargetDir>, String> {
        match self {
            FioTarget::Library => Err("the library runs in this process".into()),
            FioTarget::Preload => Ok(Box::new(PreloadTarget::new(pool_dir, size)?)),
            FioTarget::Fuse => Ok(Box::new(FuseTarget::new(pool_dir, size, false)?)),
            FioTarget::FuseWriteback => Ok(Box::new(FuseTarget::new(pool_dir, size, true)?)),
            FioTarget::FuseFloor => Ok(Box::new(FuseFloor::new()?)),
            FioTarget::Tmpfs => Ok(Box::new(TmpfsTarget::new(pool_dir)?)),
            FioTarget::Ext4Loop => Ok(Box::new(Ext4Loop::new(pool_dir, size)?)),
        }
    }
}

/// A target that is set up: its directory and the environment a program needs to reach it,
/// torn down on drop.
pub trait TargetDir: std::fmt::Debug {
    /// The directory the programs work in.
    fn dir(&self) -> &Path;

    /// Environment variables the programs run with.
    fn env(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// The preload library built beside the running executable: in its directory (`cargo build`
/// of the workspace) or in `deps` below it (built as a dependency); built with cargo, in the
/// running executable's profile, when neither has it (`cargo run -- eval` builds only the CLI).
pub fn preload_library() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut profile_dir = exe.parent().map(Path::to_owned).unwrap_or_default();
    // Test executables live one level down, in `deps`.
    if profile_dir.ends_with("deps") {
        profile_dir.pop();
    }
    let find = || {
        [profile_dir.clone(), profile_dir.join("deps")]
            .into_iter()
            .map(|dir| dir.join("libpmfs_preload.so"))
            .find(|lib| lib.is_file())
    };
    if let Some(lib) = find() {
        return Ok(lib);
    }
    build_preload_library(&profile_dir)?;
    find().ok_or_else(|| {
        format!(
            "{} is not built (cargo build --release -p pmfs-preload)",
            profile_dir.join("libpmfs_preload.so").display()
        )
    })
}

/// `cargo build -p pmfs-preload` into the target directory `profile_dir` belongs to, in its
/// profile; only when this binary was built from a checkout that still has the sources.
fn build_preload_library(profile_dir: &Path) -> Result<(), String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    if !manifest.is_file() {
        return Err("libpmfs_preload.so is not built and the sources are not here".into());
    }
    if !is_cargo_profile_dir(profile_dir) {
        // An installed or copied binary: its directory is no profile of a target directory,
        // so its name is no cargo profile and its parent no place to build into.
        return Err(format!(
            "libpmfs_preload.so is not beside the running binary in {}, which is not a cargo \
             target directory to build it in (cargo build --release -p pmfs-preload, then \
             copy target/release/libpmfs_preload.so there)",
            profile_dir.display()
        ));
    }
    let target_dir = profile_dir.parent().unwrap_or(profile_dir);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = child_command(cargo);
    command
        .args(["build", "--quiet", "-p", "pmfs-preload", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir);
    match profile_dir.file_name().and_then(|name| name.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            command.arg("--release");
        }
        Some(other) => {
            command.args(["--profile", other]);
        }
    }
    let output = command
        .output()
        .map_err(|e| format!("running cargo to build libpmfs_preload.so: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cargo build -p pmfs-preload failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Whether `dir` is a profile's output directory of a cargo target directory (`debug`,
/// `release`, a custom profile): cargo keeps its fingerprints there.
fn is_cargo_profile_dir(dir: &Path) -> bool {
    dir.join(".fingerprint").is_dir()
}

/// A formatted pool served to programs by the preload library under a prefix.
#[derive(Debug)]
pub struct PreloadTarget {
    pool: ScratchFile,
    prefix: PathBuf,
    library: PathBuf,
}

impl PreloadTarget {
    /// Formats a pool of `size` bytes in `pool_dir`, closed (the program opens it).
    pub fn new(pool_dir: &Path, size: u64) -> Result<Self, String> {
        let library = preload_library()?;
        let id = std::process::id();
        let pool = ScratchFile::new(pool_dir.join(format!("ferrite-eval-preload-{id}.pool")));
        let _ = std::fs::remove_file(pool.path());
        let created =
            Pool::create(pool.path(), &pmfs::pool_options(size)).map_err(|e| e.to_string())?;
        Fs::mkfs(created, &MkfsOptions::default(), MountOptions::default())
            .and_then(|fs| fs.unmount().map_err(pmfs::FsError::from))
            .map_err(|e| e.to_string())?;
        Ok(PreloadTarget {
            pool,
            prefix: PathBuf::from(format!("/ferrite-preload-{id}")),
            library,
        })
    }
}

impl TargetDir for PreloadTarget {
    fn dir(&self) -> &Path {
        &self.prefix
    }

    fn env(&self) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".into(), self.library.display().to_string()),
            ("PMFS_POOL".into(), self.pool.path().display().to_string()),
            ("PMFS_PREFIX".into(), self.prefix.display().to_string()),
        ]
    }
}

/// A scratch directory on tmpfs (the pool directory), removed on drop.
#[derive(Debug)]
pub struct TmpfsTarget {
    dir: ScratchDir,
}

impl TmpfsTarget {
    /// A fresh directory in `pool_dir`.
    pub fn new(pool_dir: &Path) -> Result<Self, String> {
        let dir = ScratchDir::new_in(pool_dir, "ferrite-eval-pmfs-")
            .map_err(|e| format!("a scratch directory in {}: {e}", pool_dir.display()))?;
        Ok(TmpfsTarget { dir })
    }
}

impl TargetDir for TmpfsTarget {
    fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// A PMFS pool in `pool_dir` mounted on a fresh directory through FUSE, by this process.
#[derive(Debug)]
pub struct FuseTarget {
    mounted: Option<Mounted>,
    dir: PathBuf,
    _teardown: Teardown,
    /// Removed after the unmount (fields drop after `Drop::drop`; on interrupt, teardowns
    /// run newest first).
    _pool: ScratchFile,
}

impl FuseTarget {
    /// Formats a pool of `size` bytes in `pool_dir` and mounts it (with the kernel's
    /// write-back cache when `writeback`).
    pub fn new(pool_dir: &Path, size: u64, writeback: bool) -> Result<Self, String> {
        if !Path::new("/dev/fuse").exists() {
            return Err("/dev/fuse does not exist".into());
        }
        let id = std::process::id();
        let tag = if writeback { "writeback" } else { "durable" };
        let pool = ScratchFile::new(pool_dir.join(format!("ferrite-eval-fuse-{tag}-{id}.pool")));
        let dir = std::env::temp_dir().join(format!("ferrite-eval-fuse-{tag}-{id}"));
        let _ = std::fs::remove_file(pool.path());
        let teardown = mount_point(&dir)?;
        let config = MountConfig {
            writeback_cache: writeback,
            ..MountConfig::default()
        };
        let mounted = Pool::create(pool.path(), &pmfs::pool_options(size))
            .map_err(|e| e.to_string())
            .and_then(|created| {
                Fs::mkfs(created, &MkfsOptions::default(), MountOptions::default())
                    .map_err(|e| e.to_string())
            })
            .and_then(|fs| fsmount::spawn(fs, &dir, &config).map_err(|e| e.to_string()))
            .inspect_err(|_| {
                let _ = std::fs::remove_dir(&dir);
            })?;
        Ok(FuseTarget {
            mounted: Some(mounted),
            dir,
            _teardown: teardown,
            _pool: pool,
        })
    }
}

impl TargetDir for FuseTarget {
    fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for FuseTarget {
    fn drop(&mut self) {
        if let Some(mounted) = self.mounted.take() {
            let _ = mounted.unmount();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The no-op FUSE file system mounted on a fresh directory by this process.
#[derive(Debug)]
pub struct FuseFloor {
    mounted: Option<Mounted>,
    dir: PathBuf,
    _teardown: Teardown,
}

impl FuseFloor {
    /// Mounts [`fsmount::NullFs`] with the durable mount's configuration.
    pub fn new() -> Result<Self, String> {
        if !Path::new("/dev/fuse").exists() {
            return Err("/dev/fuse does not exist".into());
        }
        let dir =
            std::env::temp_dir().join(format!("ferrite-eval-fuse-floor-{}", std::process::id()));
        let teardown = mount_point(&dir)?;
        let mounted = fsmount::spawn_null(&dir, &MountConfig::default())
            .map_err(|e| e.to_string())
            .inspect_err(|_| {
                let _ = std::fs::remove_dir(&dir);
            })?;
        Ok(FuseFloor {
            mounted: Some(mounted),
            dir,
            _teardown: teardown,
        })
    }
}

impl TargetDir for FuseFloor {
    fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for FuseFloor {
    fn drop(&mut self) {
        if let Some(mounted) = self.mounted.take() {
            let _ = mounted.unmount();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// ext4 on a loop device over an image file in `image_dir`, mounted on a fresh directory.
/// Needs root, `losetup` and `mkfs.ext4`.
#[derive(Debug)]
pub struct Ext4Loop {
    image: PathBuf,
    device: String,
    dir: PathBuf,
    mounted: bool,
    _teardown: Teardown,
}

fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let output = child_command(program)
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
        let teardown = {
            let (image, device, dir) = (image.clone(), device.clone(), dir.clone());
            on_interrupt(move || Ext4Loop::tear_down(&image, &device, &dir, true))
        };
        let mut target = Ext4Loop {
            image,
            device,
            dir,
            mounted: false,
            _teardown: teardown,
        };
        run("mkfs.ext4", &["-q", "-F", &target.device])?;
        std::fs::create_dir_all(&target.dir).map_err(|e| e.to_string())?;
        let dir_text = target.dir.display().to_string();
        run("mount", &[&target.device, &dir_text])?;
        target.mounted = true;
        Ok(target)
    }
}

impl TargetDir for Ext4Loop {
    fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Ext4Loop {
    /// Unmounts (when `mounted`), detaches the loop device, removes the mount point and the
    /// image.
    fn tear_down(image: &Path, device: &str, dir: &Path, mounted: bool) {
        if mounted {
            // Lazily: an interrupted benchmark program may still have files open in it.
            let _ = run("umount", &["--lazy", &dir.display().to_string()]);
        }
        let _ = run("losetup", &["-d", device]);
        let _ = std::fs::remove_dir(dir);
        let _ = std::fs::remove_file(image);
    }
}

impl Drop for Ext4Loop {
    fn drop(&mut self) {
        Ext4Loop::tear_down(&self.image, &self.device, &self.dir, self.mounted);
    }
}

/// A teardown that detaches the FUSE mount on `dir` (served by this process, which is about
/// to exit: detached first, even while a benchmark program still works in it, it is not left
/// as a dead "transport endpoint") and removes the mount point.
/// Creates the mount point `dir` with its teardown on interrupt registered in the same step.
/// The teardown detaches and removes it; the owner may be mounting on another thread at that
/// moment, and a mount that lands after the detach keeps the directory busy, so it detaches
/// and tries again until the directory is gone (1 s at most).
fn mount_point(dir: &Path) -> Result<Teardown, String> {
    let doomed = dir.to_owned();
    create_with_teardown(
        || std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display())),
        move || {
            for _ in 0..20 {
                let _ = fsmount::detach(&doomed);
                match std::fs::remove_dir(&doomed) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        std::thread::sleep(std::time::Duration::from_millis(50));
                    }
                    _ => return,
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary copied or installed outside a target directory (its directory's name is no
    /// cargo profile) is told where the library must be, without running cargo with that
    /// name as a profile and its parent as the target directory.
    #[test]
    fn no_build_is_attempted_outside_a_cargo_target_directory() {
        let installed = tempfile::tempdir().expect("scratch");
        let error = build_preload_library(installed.path()).expect_err("nothing to build in");
        assert!(error.contains("not a cargo target directory"), "{error}");
        assert!(
            std::fs::read_dir(installed.path()).expect("list").count() == 0,
            "something was built in the binary's directory"
        );
    }
}
