//! `ferrite fs ...`: create, mount, unmount and check PMFS file systems (`crates/pmfs`,
//! mounted through FUSE by `crates/fsmount`; `docs/pmfs-mount.md`).
//!
//! Exit codes: 0 success; `fsck` exits 4 when the file system is damaged (mount or
//! consistency check failed) and 8 when it could not check (unreadable file, not a pool, pool
//! in use, no file system, a format version or feature this build does not know), as e2fsck
//! does; other failures follow the `ferrite` conventions.

use crate::size::{format_bytes, parse_size};
use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use pmem::NativeOptions;
use pmfs::{DataMode, MkfsOptions, MountOptions};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// `ferrite fs` subcommands.
#[derive(Debug, Subcommand)]
pub enum FsCommand {
    /// Create a pool file and format a PMFS file system on it.
    Mkfs(MkfsArgs),
    /// Mount a file system on a directory through FUSE (foreground until Ctrl-C, SIGTERM
    /// or an unmount; --background to detach once mounted).
    Mount(MountArgs),
    /// Unmount a mounted directory (the serving process then closes the pool cleanly).
    Unmount {
        /// The mount point.
        dir: PathBuf,
    },
    /// Check a file system without modifying its pool: recovery runs on an in-memory copy,
    /// then the consistency check. Exit 0 consistent, 4 damaged, 8 could not check. With
    /// `--repair`, repairs the pool in place first (exit 1 when it changed something).
    Fsck {
        /// Pool file (must not be mounted).
        pool: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Repair what can be repaired safely, in the pool, through its journal: the
        /// superblock from its copy, damaged inodes and files whose block tree is damaged
        /// (removed with their names), records naming no valid inode, link counts, and
        /// what no directory reaches any more.
        #[arg(long)]
        repair: bool,
    },
}

/// `ferrite fs mkfs` arguments.
#[derive(Debug, Args)]
pub struct MkfsArgs {
    /// Path of the new pool file (must not exist).
    pool: PathBuf,
    /// Pool size, with an optional K, M, G or T suffix.
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    size: u64,
    /// Inodes (default: one per 16 KiB of pool).
    #[arg(long)]
    inodes: Option<u64>,
    /// Journal entries of 64 bytes.
    #[arg(long, default_value_t = pmfs::layout::JOURNAL_DEFAULT)]
    journal_entries: u32,
    /// Owner of the root directory as UID:GID (default: the user running mkfs, so that
    /// user's own mount is writable).
    #[arg(long, value_parser = parse_owner)]
    owner: Option<(u32, u32)>,
}

fn parse_owner(text: &str) -> Result<(u32, u32), String> {
    let (uid, gid) = text
        .split_once(':')
        .ok_or_else(|| format!("owner {text:?} is not UID:GID"))?;
    // 4294967295 is (uid_t)-1 / (gid_t)-1, which chown(2) reads as "leave unchanged" and
    // the kernel never gives a user or group: a root directory owned by it is nobody's.
    let number = |part: &str| match part.parse::<u32>() {
        Ok(u32::MAX) => Err(format!(
            "owner {text:?}: {part} is (uid_t)-1, which is no user or group"
        )),
        Ok(id) => Ok(id),
        Err(_) => Err(format!(
            "owner {text:?}: {part:?} is not a number from 0 to 4294967294"
        )),
    };
    Ok((number(uid)?, number(gid)?))
}

/// How file data is written.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum DataModeArg {
    /// Overwrites in place (metadata atomic, data ordered).
    InPlace,
    /// Every write of up to 4 MiB atomic (copy-on-write leaves).
    Cow,
}

