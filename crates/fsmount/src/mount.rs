//! Mounting: a FUSE session over a mounted `Fs`, either in the background of the calling
//! process ([`spawn`], for tests and benchmarks) or in the foreground until a signal or an
//! external unmount ([`serve`], for `ferrite fs mount`).

use crate::OwnMount;
use crate::adapter::FuseFs;
use fuser::{Config, MountOption, Session, SessionACL};
use nix::sys::signal::{SigSet, Signal};
use pmem::Persist;
use pmfs::Fs;
use std::io::Write;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

/// The most threads a session may serve requests with. Each thread past the first reads
/// from its own clone of the `/dev/fuse` descriptor, so the count costs descriptors, and
/// fuser starts them only after the mount is up: 2^64 - 1 threads made it panic (a
/// capacity overflow) and 2000 ran out of descriptors under a 1024-descriptor limit, each
/// time after the mount had been reported. The file system serialises its operations behind
/// one lock, so more threads than this overlap nothing more.
pub const MAX_THREADS: usize = 256;

/// How the file system is presented to the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountConfig {
    /// How long the kernel may cache attributes and names.
    pub ttl: Duration,
    /// Let every user in (`allow_other`; permission checks stay the kernel's). Needs root.
    pub allow_other: bool,
    /// Source name shown in `/proc/mounts`.
    pub fsname: String,
    /// Threads reading requests (each with its own cloned `/dev/fuse` descriptor when more
    /// than one), 1 to [`MAX_THREADS`]: a mount with another count is refused before it is
    /// made.
    pub threads: usize,
    /// The kernel's write-back cache: writes return once in the page cache and reach the
    /// file system later; durable at `fsync` or unmount only.
    pub writeback_cache: bool,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            ttl: Duration::from_secs(1),
            allow_other: nix::unistd::geteuid().is_root(),
            fsname: "ferrite-fs".to_owned(),
            threads: 1,
            writeback_cache: false,
        }
    }
}

impl MountConfig {
    fn fuser(&self) -> Config {
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName(self.fsname.clone()),
            MountOption::Subtype("ferrite".to_owned()),
            MountOption::DefaultPermissions,
            MountOption::RW,
        ];
        config.acl = if self.allow_other {
            SessionACL::All
        } else {
            SessionACL::Owner
        };
        // The file system serialises every operation behind one lock; more threads overlap
        // the kernel's side of requests. `check` has held the count to 1..=MAX_THREADS.
        config.n_threads = Some(self.threads);
        config.clone_fd = self.threads > 1;
        config
    }

    /// Refuses a configuration the session could not run with, before anything is
    /// mounted: fuser clones the descriptors of the threads past the first only once the
    /// mount is up, and a failure there used to be reported after "mounted".
    fn check(&self) -> Result<(), MountError> {
        if !(1..=MAX_THREADS).contains(&self.threads) {
            return Err(MountError::Threads(self.threads));
        }
        if self.threads == 1 {
            return Ok(());
        }
        let Ok((limit, _)) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        else {
            return Ok(());
        };
        let open = std::fs::read_dir("/proc/self/fd").map_or(0, |fds| fds.count()) as u64;
        // The session's own `/dev/fuse` descriptor and a few the process may open while it
        // serves (the mount table read at unmount, a log line).
        const SPARE: u64 = 8;
        let clones = self.threads as u64 - 1;
        if open + clones + SPARE <= limit {
            return Ok(());
        }
        Err(MountError::Descriptors {
            threads: self.threads,
            open,
            limit,
        })
    }
}

/// Why a mount failed or ended badly.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The mount point does not exist (its path is in the field; the message leaves it to
    /// the caller, which names the mount point already: once is enough).
    #[error("the mount point is not an existing directory (make it first, with `mkdir -p`)")]
    MissingMountPoint(String),
    /// The mount point exists but is not a directory (path as above).
    #[error("the mount point is not an existing directory")]
    NotADirectory(String),
    /// A FUSE mount whose server has ended (killed) is still mounted at the mount point:
    /// the directory answers "transport endpoint is not connected".
    #[error(
        "a FUSE mount whose server has ended is still mounted there (transport endpoint is \
         not connected); `ferrite fs unmount {}` removes it",
        crate::shell_word(Path::new(.0))
    )]
    DeadMount(String),
    /// The FUSE device cannot be opened (missing, or not readable and writable by this
    /// user: Debian's `/dev/fuse` is root's only unless `fuse3` made it world-usable).
    #[error(
        "cannot open the FUSE device {path}: {error} (a non-root user needs read and write access to it)"
    )]
    Device {
        /// The device.
        path: String,
        /// Why it cannot be opened.
        error: std::io::Error,
    },
    /// The kernel refused the mount, or the session failed.
    #[error("FUSE: {0}")]
    Fuse(#[from] std::io::Error),
    /// Signal handling failed.
    #[error("signals: {0}")]
    Signals(#[from] nix::Error),
    /// A thread count out of 1..=[`MAX_THREADS`].
    #[error("{0} threads: a mount serves with 1 to {MAX_THREADS}")]
    Threads(usize),
    /// More threads than the process's descriptor limit leaves descriptors for.
    #[error(
        "{threads} threads need {} more descriptors, and {open} of the {limit} this \
         process may open (`ulimit -n`) are in use: fewer --threads, or a higher limit",
        threads - 1 + 8
    )]
    Descriptors {
        /// The threads asked for.
        threads: usize,
        /// Descriptors open now.
        open: u64,
        /// The soft `RLIMIT_NOFILE`.
        limit: u64,
    },
}

