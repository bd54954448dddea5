//! C programs on the runtime, built with the system C compiler (`docs/nvthreads.md` §7):
//! results equal to plain pthreads without crashes (linked and `LD_PRELOAD`), deterministic
//! crashes at every persistence step of small runs with the recovery of each crash crashed
//! again at every one of its fences, campaigns of random `SIGKILL`s of the whole process
//! group spread over whole runs with acknowledgements over a pipe, the condition-variable
//! dependence case, mutants that the tests must catch, and the rest of the pthread and
//! `malloc` API.
//!
//! Needs `cc` and the runtime library `libnvthreads_rt.so`, which `cargo test` builds as an
//! example target. Without `cc` every test fails and says so (CI must install gcc).
//! `NVT_KILLS=n` sets the kills of every campaign (default 200).

mod common;

use common::*;
use rand::{Rng, SeedableRng};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

fn every_step(spec: &Spec, minimum: u64) {
    let report =
        crash_every_step(spec, None, true).unwrap_or_else(|p| panic!("{}: {p}", spec.name));
    eprintln!(
        "{}: crashed at each of {} persistence steps; {} recoveries crashed and redone",
        spec.name, report.crashed_runs, report.recovery_crashes
    );
    report.assert_covers(spec.name, minimum);
}

#[test]
fn counter_crashes_at_every_step_and_every_recovery_fence() {
    every_step(&COUNTER, 20);
}

#[test]
fn bank_crashes_at_every_step_and_every_recovery_fence() {
    every_step(&BANK, 15);
}

#[test]
fn list_crashes_at_every_step_and_every_recovery_fence() {
    every_step(&LIST, 15);
}

#[test]
fn phases_crash_at_every_step_and_every_recovery_fence() {
    every_step(&PHASES, 10);
}

#[test]
fn condvar_crashes_at_every_step_and_every_recovery_fence() {
    every_step(&CONDVAR_LOOP, 8);
}

#[test]
fn stress_crashes_at_every_step_and_every_recovery_fence() {
    every_step(&STRESS, 8);
}

/// Concurrent commits: three threads' transfers under different stripes commit at the same
/// time, so crash points fall between one thread's log append and another's.
#[test]
fn ledger_crashes_at_every_step_and_every_recovery_fence() {
    every_step(&LEDGER, 20);
}

/// Readers sharing a read-write lock merge and commit their own writes at the same time,
/// between a writer's sections.
#[test]
fn rwlock_readers_and_writers_crash_at_every_step_and_every_recovery_fence() {
    every_step(&RWBANK, 10);
}

#[test]
fn persistent_globals_crash_at_every_step_and_every_recovery_fence() {
    every_step(&GCOUNTER, 15);
}

#[test]
fn torn_commit_mutant_is_caught() {
    let problem = crash_every_step(&COUNTER, Some("commit-per-page"), false)
        .expect_err("committing each page on its own tears sections; the test must notice");
    eprintln!("mutant caught: {problem}");
}

/// What a campaign saw.
#[derive(Debug, Default)]
struct CampaignReport {
    /// Kills before the run printed its recovered state (start-up, recovery).
    before_state: usize,
    /// Kills while the workload ran.
    mid_run: usize,
    /// Runs that finished before the kill.
    finished: usize,
}

/// An uninterrupted run: how long start-up and recovery take (until it prints its state),
/// start-up plus the workload (until it prints DONE; its exit, a checkpoint, follows), and
/// how many acknowledgements it sends.
#[derive(Clone, Copy, Debug)]
struct RunTime {
    startup: Duration,
    whole: Duration,
    acks: u64,
}

/// When a kill of a campaign lands.
#[derive(Clone, Copy, Debug)]
enum KillAt {
    /// After this delay from the start (start-up and recovery: double crashes).
    Delay(Duration),
    /// Right after the program's `acks`-th acknowledgement, plus `then`.
    Progress { acks: u64, then: Duration },
}

