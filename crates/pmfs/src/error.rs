//! Errors: `Errno` for file-system operations (POSIX error numbers, as a syscall returns
//! them), `FsError` for formatting and mounting, and `Corrupt` for damaged media found while
//! decoding (it becomes `EIO` in an operation and `FsError::Corrupted` at mount).

use std::fmt;

/// A POSIX error number, as the matching system call would return it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Errno(i32);

macro_rules! errnos {
    ($($name:ident: $text:literal),* $(,)?) => {
        impl Errno {
            $(
                #[doc = $text]
                pub const $name: Errno = Errno(libc::$name);
            )*

            /// The symbolic name (`"ENOENT"`), or `"E?"` for a number this crate never returns.
            pub fn name(self) -> &'static str {
                $(if self.0 == libc::$name { return stringify!($name); })*
                "E?"
            }

            fn text(self) -> &'static str {
                $(if self.0 == libc::$name { return $text; })*
                "unknown error"
            }
        }
    };
}

errnos! {
    EPERM: "operation not permitted",
    ENOENT: "no such file or directory",
    E2BIG: "argument list too long (an extended attribute value over 64 KiB)",
    EIO: "input/output error (the file system is damaged)",
    EBADF: "bad file descriptor",
    EACCES: "permission denied",
    EBUSY: "device or resource busy",
    EEXIST: "file exists",
    EXDEV: "invalid cross-device link",
    ENOTDIR: "not a directory",
    EISDIR: "is a directory",
    EINVAL: "invalid argument",
    EFBIG: "file too large",
    ENOSPC: "no space left on device",
    EMLINK: "too many links",
    ENAMETOOLONG: "file name too long",
    ENOTEMPTY: "directory not empty",
    ELOOP: "too many levels of symbolic links",
    ENOSYS: "function not implemented",
    EOVERFLOW: "value too large for defined data type",
    EFAULT: "bad address (a mapped access past the end of the file)",
    ENXIO: "no such device or address (a mapping past the end of the file)",
    ENODEV: "no such device (only regular files can be mapped)",
    EOPNOTSUPP: "operation not supported",
    ENODATA: "no data available (no such extended attribute)",
    ERANGE: "result out of range (a buffer too small, or a bad attribute name)",
}

impl Errno {
    /// The raw number (what `errno` would hold).
    pub const fn raw(self) -> i32 {
        self.0
    }

    /// An arbitrary error number (for comparing with a system call's result).
    pub const fn from_raw(raw: i32) -> Errno {
        Errno(raw)
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.text(), self.name())
    }
}

impl std::error::Error for Errno {}

/// Damage found while decoding the media. Never a panic: every value read from PM is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Corrupt(pub String);

impl Corrupt {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Corrupt(message.into())
    }

    /// The same damage, said to be in inode `ino`'s structures (once: a message that
    /// already names an inode is kept).
    pub(crate) fn of_inode(self, ino: u64) -> Self {
        if self.0.contains("inode ") {
            self
        } else {
            Corrupt(format!("inode {ino}: {}", self.0))
        }
    }
}

impl From<pmem::checked::CheckedError> for Corrupt {
    fn from(error: pmem::checked::CheckedError) -> Self {
        Corrupt(error.to_string())
    }
}

thread_local! {
    /// The damage behind the last `EIO` this thread's operations returned, for a caller
    /// that reports it ([`take_damage`]): the errno alone cannot carry it.
    static LAST_DAMAGE: std::cell::Cell<Option<String>> = const { std::cell::Cell::new(None) };
}

impl From<Corrupt> for Errno {
    fn from(damage: Corrupt) -> Self {
        LAST_DAMAGE.set(Some(damage.0));
        Errno::EIO
    }
}

/// What the damage behind the last `EIO` an operation of this thread returned was (which
/// object, which word), taken: `None` once taken, or when no damage was described. An
/// operation that met damage but answered with another error leaves its description for
/// the next `EIO`'s caller to take.
pub fn take_damage() -> Option<String> {
    LAST_DAMAGE.take()
}

/// Why a file system could not be created or mounted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    /// The pool itself could not be opened or attached.
    #[error(transparent)]
    Pool(#[from] pmem::PoolError),
    /// No superblock: the pool was never formatted as a file system (or `mkfs` was
    /// interrupted before its last step).
    #[error("not a ferrite file system: {0}")]
    NotFormatted(&'static str),
    /// A superblock of a version this build cannot read.
    #[error("unsupported file-system version {found} (this build reads versions 1 to 3)")]
    UnsupportedVersion {
        /// Version found in the superblock.
        found: u32,
    },
    /// Incompatible feature bits this build does not know.
    #[error("unsupported file-system features {bits:#x}")]
    UnsupportedFeatures {
        /// The unknown bits.
        bits: u32,
    },
    /// Damaged metadata (the message names what and where).
    #[error("file system corrupted: {0}")]
    Corrupted(String),
    /// Bad `mkfs` parameters.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl From<Corrupt> for FsError {
    fn from(corrupt: Corrupt) -> Self {
        FsError::Corrupted(corrupt.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_values_match_the_platform() {
        assert_eq!(Errno::ENOENT.raw(), libc::ENOENT);
        assert_eq!(Errno::ENOENT.name(), "ENOENT");
        assert_eq!(Errno::from_raw(-12345).name(), "E?");
        assert_eq!(
            Errno::ENOTEMPTY.to_string(),
            "directory not empty (ENOTEMPTY)"
        );
        assert_eq!(Errno::from(Corrupt::new("x")), Errno::EIO);
    }
}
