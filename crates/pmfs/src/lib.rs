//! Ferrite PMFS: a persistent-memory file system in user space, as a library over the
//! persistence seam (`pmem::Persist`). The on-media format, every update protocol and
//! recovery are specified in `docs/pmfs-format.md`.
//!
//! - [`layout`]: constants, the superblock (with a redundant copy); words updated in place
//!   are `pmem::checked` words.
//! - [`journal`]: the fine-grained undo journal of 64-byte entries with generation ids, and
//!   the batch driver (`batch.rs`) that runs a planned change as one journal transaction.
//! - [`inode`], [`tree`], [`dir`]: inodes, per-file radix trees, directory records.
//! - [`alloc`]: the DRAM block allocator, rebuilt from the trees at every mount.
//! - [`Fs`]: mkfs, mount and recovery (`recovery.rs`), namespace operations (`ns.rs`: `lookup`,
//!   `create`, `rename`, …), data (`data.rs`: `read`, `write`, truncation), attributes
//!   (`attr.rs`), the truncate list (`truncate.rs`) and [`Fs::fsck`].
//! - [`Posix`] (over an [`Fs`] it owns): paths, its own descriptor table, errno-valued
//!   errors.
//! - [`mmap`]: memory-mapped access straight onto PM with an explicit persist
//!   (`docs/pmfs-mmap.md`).
//! - The kernel-facing calls of the FUSE adapter (`crates/fsmount`): entries that pin
//!   their inode number until `forget`, nodes created with the caller's credentials
//!   ([`Caller`]), special files.
//!
//! # Using it from an application
//!
//! A file system lives in a pool file (`pmem`), on `/dev/shm` (DRAM standing in for PM) or a
//! DAX file system. Create and format it once, then open and mount it at every start; the
//! mount recovers from a crash by itself:
//!
//! ```
//! use pmem::{NativeOptions, Pool};
//! use pmfs::posix::{O_APPEND, O_CREAT, O_RDONLY, O_WRONLY};
//! use pmfs::{Fs, MkfsOptions, MountOptions, Posix};
//!
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("app.pool");
//! // let path = "/dev/shm/app.pool";
//! let pool = Pool::create(&path, &pmfs::pool_options(16 << 20))?; // the file must not exist
//! let px = Posix::new(Fs::mkfs(pool, &MkfsOptions::default(), MountOptions::default())?);
//! let fd = px.open("/log", O_CREAT | O_WRONLY | O_APPEND, 0o644)?;
//! px.write(fd, b"record 1\n")?; // durable when it returns
//! px.close(fd)?;
//! px.into_fs().unmount()?; // marks the pool clean (dropping the `Posix` or `Fs` does too)
//!
//! // Every later start, and after a crash: open and mount.
//! let pool = Pool::open(&path, pmfs::LAYOUT, &NativeOptions::default())?;
//! let px = Posix::new(Fs::mount(pool, MountOptions::default())?);
//! let fd = px.open("/log", O_RDONLY, 0)?;
//! let mut buf = [0u8; 64];
//! let n = px.read(fd, &mut buf)?;
//! assert_eq!(&buf[..n], b"record 1\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What to know before relying on it:
//!
//! - **Durability.** Every operation is durable when it returns (`fsync` only checks its
//!   descriptor); after a crash the file system shows each operation wholly done or not done
//!   at all, except that an in-place overwrite (the default [`DataMode`]) may show each
//!   8-byte word old or new, and a write larger than one transaction piece (1 MiB in place,
//!   4 MiB with copy-on-write) may stop at a piece boundary (`docs/pmfs-format.md` §11).
//!   Stores through a mapping ([`mmap`]) are durable only after `persist`.
//! - **One process.** The pool file is locked while it is open: a second `Pool::open`, in
//!   this process or another, is `PoolError::AlreadyOpen`. Share the file system between
//!   processes with the FUSE mount (`ferrite fs mount`).
//! - **Threads.** [`Fs`] and [`Posix`] are `Send + Sync` (share them by reference or in an
//!   `Arc`); one lock serialises every operation, so threads get consistency, not
//!   parallelism.
//! - **Errors.** Operations return an [`Errno`], the number Linux's system call would give
//!   (`EIO` for damage found on the media: [`error::take_damage`] tells what); `mkfs`,
//!   `mount` and `repair` return an [`FsError`] (a pool-level problem is
//!   `FsError::Pool`). Nothing panics on damaged media.
//! - **Not a kernel.** [`Posix`] has no working directory (relative paths start at the
//!   root), no umask (the `perm` given is the mode), no permission checks (it acts with its
//!   caller's rights; new nodes are owned by [`Posix::set_credentials`]) and no access-time
//!   updates.
//! - **Checking and repair.** [`Fs::fsck`] checks a mounted file system; [`Fs::repair`]
//!   mounts one that a plain mount refuses as damaged, removing what it cannot trust.
//!
//! The same on a simulated pool (the crash simulator's backend, as the tests use):
//!
//! ```
//! use crashsim::{SimConfig, SimPm};
//! use pmfs::{Fs, MkfsOptions, MountOptions, Posix, posix::{O_CREAT, O_RDWR}};
//! use pmem::{CreateOptions, Pool};
//!
//! let size = 4 << 20;
//! let pool = Pool::format(SimPm::new(size, SimConfig::default()), &pmfs::pool_options(size))?;
//! let px = Posix::new(Fs::mkfs(pool, &MkfsOptions::default(), MountOptions::default())?);
//! px.mkdir("/docs", 0o755)?;
//! let fd = px.open("/docs/hello", O_CREAT | O_RDWR, 0o644)?;
//! px.write(fd, b"hello, persistent world")?;
//! let mut buf = [0u8; 5];
//! px.pread(fd, &mut buf, 0)?;
//! assert_eq!(&buf, b"hello");
//! px.close(fd)?;
//! assert_eq!(px.stat("/docs/hello")?.size, 23);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

