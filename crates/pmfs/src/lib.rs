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
pub use posix::{Fd, Posix, Whence};
pub use recovery::Repair;
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