impl RunTime {
    /// Where the next kill lands: a fifth of the kills at a delay uniform over start-up,
    /// seven in ten right after a uniformly chosen acknowledgement (plus a uniform fraction
    /// of the time between two: mid-run, whatever the machine's speed), one in ten after
    /// the last acknowledgement plus up to a third of the workload's time (its end, its
    /// exit, or after it).
    fn kill_at(&self, rng: &mut impl Rng) -> KillAt {
        let work = self.whole.saturating_sub(self.startup);
        let per_ack = work / self.acks.max(1) as u32;
        match rng.random_range(0..10) {
            0 | 1 => KillAt::Delay(self.startup.mul_f64(rng.random_range(0.0..1.0))),
            9 => KillAt::Progress {
                acks: self.acks,
                then: work.mul_f64(rng.random_range(0.0..0.34)),
            },
            _ => KillAt::Progress {
                acks: rng.random_range(1..=self.acks.max(1)),
                then: per_ack.mul_f64(rng.random_range(0.0..1.0)),
            },
        }
    }
}

/// One uninterrupted run of `args` on `pool`, timed and its acknowledgements counted.
fn timed_run(spec: &Spec, args: &[&str], pool: &Path) -> RunTime {
    let started = Instant::now();
    let mut running = start(spec.command(pool, args), None, None);
    let mut reader = std::io::BufReader::new(running.stdout());
    let mut state = String::new();
    std::io::BufRead::read_line(&mut reader, &mut state).expect("state line");
    let startup = started.elapsed();
    let mut whole = None;
    let mut line = String::new();
    while std::io::BufRead::read_line(&mut reader, &mut line).is_ok_and(|n| n > 0) {
        if line.starts_with("DONE") {
            whole = Some(started.elapsed());
        }
        line.clear();
    }
    let whole = whole.unwrap_or_else(|| started.elapsed());
    let acks = running.progress.count();
    kill_and_collect(&mut running, false);
    RunTime {
        startup,
        whole,
        acks,
    }
}

/// The median of three uninterrupted runs of `args` on `pool` (the machine may be busy:
/// one run can be far off).
fn median_run_time(spec: &Spec, args: &[&str], pool: &Path) -> RunTime {
    let mut runs: Vec<RunTime> = (0..3).map(|_| timed_run(spec, args, pool)).collect();
    runs.sort_by_key(|run| run.whole);
    runs[1]
}

/// The state of `pool` after uninterrupted runs: acknowledged, in effect.
fn completed_state(spec: &Spec, pool: &Path) -> State {
    parse_state(&spec.check_line(pool, None).expect("check run"))
}

/// Runs `spec` with `args` on one pool `kills` times, each time `SIGKILL`ing the process
/// group at a seeded random point ([`RunTime::kill_at`]): a fifth of the kills land in
/// start-up or in the recovery of the previous crash (double crashes), most right after a
/// random acknowledgement of the workload, some at its end or after it. Each run's recovered state is checked against
/// everything acknowledged before it.
/// `slack`: the unacknowledged sections a kill may leave durable — one per thread that can
/// have committed a section and not yet acknowledged it (the spec's own slack is for its
/// two-thread every-step runs).
fn campaign(spec: &Spec, args: &[&str], slack: u64, seed: u64) -> CampaignReport {
    let kills = kills(200);
    let (_dir, pool) = pool_path("campaign");
    // The first run creates the pool; it is not timed.
    run(spec.command(&pool, args));
    let mut full = median_run_time(spec, args, &pool);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut acked = Acked::default();
    acked.cover(&completed_state(spec, &pool));
    let mut report = CampaignReport::default();
    for kill in 0..kills {
        if kill > 0 && kill % RECALIBRATE == 0 {
            // The persistent state grows run by run (and so does recovery): keep the times
            // of a whole run up to date.
            full = median_run_time(spec, args, &pool);
            acked.cover(&completed_state(spec, &pool));
        }
        let mut running = start(spec.command(&pool, args), None, None);
        let at = full.kill_at(&mut rng);
        match at {
            KillAt::Delay(delay) => thread::sleep(delay),
            KillAt::Progress { acks, then } => {
                running.progress.wait_for(acks, full.whole * 20);
                thread::sleep(then);
            }
        }
        let delay_us = format!("{at:?}");
        let (got, lines) = kill_and_collect(&mut running, true);
        match lines.iter().find(|line| line.starts_with("STATE")) {
            Some(line) => {
                let state = parse_state(line);
                check_against(
                    state,
                    &acked,
                    slack,
                    spec.per_thread,
                    &format!("{} kill {kill} ({delay_us})", spec.name),
                );
                acked.cover(&state);
                if lines.iter().any(|line| line.starts_with("DONE")) {
                    report.finished += 1;
                } else {
                    report.mid_run += 1;
                }
            }
            None => report.before_state += 1,
        }
        acked.merge(&got);
    }
    let line = spec.check_line(&pool, None).expect("final check");
    let state = parse_state(&line);
    check_against(state, &acked, slack, spec.per_thread, "final check");
    eprintln!(
        "{}: {kills} kills, two in ten during start-up, seven after a random acknowledgement, \
         one near the end (last calibration {full:?}): {} during start-up or recovery, {} \
         mid-run, {} after the run finished; final seq {}",
        spec.name, report.before_state, report.mid_run, report.finished, state.seq
    );
    // Guards against a campaign that tests little (kills all in start-up, or all after the
    // end). A fifth of the delays fall in start-up by construction; start-ups that take
    // longer than measured (recovery grows with the state) add some, hence 60 %.
    assert!(
        report.mid_run * 3 >= kills,
        "{}: a third of the kills must land while the workload runs: {report:?}",
        spec.name
    );
    assert!(
        (report.mid_run + report.finished) * 10 >= kills * 6,
        "{}: most runs must get past recovery: {report:?}",
        spec.name
    );
    if kills >= 100 {
        assert!(
            report.before_state > 0 && report.finished > 0,
            "{}: kills must also land in start-up/recovery and after the end: {report:?}",
            spec.name
        );
    }
    assert!(state.seq > 0, "{}: no section ever committed", spec.name);
    report
}

