//! The CPU's persistence instructions: cache-line flushes, the store fence and non-temporal
//! stores, with the flush instruction chosen at run time from CPUID.
//!
//! This module and `mapping.rs` are where raw PM pointers are dereferenced.

#[cfg(not(target_arch = "x86_64"))]
compile_error!("Ferrite's native persistence backend supports x86_64 only");

use core::arch::asm;
use core::arch::x86_64::{
    __cpuid_count, __m128i, _mm_clflush, _mm_loadu_si128, _mm_sfence, _mm_stream_si32,
    _mm_stream_si64, _mm_stream_si128,
};
use serde::Serialize;

/// A cache-line write-back instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushInstr {
    /// Writes the line back and keeps it cached; unordered until a fence.
    Clwb,
    /// Writes the line back and evicts it; unordered until a fence.
    Clflushopt,
    /// Writes the line back and evicts it; ordered with other stores and clflushes.
    Clflush,
}

impl FlushInstr {
    /// Every flush instruction, strongest-performing first.
    pub const ALL: [FlushInstr; 3] = [
        FlushInstr::Clwb,
        FlushInstr::Clflushopt,
        FlushInstr::Clflush,
    ];

    /// Lower-case mnemonic.
    pub const fn name(self) -> &'static str {
        match self {
            FlushInstr::Clwb => "clwb",
            FlushInstr::Clflushopt => "clflushopt",
            FlushInstr::Clflush => "clflush",
        }
    }

    /// Parses a mnemonic (as printed by [`FlushInstr::name`]).
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|instr| instr.name() == text)
    }

    /// Whether this CPU implements the instruction.
    pub fn is_supported(self) -> bool {
        let features = CpuFeatures::get();
        match self {
            FlushInstr::Clwb => features.clwb,
            FlushInstr::Clflushopt => features.clflushopt,
            FlushInstr::Clflush => true, // Part of SSE2, which every x86_64 CPU has.
        }
    }

    /// The best instruction this CPU has: clwb, else clflushopt, else clflush.
    pub fn best_available() -> Self {
        Self::ALL
            .into_iter()
            .find(|instr| instr.is_supported())
            .unwrap_or(FlushInstr::Clflush)
    }
}

/// Persistence-related CPU features, read from CPUID leaf 7.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CpuFeatures {
    /// CPUID.(EAX=7,ECX=0):EBX bit 24.
    pub clwb: bool,
    /// CPUID.(EAX=7,ECX=0):EBX bit 23.
    pub clflushopt: bool,
    /// CPUID.(EAX=7,ECX=0):ECX bit 3 (protection keys for user pages).
    pub pku: bool,
}

impl CpuFeatures {
    /// The features of this CPU (read from CPUID once; CPUID is slow under a hypervisor).
    pub fn get() -> Self {
        static FEATURES: std::sync::OnceLock<CpuFeatures> = std::sync::OnceLock::new();
        *FEATURES.get_or_init(Self::detect)
    }

    /// Reads the features from CPUID.
    pub fn detect() -> Self {
        // Leaf 0 reports the highest leaf; leaf 7 is only queried when it is within range.
        let max_leaf = __cpuid_count(0, 0).eax;
        if max_leaf < 7 {
            return CpuFeatures {
                clwb: false,
                clflushopt: false,
                pku: false,
            };
        }
        let leaf7 = __cpuid_count(7, 0);
        CpuFeatures {
            clwb: leaf7.ebx & (1 << 24) != 0,
            clflushopt: leaf7.ebx & (1 << 23) != 0,
            pku: leaf7.ecx & (1 << 3) != 0,
        }
    }
}

/// Writes back the cache line containing `addr` with `instr`.
///
/// # Safety
/// `addr` must point into a live mapping, and `instr` must be supported by this CPU
/// ([`FlushInstr::is_supported`]).
#[inline]
pub unsafe fn flush_line(instr: FlushInstr, addr: *const u8) {
    match instr {
        // SAFETY: the caller guarantees the address is mapped and the instruction exists;
        // clwb only writes the line back and does not modify memory or flags.
        FlushInstr::Clwb => unsafe {
            asm!("clwb [{0}]", in(reg) addr, options(nostack, preserves_flags));
        },
        // SAFETY: as above for clflushopt.
        FlushInstr::Clflushopt => unsafe {
            asm!("clflushopt [{0}]", in(reg) addr, options(nostack, preserves_flags));
        },
        // SAFETY: the caller guarantees the address is mapped; clflush is part of SSE2.
        FlushInstr::Clflush => unsafe { _mm_clflush(addr) },
    }
}

