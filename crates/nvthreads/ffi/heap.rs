//! The interposed `malloc` family (`docs/nvthreads.md` §3.6).
//!
//! A call is served by the runtime's arena when the runtime runs, `NVT_MALLOC` is not
//! `private`, and the caller is not glibc or the dynamic loader; otherwise by glibc (its
//! `__libc_*` entry points). `free`, `realloc` and `malloc_usable_size` go by the block's
//! address, so memory allocated before the runtime started, or by libc, is returned to glibc.
//!
//! The exported allocation functions are naked entry points that pass their return address
//! (the caller) on as one more argument: on x86-64 it is the word at the stack pointer, on
//! AArch64 the link register. Other architectures treat every caller as the program.

use super::{
    __libc_calloc, __libc_free, __libc_malloc, __libc_memalign, __libc_realloc, active, set_errno,
};
use libc::{c_char, c_int, c_void, size_t};
use nvthreads::heapmeta::{self, AllocError};
use nvthreads::runtime::MallocMode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Text ranges of glibc and the dynamic loader (start, end), found before `main`.
static LIBC_TEXT: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];
/// Set once the text ranges are known and the runtime has started (or stays dormant).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Records the executable segments of glibc and the dynamic loader.
pub fn find_libc_text() {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    // SAFETY: dl_iterate_phdr calls the callback with valid program headers; `data` is our
    // `Vec`, used only during the call.
    unsafe { libc::dl_iterate_phdr(Some(collect_libc_text), (&raw mut ranges).cast()) };
    for (i, (start, end)) in ranges.into_iter().take(LIBC_TEXT.len() / 2).enumerate() {
        LIBC_TEXT[2 * i].store(start, Ordering::Relaxed);
        LIBC_TEXT[2 * i + 1].store(end, Ordering::Relaxed);
    }
}

unsafe extern "C" fn collect_libc_text(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: per dl_iterate_phdr, `info` is valid with `dlpi_phnum` headers; `data` is the
    // `Vec` passed by `find_libc_text`.
    let (info, ranges) = unsafe { (&*info, &mut *data.cast::<Vec<(usize, usize)>>()) };
    if info.dlpi_name.is_null() {
        return 0;
    }
    // SAFETY: a non-null dlpi_name is a NUL-terminated path.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes();
    let file = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
    if !(file.starts_with(b"libc.so") || file.starts_with(b"ld-linux")) {
        return 0;
    }
    // SAFETY: as above.
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    for header in headers {
        if header.p_type == libc::PT_LOAD && header.p_flags & libc::PF_X != 0 {
            let start = (info.dlpi_addr + header.p_vaddr) as usize;
            ranges.push((start, start + header.p_memsz as usize));
        }
    }
    0
}

/// From now on, program allocations go to the runtime's arena (if it has one).
pub fn enable() {
    ENABLED.store(true, Ordering::Release);
}

fn called_by_libc(caller: usize) -> bool {
    LIBC_TEXT.chunks(2).any(|range| {
        let (start, end) = (
            range[0].load(Ordering::Relaxed),
            range[1].load(Ordering::Relaxed),
        );
        caller >= start && caller < end
    })
}

/// The runtime, if this call is for its arena.
fn arena_runtime(caller: usize) -> Option<&'static nvthreads::runtime::Runtime> {
    if !ENABLED.load(Ordering::Acquire) || called_by_libc(caller) {
        return None;
    }
    active()
        .filter(|runtime| runtime.malloc_mode() != MallocMode::Private && runtime.arena().is_some())
}

/// Whether the program's allocations go to the runtime's arena (not to glibc).
pub(crate) fn program_arena() -> bool {
    arena_runtime(0).is_some()
}

/// Whether `ptr` is one of the program arena's blocks (not glibc's).
pub(crate) fn is_program_block(ptr: *mut c_void) -> bool {
    owner(ptr).is_some()
}

/// The runtime, if `ptr` is one of its arena's blocks.
fn owner(ptr: *mut c_void) -> Option<&'static nvthreads::runtime::Runtime> {
    if ptr.is_null() || !ENABLED.load(Ordering::Acquire) {
        return None;
    }
    active().filter(|runtime| {
        runtime
            .arena()
            .is_some_and(|arena| arena.contains(ptr as usize))
    })
}

fn or_enomem(ptr: *mut u8) -> *mut c_void {
    if ptr.is_null() {
        set_errno(libc::ENOMEM);
    }
    ptr.cast()
}

