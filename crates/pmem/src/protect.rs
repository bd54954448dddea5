//! Write protection against stray writes (the write windows of PMFS, EuroSys 2014, in user
//! space): the pool's mapping is made read-only, and every store
//! through the seam happens inside a short **write window** that lifts the protection for
//! the pages it touches and restores it afterwards. A store through a stray pointer outside
//! a window faults (`SIGSEGV`) instead of corrupting the pool.
//!
//! Two mechanisms:
//! - [`Protection::Mprotect`]: `mprotect` to read-write and back around each store. Two
//!   system calls and a TLB shootdown per window; the protection is per process, so while one
//!   thread has a window open a stray store by another thread to the same pages is not
//!   caught (windows are serialised by a lock, so at most one is open at a time).
//! - [`Protection::Mpk`]: Intel memory protection keys. The mapping is tagged with a key
//!   whose write access is disabled in each thread's PKRU register; a window enables writes
//!   for the calling thread only (`pkey_set`, a user-mode `WRPKRU`, no system call), so other
//!   threads stay protected. Needs the CPU's `pku` feature and kernel support (`ospke`).
//!
//! Protection is opt-in ([`crate::Native::protect`]); the unprotected path costs one
//! predictable branch per store.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// How a native pool is guarded against stray writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protection {
    /// Mapping read-write, no windows (the default).
    None,
    /// Read-only mapping, `mprotect` windows.
    Mprotect,
    /// Memory protection keys (fails where the CPU or kernel lacks them).
    Mpk,
    /// MPK where available, `mprotect` otherwise.
    Auto,
}

impl Protection {
    /// Every choice.
    pub const ALL: [Protection; 4] = [
        Protection::None,
        Protection::Mprotect,
        Protection::Mpk,
        Protection::Auto,
    ];

    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            Protection::None => "none",
            Protection::Mprotect => "mprotect",
            Protection::Mpk => "mpk",
            Protection::Auto => "auto",
        }
    }

    /// Parses a name as printed by [`Protection::name`].
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == text)
    }
}

/// Whether this CPU and kernel offer memory protection keys: CPUID.(EAX=7,ECX=0):ECX bit 3
/// (PKU) and bit 4 (OSPKE, enabled by the OS).
pub fn mpk_supported() -> bool {
    use std::arch::x86_64::__cpuid_count;
    // CPUID leaf 0 exists on every x86_64 CPU; leaf 7 is read only when leaf 0 says it exists.
    if __cpuid_count(0, 0).eax < 7 {
        return false;
    }
    let ecx = __cpuid_count(7, 0).ecx;
    ecx & (1 << 3) != 0 && ecx & (1 << 4) != 0
}

/// `PKEY_DISABLE_WRITE` of `<sys/mman.h>`.
const PKEY_DISABLE_WRITE: libc::c_uint = 2;

unsafe extern "C" {
    /// glibc (2.27+): sets the calling thread's access rights for `key` (a `WRPKRU`).
    fn pkey_set(key: libc::c_int, rights: libc::c_uint) -> libc::c_int;
}

/// An active guard over one mapping.
#[derive(Debug)]
pub(crate) struct Guard {
    kind: Kind,
    base: usize,
    len: usize,
    page: usize,
    /// Windows opened (for reports and tests).
    windows: AtomicU64,
}

#[derive(Debug)]
enum Kind {
    Mprotect(parking_lot::Mutex<()>),
    Mpk(libc::c_int),
}