/// Store fence: completes earlier flushes and non-temporal stores before later stores.
#[inline]
pub fn sfence() {
    // SAFETY: sfence has no operands and is part of SSE, present on every x86_64 CPU.
    unsafe { _mm_sfence() }
}

/// Copies `src` to `dst` with non-temporal stores where alignment allows: 16-byte streaming
/// stores for the aligned body, 8- and 4-byte `movnti` for aligned pieces. Reports the
/// addresses of the few head and tail bytes that had to be written with ordinary stores, so
/// the caller can flush their (at most two) cache lines.
///
/// # Safety
/// `dst..dst + src.len()` must be valid for writes and not overlap `src`.
pub unsafe fn copy_nontemporal(dst: *mut u8, src: &[u8]) -> NtCopy {
    let mut done = 0usize;
    let mut plain = NtCopy::default();
    let len = src.len();
    // Head: bring dst to 16-byte alignment with 4- and 8-byte streams, bytes if needed.
    while done < len && !(dst as usize + done).is_multiple_of(16) {
        let addr = dst as usize + done;
        let left = len - done;
        // SAFETY: addr..addr+n is inside dst's valid range (n <= left); the source slice
        // has the same bytes available.
        unsafe {
            if addr.is_multiple_of(8) && left >= 8 {
                stream8(addr as *mut u8, &src[done..done + 8]);
                done += 8;
            } else if addr.is_multiple_of(4) && left >= 4 {
                stream4(addr as *mut u8, &src[done..done + 4]);
                done += 4;
            } else {
                *(addr as *mut u8) = src[done];
                plain.note(addr);
                done += 1;
            }
        }
    }
    // Body: 16-byte aligned streaming stores.
    while len - done >= 16 {
        // SAFETY: dst + done is 16-byte aligned (head loop) and 16 bytes remain in both
        // buffers; the load is unaligned-tolerant.
        unsafe {
            let value = _mm_loadu_si128(src.as_ptr().add(done).cast::<__m128i>());
            _mm_stream_si128(dst.add(done).cast::<__m128i>(), value);
        }
        done += 16;
    }
    // Tail: 8, 4, then single bytes. It starts 16-byte aligned (the head loop stops at the
    // first 16-byte boundary, or at the end of the copy, when this loop does not run), and
    // fewer than 16 bytes remain: at most one 8-byte store on that boundary, then at most one
    // 4-byte store on the 8-byte boundary after it, so each is aligned.
    while done < len {
        let addr = dst as usize + done;
        let left = len - done;
        // SAFETY: addr..addr+n is inside dst's valid range (n <= left) and aligned to n for
        // the streaming stores (above); the source slice has the same bytes available.
        unsafe {
            if left >= 8 {
                stream8(addr as *mut u8, &src[done..done + 8]);
                done += 8;
            } else if left >= 4 {
                stream4(addr as *mut u8, &src[done..done + 4]);
                done += 4;
            } else {
                *(addr as *mut u8) = src[done];
                plain.note(addr);
                done += 1;
            }
        }
    }
    plain
}

/// Bytes written with ordinary stores by [`copy_nontemporal`]: the unaligned fringes, at
/// most three bytes at each end, so the first and the last such byte name every cache line
/// that needs a write-back.
#[derive(Clone, Copy, Debug, Default)]
pub struct NtCopy {
    /// The first ordinary-store address, if any.
    pub first: Option<usize>,
    /// The last ordinary-store address, if any.
    pub last: Option<usize>,
}

impl NtCopy {
    fn note(&mut self, addr: usize) {
        self.first.get_or_insert(addr);
        self.last = Some(addr);
    }
}

/// # Safety
/// `dst` is 8-byte aligned and valid for an 8-byte write; `src` has 8 bytes.
#[inline]
unsafe fn stream8(dst: *mut u8, src: &[u8]) {
    let mut word = [0u8; 8];
    word.copy_from_slice(&src[..8]);
    // SAFETY: the caller guarantees alignment and validity of dst.
    unsafe { _mm_stream_si64(dst.cast::<i64>(), i64::from_le_bytes(word)) }
}