/// Kills between two measurements of the time of a whole run.
const RECALIBRATE: usize = 25;

fn kills(default: usize) -> usize {
    std::env::var("NVT_KILLS").map_or(default, |v| v.parse().expect("NVT_KILLS"))
}

#[test]
fn counter_survives_random_kills() {
    campaign(&COUNTER, &["3", "400"], 3, 0x6e76_7468);
}

#[test]
fn bank_nested_locks_survive_random_kills() {
    campaign(&BANK, &["3", "400"], 3, 0x6261_6e6b);
}

#[test]
fn list_with_persistent_pointers_survives_random_kills() {
    campaign(&LIST, &["3", "400"], 3, 0x6c69_7374);
}

#[test]
fn barrier_phases_survive_random_kills() {
    campaign(&PHASES, &["3", "100"], PHASES.slack, 0x7068);
}

#[test]
fn condvar_dependences_survive_random_kills() {
    campaign(
        &CONDVAR_LOOP,
        &["loop", "250"],
        CONDVAR_LOOP.slack,
        0x636f_6e64,
    );
}

#[test]
fn liveness_stress_survives_random_kills() {
    campaign(&STRESS, &["4", "60"], 4, 0x7374_7265);
}

#[test]
fn ledger_concurrent_commits_survive_random_kills() {
    campaign(&LEDGER, &["4", "300"], 4, 0x6c65_6467);
}

#[test]
fn rwlock_readers_and_writers_survive_random_kills() {
    campaign(&RWBANK, &["4", "600"], 4, 0x7277_6c6b);
}

#[test]
fn persistent_malloc_list_survives_random_kills() {
    campaign(&MALLOC_LIST, &["3", "800"], 3, 0x6d61_6c6c);
}

#[test]
fn persistent_globals_survive_random_kills() {
    campaign(&GCOUNTER, &["3", "400"], 3, 0x676c_6f62);
}

#[test]
fn liveness_stress_finishes() {
    let (_dir, pool) = pool_path("stress");
    let mut child = command(&program("stress").linked, &pool, &["8", "40"])
        .spawn()
        .expect("spawn stress");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("liveness stress did not finish within 60 s");
        }
        thread::sleep(Duration::from_millis(10));
    }
    let mut text = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut text)
        .expect("read");
    assert!(
        text.lines().any(|line| line == "COUNT 320"),
        "stress lost increments: {text}"
    );
    eprintln!(
        "stress: 8 threads x 40 sleeps+sections in {:?}",
        started.elapsed()
    );
}

