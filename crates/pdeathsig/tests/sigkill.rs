//! A guarded child dies within a second of its parent's `SIGKILL`; an unguarded one outlives
//! it (so the test can fail). The parent is this test binary re-run as a middle process that
//! starts `sleep` and prints its pid.

use pdeathsig::{Signal, die_with_parent};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROLE: &str = "PDEATHSIG_TEST_ROLE";

/// The middle process: starts `sleep 30` (guarded or not), prints its pid, waits for it.
#[test]
fn middle() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let mut sleep = Command::new("sleep");
    sleep.arg("30");
    if role == "guarded" {
        die_with_parent(&mut sleep, Signal::Kill);
    }
    let mut child = sleep.spawn().expect("sleep");
    println!("child {}", child.id());
    // Until the test kills this process.
    let _ = child.wait();
}

/// Starts the middle process in `role`, returns it and its child's pid.
fn start_middle(role: &str) -> (std::process::Child, u32) {
    let exe = std::env::current_exe().expect("test binary");
    let mut middle = Command::new(exe)
        .args(["--exact", "middle", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .stdout(Stdio::piped())
        .spawn()
        .expect("middle");
    let stdout = middle.stdout.take().expect("stdout");
    let pid = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.split_once("child ")?.1.trim().parse().ok())
        .expect("the middle prints its child");
    (middle, pid)
}

/// Whether `pid` still runs (a zombie waiting for init to reap it has ended).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next());
        state != Some("Z")
    })
}

fn gone_within(pid: u32, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if !running(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    !running(pid)
}

fn kill(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

#[test]
fn a_guarded_child_dies_with_its_sigkilled_parent() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let (mut middle, child) = start_middle("guarded");
    assert!(running(child));
    middle.kill().expect("SIGKILL the middle");
    middle.wait().expect("reap the middle");
    assert!(
        gone_within(child, Duration::from_secs(1)),
        "pid {child} outlived its parent"
    );
}

#[test]
fn an_unguarded_child_outlives_its_sigkilled_parent() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let (mut middle, child) = start_middle("unguarded");
    middle.kill().expect("SIGKILL the middle");
    middle.wait().expect("reap the middle");
    let outlived = !gone_within(child, Duration::from_millis(300));
    kill(child);
    assert!(outlived, "without the guard the child runs on");
}