/// # Safety
/// `dst` is 4-byte aligned and valid for a 4-byte write; `src` has 4 bytes.
#[inline]
unsafe fn stream4(dst: *mut u8, src: &[u8]) {
    let mut word = [0u8; 4];
    word.copy_from_slice(&src[..4]);
    // SAFETY: the caller guarantees alignment and validity of dst.
    unsafe { _mm_stream_si32(dst.cast::<i32>(), i32::from_le_bytes(word)) }
}

/// Reads the time-stamp counter.
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc is available on every x86_64 CPU and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Reads the time-stamp counter with `rdtscp`, which waits until every earlier instruction
/// has executed (the read cannot be hoisted above preceding loads and stores).
///
/// Callers must check [`has_rdtscp`] first; on a CPU without it this falls back to
/// [`rdtsc`] after a full fence, which orders the same way.
#[inline]
pub fn rdtscp() -> u64 {
    if has_rdtscp() {
        let mut aux = 0u32;
        // SAFETY: the CPU reports rdtscp (CPUID 0x8000_0001 EDX bit 27); the instruction only
        // writes the counter and `aux`, a valid local.
        unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
    } else {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        rdtsc()
    }
}

/// Reads the time-stamp counter in program order: no earlier instruction completes after
/// it and no later one starts before it (`lfence; rdtsc; lfence`).
#[inline]
pub fn rdtsc_ordered() -> u64 {
    // SAFETY: lfence and rdtsc exist on every x86_64 CPU (SSE2 is baseline) and touch no
    // memory.
    unsafe {
        core::arch::x86_64::_mm_lfence();
        let t = core::arch::x86_64::_rdtsc();
        core::arch::x86_64::_mm_lfence();
        t
    }
}

/// Whether the CPU has `rdtscp`.
pub fn has_rdtscp() -> bool {
    tsc_features().0
}

/// Whether the time-stamp counter is invariant: it ticks at a constant rate in every
/// power state and is synchronised across cores (CPUID 0x8000_0007 EDX bit 8), so it can
/// serve as a global clock up to a small cross-core uncertainty.
pub fn has_invariant_tsc() -> bool {
    tsc_features().1
}

/// `(rdtscp, invariant TSC)`, read from CPUID once.
fn tsc_features() -> (bool, bool) {
    static FEATURES: std::sync::OnceLock<(bool, bool)> = std::sync::OnceLock::new();
    *FEATURES.get_or_init(|| {
        let max_extended = __cpuid_count(0x8000_0000, 0).eax;
        let rdtscp =
            max_extended >= 0x8000_0001 && __cpuid_count(0x8000_0001, 0).edx & (1 << 27) != 0;
        let invariant =
            max_extended >= 0x8000_0007 && __cpuid_count(0x8000_0007, 0).edx & (1 << 8) != 0;
        (rdtscp, invariant)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clflush_is_always_available_and_best_is_supported() {
        assert!(FlushInstr::Clflush.is_supported());
        assert!(FlushInstr::best_available().is_supported());
    }

    #[test]
    fn names_round_trip() {
        for instr in FlushInstr::ALL {
            assert_eq!(FlushInstr::parse(instr.name()), Some(instr));
        }
        assert_eq!(FlushInstr::parse("wbinvd"), None);
    }

    #[test]
    fn nontemporal_copy_writes_every_byte_at_any_alignment() {
        let src: Vec<u8> = (0..200u8).collect();
        for start in 0..20 {
            for len in [0, 1, 3, 4, 7, 8, 15, 16, 17, 63, 64, 65, 130] {
                let mut dst = vec![0xEEu8; 256];
                // SAFETY: start + len <= 150 < 256, so the destination range is valid.
                unsafe { copy_nontemporal(dst.as_mut_ptr().add(start), &src[..len]) };
                sfence();
                assert_eq!(
                    &dst[start..start + len],
                    &src[..len],
                    "start {start} len {len}"
                );
                assert!(dst[..start].iter().all(|&b| b == 0xEE));
                assert!(dst[start + len..].iter().all(|&b| b == 0xEE));
            }
        }
    }
}