/// `ferrite fs mount` arguments.
#[derive(Debug, Args)]
pub struct MountArgs {
    /// Pool file.
    pool: PathBuf,
    /// Mount point (an existing directory).
    dir: PathBuf,
    /// Detach once mounted; unmount with `ferrite fs unmount DIR` (or SIGTERM to the
    /// printed pid).
    #[arg(long)]
    background: bool,
    /// With --background: append the server's messages to this file (a foreground mount
    /// prints them).
    #[arg(long, requires = "background")]
    log: Option<PathBuf>,
    /// Data write mode.
    #[arg(long, value_enum, default_value = "in-place")]
    data_mode: DataModeArg,
    /// New regular files get 2 MiB leaves: even a 1-byte file then takes 2 MiB of the pool
    /// (a 64 MiB pool holds about 31 files): for pools of large files only.
    #[arg(long)]
    huge_files: bool,
    /// How long the kernel caches attributes and names, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    attr_ttl_ms: u64,
    /// Threads serving requests, 1 to 256 (each past the first holds a descriptor of
    /// its own; the file system runs one operation at a time).
    #[arg(long, default_value_t = 1,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new()
              .range(1..=fsmount::MAX_THREADS as u64))]
    threads: usize,
    /// The kernel's write-back cache: faster writes, durable only at fsync or unmount (not
    /// when write returns).
    #[arg(long)]
    writeback_cache: bool,
    /// Write protection of the pool's mapping against stray writes: none, mprotect (write
    /// windows by mprotect), mpk (protection keys; fails without CPU support), auto (mpk
    /// where available, else mprotect).
    #[arg(long, default_value = "none", value_parser = parse_protection)]
    protect: pmem::Protection,
    /// Internal: print one "ready PID" or "error MESSAGE" line on stdout for the parent of
    /// a background mount, and nothing after.
    #[arg(long, hide = true)]
    notify_ready: bool,
}

/// A `fs unmount` argument that names no directory: exit 19 when nothing is there (as a
/// missing `fs mount` mount point), 2 when it is a file (as `fs mount` of one).
#[derive(Debug)]
pub enum NotAMountPoint {
    /// Nothing at the path.
    Missing(PathBuf),
    /// Something other than a directory.
    NotADirectory(PathBuf),
}

impl std::fmt::Display for NotAMountPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotAMountPoint::Missing(dir) => {
                write!(f, "unmounting {}: no such directory", dir.display())
            }
            NotAMountPoint::NotADirectory(dir) => write!(
                f,
                "unmounting {}: not a directory, so nothing can be mounted there",
                dir.display()
            ),
        }
    }
}

impl std::error::Error for NotAMountPoint {}

impl NotAMountPoint {
    /// The README's code: 19 for a missing path, 2 for one that is not a directory.
    pub fn exit_code(&self) -> i32 {
        match self {
            NotAMountPoint::Missing(_) => pmem::PoolError::NotFound.exit_code(),
            NotAMountPoint::NotADirectory(_) => 2,
        }
    }
}

/// Unmounts `dir` and returns once its server has closed the pool and exited, so that
/// `fs fsck` or another mount can open the pool next. A directory where no ferrite file
/// system is mounted is refused with exit 1, as `fusermount -u` refuses it.
fn unmount(dir: &Path, out: &mut dyn Write) -> anyhow::Result<()> {
    // `lstat`, not `exists`: the root of a mount whose server died answers ENOTCONN, and
    // that mount is what an unmount must still remove.
    match std::fs::symlink_metadata(dir) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(NotAMountPoint::Missing(dir.to_owned()).into());
        }
        Ok(meta) if !meta.is_dir() => {
            return Err(NotAMountPoint::NotADirectory(dir.to_owned()).into());
        }
        _ => {}
    }
    let released =
        fsmount::unmount_and_wait(dir).with_context(|| format!("unmounting {}", dir.display()))?;
    writeln!(out, "unmounted {}", dir.display())?;
    let waited = fsmount::RELEASE_TIMEOUT.as_secs();
    match released {
        fsmount::Released::Pool(_) => Ok(()),
        fsmount::Released::StillHeld(pool) => anyhow::bail!(
            "unmounted {}, but its server still holds {} after {waited} s",
            dir.display(),
            pool.display()
        ),
        fsmount::Released::ServerRunning { pool, pid } => anyhow::bail!(
            "unmounted {}; its server (pid {pid}) closed {} but was still running after \
             {waited} s",
            dir.display(),
            pool.display()
        ),
    }
}