pub mod alloc;
mod attr;
mod batch;
mod data;
pub mod dir;
pub mod error;
mod filesystem;
mod fsck;
pub mod inode;
pub mod journal;
mod kernel;
pub mod layout;
pub mod mmap;
mod ns;
mod options;
pub mod posix;
mod recovery;
mod repair;
mod state;
pub mod tree;
mod truncate;
pub mod xattr;

pub use attr::{Attr, DirEntry, JournalStats, SetAttr, StatFs, TimeSet};
pub use error::{Corrupt, Errno, FsError};
pub use filesystem::Fs;
pub use fsck::FsckReport;
pub use inode::FileType;
pub use kernel::Caller;
pub use layout::{LAYOUT, MkfsOptions, Superblock};
pub use options::{Clock, DataMode, MountOptions};
pub use posix::{Fd, PathArg, Posix, Whence};
pub use recovery::Repair;
pub use repair::FsckRepair;
pub use xattr::SetMode;

/// Pool creation options for a file system of `size` bytes (layout [`LAYOUT`], 4 KiB root).
pub fn pool_options(size: u64) -> pmem::CreateOptions {
    let mut options = pmem::CreateOptions::new(LAYOUT, size);
    options.root_size = layout::ROOT_SIZE;
    options
}

/// Deliberately broken variants, for the crash tests' self-test (they prove the tests can
/// fail). Never set outside tests.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// The correct file system.
    #[default]
    None,
    /// Journal entries are not flushed before the log fence.
    SkipLogFlush,
    /// In-place metadata is not flushed before the commit word.
    SkipDirtyFlush,
    /// Recovery undoes entries oldest first.
    ForwardRollback,
    /// Recovery processes the truncate list before rolling back the journal.
    TruncateBeforeRollback,
    /// Rename rewrites the old record's name in place, outside the journal.
    InPlaceRename,
    /// File data is stored with cacheable stores and never flushed.
    NoDataFence,
    /// A mapping's persist fences without flushing the mapped lines.
    MapNoFlush,
    /// The overwrite path stores `mtime` before `ctime` (a crash can then show a new
    /// `mtime` with an old `ctime`).
    TimesOutOfOrder,
}

#[cfg(test)]
mod tests {
    /// The crate documentation promises that a file system can be shared between threads.
    #[test]
    fn fs_and_posix_are_send_and_sync() {
        fn shareable<T: Send + Sync>() {}
        shareable::<crate::Fs<pmem::Native>>();
        shareable::<crate::Posix<pmem::Native>>();
        shareable::<crate::Fs<pmem::MemPm>>();
    }
}
