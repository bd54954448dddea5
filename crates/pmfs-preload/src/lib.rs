//! Direct access to a PMFS pool for unmodified programs (the user-space analogue of PMFS'
//! XIP path, EuroSys'14): loaded with `LD_PRELOAD`, this library serves every file operation
//! on paths under a prefix from a pool mapped into the program's own process, through the
//! `pmfs` library, and passes everything else to the C library. No kernel round trip stands
//! between the program and PM; `mmap` of a served file maps the pool's pages themselves.
//!
//! ```text
//! PMFS_POOL=/dev/shm/fs.pool PMFS_PREFIX=/pmfs LD_PRELOAD=libpmfs_preload.so sqlite3 /pmfs/db
//! ```
//!
//! The model (`docs/pmfs-mount.md`, "Direct access"):
//! - **One process owns the pool** (the pool's lock): the first served call opens and
//!   mounts it; a pool mounted elsewhere (or served to another process) makes served calls
//!   fail with `EBUSY` (tried again at each call) and one message on stderr. Sharing
//!   between processes is the FUSE mount's job. A child forked while its parent holds the
//!   pool drops its copy of the served state (it would go stale): its inherited served
//!   descriptors are placeholders (`EBADF`) and the pool is busy (`EBUSY`); programs that
//!   fork workers (fio) run threads instead.
//! - Guarantees are the library's: every call that returns has made its change durable
//!   (metadata atomic, data in place with non-temporal stores, or copy-on-write), exactly as
//!   through the mount; stores through a mapping are durable at `msync`, `fsync` or
//!   `munmap`.
//! - Served paths are absolute paths under the prefix (and paths relative to a served
//!   directory descriptor with the `*at` calls); relative paths resolve through the kernel.
//! - A served descriptor is a real descriptor number (an `O_PATH` descriptor of `/` holds
//!   it, so a call this library does not serve fails with `EBADF` instead of touching
//!   another file). `dup` of it is another descriptor of the same open file; record locks
//!   (`fcntl` `F_SETLK`) always succeed, since no other process can hold one. A served
//!   descriptor without close-on-exec is handed to the program `exec` starts (`handover`).
//! - C stdio on served files is a `fopencookie` `FILE` over the served calls (`stdio`);
//!   the standard streams switch to one while a served file is descriptor 0, 1 or 2.
//! - `chdir` into the prefix gives a served working directory for relative paths (`cwd`);
//!   the kernel's is parked meanwhile in a removed empty directory, where nothing resolves,
//!   and the programs started from there take the served one over.
//! - A process that holds nothing served and runs one thread gives the pool up before it
//!   starts another program (`spawn`), and mounts it again at its next served call.
//! - The pool is not marked clean when the program exits; the next open recovers as after
//!   a crash, which every mount does anyway.
//!
//! x86-64 Linux only: the variadic `open`/`fcntl` are declared with their optional
//! argument, which the System V calling convention passes in the same register either way.

/// The next definition of C function `$name` with type `$ty`, looked up once.
macro_rules! next {
    ($name:expr, $ty:ty) => {{
        static ADDRESS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut address = ADDRESS.load(std::sync::atomic::Ordering::Relaxed);
        if address == 0 {
            // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no other
            // precondition.
            address = unsafe { libc::dlsym(libc::RTLD_NEXT, concat!($name, "\0").as_ptr().cast()) }
                as usize;
            if address == 0 {
                eprintln!(concat!("pmfs-preload: no C library definition of ", $name));
                std::process::abort();
            }
            ADDRESS.store(address, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: `address` is the non-null address of the C library's `$name`, whose
        // prototype `$ty` transcribes.
        unsafe { std::mem::transmute::<usize, $ty>(address) }
    }};
}

mod abi;
mod cwd;
mod dirs;
mod handover;
mod names;
mod served;
mod shell;
mod spawn;
mod statfs;
mod stdio;
mod vectored;
