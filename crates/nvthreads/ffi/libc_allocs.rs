//! libc functions that allocate memory on the program's behalf and hand it over
//! (`docs/nvthreads.md` §3.6): `asprintf`, `vasprintf` (x86-64), `getline`, `getdelim`, `realpath`
//! and `canonicalize_file_name`, `getcwd` with a null buffer, `get_current_dir_name`,
//! `scandir` and `scandirat` (and their `64` names), `getaddrinfo` (with `freeaddrinfo`).
//! glibc allocates that memory through internal calls, which the `malloc` family serves from
//! glibc's own heap — private to each thread-process — so a string one thread made and
//! another freed or read would be another process's pointer. Interposed here, the memory
//! comes from the program's arena like any `malloc`: shared with every thread (persistent
//! with `NVT_MALLOC=persistent`). With the runtime dormant, or `NVT_MALLOC=private`, each
//! forwards to glibc unchanged.

use crate::heap::{copy_string, malloc_from, program_arena};
use crate::{__libc_free, next, set_errno};
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
        set_errno(libc::ENOMEM);
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

/// A directory entry's filter, as `scandir` takes it.
type EntryFilter = Option<unsafe extern "C" fn(*const libc::dirent) -> c_int>;
/// An ordering of two directory entries, as `scandir` takes it.
type EntryOrder =
    Option<unsafe extern "C" fn(*mut *const libc::dirent, *mut *const libc::dirent) -> c_int>;

/// `scandir(3)`: the list and its entries are moved into the program's arena, so a thread
/// can hand them to another, which frees them with `free`.
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn scandir(
    dir: *const c_char,
    list: *mut *mut *mut libc::dirent,
    filter: EntryFilter,
    order: EntryOrder,
) -> c_int {
    let real = next!(c"scandir" => unsafe extern "C" fn(*const c_char, *mut *mut *mut libc::dirent, EntryFilter, EntryOrder) -> c_int);
    // SAFETY: forwarded; on success glibc stored its list at `*list`.
    unsafe { adopt_entries(list, real(dir, list, filter, order)) }
}

/// `scandirat(3)`, `scandir` relative to a directory descriptor.
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn scandirat(
    at: c_int,
    dir: *const c_char,
    list: *mut *mut *mut libc::dirent,
    filter: EntryFilter,
    order: EntryOrder,
) -> c_int {
    let real = next!(c"scandirat" => unsafe extern "C" fn(c_int, *const c_char, *mut *mut *mut libc::dirent, EntryFilter, EntryOrder) -> c_int);
    // SAFETY: forwarded; on success glibc stored its list at `*list`.
    unsafe { adopt_entries(list, real(at, dir, list, filter, order)) }
}

/// `scandir64`: the same function on LP64 glibc (`dirent64` is `dirent`).
///
/// # Safety
/// As `scandir`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn scandir64(
    dir: *const c_char,
    list: *mut *mut *mut libc::dirent,
    filter: EntryFilter,
    order: EntryOrder,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { scandir(dir, list, filter, order) }
}

/// `scandirat64`, as `scandirat`.
///
/// # Safety
/// As `scandirat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn scandirat64(
    at: c_int,
    dir: *const c_char,
    list: *mut *mut *mut libc::dirent,
    filter: EntryFilter,
    order: EntryOrder,
) -> c_int {
    // SAFETY: forwarded.
    unsafe { scandirat(at, dir, list, filter, order) }
}

/// After a `scandir` that returned `count`: its list and entries copied into the program's
/// arena and glibc's freed. Every copy is made before anything of glibc's is freed, so on
/// `ENOMEM` the caller gets -1 and nothing leaks.
///
/// # Safety
/// When `count >= 0`, `*list` is glibc's array of `count` entries, owned by the caller.
unsafe fn adopt_entries(list: *mut *mut *mut libc::dirent, count: c_int) -> c_int {
    if count < 0 || !program_arena() {
        return count;
    }
    // SAFETY: the caller's contract.
    let theirs = unsafe { *list };
    if count == 0 {
        // glibc's list of no entries is null: keep it so (freeing whatever it gave).
        // SAFETY: glibc's array (or null), no longer used; `list` is writable.
        unsafe {
            __libc_free(theirs.cast());
            *list = std::ptr::null_mut();
        }
        return 0;
    }
    let count_usize = count as usize;
    let ours =
        malloc_from(count_usize * size_of::<*mut libc::dirent>(), 0).cast::<*mut libc::dirent>();
    let mut copied = 0;
    while !ours.is_null() && copied < count_usize {
        // SAFETY: `theirs` holds `count` valid entries; `ours` has room for `count` pointers.
        let copy = unsafe { copy_entry(*theirs.add(copied)) };
        if copy.is_null() {
            break;
        }
        // SAFETY: as above.
        unsafe { *ours.add(copied) = copy };
        copied += 1;
    }
    let complete = !ours.is_null() && copied == count_usize;
    for i in 0..count_usize {
        // SAFETY: glibc's entries and array, no longer used (or given up on ENOMEM).
        unsafe { __libc_free((*theirs.add(i)).cast()) };
    }
    // SAFETY: as above.
    unsafe { __libc_free(theirs.cast()) };
    if !complete {
        for i in 0..copied {
            // SAFETY: our copies made above.
            unsafe { crate::heap::free((*ours.add(i)).cast()) };
        }
        // SAFETY: our array (or null); `list` is writable (the C contract): it must not
        // keep glibc's freed array for an error path that frees it.
        unsafe {
            crate::heap::free(ours.cast());
            *list = std::ptr::null_mut();
        }
        set_errno(libc::ENOMEM);
        return -1;
    }
    // SAFETY: `list` is writable (the C contract).
    unsafe { *list = ours };
    count
}

