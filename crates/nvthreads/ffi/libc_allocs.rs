//! libc functions that allocate memory on the program's behalf and hand it over
//! (`docs/nvthreads.md` §3.6): `asprintf`, `vasprintf` (x86-64), `getline`, `getdelim`, `realpath`
//! and `canonicalize_file_name`, `getcwd` with a null buffer, `get_current_dir_name`.
//! glibc allocates that memory through internal calls, which the `malloc` family serves from
//! glibc's own heap — private to each thread-process — so a string one thread made and
//! another freed or read would be another process's pointer. Interposed here, the memory
//! comes from the program's arena like any `malloc`: shared with every thread (persistent
//! with `NVT_MALLOC=persistent`). With the runtime dormant, or `NVT_MALLOC=private`, each
//! forwards to glibc unchanged.

use crate::heap::{copy_string, malloc_from, program_arena};
use crate::{__libc_free, next};
use libc::{FILE, c_char, c_int, c_void, size_t, ssize_t};

/// glibc's `PATH_MAX`: the longest path `realpath` returns.
const PATH_MAX: usize = 4096;

/// The string glibc allocated at `text`, moved into the program's arena (glibc's copy
/// freed), or null with `ENOMEM`.
///
/// # Safety
/// `text` is a NUL-terminated string from glibc's `malloc`, owned by the caller.
unsafe fn adopt_string(text: *mut c_char) -> *mut c_char {
    // SAFETY: the caller's contract.
    let len = unsafe { libc::strlen(text) };
    // SAFETY: `text` holds `len` bytes.
    let copy = unsafe { copy_string(text, len) };
    // SAFETY: glibc's block, no longer used.
    unsafe { __libc_free(text.cast()) };
    if copy.is_null() {
        // SAFETY: __errno_location returns this thread's errno.
        unsafe { *libc::__errno_location() = libc::ENOMEM };
    }
    copy
}

/// `vasprintf(3)`.
///
/// # Safety
/// As the C function: `strp` writable, `format` and `args` a valid format and `va_list`
/// (passed on as the pointer both x86-64 and AArch64 pass a `va_list` by).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vasprintf(
    strp: *mut *mut c_char,
    format: *const c_char,
    args: *mut c_void,
) -> c_int {
    let real = next!(c"vasprintf" => unsafe extern "C" fn(*mut *mut c_char, *const c_char, *mut c_void) -> c_int);
    // SAFETY: forwarded from the caller's contract.
    let len = unsafe { real(strp, format, args) };
    // SAFETY: on success glibc stored its string at `*strp`.
    unsafe { adopt_printed(strp, len) }
}

/// `__vasprintf_chk`, `vasprintf` of programs built with `_FORTIFY_SOURCE`.
///
/// # Safety
/// As `vasprintf`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __vasprintf_chk(
    strp: *mut *mut c_char,
    flag: c_int,
    format: *const c_char,
    args: *mut c_void,
) -> c_int {
    let real = next!(c"__vasprintf_chk" => unsafe extern "C" fn(*mut *mut c_char, c_int, *const c_char, *mut c_void) -> c_int);
    // SAFETY: forwarded from the caller's contract.
    let len = unsafe { real(strp, flag, format, args) };
    // SAFETY: on success glibc stored its string at `*strp`.
    unsafe { adopt_printed(strp, len) }
}

/// After a `vasprintf` that returned `len`: its string moved into the program's arena.
///
/// # Safety
/// When `len >= 0`, `*strp` is glibc's string, owned by the caller.
unsafe fn adopt_printed(strp: *mut *mut c_char, len: c_int) -> c_int {
    if len < 0 || !program_arena() {
        return len;
    }
    // SAFETY: the caller's contract.
    let copy = unsafe { adopt_string(*strp) };
    // SAFETY: `strp` is writable (the C contract).
    unsafe { *strp = copy };
    if copy.is_null() { -1 } else { len }
}