/// Runs one `ferrite fs` command.
pub fn run(command: &FsCommand, out: &mut dyn Write) -> anyhow::Result<()> {
    match command {
        FsCommand::Mkfs(args) => mkfs(args, out),
        FsCommand::Mount(args) if args.background => mount_background(args, out),
        FsCommand::Mount(args) => mount_foreground(args, out),
        FsCommand::Unmount { dir } => unmount(dir, out),
        FsCommand::Fsck {
            pool,
            json,
            repair: false,
        } => fsck(pool, *json, out),
        FsCommand::Fsck {
            pool,
            json,
            repair: true,
        } => fsck_repair(pool, *json, out),
    }
}

fn mkfs(args: &MkfsArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let options = MkfsOptions {
        inodes: args.inodes,
        journal_entries: args.journal_entries,
        root_owner: args.owner.unwrap_or_else(fsmount::invoking_user),
        ..MkfsOptions::default()
    };
    let native = NativeOptions::default().try_with_env_overrides()?;
    crate::output::directory_of_new_file_exists(&args.pool)?;
    let existed = args.pool.symlink_metadata().is_ok();
    let fs = match fsmount::mkfs(&args.pool, args.size, &options, native) {
        Ok(fs) => fs,
        Err(error) => {
            if !existed {
                remove_unformatted(&args.pool);
            }
            return Err(anyhow::Error::new(error).context(format!("{}: mkfs", args.pool.display())));
        }
    };
    let (sb, st) = (fs.superblock().clone(), fs.statfs());
    fs.unmount()
        .with_context(|| format!("{}: closing", args.pool.display()))?;
    writeln!(
        out,
        "created {}: {} pool, {} data blocks of 4 KiB ({} free), {} inodes, journal of {} \
         entries",
        args.pool.display(),
        format_bytes(args.size),
        sb.data_blocks,
        st.free_blocks,
        sb.inode_count - 1,
        sb.journal_entries
    )?;
    Ok(())
}

/// Removes the pool file a failed `mkfs` created (a retry would find it in the way).
fn remove_unformatted(path: &Path) {
    if !path.exists() {
        return;
    }
    if let Err(remove) = std::fs::remove_file(path) {
        let _ = writeln!(
            std::io::stderr(),
            "ferrite: {}: removing the unformatted file: {remove}",
            path.display()
        );
    }
}

fn mount_options(args: &MountArgs) -> MountOptions {
    MountOptions {
        data_mode: match args.data_mode {
            DataModeArg::InPlace => DataMode::InPlace,
            DataModeArg::Cow => DataMode::CopyOnWrite,
        },
        huge_files: args.huge_files,
        ..MountOptions::default()
    }
}

fn mount_foreground(args: &MountArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let native = match NativeOptions::default().try_with_env_overrides() {
        Ok(native) => native,
        Err(error) => return notify_failure(args, anyhow::Error::new(error), &args.pool),
    };
    // Before the pool is opened (and perhaps repaired): a typo in the mount point costs
    // nothing and is named as such.
    if let Err(error) = fsmount::check_mount_point(&args.dir) {
        return notify_failure(args, anyhow::Error::new(error), &args.dir);
    }
    let fs = match fsmount::open(&args.pool, mount_options(args), &native, args.protect) {
        Ok(fs) => fs,
        Err(error) => return notify_failure(args, where_in_use(error, &args.pool), &args.pool),
    };
    for repair in fs.repairs() {
        let _ = writeln!(
            std::io::stderr(),
            "ferrite: {}: repaired at mount: {repair}",
            args.pool.display()
        );
    }
    let config = fsmount::MountConfig {
        ttl: Duration::from_millis(args.attr_ttl_ms),
        threads: args.threads,
        writeback_cache: args.writeback_cache,
        fsname: format!("{}{}", fsmount::FSNAME_PREFIX, args.pool.display()),
        ..fsmount::MountConfig::default()
    };
    let notify = args.notify_ready;
    let mut ready_error = None;
    let ended = fsmount::serve(fs, &args.dir, &config, || {
        if let Err(error) = report_mounted(args, out) {
            ready_error = Some(error);
        }
    });
    let ended = match ended {
        Ok(ended) => ended,
        Err(error) => return notify_failure(args, anyhow::Error::new(error), &args.dir),
    };
    if let Some(error) = ready_error {
        let _ = writeln!(std::io::stderr(), "ferrite: reporting the mount: {error}");
    }
    let how = match ended {
        fsmount::Ended::External => "unmounted from outside".to_owned(),
        fsmount::Ended::Signal(signal) => format!("unmounted on {signal}"),
    };
    let closed = format!("{how}; {} closed cleanly", args.pool.display());
    if notify {
        // The background parent stopped reading at "ready": the server's own lines go to
        // its log (stderr, unbuffered), so the log ends with how the pool was closed.
        let _ = writeln!(std::io::stderr(), "{closed}");
    } else {
        writeln!(out, "{closed}")?;
    }
    Ok(())
}