/// The output lines a comparison with plain pthreads looks at.
fn result_lines(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|line| {
            line.starts_with("RESULT")
                || line.starts_with("COUNT")
                || line.ends_with(" ok")
                || line.starts_with("XY")
        })
        .cloned()
        .collect()
}

#[test]
fn results_equal_plain_pthreads() {
    let cases: &[(&str, &[&str])] = &[
        ("counter", &["4", "300"]),
        ("bank", &["3", "300"]),
        ("list", &["3", "300"]),
        ("phases", &["3", "20"]),
        ("condvar", &["loop", "40"]),
        ("condvar", &["commit"]),
        ("condvar", &["pairs", "50"]),
        ("stress", &["4", "10"]),
        ("globals", &["4", "200"]),
        ("gcounter", &["4", "300"]),
        ("ledger", &["4", "200"]),
        ("rwbank", &["3", "300"]),
        ("extras", &[]),
    ];
    for &(name, args) in cases {
        let built = program(name);
        let (_dir, pool) = pool_path("plain");
        let mut plain = command(&built.linked, &pool, args);
        plain.env("NVT_DISABLE", "1");
        let expected = result_lines(&run(plain));
        assert!(!expected.is_empty(), "{name}: no result line");
        assert!(
            !pool.exists(),
            "{name}: a dormant runtime must not make a pool"
        );
        let runtime = result_lines(&run(command(&built.linked, &pool, args)));
        assert_eq!(
            runtime, expected,
            "{name} {args:?}: runtime differs from pthreads"
        );
        let (_dir, pool) = pool_path("preload");
        let mut preloaded = command(&built.preload, &pool, args);
        preloaded.env("LD_PRELOAD", library_dir().join("libnvthreads_rt.so"));
        let preloaded = result_lines(&run(preloaded));
        assert_eq!(
            preloaded, expected,
            "{name} {args:?}: LD_PRELOAD differs from pthreads"
        );
        eprintln!("{name} {args:?}: {expected:?}");
    }
}

#[test]
fn malloc_family_is_shared_between_threads() {
    let built = program("malloc");
    let (dir, pool) = pool_path("malloc");
    let scratch = dir.path().join("scratch.txt");
    let scratch = scratch.to_str().expect("utf-8 path");
    let ok = vec!["MALLOC ok".to_owned()];
    assert_eq!(
        run(command(&built.linked, &pool, &["4", "2000", scratch])),
        ok
    );
    let mut preloaded = command(&built.preload, &pool, &["3", "500", scratch]);
    preloaded.env("LD_PRELOAD", library_dir().join("libnvthreads_rt.so"));
    assert_eq!(run(preloaded), ok, "LD_PRELOAD");
    let (_dir, persistent_pool) = pool_path("pmalloc");
    let mut persistent = command(&built.linked, &persistent_pool, &["2", "500", scratch]);
    persistent
        .env("NVT_MALLOC", "persistent")
        .env("NVT_HEAP_MB", "64");
    assert_eq!(run(persistent), ok, "NVT_MALLOC=persistent");
    let mut private = command(&built.linked, &pool, &["2", "100", scratch]);
    private.env("NVT_MALLOC", "private").stderr(Stdio::piped());
    let output = private.output().expect("spawn");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "with NVT_MALLOC=private, malloc'd memory cannot be shared (a thread's realloc of \
         main's buffer aborts it, or a thread's writes stay private): {:?}\n{stderr}",
        output.status
    );
}

#[test]
fn timed_waits_kinds_once_rwlocks_and_detached_threads() {
    let (_dir, pool) = pool_path("extras");
    let lines = run(command(&program("extras").linked, &pool, &[]));
    assert_eq!(lines, vec!["EXTRAS ok".to_owned()]);
}

/// The recovered `XY` line of the condvar program.
fn condvar_state(pool: &Path) -> [u64; 4] {
    let lines = run(command(&program("condvar").linked, pool, &["check"]));
    let line = &lines[0];
    let get = |name: &str| field(line, name).unwrap_or_else(|| panic!("no {name} in {line:?}"));
    [get("x"), get("y"), get("flag"), get("busy")]
}