/// Entry points: each passes its return address as one more argument to `$target`.
macro_rules! entry_point {
    ($(#[$doc:meta])* $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty => $target:ident, $reg:literal, $arm:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As the C function of this name.
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!(concat!("mov ", $reg, ", qword ptr [rsp]"), "jmp {target}", target = sym $target)
        }

        $(#[$doc])*
        ///
        /// # Safety
        /// As the C function of this name.
        #[cfg(target_arch = "aarch64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            core::arch::naked_asm!(concat!("mov ", $arm, ", x30"), "b {target}", target = sym $target)
        }

        $(#[$doc])*
        ///
        /// # Safety
        /// As the C function of this name.
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            $target($($arg,)* 0)
        }
    };
}

entry_point!(
    /// `malloc(3)`.
    malloc(size: size_t) -> *mut c_void => malloc_from, "rsi", "x1"
);
entry_point!(
    /// `calloc(3)`.
    calloc(count: size_t, size: size_t) -> *mut c_void => calloc_from, "rdx", "x2"
);
entry_point!(
    /// `realloc(3)`.
    realloc(ptr: *mut c_void, size: size_t) -> *mut c_void => realloc_from, "rdx", "x2"
);
entry_point!(
    /// `reallocarray(3)`.
    reallocarray(ptr: *mut c_void, count: size_t, size: size_t) -> *mut c_void => reallocarray_from, "rcx", "x3"
);
entry_point!(
    /// `posix_memalign(3)`.
    posix_memalign(out: *mut *mut c_void, align: size_t, size: size_t) -> c_int => posix_memalign_from, "rcx", "x3"
);
entry_point!(
    /// `aligned_alloc(3)`.
    aligned_alloc(align: size_t, size: size_t) -> *mut c_void => memalign_from, "rdx", "x2"
);
entry_point!(
    /// `memalign(3)`.
    memalign(align: size_t, size: size_t) -> *mut c_void => memalign_from, "rdx", "x2"
);
entry_point!(
    /// `valloc(3)`.
    valloc(size: size_t) -> *mut c_void => valloc_from, "rsi", "x1"
);
entry_point!(
    /// `pvalloc(3)`.
    pvalloc(size: size_t) -> *mut c_void => pvalloc_from, "rsi", "x1"
);

pub(crate) extern "C" fn malloc_from(size: size_t, caller: usize) -> *mut c_void {
    match arena_runtime(caller) {
        Some(runtime) => or_enomem(runtime.arena_alloc(size, 16, false)),
        // SAFETY: glibc's malloc has no preconditions.
        None => unsafe { __libc_malloc(size) },
    }
}

extern "C" fn calloc_from(count: size_t, size: size_t, caller: usize) -> *mut c_void {
    let Some(bytes) = count.checked_mul(size) else {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    match arena_runtime(caller) {
        Some(runtime) => or_enomem(runtime.arena_alloc(bytes, 16, true)),
        // SAFETY: glibc's calloc has no preconditions.
        None => unsafe { __libc_calloc(count, size) },
    }
}

pub(crate) extern "C" fn realloc_from(
    ptr: *mut c_void,
    size: size_t,
    caller: usize,
) -> *mut c_void {
    if ptr.is_null() {
        return malloc_from(size, caller);
    }
    match owner(ptr) {
        Some(runtime) if size == 0 => {
            runtime.arena_free(ptr as usize);
            std::ptr::null_mut()
        }
        Some(runtime) => or_enomem(runtime.arena_realloc(ptr as usize, size)),
        // SAFETY: `ptr` is not an arena block, so it came from glibc (C contract).
        None => unsafe { __libc_realloc(ptr, size) },
    }
}

extern "C" fn reallocarray_from(
    ptr: *mut c_void,
    count: size_t,
    size: size_t,
    caller: usize,
) -> *mut c_void {
    match count.checked_mul(size) {
        Some(bytes) => realloc_from(ptr, bytes, caller),
        None => {
            set_errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
    }
}

fn aligned_from(align: usize, size: usize, caller: usize) -> *mut c_void {
    match arena_runtime(caller) {
        Some(runtime) => runtime.arena_alloc(size, align.max(16), false).cast(),
        // SAFETY: glibc's memalign accepts any power-of-two alignment.
        None => unsafe { __libc_memalign(align, size) },
    }
}

extern "C" fn posix_memalign_from(
    out: *mut *mut c_void,
    align: size_t,
    size: size_t,
    caller: usize,
) -> c_int {
    if !align.is_power_of_two() || !align.is_multiple_of(std::mem::size_of::<*mut c_void>()) {
        return libc::EINVAL;
    }
    let block = aligned_from(align, size, caller);
    if block.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the C contract: `out` is valid for a write.
    unsafe { out.write(block) };
    0
}

extern "C" fn memalign_from(align: size_t, size: size_t, caller: usize) -> *mut c_void {
    if align == 0 || align > (1 << 40) {
        set_errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    // glibc rounds an alignment that is not a power of two up to the next one.
    or_enomem(aligned_from(align.next_power_of_two(), size, caller).cast())
}

extern "C" fn valloc_from(size: size_t, caller: usize) -> *mut c_void {
    or_enomem(aligned_from(4096, size, caller).cast())
}

extern "C" fn pvalloc_from(size: size_t, caller: usize) -> *mut c_void {
    or_enomem(aligned_from(4096, size.max(1).next_multiple_of(4096), caller).cast())
}

/// `free(3)`.
///
/// # Safety
/// As `free(3)`: `ptr` is null or a live block of this allocator or glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(ptr: *mut c_void) {
    match owner(ptr) {
        Some(runtime) => runtime.arena_free(ptr as usize),
        // SAFETY: not an arena block, so null or glibc's (C contract).
        None => unsafe { __libc_free(ptr) },
    }
}

/// `cfree(3)`, the obsolete name of `free`.
///
/// # Safety
/// As `free(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cfree(ptr: *mut c_void) {
    // SAFETY: forwarded.
    unsafe { free(ptr) }
}

/// `malloc_usable_size(3)`.
///
/// # Safety
/// `ptr` is null or a live block of this allocator or glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc_usable_size(ptr: *mut c_void) -> size_t {
    match owner(ptr) {
        Some(runtime) => runtime.arena_usable_size(ptr as usize),
        None => {
            let real =
                crate::next!(c"malloc_usable_size" => unsafe extern "C" fn(*mut c_void) -> size_t);
            // SAFETY: glibc's block (or null).
            unsafe { real(ptr) }
        }
    }
}

