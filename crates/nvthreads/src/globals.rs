//! The program's own globals (`docs/nvthreads.md` §3.2, §4.6): the writable part of the
//! executable's data segment, which the runtime adopts (shared between thread-processes)
//! and, with `NVT_GLOBALS=persistent`, logs and recovers like the heap.
//!
//! Not every byte of that segment may come back from an earlier run: the dynamic loader
//! writes some words at every start with values that depend on where things were loaded
//! (relocated pointers, GOT entries resolved lazily, objects copied from libraries by copy
//! relocations such as `stdout` or `environ`). [`ProgramGlobals::excluded`] lists those
//! bytes, read from the executable's dynamic section in memory: they are never logged and
//! never restored, so they keep this run's values.

use crate::pages::PAGE;

/// The executable's writable data and what must not persist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgramGlobals {
    /// Page-aligned `(address, length)` ranges of `.data`/`.bss` (RELRO left out).
    pub ranges: Vec<(usize, usize)>,
    /// Sorted, merged `(address, length)` ranges the dynamic loader writes at start-up.
    pub excluded: Vec<(usize, usize)>,
    /// A hash of the executable's GNU build id and segment sizes (0 without a build id: its
    /// globals cannot be matched to a later run, so they do not persist).
    pub fingerprint: u64,
}

impl ProgramGlobals {
    /// Total bytes of the ranges.
    pub fn len(&self) -> usize {
        self.ranges.iter().map(|&(_, len)| len).sum()
    }

    /// Whether there are no globals.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Splits `[addr, addr + len)` into the parts that are not excluded.
    pub fn persistent_parts(&self, addr: usize, len: usize) -> Vec<(usize, usize)> {
        let mut parts = Vec::new();
        let mut at = addr;
        let end = addr + len;
        for &(start, size) in &self.excluded {
            let stop = start + size;
            if stop <= at {
                continue;
            }
            if start >= end {
                break;
            }
            if start > at {
                parts.push((at, start - at));
            }
            at = at.max(stop);
            if at >= end {
                break;
            }
        }
        if at < end {
            parts.push((at, end - at));
        }
        parts
    }
}

/// Sorts and merges `(address, length)` ranges.
pub fn merge_ranges(mut ranges: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (start, len) in ranges {
        match merged.last_mut() {
            Some((last, last_len)) if *last + *last_len >= start => {
                *last_len = (*last_len).max(start + len - *last);
            }
            _ => merged.push((start, len)),
        }
    }
    merged
}

/// Reads the running executable's globals, exclusions and fingerprint.
pub fn program_globals() -> ProgramGlobals {
    let mut found = ProgramGlobals::default();
    // SAFETY: dl_iterate_phdr calls the callback with valid program headers; `data` is our
    // value, used only during the call. The first object reported is the executable.
    unsafe {
        libc::dl_iterate_phdr(Some(first_object), (&raw mut found).cast());
    }
    found.excluded = merge_ranges(std::mem::take(&mut found.excluded));
    found
}

unsafe extern "C" fn first_object(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut libc::c_void,
) -> i32 {
    // SAFETY: per dl_iterate_phdr, `info` points to a valid header list of `dlpi_phnum`
    // entries; `data` is the value passed by `program_globals`.
    let (info, found) = unsafe { (&*info, &mut *data.cast::<ProgramGlobals>()) };
    // SAFETY: as above.
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let base = info.dlpi_addr as usize;
    let page = PAGE;
    let relro_end = headers
        .iter()
        .find(|h| h.p_type == libc::PT_GNU_RELRO)
        .map_or(0, |h| {
            (base + (h.p_vaddr + h.p_memsz) as usize) / page * page
        });
    let mut hash = crc32fast::Hasher::new();
    for header in headers {
        match header.p_type {
            libc::PT_LOAD if header.p_flags & libc::PF_W != 0 => {
                let start = ((base + header.p_vaddr as usize) / page * page).max(relro_end);
                let end = (base + (header.p_vaddr + header.p_memsz) as usize).div_ceil(page) * page;
                if end > start {
                    found.ranges.push((start, end - start));
                    hash.update(&((end - start) as u64).to_le_bytes());
                }
            }
            libc::PT_DYNAMIC => {
                // SAFETY: the executable's dynamic section, mapped and readable, of
                // `p_memsz` bytes of `Elf64_Dyn` entries.
                unsafe { read_dynamic(base, base + header.p_vaddr as usize, found) };
            }
            libc::PT_NOTE => {
                // SAFETY: a loaded note segment of `p_memsz` bytes.
                let notes = unsafe {
                    std::slice::from_raw_parts(
                        (base + header.p_vaddr as usize) as *const u8,
                        header.p_memsz as usize,
                    )
                };
                if let Some(id) = build_id(notes) {
                    hash.update(id);
                    found.fingerprint = 1;
                }
            }
            _ => {}
        }
    }
    if found.fingerprint != 0 {
        found.fingerprint = u64::from(hash.finalize()) | 1 << 32;
    }
    1 // stop after the executable
}

