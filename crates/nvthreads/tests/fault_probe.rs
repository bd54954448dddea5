//! The start-up check that a faulting write resumes precisely (`src/faultprobe.rs`): it
//! passes on the machine, and a program run under valgrind without
//! `--vex-guest-max-insns=1` is refused with status 78 instead of computing a wrong answer.

mod common;

use nvthreads::faultprobe::{self, Resume};
use std::path::Path;
use std::process::{Command, Stdio};

/// Natively the kernel resumes a faulting write precisely; the probe leaves the process's
/// `SIGSEGV` action as it found it.
#[test]
fn write_faults_resume_precisely_on_the_machine() {
    // SAFETY: reading the current action only.
    let before = unsafe { current_segv_handler() };
    assert_eq!(faultprobe::probe().expect("probe"), Resume::Precise);
    // SAFETY: as above.
    assert_eq!(unsafe { current_segv_handler() }, before);
}

/// The address of the process's current `SIGSEGV` handler (0: the default action).
///
/// # Safety
/// None beyond the call's: it only reads the action.
unsafe fn current_segv_handler() -> usize {
    // SAFETY: a zeroed sigaction is a valid value to be overwritten.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only reads the current one into `action`.
    unsafe { libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut action) };
    action.sa_sigaction
}

/// `counter 2 50` under `valgrind --tool=<tool> [extra]`, on `pool`: status and stdout.
fn under_valgrind(tool: &str, extra: &[&str], pool: &Path) -> (Option<i32>, String, String) {
    let program = &common::program("counter").linked;
    let output = Command::new("valgrind")
        .args(["-q", &format!("--tool={tool}"), "--trace-children=yes"])
        .args(
            ["--cachegrind-out-file=/dev/null"]
                .iter()
                .filter(|_| tool == "cachegrind"),
        )
        .args(extra)
        .arg(program)
        .args(["2", "50"])
        .env("NVT_POOL", pool)
        .env("NVT_HEAP_MB", "8")
        .env("NVT_LOG_MB", "2")
        .env("NVT_MALLOC_MB", "256")
        .stdin(Stdio::null())
        .output()
        .expect("spawn valgrind");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn valgrind_present() -> bool {
    let found = Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if !found {
        eprintln!("valgrind is not installed: the valgrind checks are skipped");
    }
    found
}

/// Under valgrind's default translation (registers stale at the fault; cachegrind replays
/// the block) the program is refused at start-up with status 78 and the remedy, and the
/// pool is left untouched; with `--vex-guest-max-insns=1` it runs, and a second run
/// recovers every section of the first.
#[test]
fn valgrind_is_refused_unless_it_resumes_faults_precisely() {
    if !valgrind_present() {
        return;
    }
    let (_dir, pool) = common::pool_path("valgrind");
    for tool in ["none", "cachegrind"] {
        let (status, stdout, stderr) = under_valgrind(tool, &[], &pool);
        assert_eq!(status, Some(78), "{tool}: {stdout}{stderr}");
        assert!(stdout.is_empty(), "{tool}: {stdout}");
        assert!(
            stderr.contains("--vex-guest-max-insns=1"),
            "{tool}: {stderr}"
        );
        assert!(
            !pool.exists(),
            "{tool}: a refused run must not create the pool"
        );
    }
    let precise = ["--vex-guest-max-insns=1"];
    let (status, stdout, stderr) = under_valgrind("none", &precise, &pool);
    assert_eq!(status, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("RESULT seq=100 a=100 b=100"),
        "{stdout}{stderr}"
    );
    let (status, stdout, stderr) = under_valgrind("none", &precise, &pool);
    assert_eq!(status, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains("seq=100 a=100 b=100 crashed=0 ok=1"),
        "{stdout}{stderr}"
    );
}