/// Runs the dependence case in `mode`; returns the recovered [x, y, flag, busy].
fn condvar_case(mode: &str, mutant: Option<&str>) -> [u64; 4] {
    let (_dir, pool) = pool_path("condvar");
    let mut program = command(&program("condvar").linked, &pool, &[mode]);
    program.process_group(0);
    if let Some(mutant) = mutant {
        program.env("NVT_MUTANT", mutant);
    }
    let output = program.output().expect("spawn condvar");
    assert_eq!(
        output.status.success(),
        mode == "commit",
        "{mode}: {:?}",
        output.status
    );
    // The thread-processes were killed with the group; wait until the pool is free again
    // (they end within milliseconds; the bound only stops a hang, on a loaded machine too).
    for _ in 0..4000 {
        if !pmem::inspect(&pool).is_ok_and(|report| report.in_use) {
            break;
        }
        thread::sleep(Duration::from_millis(5));
    }
    condvar_state(&pool)
}

#[test]
fn dependent_section_dies_with_the_section_it_observed() {
    for _ in 0..4 {
        let [x, y, flag, _] = condvar_case("crash", None);
        assert_eq!(
            (x, y, flag),
            (0, 0, 0),
            "T1 crashed in its section: neither T1's x nor T2's dependent section may survive"
        );
    }
    let [x, y, flag, busy] = condvar_case("commit", None);
    assert_eq!((x, y, flag), (42, 42, 1), "both sections committed");
    assert_eq!(
        busy, 1,
        "trylock of a mutex held by T1 must fail with EBUSY"
    );
}

/// The durability delay, stated: a section that depends on no open section is durable when
/// its outermost unlock returns, one that depends on an open section when that section ends
/// (its outermost unlock), whatever other threads do. Two pairs of threads whose open
/// sections overlap all the time and a bystander check it after every section (the runtime
/// of version 2 needed a moment with no open section anywhere, which this load never
/// gives).
#[test]
fn durability_is_not_held_back_by_unrelated_open_sections() {
    let (_dir, pool) = pool_path("pairs");
    let lines = run(command(
        &program("condvar").linked,
        &pool,
        &["pairs", "300"],
    ));
    assert_eq!(lines, vec!["PAIRS ok".to_owned()]);
}

#[test]
fn dependence_mutant_is_caught() {
    let caught = (0..4).any(|_| {
        let [x, y, ..] = condvar_case("crash", Some("no-dependence"));
        (x, y) != (0, 0)
    });
    assert!(
        caught,
        "committing a dependent section early must expose T1's open section"
    );
    let problem = crash_every_step(&CONDVAR_LOOP, Some("no-dependence"), false);
    eprintln!("no-dependence mutant at every step: {problem:?}");
}

#[test]
fn globals_are_shared_between_threads() {
    let (_dir, pool) = pool_path("globals");
    let lines = run(command(&program("globals").linked, &pool, &["4", "200"]));
    assert_eq!(lines, vec!["GLOBALS ok".to_owned()]);
    // With NVT_GLOBALS=0 each thread-process has its own copy: the counter stays 0 in main.
    let mut private = command(&program("globals").linked, &pool, &["2", "10"]);
    private.env("NVT_GLOBALS", "0");
    let output = private.output().expect("spawn");
    assert!(
        !output.status.success(),
        "globals cannot be shared with NVT_GLOBALS=0"
    );
}

#[test]
fn kernel_writes_into_tracked_memory() {
    let (dir, pool) = pool_path("kernelio");
    let scratch = dir.path().join("scratch");
    let scratch = scratch.to_str().expect("utf-8 path");
    let lines = run(command(&program("kernelio").linked, &pool, &[scratch]));
    assert_eq!(lines, vec!["KERNELIO ok".to_owned()]);
}