/// `strdup(3)`: the copy is the program's memory (shared like any `malloc`).
///
/// # Safety
/// `text` is a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn strdup(text: *const c_char) -> *mut c_char {
    // SAFETY: the C contract.
    let len = unsafe { libc::strlen(text) };
    // SAFETY: `text` holds `len` bytes and its NUL.
    unsafe { copy_string(text, len) }
}

/// `strndup(3)`.
///
/// # Safety
/// `text` holds a NUL-terminated string or at least `max` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn strndup(text: *const c_char, max: size_t) -> *mut c_char {
    // SAFETY: the C contract.
    let len = unsafe { libc::strnlen(text, max) };
    // SAFETY: `text` holds at least `len` bytes.
    unsafe { copy_string(text, len) }
}

/// A fresh program allocation holding `len` bytes of `text` and a NUL.
///
/// # Safety
/// `text` is readable for `len` bytes.
pub(crate) unsafe fn copy_string(text: *const c_char, len: usize) -> *mut c_char {
    let copy = malloc_from(len + 1, 0).cast::<c_char>();
    if !copy.is_null() {
        // SAFETY: `copy` has `len + 1` bytes; `text` has `len` readable bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(text, copy, len);
            copy.add(len).write(0);
        }
    }
    copy
}

/// `nvmalloc` of a dormant runtime: ordinary zeroed memory, one object per name, so the
/// program runs unchanged on plain pthreads (nothing persists). The requests the runtime
/// refuses are refused alike (a size of 0, a bad name, an existing object too small); there
/// is no limit on names, and memory runs out only when glibc's does.
pub fn dormant_nvmalloc(size: usize, name: Option<&[u8]>) -> Result<*mut c_void, AllocError> {
    static NAMED: Mutex<Vec<(Vec<u8>, usize, usize)>> = Mutex::new(Vec::new());
    heapmeta::check_request(size as u64, name)?;
    let mut named = NAMED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(name) = name
        && let Some((_, at, existing)) = named.iter().find(|(known, ..)| known == name)
    {
        return if *existing >= size {
            Ok(*at as *mut c_void)
        } else {
            Err(AllocError::TooSmall {
                existing: *existing as u64,
                size: size as u64,
            })
        };
    }
    // SAFETY: glibc's calloc has no preconditions.
    let at = unsafe { __libc_calloc(1, size) };
    if at.is_null() {
        return Err(AllocError::DormantOutOfMemory { size: size as u64 });
    }
    if let Some(name) = name {
        named.push((name.to_vec(), at as usize, size));
    }
    Ok(at)
}
