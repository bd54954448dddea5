//! Shared mappings of pool files.
//!
//! A pool is mapped `MAP_SHARED`. On a DAX file system we first ask for `MAP_SYNC`, which
//! guarantees that flushed stores are durable without `msync` (the file's block mapping is
//! kept persistent by the kernel). memmap2 cannot pass `MAP_SYNC`, so that attempt uses libc
//! directly; when the kernel refuses it (any non-DAX file system, including tmpfs), the
//! mapping falls back to memmap2.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// A writable shared mapping of a whole file.
#[derive(Debug)]
pub(crate) struct Mapping {
    base: *mut u8,
    len: usize,
    sync: bool,
    /// Keeps the memmap2 mapping alive when it is the one in use.
    _fallback: Option<memmap2::MmapRaw>,
}

// SAFETY: the mapping is plain shared memory; the raw pointer is only dereferenced by the
// backend, whose users provide isolation for overlapping accesses.
unsafe impl Send for Mapping {}
// SAFETY: as above; no interior state besides the mapped bytes.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `file`, preferring `MAP_SYNC`.
    pub(crate) fn new(file: &File, len: usize) -> io::Result<Self> {
        match map_sync(file, len) {
            Ok(base) => Ok(Mapping {
                base,
                len,
                sync: true,
                _fallback: None,
            }),
            Err(_) => {
                let raw = memmap2::MmapOptions::new().len(len).map_raw(file)?;
                Ok(Mapping {
                    base: raw.as_mut_ptr(),
                    len,
                    sync: false,
                    _fallback: Some(raw),
                })
            }
        }
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    /// Whether the kernel granted `MAP_SYNC` (the file lives on DAX persistent memory).
    pub(crate) fn is_sync(&self) -> bool {
        self.sync
    }

    /// `msync(MS_SYNC)` of the pages covering `[off, off + len)`.
    pub(crate) fn msync(&self, off: usize, len: usize) -> io::Result<()> {
        let page = page_size();
        let start = off / page * page;
        let end = (off + len).div_ceil(page) * page;
        let end = end.min(self.len);
        // SAFETY: start..end lies within the mapping (clamped to its length) and start is
        // page-aligned, as msync requires.
        let rc = unsafe { libc::msync(self.base.add(start).cast(), end - start, libc::MS_SYNC) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.sync {
            // SAFETY: base/len describe the mapping created by map_sync, unmapped only here.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }
}

fn map_sync(file: &File, len: usize) -> io::Result<*mut u8> {
    // SAFETY: a fresh mapping (no address hint) of a file descriptor we own; the result is
    // checked against MAP_FAILED.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
            file.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(ptr.cast())
    }
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// The file system type of an open file (`statfs.f_type`).
pub(crate) fn fs_type(file: &File) -> io::Result<i64> {
    let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: buf is a valid out-pointer for one statfs record.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), buf.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatfs returned 0, so it initialised the record.
    Ok(unsafe { buf.assume_init() }.f_type)
}

/// `statfs.f_type` of tmpfs (`/dev/shm`), where a mapping is DRAM standing in for PM.
pub(crate) const TMPFS_MAGIC: i64 = 0x0102_1994;