impl Guard {
    /// Protects `[base, base + len)` (a whole page-aligned mapping) with `mode`
    /// ([`Protection::None`] is refused by the caller). The caller guarantees no other
    /// thread stores into the mapping while the guard is being installed.
    pub(crate) fn install(base: *mut u8, len: usize, mode: Protection) -> io::Result<Guard> {
        let page = crate::mapping::page_size();
        let kind = match mode {
            Protection::Mpk => Kind::Mpk(alloc_key()?),
            Protection::Auto if mpk_supported() => match alloc_key() {
                Ok(key) => Kind::Mpk(key),
                Err(_) => Kind::Mprotect(parking_lot::Mutex::new(())),
            },
            Protection::Auto | Protection::Mprotect => Kind::Mprotect(parking_lot::Mutex::new(())),
            Protection::None => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "no protection to install",
                ));
            }
        };
        let guard = Guard {
            kind,
            base: base as usize,
            len,
            page,
            windows: AtomicU64::new(0),
        };
        match guard.kind {
            Kind::Mprotect(_) => {
                if let Err(error) = guard.mprotect(0, len, libc::PROT_READ) {
                    // mprotect may have changed part of the range before it failed; give the
                    // whole mapping back writable, since no guard will open windows on it.
                    let _ = guard.mprotect(0, len, libc::PROT_READ | libc::PROT_WRITE);
                    return Err(error);
                }
            }
            Kind::Mpk(key) => {
                // SAFETY: base/len describe a live mapping owned by the backend; tagging its
                // pages with our key keeps them readable and writable at the page-table level
                // (PKRU now disables writes for this thread, see alloc_key).
                let rc = unsafe {
                    libc::syscall(
                        libc::SYS_pkey_mprotect,
                        base,
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        key,
                    )
                };
                if rc != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(guard)
    }

    /// The mechanism in force.
    pub(crate) fn mode(&self) -> Protection {
        match self.kind {
            Kind::Mprotect(_) => Protection::Mprotect,
            Kind::Mpk(_) => Protection::Mpk,
        }
    }

    /// Windows opened so far.
    pub(crate) fn windows(&self) -> u64 {
        self.windows.load(Ordering::Relaxed)
    }

    /// Runs `store` with `[off, off + len)` of the mapping writable.
    /// The caller has checked that `[off, off + len)` lies inside the mapping.
    ///
    /// The window closes when `store` returns and also when it unwinds: a panic caught
    /// further up must not leave the pages (mprotect) or the thread (MPK) writable.
    #[inline]
    pub(crate) fn window<R>(&self, off: u64, len: usize, store: impl FnOnce() -> R) -> R {
        self.windows.fetch_add(1, Ordering::Relaxed);
        match &self.kind {
            Kind::Mprotect(lock) => {
                let _one_window = lock.lock();
                let (start, end) = self.pages(off as usize, len);
                self.mprotect(start, end - start, libc::PROT_READ | libc::PROT_WRITE)
                    .expect("mprotect opening a write window");
                // Declared after the lock guard, so it is dropped (and the pages made
                // read-only again) before the lock is released.
                let _close = CloseWindow(|| {
                    self.mprotect(start, end - start, libc::PROT_READ)
                        .expect("mprotect closing a write window")
                });
                store()
            }
            &Kind::Mpk(key) => {
                set_rights(key, 0);
                let _close = CloseWindow(|| set_rights(key, PKEY_DISABLE_WRITE));
                store()
            }
        }
    }

    /// Makes sure the calling thread may read the mapping (a thread created before the key
    /// was allocated may have all access to it disabled in its PKRU).
    #[inline]
    pub(crate) fn prepare_read(&self) {
        if let Kind::Mpk(key) = self.kind {
            thread_local! {
                static READY: std::cell::Cell<libc::c_int> = const { std::cell::Cell::new(-1) };
            }
            if READY.get() != key {
                set_rights(key, PKEY_DISABLE_WRITE);
                READY.set(key);
            }
        }
    }

    fn pages(&self, off: usize, len: usize) -> (usize, usize) {
        let start = off / self.page * self.page;
        let end = (off + len.max(1)).div_ceil(self.page) * self.page;
        (start, end.min(self.len.div_ceil(self.page) * self.page))
    }

    fn mprotect(&self, off: usize, len: usize, prot: libc::c_int) -> io::Result<()> {
        // SAFETY: [base + off, base + off + len) lies within the backend's live mapping (the
        // whole of it at install; for a window, the pages of a range the backend checked to
        // be in bounds before opening it, the end clamped by pages()) and base + off is
        // page-aligned; changing its protection touches no Rust-visible memory.
        let rc = unsafe { libc::mprotect((self.base + off) as *mut libc::c_void, len, prot) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// Runs its closure when dropped: closes a write window on return and on unwind.
struct CloseWindow<F: FnMut()>(F);

impl<F: FnMut()> Drop for CloseWindow<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

/// Dropping a guard never touches the protection of `[base, base + len)`. The backend drops
/// its guard after its mapping (fields drop in declaration order), when those addresses may
/// already belong to another mapping of this process: an mprotect there would change the
/// protection of memory the guard does not own. (Unmapping removes the protection anyway.)
impl Drop for Guard {
    fn drop(&mut self) {
        if let Kind::Mpk(key) = self.kind {
            // SAFETY: frees the key this guard allocated; only its own mapping was tagged
            // with it, and that mapping is gone (the backend unmaps it before dropping the
            // guard), as pkey_free(2) asks.
            unsafe { libc::syscall(libc::SYS_pkey_free, key) };
        }
    }
}

/// Allocates a key whose writes are disabled for the calling thread.
fn alloc_key() -> io::Result<libc::c_int> {
    if !mpk_supported() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this CPU has no memory protection keys (no pku/ospke in CPUID)",
        ));
    }
    // SAFETY: pkey_alloc takes two integers and returns a key or -1.
    let key = unsafe { libc::syscall(libc::SYS_pkey_alloc, 0, PKEY_DISABLE_WRITE) };
    if key < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(key as libc::c_int)
}