/// Standard output written by several thread-processes: every line whole and each once, as
/// with glibc's threads (which share one stdio buffer).
#[test]
fn stdio_lines_from_threads_never_tear() {
    let (_dir, pool) = pool_path("printer");
    let (threads, lines) = (4usize, 5000usize);
    let output = run(command(
        &program("printer").linked,
        &pool,
        &[&threads.to_string(), &lines.to_string()],
    ));
    let payload = "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz";
    let mut seen = vec![vec![false; lines]; threads];
    let mut torn = Vec::new();
    for line in &output {
        let fields: Vec<&str> = line.split(' ').collect();
        let parsed = match fields.as_slice() {
            ["P", t, i, text] if *text == payload => {
                t.parse::<usize>().ok().zip(i.parse::<usize>().ok())
            }
            _ => None,
        };
        match parsed {
            Some((t, i)) if t < threads && i < lines && !seen[t][i] => seen[t][i] = true,
            _ => torn.push(line.clone()),
        }
    }
    let missing = seen.iter().flatten().filter(|&&s| !s).count();
    assert!(
        torn.is_empty() && missing == 0,
        "{} torn or repeated lines (first: {:?}), {missing} missing",
        torn.len(),
        torn.first()
    );
}

/// Every failure of `nvmalloc` returns NULL with its documented errno and a reason from
/// `nvt_error()`; with `NVT_DEBUG=1` the reason is printed too.
#[test]
fn nvmalloc_failures_set_errno_and_say_why() {
    let (_dir, pool) = pool_path("errors");
    let mut errors = command(&program("errors").linked, &pool, &[]);
    errors
        .env("NVT_DEBUG", "1")
        .env("NVT_HEAP_MB", "8")
        .stderr(Stdio::piped());
    let output = errors.output().expect("spawn errors");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert_eq!(stdout.trim(), "ERRORS ok");
    let stderr = String::from_utf8_lossy(&output.stderr);
    for reason in [
        "at most 47",
        "is empty",
        "fewer than",
        "names",
        "free bytes",
    ] {
        assert!(
            stderr.contains("nvthreads: nvmalloc(") && stderr.contains(reason),
            "NVT_DEBUG=1 must print why ({reason}): {stderr}"
        );
    }
}

/// `LD_PRELOAD` reaches wrappers too (`timeout`, `env`, a shell): the runtime must start in
/// the program they run, not in them. Two runs on one pool: the second finds the first's
/// sections.
#[test]
fn preloading_through_a_wrapper_runs_the_program_on_the_runtime() {
    let library = library_dir().join("libnvthreads_rt.so");
    let counter = &program("counter").preload;
    let wrappers: [&[&str]; 3] = [&["timeout", "60"], &["env"], &["sh", "-c", "\"$0\" \"$@\""]];
    for wrapper in wrappers {
        let (_dir, pool) = pool_path("wrapped");
        let mut states = Vec::new();
        for _ in 0..2 {
            let mut wrapped = command(Path::new(wrapper[0]), &pool, &wrapper[1..]);
            wrapped
                .arg(counter)
                .args(["2", "10"])
                .env("LD_PRELOAD", &library);
            let lines = run(wrapped);
            states.push(parse_state(&lines[0]));
        }
        assert!(pool.exists(), "{wrapper:?}: the program made its pool");
        assert_eq!(
            (states[1].run, states[1].seq),
            (1, 20),
            "{wrapper:?}: the second run must find the first one's sections: {states:?}"
        );
    }
}

/// A program that uses the runtime, started by a running program on the same pool, runs
/// without persistence and says so on stderr.
#[test]
fn a_program_on_a_pool_in_use_says_it_runs_without_persistence() {
    let (_dir, pool) = pool_path("nested");
    let mut nested = command(&program("counter").linked, &pool, &["2", "5"]);
    nested.env("NVT_ACTIVE", &pool).stderr(Stdio::piped());
    let output = nested.output().expect("spawn");
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("in use by the program that started this one")
            && stderr.contains("nothing is persistent"),
        "{stderr}"
    );
    assert!(!pool.exists(), "a dormant runtime makes no pool");
}

