//! A thread-process that dies — `abort()`, killed from outside while others wait on a mutex
//! it holds, on a condition variable it would signal or for a detached thread, or struck by
//! an injected failure (`NVT_FAIL_AT`: a panic, `abort()` or a stall killed from outside, at
//! its exit, holding its lane, or holding the log's gate for a checkpoint) — ends the run
//! within a bounded time with a message on stderr, every process of the run ends, and the
//! next run recovers every durable section (`docs/nvthreads.md` §3.7).

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a run may take to end once its thread died. The watchdog checks every 200 ms;
/// the rest is room for a machine shared with other builds. A hang never ends.
const END_WITHIN: Duration = Duration::from_secs(30);

enum Line {
    Out(String),
    Err(String),
    Closed,
}

struct Ended {
    status: ExitStatus,
    stdout: Vec<String>,
    stderr: Vec<String>,
    /// From the kill of the stalled process (or the start) to the end of every process.
    took: Duration,
}

fn forward(stream: impl Read + Send + 'static, tx: mpsc::Sender<Line>, out: bool) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            let _ = tx.send(if out {
                Line::Out(line)
            } else {
                Line::Err(line)
            });
        }
        let _ = tx.send(Line::Closed);
    });
}

/// The process id a stalled thread printed (`STALL pid=P` from the program, `(process P)
/// stalls at` from `NVT_FAIL_AT=stall@…`).
fn stalled_pid(line: &Line) -> Option<i32> {
    match line {
        Line::Out(text) => text.strip_prefix("STALL pid=")?.trim().parse().ok(),
        Line::Err(text) if text.contains("stalls at") => {
            let after = text.split("(process ").nth(1)?;
            after.split(')').next()?.parse().ok()
        }
        _ => None,
    }
}

/// Runs `command` in its own process group, kills with `SIGKILL` the thread-process that
/// says it stalls, and waits until the program and every process holding its output end
/// (a hang, or a process of the run outliving it, fails the test after [`END_WITHIN`]).
fn run_until_end(mut command: Command) -> Ended {
    command.stderr(Stdio::piped()).process_group(0);
    let mut child = command.spawn().expect("spawn");
    let group = child.id() as i32;
    let (tx, rx) = mpsc::channel();
    forward(child.stdout.take().expect("stdout"), tx.clone(), true);
    forward(child.stderr.take().expect("stderr"), tx, false);
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let mut since = Instant::now();
    let mut closed = 0;
    let mut status = None;
    while closed < 2 || status.is_none() {
        if since.elapsed() > END_WITHIN {
            // SAFETY: killing the test's own process group.
            unsafe { libc::kill(-group, libc::SIGKILL) };
            let _ = child.wait();
            panic!(
                "the run did not end within {END_WITHIN:?} (exited: {status:?})\nstdout: \
                 {stdout:?}\nstderr: {stderr:?}"
            );
        }
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(20)) {
            if let Some(pid) = stalled_pid(&line) {
                // SAFETY: killing a process of the program under test.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                since = Instant::now();
            }
            match line {
                Line::Out(text) => stdout.push(text),
                Line::Err(text) => stderr.push(text),
                Line::Closed => closed += 1,
            }
        }
        if status.is_none() {
            status = child.try_wait().expect("wait");
        }
    }
    // Reaped by `try_wait` already: returns its status.
    let status = child.wait().expect("wait");
    Ended {
        status,
        stdout,
        stderr,
        took: since.elapsed(),
    }
}

/// `(a, durable)`: the recovered count and the count the run saw durable.
fn field(lines: &[String], prefix: &str, name: &str) -> Option<u64> {
    let line = lines.iter().find(|line| line.starts_with(prefix))?;
    common::field(line, name)
}

/// The next run recovers a state with `a == b` holding at least the durable sections.
fn check_recovered(pool: &std::path::Path, durable: u64, context: &str) {
    let program = common::program("dying");
    let lines = common::run(common::command(&program.linked, pool, &["check"]));
    let state = lines.first().expect("state line");
    assert!(state.ends_with("ok=1"), "{context}: torn state {state}");
    let a = common::field(state, "a").expect("a");
    assert!(
        a >= durable,
        "{context}: lost durable sections: recovered a={a} < durable {durable}"
    );
}

