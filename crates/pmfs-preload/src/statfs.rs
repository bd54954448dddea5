//! File system statistics of served paths and descriptors (`statfs`, `fstatfs`, `statvfs`,
//! `fstatvfs` and their `64` forms, the same structures on x86-64): the pool's real block
//! and inode counts from `Fs::statfs`.

use crate::abi::{DEV_MAJOR, DEV_MINOR, ret, served_fd, served_fs, served_path};
use libc::{c_char, c_int};
use pmfs::{Errno, StatFs};

/// The `f_type` of a served file system: "PMFS" in ASCII (PMFS has no magic number
/// registered with Linux; tools print it as a number).
const PMFS_MAGIC: i64 = 0x504d_4653;

/// The statistics of the served file system.
fn counts() -> Result<StatFs, Errno> {
    Ok(served_fs()?.px.fs().statfs())
}

/// The file system id reported (the device number `stat` reports).
fn fsid() -> libc::fsid_t {
    // SAFETY: `fsid_t` is two integers; all-zero is valid.
    let mut id: libc::fsid_t = unsafe { std::mem::zeroed() };
    // SAFETY: the same layout as `[i32; 2]` (`__val` is private in the `libc` crate).
    unsafe {
        std::ptr::addr_of_mut!(id)
            .cast::<[i32; 2]>()
            .write([libc::makedev(DEV_MAJOR, DEV_MINOR) as i32, 0])
    };
    id
}

/// # Safety
/// `out` points to a writable `struct statfs`.
unsafe fn fill_statfs(out: *mut libc::statfs, s: &StatFs) {
    // SAFETY: an all-zero `struct statfs` is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    st.f_type = PMFS_MAGIC;
    st.f_bsize = i64::from(s.block_size);
    st.f_frsize = i64::from(s.block_size);
    st.f_blocks = s.blocks;
    st.f_bfree = s.free_blocks;
    st.f_bavail = s.free_blocks;
    st.f_files = s.inodes;
    st.f_ffree = s.free_inodes;
    st.f_fsid = fsid();
    st.f_namelen = i64::from(s.name_max);
    // SAFETY: the caller's `struct statfs`.
    unsafe { out.write(st) };
}

/// # Safety
/// `out` points to a writable `struct statvfs`.
unsafe fn fill_statvfs(out: *mut libc::statvfs, s: &StatFs) {
    // SAFETY: an all-zero `struct statvfs` is valid.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    st.f_bsize = u64::from(s.block_size);
    st.f_frsize = u64::from(s.block_size);
    st.f_blocks = s.blocks;
    st.f_bfree = s.free_blocks;
    st.f_bavail = s.free_blocks;
    st.f_files = s.inodes;
    st.f_ffree = s.free_inodes;
    st.f_favail = s.free_inodes;
    st.f_fsid = libc::makedev(DEV_MAJOR, DEV_MINOR);
    st.f_flag = libc::ST_NOSUID | libc::ST_NODEV;
    st.f_namemax = u64::from(s.name_max);
    // SAFETY: the caller's `struct statvfs`.
    unsafe { out.write(st) };
}

/// The statistics of a served path (which must exist, as for the kernel's `statfs`).
fn path_counts(p: &[u8]) -> Result<StatFs, Errno> {
    served_fs()?.px.stat(p)?;
    counts()
}

/// Defines `$name` (path) and `$fname` (descriptor), filling `$out` with `$fill`.
macro_rules! statfs_pair {
    ($name:ident, $fname:ident, $out:ty, $fill:ident) => {
        /// # Safety
        /// The C function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, out: *mut $out) -> c_int {
            // SAFETY: the call's path.
            if let Some(p) = unsafe { served_path(path) } {
                return ret(path_counts(&p).map(|s| {
                    // SAFETY: the caller's structure.
                    unsafe { $fill(out, &s) };
                    0
                }));
            }
            let real = next!(
                stringify!($name),
                unsafe extern "C" fn(*const c_char, *mut $out) -> c_int
            );
            // SAFETY: forwarded as received.
            unsafe { real(path, out) }
        }

        /// # Safety
        /// The C function of this name.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $fname(kfd: c_int, out: *mut $out) -> c_int {
            if served_fd(kfd).is_some() {
                return ret(counts().map(|s| {
                    // SAFETY: the caller's structure.
                    unsafe { $fill(out, &s) };
                    0
                }));
            }
            let real = next!(
                stringify!($fname),
                unsafe extern "C" fn(c_int, *mut $out) -> c_int
            );
            // SAFETY: forwarded as received.
            unsafe { real(kfd, out) }
        }
    };
}

statfs_pair!(statfs, fstatfs, libc::statfs, fill_statfs);
statfs_pair!(statfs64, fstatfs64, libc::statfs, fill_statfs);
statfs_pair!(statvfs, fstatvfs, libc::statvfs, fill_statvfs);
statfs_pair!(statvfs64, fstatvfs64, libc::statvfs, fill_statvfs);
