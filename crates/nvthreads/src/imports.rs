//! Whether this process uses the runtime (`docs/nvthreads.md` §3.7): whether the executable
//! itself was linked with the runtime or creates threads (imports one of
//! [`THREAD_SYMBOLS`]), or the executable or a library loaded with it imports the
//! persistence API ([`API_SYMBOLS`]).
//!
//! `LD_PRELOAD` loads the runtime into every process started with it, wrappers included
//! (`timeout 60 ./prog`, `strace`, `env`, a shell script). A wrapper neither creates threads
//! nor calls `nvmalloc`: if the runtime started there, it would take the pool's lock and the
//! real program, started by the wrapper, would find the pool in use. So the runtime starts
//! only in a process that uses it, and stays dormant (plain glibc, and the pool left to the
//! program) elsewhere.
//!
//! Thread creation counts only in the executable: libraries import `pthread_create` for
//! their own worker threads (`strace` loads `liblzma`, which does), and a wrapper linked
//! with one must not take the pool. An executable linked with the runtime itself (its
//! `DT_NEEDED` names `libnvthreads_rt`) chose it and uses it however its threads are made;
//! a preloaded program whose threads are all made by a library (C++ `std::thread` in
//! `libstdc++`) sets `NVT_ENABLE=1`.
//!
//! The imports are read from the relocation tables of every object loaded at start-up (the
//! executable first; libc, the dynamic loader and this library itself are skipped): a call
//! to a function of another object is a `JUMP_SLOT` or `GLOB_DAT` relocation naming it.

use crate::globals::{
    DT_JMPREL, DT_PLTRELSZ, DT_RELA, DT_RELAENT, DT_RELASZ, DT_STRSZ, DT_STRTAB, DT_SYMENT,
    DT_SYMTAB, DynamicTags,
};
use std::ffi::CStr;

/// The persistence API: imported by any loaded object, it makes the process a user of the
/// runtime.
pub const API_SYMBOLS: [&str; 9] = [
    "nvmalloc",
    "nvt_error",
    "nvrecover",
    "crashed",
    "isCrashed",
    "nvcheckpoint",
    "nvt_init",
    "nvt_durable_epoch",
    "nvt_section_epoch",
];

/// Thread creation (POSIX and C11): imported by the executable itself, it makes the process
/// a user of the runtime.
pub const THREAD_SYMBOLS: [&str; 2] = ["pthread_create", "thrd_create"];

/// Objects never searched: glibc, the dynamic loader and the runtime library.
const SKIPPED: [&str; 4] = ["libc.so", "ld-linux", "libnvthreads_rt", "linux-vdso"];

/// The search's state, passed through `dl_iterate_phdr`.
struct Search {
    /// Objects visited so far (the executable is the first).
    visited: usize,
    found: bool,
}

/// Whether the executable was linked with the runtime or imports one of [`THREAD_SYMBOLS`]
/// or [`API_SYMBOLS`], or another object loaded in this process (but libc, the loader and
/// this library) imports one of [`API_SYMBOLS`].
pub fn process_uses_runtime() -> bool {
    let mut search = Search {
        visited: 0,
        found: false,
    };
    // SAFETY: dl_iterate_phdr calls the callback with valid program headers; `data` is our
    // search state, used only during the call.
    unsafe {
        libc::dl_iterate_phdr(Some(search_object), (&raw mut search).cast());
    }
    search.found
}

unsafe extern "C" fn search_object(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut libc::c_void,
) -> i32 {
    // SAFETY: per dl_iterate_phdr, `info` points to a valid header list of `dlpi_phnum`
    // entries and a NUL-terminated (possibly empty) name; `data` is the flag passed by
    // `process_uses_runtime`.
    let (info, search) = unsafe { (&*info, &mut *data.cast::<Search>()) };
    let executable = search.visited == 0;
    search.visited += 1;
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    if SKIPPED.iter().any(|skipped| name.contains(skipped)) {
        return 0;
    }
    // SAFETY: as above.
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let base = info.dlpi_addr as usize;
    for header in headers.iter().filter(|h| h.p_type == libc::PT_DYNAMIC) {
        // SAFETY: the object's dynamic section, mapped and readable.
        if unsafe { imports_runtime(base, base + header.p_vaddr as usize, executable) } {
            search.found = true;
            return 1;
        }
    }
    0
}