/// A second run of a program on a pool a live run holds ends at once, with a message and
/// exit status 75, instead of waiting and aborting.
#[test]
fn a_second_run_on_a_busy_pool_exits_at_once_with_status_75() {
    let (_dir, pool) = pool_path("busy");
    // The first run prints lines until the pipe it writes to is full, then blocks holding
    // the pool (its first line says the runtime has started).
    let mut first = command(&program("printer").linked, &pool, &["1", "1000000"]);
    first.process_group(0);
    let mut first = first.spawn().expect("spawn the first run");
    let mut state = String::new();
    let mut reader = std::io::BufReader::new(first.stdout.take().expect("stdout"));
    std::io::BufRead::read_line(&mut reader, &mut state).expect("first run's output");
    assert!(state.starts_with("P 0 0"), "{state}");
    let started = Instant::now();
    let mut second = command(&program("stress").linked, &pool, &["1", "1", "check"]);
    second.stderr(Stdio::piped());
    let output = second.output().expect("spawn the second run");
    let waited = started.elapsed();
    // SAFETY: signalling the process group made for the first run.
    unsafe { libc::kill(-(first.id() as i32), libc::SIGKILL) };
    let _ = first.wait();
    drop(reader);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(75), "{stderr}");
    assert!(stderr.contains("is in use by process"), "{stderr}");
    assert!(
        waited < Duration::from_secs(2),
        "the second run must not wait for the pool: {waited:?}"
    );
}

/// A run's stdout lines and the counters it printed at exit (`NVT_STATS=1`, `NVT_PROFILE=1`).
fn run_with_counters(
    mut command: Command,
) -> (
    Vec<String>,
    nvthreads::stats::Stats,
    nvthreads::profile::ProfileLine,
) {
    command
        .env("NVT_STATS", "1")
        .env("NVT_PROFILE", "1")
        .stderr(Stdio::piped());
    let output = command.output().expect("spawn");
    let stdout = String::from_utf8(output.stdout).expect("utf8");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{:?}\n{stdout}\n{stderr}",
        output.status
    );
    let stats = nvthreads::stats::Stats::parse(&stderr).expect("a stats line");
    let profile = nvthreads::profile::ProfileLine::parse(&stderr).expect("a profile line");
    (stdout.lines().map(str::to_owned).collect(), stats, profile)
}

/// Thread-processes write `malloc`'d memory and globals in place (`docs/nvthreads.md` §3.2):
/// a data-race-free work queue in `malloc`'d memory gives pthreads' result with no write
/// fault and no merged page, C11 atomics in `malloc`'d memory count right, and the kernel
/// can write a thread's `malloc`'d buffer through a system call the runtime does not wrap.
/// `NVT_ISOLATE_VOLATILE=1` brings tracking back: the same result (the atomic count aside:
/// merged copies lose increments), every volatile page written by a worker faulted and
/// merged, and the kernel's write refused (`EFAULT`) on a write-protected page.
#[test]
fn volatile_memory_is_written_in_place_by_thread_processes() {
    let built = program("volatile");
    let (dir, pool) = pool_path("volatile");
    let scratch = dir.path().join("scratch");
    let scratch = scratch.to_str().expect("utf-8 path");
    let args = ["4", "20000", scratch];
    let mut plain = command(&built.linked, &pool, &args);
    plain.env("NVT_DISABLE", "1");
    let expected = run(plain);
    assert_eq!(expected.len(), 3, "{expected:?}");
    assert!(expected[0].ends_with("wrong=0"), "{expected:?}");
    assert_eq!(expected[1], "ATOMIC 20000");
    assert_eq!(expected[2], "READV ok");

    // The first run on a pool writes the heap's metadata (a fault and a record in main);
    // the second writes nothing persistent at all.
    assert_eq!(run(command(&built.linked, &pool, &args)), expected);
    let (lines, stats, profile) = run_with_counters(command(&built.linked, &pool, &args));
    assert_eq!(lines, expected, "in place: differs from pthreads");
    let faults = profile.step(nvthreads::profile::Step::Fault).count;
    assert_eq!((faults, stats.merged_pages), (0, 0), "in place: {stats:?}");

    let mut isolated = command(&built.linked, &pool, &args);
    isolated.env("NVT_ISOLATE_VOLATILE", "1");
    let (lines, stats, profile) = run_with_counters(isolated);
    assert_eq!(lines[0], expected[0], "isolated: differs from pthreads");
    assert_eq!(lines[2], format!("READV failed errno={}", libc::EFAULT));
    // 20,000 results of 8 bytes: 40 pages of the results array, each written by every worker.
    let faults = profile.step(nvthreads::profile::Step::Fault).count;
    assert!(faults > 0, "isolated: no write fault");
    assert!(stats.merged_pages >= 40, "isolated: {stats:?}");
}