/// `asprintf(3)` and `__asprintf_chk` on x86-64: a variadic entry that builds the `va_list`
/// of its variable arguments as a compiler's prologue does — the six argument registers and,
/// when `al` says vector registers carry arguments, `xmm0`–`xmm7` saved in a register save
/// area, the stack arguments above the return address — and calls the `vasprintf` of the
/// same arguments. `$fixed` is the number of named integer arguments (the `va_list`'s
/// `gp_offset` is 8 for each); the `va_list` goes in the register after them.
macro_rules! variadic_asprintf {
    ($(#[$doc:meta])* $name:ident ( $($arg:ident : $ty:ty),* ) => $target:ident, $fixed:literal, $list_reg:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// As the C function of this name.
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            // Frame (rsp 16-aligned after the `sub`): the va_list at 0, the register save
            // area at 0x20 (six integer registers, then eight vector registers at 0x50).
            core::arch::naked_asm!(
                "sub rsp, 0xd8",
                "mov qword ptr [rsp + 0x20], rdi",
                "mov qword ptr [rsp + 0x28], rsi",
                "mov qword ptr [rsp + 0x30], rdx",
                "mov qword ptr [rsp + 0x38], rcx",
                "mov qword ptr [rsp + 0x40], r8",
                "mov qword ptr [rsp + 0x48], r9",
                "test al, al",
                "je 2f",
                "movaps xmmword ptr [rsp + 0x50], xmm0",
                "movaps xmmword ptr [rsp + 0x60], xmm1",
                "movaps xmmword ptr [rsp + 0x70], xmm2",
                "movaps xmmword ptr [rsp + 0x80], xmm3",
                "movaps xmmword ptr [rsp + 0x90], xmm4",
                "movaps xmmword ptr [rsp + 0xa0], xmm5",
                "movaps xmmword ptr [rsp + 0xb0], xmm6",
                "movaps xmmword ptr [rsp + 0xc0], xmm7",
                "2:",
                concat!("mov dword ptr [rsp], ", $fixed, " * 8"),
                "mov dword ptr [rsp + 4], 48",
                "lea rax, [rsp + 0xe0]",
                "mov qword ptr [rsp + 8], rax",
                "lea rax, [rsp + 0x20]",
                "mov qword ptr [rsp + 16], rax",
                concat!("mov ", $list_reg, ", rsp"),
                "call {target}",
                "add rsp, 0xd8",
                "ret",
                target = sym $target,
            )
        }
    };
}

variadic_asprintf!(
    /// `asprintf(3)`.
    asprintf(strp: *mut *mut c_char, format: *const c_char) => vasprintf, 2, "rdx"
);
variadic_asprintf!(
    /// `__asprintf_chk`, `asprintf` of programs built with `_FORTIFY_SOURCE`.
    __asprintf_chk(strp: *mut *mut c_char, flag: c_int, format: *const c_char) => __vasprintf_chk, 3, "rcx"
);

/// `getdelim(3)`: a null `*line` gets its first buffer from the program's arena; glibc
/// grows it with `realloc`, which keeps an arena block in the arena.
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getdelim(
    line: *mut *mut c_char,
    capacity: *mut size_t,
    delimiter: c_int,
    stream: *mut FILE,
) -> ssize_t {
    // SAFETY: the C contract: both pointers are valid (glibc returns EINVAL if null).
    unsafe { first_line_buffer(line, capacity) };
    let real = next!(c"getdelim" => unsafe extern "C" fn(*mut *mut c_char, *mut size_t, c_int, *mut FILE) -> ssize_t);
    // SAFETY: forwarded.
    unsafe { real(line, capacity, delimiter, stream) }
}

/// `__getdelim`, which glibc's `<stdio.h>` makes `getline` call in optimised builds.
///
/// # Safety
/// As `getdelim`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __getdelim(
    line: *mut *mut c_char,
    capacity: *mut size_t,
    delimiter: c_int,
    stream: *mut FILE,
) -> ssize_t {
    // SAFETY: forwarded.
    unsafe { getdelim(line, capacity, delimiter, stream) }
}