/// A copy of one directory entry in the program's arena: its fixed fields and its name with
/// the NUL (as glibc's `scandir` sizes its own copies), or null.
///
/// # Safety
/// `entry` is a valid `dirent` with a NUL-terminated name.
unsafe fn copy_entry(entry: *const libc::dirent) -> *mut libc::dirent {
    let name_at = std::mem::offset_of!(libc::dirent, d_name);
    // SAFETY: the name is NUL-terminated (the caller's contract).
    let len = name_at + unsafe { libc::strlen((*entry).d_name.as_ptr()) } + 1;
    let copy = malloc_from(len.max(size_of::<libc::dirent>()), 0).cast::<libc::dirent>();
    if !copy.is_null() {
        // SAFETY: `entry` is readable for `len` bytes; `copy` has at least `len`.
        unsafe { std::ptr::copy_nonoverlapping(entry.cast::<u8>(), copy.cast::<u8>(), len) };
    }
    copy
}

/// `getaddrinfo(3)`: the list is moved into the program's arena (each node with its address
/// in one block and its canonical name in another, as glibc lays them out), so a thread can
/// hand it to another, which frees it with `freeaddrinfo`.
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const libc::addrinfo,
    result: *mut *mut libc::addrinfo,
) -> c_int {
    let real = next!(c"getaddrinfo" => unsafe extern "C" fn(*const c_char, *const c_char, *const libc::addrinfo, *mut *mut libc::addrinfo) -> c_int);
    // SAFETY: forwarded.
    let status = unsafe { real(node, service, hints, result) };
    if status != 0 || !program_arena() {
        return status;
    }
    // SAFETY: on success glibc stored its list at `*result`, owned by the caller.
    let theirs = unsafe { *result };
    // SAFETY: glibc's well-formed list.
    let ours = unsafe { copy_addresses(theirs) };
    let glibc_free = next!(c"freeaddrinfo" => unsafe extern "C" fn(*mut libc::addrinfo));
    // SAFETY: glibc's list, no longer used.
    unsafe { glibc_free(theirs) };
    // SAFETY: `result` is writable (the C contract); on failure it must not keep glibc's
    // freed list for an error path that frees it.
    unsafe { *result = ours };
    if ours.is_null() {
        return libc::EAI_MEMORY;
    }
    0
}

/// `freeaddrinfo(3)` of a list from either allocator.
///
/// # Safety
/// `list` is null or a list `getaddrinfo` returned, not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn freeaddrinfo(list: *mut libc::addrinfo) {
    if crate::heap::is_program_block(list.cast()) {
        // SAFETY: our list, made by `copy_addresses`.
        unsafe { free_addresses(list) };
        return;
    }
    let real = next!(c"freeaddrinfo" => unsafe extern "C" fn(*mut libc::addrinfo));
    // SAFETY: forwarded: glibc's list (or null).
    unsafe { real(list) }
}

/// A copy of an address list in the program's arena, or null (nothing left allocated).
///
/// # Safety
/// `list` is a well-formed `addrinfo` list.
unsafe fn copy_addresses(list: *const libc::addrinfo) -> *mut libc::addrinfo {
    let mut first: *mut libc::addrinfo = std::ptr::null_mut();
    let mut link: *mut *mut libc::addrinfo = &mut first;
    let mut at = list;
    while !at.is_null() {
        // SAFETY: a node of a well-formed list.
        let node = unsafe { &*at };
        let size = size_of::<libc::addrinfo>() + node.ai_addrlen as usize;
        let copy = malloc_from(size, 0).cast::<libc::addrinfo>();
        if copy.is_null() {
            // SAFETY: our partial list, null-terminated.
            unsafe { free_addresses(first) };
            return std::ptr::null_mut();
        }
        // SAFETY: `copy` has room for the node and its address right after it.
        unsafe {
            copy.write(libc::addrinfo {
                ai_next: std::ptr::null_mut(),
                ai_canonname: std::ptr::null_mut(),
                ai_addr: std::ptr::null_mut(),
                ..*node
            });
            *link = copy;
            link = &mut (*copy).ai_next;
            if !node.ai_addr.is_null() {
                let address = copy.add(1).cast::<libc::sockaddr>();
                std::ptr::copy_nonoverlapping(
                    node.ai_addr.cast::<u8>(),
                    address.cast::<u8>(),
                    node.ai_addrlen as usize,
                );
                (*copy).ai_addr = address;
            }
        }
        if !node.ai_canonname.is_null() {
            // SAFETY: a NUL-terminated name.
            let name = unsafe { copy_string(node.ai_canonname, libc::strlen(node.ai_canonname)) };
            if name.is_null() {
                // SAFETY: our partial list, null-terminated.
                unsafe { free_addresses(first) };
                return std::ptr::null_mut();
            }
            // SAFETY: `copy` is our node.
            unsafe { (*copy).ai_canonname = name };
        }
        at = node.ai_next;
    }
    first
}

/// Frees a list [`copy_addresses`] made.
///
/// # Safety
/// `list` is null or such a list, not yet freed.
unsafe fn free_addresses(mut list: *mut libc::addrinfo) {
    while !list.is_null() {
        // SAFETY: our node and name (or null), freed once.
        unsafe {
            let next = (*list).ai_next;
            crate::heap::free((*list).ai_canonname.cast());
            crate::heap::free(list.cast());
            list = next;
        }
    }
}