fn set_rights(key: libc::c_int, rights: libc::c_uint) {
    // SAFETY: key was returned by pkey_alloc (only guards with an MPK key call this); the
    // call only writes the calling thread's PKRU register.
    let rc = unsafe { pkey_set(key, rights) };
    assert_eq!(rc, 0, "pkey_set({key}, {rights}) failed");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shared anonymous mapping of `pages` pages, unmapped on drop.
    struct Scratch {
        base: *mut u8,
        len: usize,
    }

    impl Scratch {
        fn new(pages: usize) -> Self {
            let len = pages * crate::mapping::page_size();
            // SAFETY: a fresh anonymous mapping (no address hint); checked against MAP_FAILED.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED, "mmap");
            Scratch {
                base: base.cast(),
                len,
            }
        }

        /// The permissions `/proc/self/maps` shows for the page at `base + off` ("r--s").
        fn perms(&self, off: usize) -> String {
            let addr = self.base as usize + off;
            let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
            maps.lines()
                .find_map(|line| {
                    let (range, rest) = line.split_once(' ')?;
                    let (start, end) = range.split_once('-')?;
                    let start = usize::from_str_radix(start, 16).ok()?;
                    let end = usize::from_str_radix(end, 16).ok()?;
                    (start..end).contains(&addr).then(|| rest[..4].to_owned())
                })
                .expect("the scratch mapping is listed")
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            // SAFETY: base/len describe the mapping made in `new`, unmapped only here.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }

    #[test]
    fn dropping_a_guard_leaves_the_protection_alone() {
        // The backend drops its guard after unmapping, when the addresses may already be
        // someone else's; and a second guard over the same pages must not lift the first's
        // protection when it goes away.
        let scratch = Scratch::new(4);
        let first = Guard::install(scratch.base, scratch.len, Protection::Mprotect).expect("1st");
        let second = Guard::install(scratch.base, scratch.len, Protection::Mprotect).expect("2nd");
        assert_eq!(scratch.perms(0), "r--s");
        drop(second);
        assert_eq!(
            scratch.perms(0),
            "r--s",
            "a dropped guard made the pages writable"
        );
        assert_eq!(scratch.perms(scratch.len - 1), "r--s");
        drop(first);
    }

    #[test]
    fn a_window_closes_when_its_store_panics() {
        let page = crate::mapping::page_size();
        let scratch = Scratch::new(4);
        let guard = Guard::install(scratch.base, scratch.len, Protection::Mprotect).expect("guard");
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            guard.window(page as u64, 8, || {
                assert_eq!(scratch.perms(page), "rw-s", "open inside the window");
                panic!("store failed");
            })
        }));
        assert!(caught.is_err());
        assert_eq!(
            scratch.perms(page),
            "r--s",
            "the window stayed open after its store unwound"
        );
        // The window lock was released too: another window opens.
        guard.window(page as u64, 8, || ());
        assert_eq!(scratch.perms(page), "r--s");
    }
}