/// `DT_NEEDED`: a library the object was linked with.
const DT_NEEDED: u64 = 1;
/// The runtime library's name, as a `DT_NEEDED` entry holds it.
const RUNTIME_LIBRARY: &[u8] = b"libnvthreads_rt";

/// Whether the dynamic section `dynamic` names the runtime library among the libraries its
/// object was linked with.
///
/// # Safety
/// `dynamic` is a mapped dynamic section whose string table, `strsz` bytes, is at `strtab`.
unsafe fn links_runtime(dynamic: usize, strtab: usize, strsz: usize) -> bool {
    let mut at = dynamic as *const u64;
    loop {
        // SAFETY: the section is a sequence of (tag, value) pairs ending with DT_NULL.
        let (tag, value) = unsafe { (at.read(), at.add(1).read() as usize) };
        match tag {
            0 => return false,
            DT_NEEDED if value < strsz => {
                // SAFETY: a NUL-terminated name inside the mapped string table.
                let name = unsafe { CStr::from_ptr((strtab + value) as *const libc::c_char) };
                if name.to_bytes().starts_with(RUNTIME_LIBRARY) {
                    return true;
                }
            }
            _ => {}
        }
        // SAFETY: still inside the section (DT_NULL not reached).
        at = unsafe { at.add(2) };
    }
}

/// Whether the relocations of the object loaded at `base` with dynamic section `dynamic`
/// name one of [`API_SYMBOLS`] (or, for the executable, of [`THREAD_SYMBOLS`]), or the
/// object is the executable and was linked with the runtime.
///
/// # Safety
/// `dynamic` is the object's mapped dynamic section, loaded at `base`.
unsafe fn imports_runtime(base: usize, dynamic: usize, executable: bool) -> bool {
    let wanted = |name: &[u8]| {
        API_SYMBOLS.iter().any(|api| name == api.as_bytes())
            || (executable
                && THREAD_SYMBOLS
                    .iter()
                    .any(|thread| name == thread.as_bytes()))
    };
    // SAFETY: the caller's contract.
    let tags = unsafe { DynamicTags::read(base, dynamic) };
    let address = |tag| tags.address(tag);
    let size = |tag| tags.size(tag);
    let (Some(symtab), Some(strtab)) = (address(DT_SYMTAB), address(DT_STRTAB)) else {
        return false;
    };
    let (syment, strsz) = (size(DT_SYMENT).max(24), size(DT_STRSZ));
    // SAFETY: the caller's contract; the string table is the object's, `strsz` bytes.
    if executable && unsafe { links_runtime(dynamic, strtab, strsz) } {
        return true;
    }
    let entry = size(DT_RELAENT).max(24);
    for (table, bytes) in [
        (address(DT_RELA), size(DT_RELASZ)),
        (address(DT_JMPREL), size(DT_PLTRELSZ)),
    ] {
        let Some(table) = table else { continue };
        for i in 0..bytes / entry {
            // SAFETY: a mapped relocation table of `bytes` bytes of Elf64_Rela entries; the
            // info word is the second.
            let info = unsafe { ((table + i * entry) as *const u64).add(1).read() };
            let symbol = (info >> 32) as usize;
            if symbol == 0 {
                continue;
            }
            // SAFETY: the relocation's symbol entry (Elf64_Sym: st_name first, a u32).
            let name_at = unsafe { ((symtab + symbol * syment) as *const u32).read() } as usize;
            if name_at >= strsz {
                continue;
            }
            // SAFETY: a NUL-terminated name inside the mapped string table.
            let name = unsafe { CStr::from_ptr((strtab + name_at) as *const libc::c_char) };
            if wanted(name.to_bytes()) {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_harness_imports_pthread_create() {
        // The test harness creates threads through std, which calls libc's
        // pthread_create: the harness binary imports it.
        assert!(process_uses_runtime());
    }
}