/// Runs `dying MODE…` (with `env`) to its end, checks it ended as a dead thread ends a run,
/// and that the next run recovers.
fn dies_and_recovers(args: &[&str], env: &[(&str, &str)], says: &[&str]) -> Ended {
    let program = common::program("dying");
    let (_dir, pool) = common::pool_path("dying");
    let mut command = common::command(&program.linked, &pool, args);
    command.envs(env.iter().copied());
    let ended = run_until_end(command);
    let context = format!("dying {args:?} {env:?}: {:?}", ended.stderr);
    assert!(
        !ended.status.success() && ended.status.code().is_none(),
        "{context}: the run must end killed, not with {:?} (stdout {:?})",
        ended.status,
        ended.stdout
    );
    assert!(
        !ended.stdout.iter().any(|line| line.starts_with("DONE")),
        "{context}: main went on after a thread died"
    );
    assert!(
        ended
            .stderr
            .iter()
            .any(|line| says.iter().any(|s| line.contains(s))),
        "{context}: no message saying {says:?}"
    );
    let durable = field(&ended.stdout, "DURABLE", "a").unwrap_or(0);
    assert!(
        durable >= 20,
        "{context}: no durable prefix: {:?}",
        ended.stdout
    );
    check_recovered(&pool, durable, &context);
    ended
}

const DIED_WITHOUT_ENDING: &str = "died without ending; ending the program";

/// Every process waiting in the runtime may find the same death: one line says it.
fn said_once(ended: &Ended, message: &str) {
    let lines = ended.stderr.iter().filter(|line| line.contains(message));
    assert_eq!(lines.count(), 1, "{message}: {:?}", ended.stderr);
}

fn killed_by(ended: &Ended, signal: i32) {
    assert_eq!(
        ended.status.signal(),
        Some(signal),
        "status {:?}",
        ended.status
    );
}

#[test]
fn a_thread_that_aborts_instead_of_returning_ends_the_run() {
    let ended = dies_and_recovers(&["abort-exit"], &[], &["died of signal 6;"]);
    killed_by(&ended, libc::SIGKILL);
}

#[test]
fn a_thread_killed_holding_a_mutex_ends_the_run_waiting_on_it() {
    let ended = dies_and_recovers(&["kill-mutex"], &[], &[DIED_WITHOUT_ENDING]);
    said_once(&ended, DIED_WITHOUT_ENDING);
    killed_by(&ended, libc::SIGKILL);
}

#[test]
fn a_thread_killed_while_another_waits_on_a_condition_variable_ends_the_run() {
    let ended = dies_and_recovers(&["kill-cond"], &[], &[DIED_WITHOUT_ENDING]);
    said_once(&ended, DIED_WITHOUT_ENDING);
    killed_by(&ended, libc::SIGKILL);
}

#[test]
fn a_detached_thread_killed_while_main_exits_ends_the_run() {
    let ended = dies_and_recovers(&["kill-detached"], &[], &[DIED_WITHOUT_ENDING]);
    said_once(&ended, DIED_WITHOUT_ENDING);
    killed_by(&ended, libc::SIGKILL);
}

/// Every injected failure at every point ends the run; the stalls are killed from outside.
#[test]
fn injected_failures_at_exit_in_a_lane_and_in_a_checkpoint_end_the_run() {
    for point in ["exit", "lane", "checkpoint"] {
        for action in ["panic", "abort", "stall"] {
            let fail = format!("{action}@{point}");
            let says: &[&str] = match action {
                "stall" => &[DIED_WITHOUT_ENDING],
                _ => &["died of signal 6;", "died of signal 4;"],
            };
            // 2 workers × 1,500 sections fill half a lane of the 2 MiB log (16 lanes), so a
            // worker checkpoints.
            let ended = dies_and_recovers(
                &["work", "2", "1500"],
                &[("NVT_FAIL_AT", fail.as_str())],
                says,
            );
            if action == "panic" {
                assert!(
                    ended.stderr.iter().any(|line| line.contains("panics at")),
                    "{fail}: {:?}",
                    ended.stderr
                );
            }
            eprintln!("{fail}: ended in {:?} after the failure", ended.took);
        }
    }
}

#[test]
fn without_a_failure_the_work_ends_normally() {
    let program = common::program("dying");
    let (_dir, pool) = common::pool_path("dying");
    let lines = common::run(common::command(
        &program.linked,
        &pool,
        &["work", "2", "1500"],
    ));
    let done = field(&lines, "DONE", "a").expect("DONE line");
    assert_eq!(done, 20 + 2 * 1500);
    check_recovered(&pool, done, "clean run");
}