/// Says the mount is up: in the foreground on `out`; as a background server, "ready PID"
/// on `out` for the parent and the mount line on stderr, its log.
///
/// Every line a server writes to stderr is written with `let _ = writeln!`, never
/// `eprintln!`: stderr is the `--log` file, which may be on a full file system, and
/// `eprintln!` panics when the write fails — with the mount up, which the panic left dead
/// ("transport endpoint is not connected").
fn report_mounted(args: &MountArgs, out: &mut dyn Write) -> std::io::Result<()> {
    let pid = std::process::id();
    let dir = args.dir.display();
    let mounted = format!("mounted {} on {dir}", args.pool.display());
    if args.notify_ready {
        writeln!(out, "ready {pid}")?;
        out.flush()?;
        let _ = writeln!(
            std::io::stderr(),
            "{mounted} (server pid {pid}; `ferrite fs unmount {}` to unmount)",
            fsmount::shell_word(&args.dir)
        );
        return Ok(());
    }
    writeln!(
        out,
        "{mounted} (Ctrl-C, SIGTERM or `ferrite fs unmount {}` to unmount)",
        fsmount::shell_word(&args.dir)
    )?;
    out.flush()
}

/// A pool refused because it is open elsewhere says where it is mounted, when it is.
fn where_in_use(error: pmfs::FsError, pool: &Path) -> anyhow::Error {
    let in_use = matches!(error, pmfs::FsError::Pool(pmem::PoolError::AlreadyOpen));
    let error = anyhow::Error::new(error);
    match fsmount::mount_point_of_pool(pool).filter(|_| in_use) {
        Some(dir) => error.context(format!("mounted on {}", dir.display())),
        None => error,
    }
}

/// A failure before the mount was up: the background parent learns it on stdout.
fn notify_failure(args: &MountArgs, error: anyhow::Error, what: &Path) -> anyhow::Result<()> {
    let error = error.context(what.display().to_string());
    if args.notify_ready {
        // The parent may be gone (a failure after the mount was up): ignore a closed pipe.
        let _ = writeln!(std::io::stdout(), "error {}", crate::one_line(&error));
    }
    Err(error)
}

