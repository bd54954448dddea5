//! Errors of the runtime's persistent layer.

#![forbid(unsafe_code)]

use pmem::PoolError;

/// What can go wrong opening, logging to or recovering an NVthreads pool.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NvtError {
    /// The pool itself could not be created, opened or validated.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A checksum-valid structure has inconsistent contents.
    #[error("corrupted NVthreads pool: {0}")]
    Corrupted(String),
    /// A checked word (the commit or lap word) fails its check, or a value does not fit one.
    #[error("corrupted NVthreads pool: {0}")]
    Checked(#[from] pmem::checked::CheckedError),
    /// The runtime header names a format version this build does not read.
    #[error("unsupported NVthreads format version {found} (this build reads {supported})")]
    UnsupportedVersion {
        /// Version found on the media.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// A record does not fit in an empty lane, or the records not committed yet (of sections
    /// still open) fill a lane by themselves.
    #[error(
        "redo log full: {needed} bytes needed, {free} bytes in a lane, {pending} uncommitted records"
    )]
    LogFull {
        /// Bytes needed.
        needed: u64,
        /// Bytes a lane holds.
        free: u64,
        /// Records not committed yet in that lane.
        pending: u64,
    },
    /// A record does not fit in the free space of its lane: a checkpoint makes room.
    #[error("lane {lane} full: record of {needed} bytes, {free} bytes free")]
    LaneFull {
        /// The lane.
        lane: usize,
        /// Size of the record.
        needed: u64,
        /// Free bytes at the lane's tail.
        free: u64,
    },
    /// A record of a lane fails its check while an intact record of the current lap lies
    /// after it in the same lane: media damage, not a torn tail (a lane's records are
    /// written one after the other, each durable before the next is written, so a crash
    /// can tear only the last). Recovery refuses the pool and changes nothing in it.
    #[error(
        "damaged redo log: lane {lane}'s record at pool offset {offset:#x} fails its check, \
         but an intact record of the current lap follows it at {intact:#x} (not a torn tail: \
         committed sections would be lost)"
    )]
    DamagedLog {
        /// The lane.
        lane: usize,
        /// Pool offset of the record that fails its check.
        offset: u64,
        /// Pool offset of the first intact record of the current lap after it.
        intact: u64,
    },
    /// Invalid geometry or argument.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}