/// `getline(3)`, `getdelim` up to a newline.
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getline(
    line: *mut *mut c_char,
    capacity: *mut size_t,
    stream: *mut FILE,
) -> ssize_t {
    // SAFETY: forwarded.
    unsafe { getdelim(line, capacity, c_int::from(b'\n'), stream) }
}

/// Gives a null `*line` a buffer of the program's arena, as glibc would give one of its own.
///
/// # Safety
/// `line` and `capacity` are null or valid for reads and writes.
unsafe fn first_line_buffer(line: *mut *mut c_char, capacity: *mut size_t) {
    const FIRST: usize = 120;
    // SAFETY: the caller's contract; null pointers are left to glibc's EINVAL.
    if line.is_null() || capacity.is_null() || unsafe { !(*line).is_null() } || !program_arena() {
        return;
    }
    let buffer = malloc_from(FIRST, 0).cast::<c_char>();
    if !buffer.is_null() {
        // SAFETY: both valid (checked above).
        unsafe {
            *line = buffer;
            *capacity = FIRST;
        }
    }
}

/// `realpath(3)`: with a null `resolved`, the path is returned in the program's arena.
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char {
    let real =
        next!(c"realpath" => unsafe extern "C" fn(*const c_char, *mut c_char) -> *mut c_char);
    if !resolved.is_null() || !program_arena() {
        // SAFETY: forwarded.
        return unsafe { real(path, resolved) };
    }
    let mut buffer = [0 as c_char; PATH_MAX];
    // SAFETY: `buffer` holds PATH_MAX bytes, as realpath requires.
    let found = unsafe { real(path, buffer.as_mut_ptr()) };
    if found.is_null() {
        return found;
    }
    // SAFETY: realpath wrote a NUL-terminated path into `buffer`.
    unsafe { copy_string(buffer.as_ptr(), libc::strlen(buffer.as_ptr())) }
}

/// `canonicalize_file_name(3)`: `realpath(path, NULL)`.
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn canonicalize_file_name(path: *const c_char) -> *mut c_char {
    // SAFETY: forwarded.
    unsafe { realpath(path, std::ptr::null_mut()) }
}

/// `getcwd(3)`: with a null `buffer`, the directory is returned in the program's arena
/// (`size` bytes, or as many as it needs when `size` is 0).
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getcwd(buffer: *mut c_char, size: size_t) -> *mut c_char {
    let real = next!(c"getcwd" => unsafe extern "C" fn(*mut c_char, size_t) -> *mut c_char);
    if !buffer.is_null() || !program_arena() {
        // SAFETY: forwarded.
        return unsafe { real(buffer, size) };
    }
    // SAFETY: forwarded: glibc allocates the string it returns.
    let path = unsafe { real(buffer, size) };
    if path.is_null() {
        return path;
    }
    if size == 0 {
        // SAFETY: glibc's string, owned here.
        return unsafe { adopt_string(path) };
    }
    // The caller asked for a buffer of `size` bytes (it may append to it).
    let copy = malloc_from(size, 0).cast::<c_char>();
    if !copy.is_null() {
        // SAFETY: the path and its NUL fit in `size` bytes (glibc checked), `copy` has `size`.
        unsafe { libc::strcpy(copy, path) };
    }
    // SAFETY: glibc's block, no longer used.
    unsafe { __libc_free(path.cast()) };
    copy
}

/// `get_current_dir_name(3)`.
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn get_current_dir_name() -> *mut c_char {
    let real = next!(c"get_current_dir_name" => unsafe extern "C" fn() -> *mut c_char);
    // SAFETY: forwarded.
    let path = unsafe { real() };
    if path.is_null() || !program_arena() {
        return path;
    }
    // SAFETY: glibc's string, owned here.
    unsafe { adopt_string(path) }
}