/// Starts this same command in the foreground as a detached child (own process group,
/// no terminal), waits for its "ready" line, and returns. Unlike the programs `bench` and
/// `eval` start, the server is meant to outlive this process: it gets no parent-death signal.
fn mount_background(args: &MountArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("locating the ferrite executable")?;
    let stderr = match &args.log {
        Some(path) => Stdio::from(open_log(path)?),
        None => Stdio::null(),
    };
    let mut child = Command::new(exe)
        .args(["fs", "mount", "--notify-ready"])
        .arg(&args.pool)
        .arg(&args.dir)
        .args(["--attr-ttl-ms", &args.attr_ttl_ms.to_string()])
        .args(["--threads", &args.threads.to_string()])
        .args(args.writeback_cache.then_some("--writeback-cache"))
        .args(["--data-mode", data_mode_name(args.data_mode)])
        .args(args.huge_files.then_some("--huge-files"))
        .args(["--protect", args.protect.name()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0)
        .spawn()
        .context("starting the background server")?;
    let stdout = child.stdout.take().context("the server's stdout")?;
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .context("waiting for the server")?;
    let line = line.trim_end();
    if let Some(pid) = line.strip_prefix("ready ") {
        writeln!(
            out,
            "mounted {} on {} (server pid {pid}; `ferrite fs unmount {}` to unmount)",
            args.pool.display(),
            args.dir.display(),
            fsmount::shell_word(&args.dir)
        )?;
        return Ok(());
    }
    let status = child.wait().context("waiting for the server")?;
    match line.strip_prefix("error ") {
        Some(message) => Err(ServerFailed {
            message: message.to_owned(),
            exit_code: status.code().unwrap_or(1),
        }
        .into()),
        None => anyhow::bail!("the background server exited ({status}) before mounting"),
    }
}

/// The log of a background server, opened for appending; a failure has the exit code of
/// the README's table (19 no such file, 16 permission denied, 2 a directory: a wrong
/// argument, as a mount point that is a file is).
fn open_log(path: &Path) -> anyhow::Result<std::fs::File> {
    if path.is_dir() {
        return Err(crate::UsageError(format!(
            "--log {} is a directory; name a file for the server's log",
            path.display()
        ))
        .into());
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|error| {
            let failure = crate::pool_cmd::PoolFailure {
                path: path.to_owned(),
                error: pmem::PoolError::from(error),
            };
            anyhow::Error::new(failure).context("opening the log")
        })
}

/// A background server that failed before mounting: its message, and its exit code (the
/// same code a foreground mount exits with).
#[derive(Debug)]
pub struct ServerFailed {
    message: String,
    /// The server's exit code.
    pub exit_code: i32,
}

impl std::fmt::Display for ServerFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ServerFailed {}

fn parse_protection(text: &str) -> Result<pmem::Protection, String> {
    pmem::Protection::parse(text)
        .ok_or_else(|| format!("unknown protection {text:?} (none, mprotect, mpk, auto)"))
}

fn data_mode_name(mode: DataModeArg) -> &'static str {
    match mode {
        DataModeArg::InPlace => "in-place",
        DataModeArg::Cow => "cow",
    }
}

fn fsck(pool: &Path, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    if let Some(error) = uncheckable(pool) {
        return cannot_check(pool, json, &error, out);
    }
    match fsmount::check_offline(pool) {
        Ok(report) => {
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
            } else {
                print_check(pool, &report, out)?;
            }
            Ok(())
        }
        Err(error) => fsck_failed(pool, json, &error, out),
    }
}

/// The file system on `pool` when this build cannot check it at all: not formatted, a
/// format version or incompatible features it does not know. Read-only (the superblock is
/// probed through a private copy-on-write view); `None` also when the file cannot be
/// attached, which the check itself then reports.
fn uncheckable(pool: &Path) -> Option<pmfs::FsError> {
    let file = std::fs::File::open(pool).ok()?;
    let len = file.metadata().ok()?.len();
    let view = pmem::Pool::attach(fsmount::OverlayPm::new(file, len), pmfs::LAYOUT).ok()?;
    match pmfs::Fs::probe(&view) {
        Err(
            error @ (pmfs::FsError::NotFormatted(_)
            | pmfs::FsError::UnsupportedVersion { .. }
            | pmfs::FsError::UnsupportedFeatures { .. }),
        ) => Some(error),
        _ => None,
    }
}

/// Exit code of a check that could not run (e2fsck's convention).
const CANNOT_CHECK: u8 = 8;

fn cannot_check(
    pool: &Path,
    json: bool,
    error: &pmfs::FsError,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    report_failure(pool, json, &error.to_string(), CANNOT_CHECK, out)
}

fn fsck_failed(
    pool: &Path,
    json: bool,
    error: &fsmount::CheckError,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    report_failure(pool, json, &error.to_string(), error.exit_code(), out)
}

