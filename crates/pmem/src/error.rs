//! Errors of the substrate layer.

use std::io;

/// Why a pool could not be created, opened or validated.
///
/// Every way a file on disk can be wrong maps to a variant here; none of them panics.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The file does not start with the pool magic.
    #[error("not a Ferrite pool ({reason})")]
    NotAPool {
        /// What was found instead.
        reason: &'static str,
    },
    /// The header is intact but written by a format version this build cannot read.
    #[error("unsupported pool format version {found} (this build reads version {supported})")]
    UnsupportedVersion {
        /// Version in the header.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// The header requires features this build does not implement.
    #[error("pool requires unsupported features {bits:#x}")]
    UnsupportedFeatures {
        /// Unknown incompatible feature bits.
        bits: u32,
    },
    /// The pool belongs to a different application layout.
    #[error("wrong layout: pool has layout {found:?}, expected {expected:?}")]
    WrongLayout {
        /// Layout the caller asked for.
        expected: String,
        /// Layout recorded in the pool.
        found: String,
    },
    /// The file is shorter than the pool its header describes.
    #[error("truncated pool: file has {actual} bytes, header records {expected}")]
    Truncated {
        /// File length.
        actual: u64,
        /// Pool size in the header (or the minimum header length).
        expected: u64,
    },
    /// The file is longer than the pool its header describes.
    #[error("size mismatch: file has {actual} bytes, header records {expected}")]
    SizeMismatch {
        /// File length.
        actual: u64,
        /// Pool size in the header.
        expected: u64,
    },
    /// A checksum does not match its data.
    #[error("{what} checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    ChecksumMismatch {
        /// Which structure.
        what: &'static str,
        /// Checksum found on the media.
        stored: u32,
        /// Checksum of the data found on the media.
        computed: u32,
    },
    /// The header's checksum matches but its fields are inconsistent.
    #[error("corrupt pool header: {0}")]
    Corrupted(String),
    /// Another process (or another handle in this process) holds the pool open.
    #[error("pool is already open by another process or handle")]
    AlreadyOpen,
    /// The operating system denied access to the file.
    #[error("permission denied")]
    PermissionDenied,
    /// The file does not exist.
    #[error("no such file")]
    NotFound,
    /// `create` found an existing file.
    #[error("a file already exists at that path")]
    AlreadyExists,
    /// The file system has no room for the pool.
    #[error("not enough space for a pool of {requested} bytes")]
    OutOfSpace {
        /// Requested pool size.
        requested: u64,
    },
    /// A parameter is out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An earlier write-back failed; the pool must be reopened.
    #[error("pool is poisoned by an earlier failed write-back; reopen it")]
    Poisoned,
    /// Any other I/O failure.
    #[error("I/O error: {0}")]
    Io(#[source] io::Error),
}

impl From<io::Error> for PoolError {
    fn from(error: io::Error) -> Self {
        match error.kind() {
            io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
                PoolError::PermissionDenied
            }
            io::ErrorKind::AlreadyExists => PoolError::AlreadyExists,
            io::ErrorKind::NotFound => PoolError::NotFound,
            _ => PoolError::Io(error),
        }
    }
}

impl PoolError {
    /// A stable exit code for command-line tools (listed in `docs/pool-format.md`).
    pub fn exit_code(&self) -> i32 {
        match self {
            PoolError::NotAPool { .. } => 10,
            PoolError::UnsupportedVersion { .. } | PoolError::UnsupportedFeatures { .. } => 11,
            PoolError::WrongLayout { .. } => 12,
            PoolError::Truncated { .. } | PoolError::SizeMismatch { .. } => 13,
            PoolError::ChecksumMismatch { .. } | PoolError::Corrupted(_) => 14,
            PoolError::AlreadyOpen => 15,
            PoolError::PermissionDenied => 16,
            PoolError::AlreadyExists => 17,
            PoolError::OutOfSpace { .. } => 18,
            PoolError::NotFound => 19,
            PoolError::InvalidArgument(_) => 2,
            PoolError::Poisoned | PoolError::Io(_) => 1,
        }
    }
}