/// A FUSE session served by a thread of this process, and the mount it made.
///
/// fuser 0.18 unmounts its mount point by path when its mount handle drops, and does so
/// even after the kernel has ended the session (its test of whether the mount is still there
/// takes the connection's `POLLERR` for "mounted"). By then that path names whatever the
/// mount covered — a tmpfs it was stacked on, another ferrite mount — and the unmount would
/// take it away. So fuser's handle is never dropped (one `/dev/fuse` descriptor, its
/// connection ended, stays open per session), and only [`OwnMount::unmount`] unmounts.
#[derive(Debug)]
struct Running {
    /// fuser's handle; its session thread has been taken out ([`Running::take_thread`]).
    session: ManuallyDrop<fuser::BackgroundSession>,
    /// The mount made, `None` if the mount table did not show it (then it is never
    /// unmounted from here).
    own: Option<OwnMount>,
}

impl Running {
    /// Mounts `session`'s file system on `dir` (canonical) and runs it on a new thread.
    fn start<FS: fuser::Filesystem + Send + 'static>(
        session: Session<FS>,
        dir: &Path,
        config: &MountConfig,
    ) -> Result<Running, MountError> {
        let own = OwnMount::find(dir, &config.fsname);
        let session = ManuallyDrop::new(session.spawn()?);
        Ok(Running { session, own })
    }

    /// The session thread, to be joined: fuser's handle keeps a thread that has already
    /// finished in its place, since the handle itself is never dropped.
    fn take_thread(&mut self) -> std::io::Result<JoinHandle<std::io::Result<()>>> {
        let finished = std::thread::Builder::new()
            .name("ferrite-fuse-done".to_owned())
            .stack_size(16 * 1024)
            .spawn(|| Ok(()))?;
        Ok(std::mem::replace(&mut self.session.guard, finished))
    }

    /// Unmounts this session's mount if it is still the topmost at its directory.
    fn unmount(&self) -> std::io::Result<()> {
        match &self.own {
            Some(own) => own.unmount(),
            None => Err(std::io::Error::other(
                "this server's mount was not found in the mount table; unmount it from outside",
            )),
        }
    }
}

/// A file system mounted by [`spawn`]; dropping it (or [`Mounted::unmount`]) unmounts it
/// while it is still the topmost mount at its directory.
#[derive(Debug)]
pub struct Mounted {
    running: Running,
    /// Whether [`Mounted::unmount`] ran (the drop has nothing left to do).
    done: bool,
}

impl Mounted {
    /// Unmounts and waits for the session (and the pool's clean close) to finish.
    pub fn unmount(mut self) -> Result<(), MountError> {
        self.done = true;
        self.running.unmount()?;
        let thread = self.running.take_thread()?;
        thread
            .join()
            .map_err(|_| std::io::Error::other("the FUSE session thread panicked"))??;
        Ok(())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if !self.done {
            // Nothing to report to: a mount no longer this session's stays as it is.
            let _ = self.running.unmount();
        }
    }
}

/// Whether `dir` can be a mount point (an existing directory, not a dead FUSE mount):
/// checked by every mount, and by callers that want to refuse a bad mount point before the
/// work of opening a pool.
pub fn check_mount_point(dir: &Path) -> Result<(), MountError> {
    let path = || dir.display().to_string();
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(MountError::MissingMountPoint(path()))
        }
        Err(error) if error.raw_os_error() == Some(nix::libc::ENOTCONN) => {
            Err(MountError::DeadMount(path()))
        }
        _ => Err(MountError::NotADirectory(path())),
    }
}

/// The FUSE device fuser opens.
const FUSE_DEVICE: &str = "/dev/fuse";

/// A session for `fs` on `dir`; a failure caused by the FUSE device names it.
fn new_session<B: Persist + 'static>(
    fs: Fs<B>,
    dir: &Path,
    config: &MountConfig,
) -> Result<Session<FuseFs<B>>, MountError> {
    config.check()?;
    let adapter = FuseFs::new(fs, config.ttl).with_writeback_cache(config.writeback_cache);
    Session::new(adapter, dir, &config.fuser())
        .map_err(|error| mount_failed(error, Path::new(FUSE_DEVICE)))
}

/// Turns a failed mount into an error that names `device` when it cannot be opened.
fn mount_failed(error: std::io::Error, device: &Path) -> MountError {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(device)
    {
        Ok(_) => MountError::Fuse(error),
        Err(error) => MountError::Device {
            path: device.display().to_string(),
            error,
        },
    }
}