/// The GNU build id in a note segment.
fn build_id(mut notes: &[u8]) -> Option<&[u8]> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let word = |bytes: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    while notes.len() >= 12 {
        let (name_len, desc_len, kind) = (word(notes, 0)?, word(notes, 4)?, word(notes, 8)?);
        let name_end = 12 + (name_len as usize).next_multiple_of(4);
        let desc_end = name_end + (desc_len as usize).next_multiple_of(4);
        if desc_end > notes.len() {
            return None;
        }
        if kind == NT_GNU_BUILD_ID && notes.get(12..12 + name_len as usize) == Some(b"GNU\0") {
            return Some(&notes[name_end..name_end + desc_len as usize]);
        }
        notes = &notes[desc_end..];
    }
    None
}

pub(crate) const DT_NULL: u64 = 0;
pub(crate) const DT_PLTRELSZ: u64 = 2;
pub(crate) const DT_PLTGOT: u64 = 3;
pub(crate) const DT_STRTAB: u64 = 5;
pub(crate) const DT_SYMTAB: u64 = 6;
pub(crate) const DT_RELA: u64 = 7;
pub(crate) const DT_RELASZ: u64 = 8;
pub(crate) const DT_RELAENT: u64 = 9;
pub(crate) const DT_STRSZ: u64 = 10;
pub(crate) const DT_SYMENT: u64 = 11;
pub(crate) const DT_JMPREL: u64 = 23;
pub(crate) const DT_RELRSZ: u64 = 35;
pub(crate) const DT_RELR: u64 = 36;

/// The entries of a loaded object's dynamic section, by tag.
pub(crate) struct DynamicTags {
    base: usize,
    tags: std::collections::HashMap<u64, u64>,
}

impl DynamicTags {
    /// Reads the dynamic section mapped at `dynamic` of the object loaded at `base`.
    ///
    /// # Safety
    /// `dynamic` is the object's mapped dynamic section, loaded at `base`.
    pub(crate) unsafe fn read(base: usize, dynamic: usize) -> DynamicTags {
        let mut tags = std::collections::HashMap::new();
        let mut at = dynamic as *const u64;
        loop {
            // SAFETY: the section is a sequence of (tag, value) pairs ending with DT_NULL.
            let (tag, value) = unsafe { (at.read(), at.add(1).read()) };
            if tag == DT_NULL {
                break;
            }
            tags.insert(tag, value);
            // SAFETY: still inside the section (DT_NULL not reached).
            at = unsafe { at.add(2) };
        }
        DynamicTags { base, tags }
    }

    /// The address an entry names: the loader stores absolute addresses in some entries and
    /// leaves others relative to the load base.
    pub(crate) fn address(&self, tag: u64) -> Option<usize> {
        self.tags.get(&tag).map(|&value| {
            let value = value as usize;
            if value < self.base {
                value + self.base
            } else {
                value
            }
        })
    }

    /// A size entry (0 when absent).
    pub(crate) fn size(&self, tag: u64) -> usize {
        self.tags.get(&tag).map_or(0, |&v| v as usize)
    }
}

/// Copy relocations (x86-64 and AArch64).
const R_X86_64_COPY: u32 = 5;
const R_AARCH64_COPY: u32 = 1024;