/// Prints the verdict (4: damaged, else: cannot check) and exits with `code`.
fn report_failure(
    pool: &Path,
    json: bool,
    error: &str,
    code: u8,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let verdict = if code == 4 { "damaged" } else { "cannot check" };
    if json {
        let value = serde_json::json!({
            "verdict": verdict,
            "error": error,
            "exit_code": code,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
    }
    out.flush()?;
    let _ = writeln!(
        std::io::stderr(),
        "ferrite: {}: {verdict}: {error}",
        pool.display()
    );
    std::process::exit(i32::from(code));
}

/// Whether `check` shows a pool that needs no repair at all: consistent, closed cleanly,
/// nothing for a mount to recover or repair. `--repair` then leaves the file untouched (not
/// one byte).
fn needs_no_repair(check: &fsmount::CheckReport) -> bool {
    check.clean_shutdown && check.recovery_bytes == 0 && check.repairs.is_empty()
}

/// What opening the pool for the repair changed besides the repairs `Fs::repair` lists,
/// from the check made before: the recovery of a pool not closed cleanly, the repairs
/// every mount makes, and the clean close.
fn recovery_done(before: Option<&fsmount::CheckReport>) -> Option<String> {
    let before = before?;
    let mut done = Vec::new();
    if !before.clean_shutdown {
        done.push(match before.recovery_bytes {
            0 => "recovered after an unclean shutdown (nothing to roll back)".to_owned(),
            bytes => format!("recovered after an unclean shutdown ({bytes} bytes rewritten)"),
        });
    }
    if !before.repairs.is_empty() {
        done.push(format!("repaired at mount: {}", before.repairs.join("; ")));
    }
    done.push("closed cleanly".to_owned());
    Some(done.join("; "))
}

fn fsck_repair(pool: &Path, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    // A repair writes the pool through the native backend: FERRITE_PERSIST_MODE and
    // FERRITE_FLUSH apply as to every `fs` command that writes (they were ignored here),
    // and a value they do not take is refused before anything is read.
    let native = NativeOptions::default().try_with_env_overrides()?;
    if let Some(error) = uncheckable(pool) {
        return cannot_check(pool, json, &error, out);
    }
    let before = fsmount::check_offline(pool).ok();
    if let Some(check) = before.clone().filter(needs_no_repair) {
        if json {
            let report = fsmount::RepairReport {
                repairs: Vec::new(),
                check,
            };
            writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        } else {
            print_check(pool, &check, out)?;
        }
        return Ok(());
    }
    let report = match fsmount::repair_offline(pool, &native) {
        Ok(report) => report,
        Err(error) => return fsck_failed(pool, json, &error, out),
    };
    let recovery = recovery_done(before.as_ref());
    if json {
        let mut value = serde_json::to_value(&report)?;
        value["recovery"] = serde_json::json!(recovery);
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
    } else {
        for repair in &report.repairs {
            writeln!(out, "repaired: {}: {repair}", pool.display())?;
        }
        if let Some(recovery) = &recovery {
            writeln!(out, "repaired: {}: {recovery}", pool.display())?;
        }
        print_check(pool, &report.check, out)?;
    }
    // The pool was written (recovered, repaired, closed cleanly): e2fsck's 1, "errors were
    // corrected", whatever the list of repairs says.
    out.flush()?;
    std::process::exit(1);
}

fn print_check(
    pool: &Path,
    report: &fsmount::CheckReport,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let shutdown = if report.clean_shutdown {
        "closed cleanly".to_owned()
    } else if report.recovery_bytes > 0 {
        format!(
            "not closed cleanly; the next mount's recovery rewrites {} bytes",
            report.recovery_bytes
        )
    } else {
        "not closed cleanly; nothing to recover".to_owned()
    };
    let shutdown = if report.repairs.is_empty() {
        shutdown
    } else {
        format!(
            "{shutdown}; repaired on the check's copy, and by the next mount on the pool: {}",
            report.repairs.join("; ")
        )
    };
    writeln!(
        out,
        "ok: {}: consistent ({shutdown}); {} inodes ({} files, {} directories, {} symlinks), \
         {} blocks used, {} free",
        pool.display(),
        report.inodes,
        report.files,
        report.dirs,
        report.symlinks,
        report.used_blocks,
        report.free_blocks
    )?;
    Ok(())
}
