//! Whether a faulting write resumes precisely (`docs/nvthreads.md` §3.2, §9).
//!
//! The page tracker lets the program's first write to a page fault, makes the page writable
//! in the `SIGSEGV` handler and returns, so that the faulting instruction runs again. That is
//! correct only if the instruction runs again *alone* (nothing before it in the program is
//! repeated) and with the registers it had when it faulted. The kernel guarantees both. A
//! binary translator need not: valgrind 3.19 (`--tool=none` and memcheck) resumes a block
//! with registers written earlier in the block not yet stored back (the store writes a stale
//! register), and cachegrind and callgrind run the whole translated block again from its
//! start (an `x += d` before the faulting store is applied twice). Either silently corrupts
//! the program's data, so the runtime checks at start-up, with one instruction sequence that
//! shows both, and refuses to run where it fails ([`EXIT_IMPRECISE_FAULTS`]). valgrind
//! passes with `--vex-guest-max-insns=1` (one instruction per translated block).

use std::io;
use std::ptr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::pages::PAGE;

/// The exit status of a program started where write faults do not resume precisely
/// (`EX_CONFIG` of `sysexits.h`: the environment is misconfigured), documented in
/// `include/nvthreads.h`.
pub const EXIT_IMPRECISE_FAULTS: i32 = crate::runtime::EXIT_CANNOT_START;

/// How a faulting write resumed after its handler returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resume {
    /// The faulting instruction ran again alone, with its registers: what the tracker needs.
    Precise,
    /// The instruction ran again with a register value from before the fault's block.
    StaleRegisters,
    /// Instructions before the faulting one ran again too.
    Replayed,
}

/// The page the probe's handler may make writable (0: none).
static PROBE_PAGE: AtomicUsize = AtomicUsize::new(0);
/// Counted once by the probe's instruction sequence (twice if a translator replays it). It is
/// reset before the handler is installed: the `sigaction` system call between the reset and
/// the sequence ends any translated block, so a replay cannot reset it too.
static PROBE_COUNT: AtomicU64 = AtomicU64::new(0);

const STALE: u64 = 7;
const STORED: u64 = 42;
const OVERWRITTEN: u64 = 99;

/// Faults one write on a fresh read-only page and reports how it resumed. Must run while the
/// process has a single thread and before the tracker installs its own `SIGSEGV` handler;
/// the previous handler is restored before returning.
pub fn probe() -> io::Result<Resume> {
    // SAFETY: a fresh private anonymous mapping of one page.
    let page = unsafe {
        libc::mmap(
            ptr::null_mut(),
            PAGE,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if page == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    PROBE_PAGE.store(page as usize, Ordering::SeqCst);
    PROBE_COUNT.store(0, Ordering::SeqCst);
    let result = with_probe_handler(|| fault_once(page.cast()));
    PROBE_PAGE.store(0, Ordering::SeqCst);
    // SAFETY: unmapping the page mapped above; nothing refers to it any more.
    unsafe { libc::munmap(page, PAGE) };
    result
}

/// Runs `run` with [`on_probe_fault`] as the `SIGSEGV` handler, then restores the previous one.
fn with_probe_handler(run: impl FnOnce() -> Resume) -> io::Result<Resume> {
    // SAFETY: a zeroed sigaction is a valid starting point; the handler has the SA_SIGINFO
    // signature and only calls mprotect and sigaction (async-signal-safe).
    let mut previous: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let installed = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        let handler: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) = on_probe_fault;
        action.sa_sigaction = handler as usize;
        action.sa_flags = libc::SA_SIGINFO;
        crate::pages::glibc_sigaction(libc::SIGSEGV, &action, &mut previous)
    };
    if installed != 0 {
        return Err(io::Error::last_os_error());
    }
    let resume = run();
    // Restoring the action sigaction returned above.
    if crate::pages::glibc_sigaction(libc::SIGSEGV, &previous, ptr::null_mut()) != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(resume)
}

/// In one straight-line block: count once in writable memory, load a register, store it to
/// the read-only `page` (the fault), then overwrite the register. A translator that keeps
/// the register only in its own state until the block ends stores the stale value; one that
/// replays the block from its start counts twice.
#[cfg(target_arch = "x86_64")]
fn fault_once(page: *mut u64) -> Resume {
    let mut register = STALE;
    // SAFETY: PROBE_COUNT is a static counted with a plain add (a single-threaded process:
    // nothing else touches it); the store to `page` faults once and the handler makes
    // the page writable (PROBE_PAGE names it), so it then lands in our own mapping.
    unsafe {
        std::arch::asm!(
            "add qword ptr [{count}], 1",
            "mov {register}, {stored}",
            "mov qword ptr [{page}], {register}",
            "mov {register}, {overwritten}",
            count = in(reg) PROBE_COUNT.as_ptr(),
            page = in(reg) page,
            stored = in(reg) STORED,
            overwritten = in(reg) OVERWRITTEN,
            register = inout(reg) register,
        );
    }
    debug_assert_eq!(register, OVERWRITTEN);
    // SAFETY: the page is mapped and was made readable and writable by the handler.
    let stored = unsafe { ptr::read_volatile(page) };
    classify(stored, PROBE_COUNT.load(Ordering::SeqCst))
}

/// Other architectures: the runtime is built for x86-64 (clwb, sfence); nothing to probe.
#[cfg(not(target_arch = "x86_64"))]
fn fault_once(_page: *mut u64) -> Resume {
    Resume::Precise
}

fn classify(stored: u64, count: u64) -> Resume {
    if count != 1 {
        Resume::Replayed
    } else if stored != STORED {
        Resume::StaleRegisters
    } else {
        Resume::Precise
    }
}

extern "C" fn on_probe_fault(signal: i32, info: *mut libc::siginfo_t, _context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PROBE_PAGE.load(Ordering::SeqCst);
    if page != 0 && (page..page + PAGE).contains(&addr) {
        // SAFETY: the probe's own page, mapped by `probe` until it returns.
        unsafe {
            libc::mprotect(
                page as *mut libc::c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        return;
    }
    // Not the probe's fault: default action, so the instruction faults again and the
    // process dies of the signal as it would without the probe.
    // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask.
    let default: libc::sigaction = unsafe { std::mem::zeroed() };
    crate::pages::glibc_sigaction(signal, &default, ptr::null_mut());
}

/// Ends the program with a message and [`EXIT_IMPRECISE_FAULTS`] unless write faults resume
/// precisely here (called when the runtime starts, before the pool is opened).
pub fn require_precise_write_faults() {
    let why = match probe() {
        Ok(Resume::Precise) => return,
        Ok(Resume::StaleRegisters) => "resumes it with stale registers",
        Ok(Resume::Replayed) => "runs the instructions before it again",
        Err(error) => {
            crate::runtime::fatal(&format!("probing write faults failed: {error}"));
        }
    };
    use std::io::Write;
    let _ = writeln!(
        io::stderr(),
        "nvthreads: this process {why} after a write fault is handled (valgrind?), and the \
         runtime tracks writes by letting the first write to a page fault and run again: \
         its data would be silently corrupted, so it does not start; exiting with status \
         {EXIT_IMPRECISE_FAULTS} (under valgrind, add --vex-guest-max-insns=1)"
    );
    std::process::exit(EXIT_IMPRECISE_FAULTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outcomes_are_told_apart() {
        assert_eq!(classify(STORED, 1), Resume::Precise);
        assert_eq!(classify(STALE, 1), Resume::StaleRegisters);
        assert_eq!(classify(STORED, 2), Resume::Replayed);
    }
}