/// Collects the bytes the dynamic loader writes: every relocation target, the copies of
/// copy relocations, and the GOT header.
///
/// # Safety
/// `dynamic` is the executable's mapped dynamic section, loaded at `base`.
unsafe fn read_dynamic(base: usize, dynamic: usize, found: &mut ProgramGlobals) {
    // SAFETY: the caller's contract.
    let tags = unsafe { DynamicTags::read(base, dynamic) };
    let address = |tag| tags.address(tag);
    let size = |tag| tags.size(tag);
    let symtab = address(DT_SYMTAB);
    let syment = size(DT_SYMENT).max(24);
    for (table, bytes) in [
        (address(DT_RELA), size(DT_RELASZ)),
        (address(DT_JMPREL), size(DT_PLTRELSZ)),
    ] {
        let Some(table) = table else { continue };
        let entry = size(DT_RELAENT).max(24);
        for i in 0..bytes / entry {
            // SAFETY: a mapped relocation table of `bytes` bytes of Elf64_Rela entries.
            let (offset, info) = unsafe {
                let rela = (table + i * entry) as *const u64;
                (rela.read(), rela.add(1).read())
            };
            let target = base + offset as usize;
            let kind = info as u32;
            let mut len = 8;
            if (kind == R_X86_64_COPY || kind == R_AARCH64_COPY)
                && let Some(symtab) = symtab
            {
                let symbol = (info >> 32) as usize;
                // SAFETY: the symbol table entry (Elf64_Sym: st_size at byte 16).
                len = unsafe { ((symtab + symbol * syment + 16) as *const u64).read() } as usize;
            }
            found.excluded.push((target, len.max(1)));
        }
    }
    if let Some(relr) = address(DT_RELR) {
        // SAFETY: a mapped RELR table of DT_RELRSZ bytes.
        let words = unsafe { std::slice::from_raw_parts(relr as *const u64, size(DT_RELRSZ) / 8) };
        let mut next = 0usize;
        for &word in words {
            if word & 1 == 0 {
                let target = base + word as usize;
                found.excluded.push((target, 8));
                next = target + 8;
            } else {
                for bit in 1..64 {
                    if word >> bit & 1 == 1 {
                        found.excluded.push((next + (bit - 1) * 8, 8));
                    }
                }
                next += 63 * 8;
            }
        }
    }
    if let Some(got) = address(DT_PLTGOT) {
        found.excluded.push((got, 24));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_split() {
        let merged = merge_ranges(vec![(100, 8), (90, 10), (200, 4), (104, 8)]);
        assert_eq!(merged, vec![(90, 22), (200, 4)]);
        let globals = ProgramGlobals {
            ranges: vec![(0, 4096)],
            excluded: merged,
            fingerprint: 1,
        };
        assert_eq!(
            globals.persistent_parts(80, 140),
            vec![(80, 10), (112, 88), (204, 16)]
        );
        assert_eq!(
            globals.persistent_parts(92, 10),
            Vec::<(usize, usize)>::new()
        );
        assert_eq!(globals.persistent_parts(0, 50), vec![(0, 50)]);
    }

    #[test]
    fn build_id_is_found_in_notes() {
        let mut notes = Vec::new();
        for (kind, name, desc) in [
            (1u32, &b"GNU\0"[..], &[9u8; 16][..]),
            (3, b"GNU\0", &[7; 20]),
        ] {
            notes.extend_from_slice(&(name.len() as u32).to_le_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            notes.extend_from_slice(&kind.to_le_bytes());
            notes.extend_from_slice(name);
            notes.extend_from_slice(desc);
        }
        assert_eq!(build_id(&notes), Some(&[7u8; 20][..]));
        assert_eq!(build_id(&notes[..20]), None);
    }

    #[test]
    fn the_test_binary_has_globals_and_exclusions() {
        let globals = program_globals();
        assert!(!globals.is_empty());
        assert!(globals.fingerprint != 0, "the test binary has a build id");
        assert!(
            !globals.excluded.is_empty(),
            "a PIE test binary has relocated words"
        );
    }
}