/// `dir` as the mount table will name it: resolved before the mount, since looking at a
/// mount point afterwards asks the file system, which may not be serving yet.
fn canonical_dir(dir: &Path) -> Result<PathBuf, MountError> {
    check_mount_point(dir)?;
    Ok(dir.canonicalize()?)
}

/// Mounts `fs` on `dir`, served by a background thread of this process.
pub fn spawn<B: Persist + 'static>(
    fs: Fs<B>,
    dir: &Path,
    config: &MountConfig,
) -> Result<Mounted, MountError> {
    let dir = canonical_dir(dir)?;
    let session = new_session(fs, &dir, config)?;
    Ok(Mounted {
        running: Running::start(session, &dir, config)?,
        done: false,
    })
}

/// Mounts the FUSE floor ([`crate::NullFs`]: names and sizes, no data) on `dir`, served by
/// a background thread of this process, with `config`'s threads.
pub fn spawn_null(dir: &Path, config: &MountConfig) -> Result<Mounted, MountError> {
    let dir = canonical_dir(dir)?;
    config.check()?;
    let session = Session::new(crate::NullFs::default(), &dir, &config.fuser())
        .map_err(|error| mount_failed(error, Path::new(FUSE_DEVICE)))?;
    Ok(Mounted {
        running: Running::start(session, &dir, config)?,
        done: false,
    })
}

/// How a foreground mount ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Unmounted from outside (`umount`, `fusermount3 -u`).
    External,
    /// Unmounted by this process after the signal.
    Signal(Signal),
}

/// Mounts `fs` on `dir` and serves it until SIGINT, SIGTERM or SIGHUP (then unmounts) or an
/// external unmount; the pool is closed cleanly either way. `ready` runs once the mount is
/// up.
///
/// For a process whose only thread is the caller (the `ferrite` command): it blocks those
/// signals and SIGUSR1 (the session thread's "ended" notice) in the calling thread, which
/// the session thread inherits; another thread that does not block them could take them
/// instead.
pub fn serve<B: Persist + 'static>(
    fs: Fs<B>,
    dir: &Path,
    config: &MountConfig,
    ready: impl FnOnce(),
) -> Result<Ended, MountError> {
    let dir = &canonical_dir(dir)?;
    let mut signals = SigSet::empty();
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGUSR1,
    ] {
        signals.add(signal);
    }
    signals.thread_block()?;
    let ended = serve_blocked(fs, dir, config, &signals, ready);
    signals.thread_unblock()?;
    ended
}

fn serve_blocked<B: Persist + 'static>(
    fs: Fs<B>,
    dir: &Path,
    config: &MountConfig,
    signals: &SigSet,
    ready: impl FnOnce(),
) -> Result<Ended, MountError> {
    let session = new_session(fs, dir, config)?;
    let mut running = Running::start(session, dir, config)?;
    let session_thread = running.take_thread()?;
    let worker = std::thread::Builder::new()
        .name("ferrite-fuse".to_owned())
        .spawn(move || {
            let result = session_thread
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the FUSE session panicked")));
            // Wake the waiting thread; it consumes this signal before unblocking it.
            let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), Signal::SIGUSR1);
            result
        })?;
    ready();
    // Every signal tries `umount` itself (fuser's unmounter gives its handle away on the
    // first try, so a refused unmount could never be retried); the mount ended because of a
    // signal only if one of these calls unmounted it. Each unmounts this server's own mount
    // only, and once the session has ended nothing is unmounted any more.
    let mut ended = Ended::External;
    loop {
        match signals.wait()? {
            Signal::SIGUSR1 => break,
            signal => match running.unmount() {
                Ok(()) => ended = Ended::Signal(signal),
                Err(error) => {
                    // Not `eprintln!`: stderr is a background server's log, which may be
                    // full, and a panic here would leave the mount dead.
                    let _ = writeln!(
                        std::io::stderr(),
                        "ferrite: cannot unmount {} on {signal}: {error}; still serving",
                        dir.display()
                    );
                }
            },
        }
    }
    let served = worker
        .join()
        .map_err(|_| std::io::Error::other("the FUSE session thread panicked"))?;
    if let Err(error) = served {
        // The session failed with its mount up (a thread it could not start, a read of
        // the device that failed): the kernel keeps the mount, answering "transport
        // endpoint is not connected" to everyone, until it is unmounted. This server made
        // it, so it removes it (when it is still its own and topmost) before reporting.
        if let Err(unmount) = running.unmount() {
            let _ = writeln!(
                std::io::stderr(),
                "ferrite: the FUSE session on {} failed; cannot unmount it: {unmount}",
                dir.display()
            );
        }
        return Err(error.into());
    }
    Ok(ended)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_that_cannot_be_opened_is_named() {
        let refused = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let error = mount_failed(refused, Path::new("/nonexistent/fuse"));
        let text = error.to_string();
        assert!(
            matches!(error, MountError::Device { .. }) && text.contains("/nonexistent/fuse"),
            "{text}"
        );
        let busy = std::io::Error::other("mount point busy");
        let error = mount_failed(busy, Path::new("/dev/null"));
        assert!(matches!(error, MountError::Fuse(_)), "{error}");
    }
}
