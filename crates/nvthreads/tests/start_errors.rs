//! A runtime that cannot start ends the program with one line and status 78 (`EX_CONFIG`),
//! never an abort; damaged heap metadata is refused, never formatted over.

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const CANNOT_START: i32 = nvthreads::runtime::EXIT_CANNOT_START;

fn counter(pool: &Path, configure: impl FnOnce(&mut Command)) -> Output {
    let program = &common::program("counter").linked;
    let mut command = common::command(program, pool, &["2", "20"]);
    command.stderr(Stdio::piped());
    configure(&mut command);
    command.output().expect("spawn counter")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Where the heap metadata is in the pool file: heap page 0, page-aligned (a copy of its
/// bytes in a log record is not).
fn heap_metadata_at(pool: &Path) -> usize {
    let bytes = std::fs::read(pool).expect("read pool");
    (0..bytes.len())
        .step_by(4096)
        .find(|&at| bytes[at..].starts_with(&nvthreads::heapmeta::MAGIC))
        .expect("heap metadata in the pool")
}

fn damage(pool: &Path, at: usize) {
    let mut bytes = std::fs::read(pool).expect("read pool");
    bytes[at] ^= 0x5a;
    std::fs::write(pool, bytes).expect("write pool");
}

fn assert_refused(output: &Output, reason: &str) {
    assert_eq!(
        output.status.code(),
        Some(CANNOT_START),
        "{}",
        stderr(output)
    );
    let message = stderr(output);
    assert!(
        message.contains("nvthreads: cannot start") && message.contains(reason),
        "{message}"
    );
}

/// Damage anywhere in the heap metadata — its magic, or a name the program looks its state
/// up by — is refused at every start, and the damaged page stays as it was (a runtime that
/// took it for a blank heap would format over it and hand out fresh, zeroed objects).
#[test]
fn damaged_heap_metadata_is_refused_and_kept() {
    common::require_cc();
    for (offset, reason) in [(0, "bad magic"), (64, "checksum mismatch")] {
        let (_dir, pool) = common::pool_path("meta");
        let first = counter(&pool, |_| {});
        assert!(first.status.success(), "{}", stderr(&first));
        let meta = heap_metadata_at(&pool);
        damage(&pool, meta + offset);
        let page = |pool: &Path| std::fs::read(pool).expect("read")[meta..meta + 4096].to_vec();
        let damaged = page(&pool);
        for _ in 0..2 {
            assert_refused(&counter(&pool, |_| {}), reason);
            assert_eq!(page(&pool), damaged, "the metadata was rewritten");
        }
    }
}

/// A pool path in a missing directory names the path the user gave, and the directory.
#[test]
fn a_pool_in_a_missing_directory_names_the_path() {
    common::require_cc();
    let pool = Path::new("/nonexistent-nvthreads-dir/x.pool");
    let output = counter(pool, |_| {});
    assert_refused(&output, "/nonexistent-nvthreads-dir/x.pool:");
    assert_refused(
        &output,
        "the directory /nonexistent-nvthreads-dir does not exist",
    );
    assert!(
        !stderr(&output).contains(".creating"),
        "{}",
        stderr(&output)
    );
}

/// A variable that does not parse ends the program with a status, not an abort.
#[test]
fn a_bad_variable_ends_with_the_documented_status() {
    common::require_cc();
    let (_dir, pool) = common::pool_path("env");
    let output = counter(&pool, |command| {
        command.env("NVT_HEAP_MB", "abc");
    });
    assert_refused(&output, "NVT_HEAP_MB");
    assert!(!pool.exists(), "no pool is made for a bad configuration");
    for (name, value) in [
        ("NVT_DEBUG", "2"),
        ("NVT_DISABLE", "yes"),
        ("NVT_STATS", "true"),
        ("NVT_GLOBALS", "1"),
        ("NVT_POOL", ""),
    ] {
        let output = counter(&pool, |command| {
            command.env(name, value);
        });
        assert_refused(&output, &format!("{name}={value}: expected"));
        assert!(!pool.exists(), "no pool is made for {name}={value}");
    }
    for name in ["FERRITE_PERSIST_MODE", "FERRITE_FLUSH"] {
        let output = counter(&pool, |command| {
            command.env(name, "bogus");
        });
        assert_refused(&output, name);
        assert!(!pool.exists(), "no pool is made for a bad {name}");
    }
}

/// `counter` with `NVT_MALLOC_MB=value`, killed if it has not ended within 30 s (a start-up
/// panic once unwound into the interposed `pthread_once` and waited forever).
fn counter_with_malloc_mb(pool: &Path, value: &str) -> Output {
    let program = &common::program("counter").linked;
    let mut child = common::command(program, pool, &["2", "20"])
        .env("NVT_MALLOC_MB", value)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn counter");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().expect("reap");
            panic!("NVT_MALLOC_MB={value}: hung at start: {}", stderr(&output));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// A shared `malloc` region of 0 MiB, or larger than the address space set aside for it, is
/// a bad variable like any other (it once panicked in the page tracker and hung), and the
/// bounds themselves work.
#[test]
fn a_malloc_region_size_out_of_range_is_refused() {
    common::require_cc();
    let (_dir, pool) = common::pool_path("malloc-mb");
    for value in ["0", "1048577", "99999999999"] {
        let output = counter_with_malloc_mb(&pool, value);
        assert_refused(
            &output,
            &format!("NVT_MALLOC_MB={value}: expected a number of MiB from 1 to 1048576"),
        );
        assert!(!pool.exists(), "no pool is made for NVT_MALLOC_MB={value}");
    }
    for value in ["1", "1048576"] {
        let output = counter_with_malloc_mb(&pool, value);
        assert!(
            output.status.success(),
            "NVT_MALLOC_MB={value}: {}",
            stderr(&output)
        );
    }
}

/// A heap or log size of 0 is refused as a bad variable (it once failed later, about "heap
/// size 0" or "log size 0", naming no variable), and a pool too large for its file system
/// names the variables that sized it.
#[test]
fn a_pool_size_out_of_range_names_its_variable() {
    common::require_cc();
    let (_dir, pool) = common::pool_path("sizes");
    for name in ["NVT_HEAP_MB", "NVT_LOG_MB", "NVT_PMALLOC_MB"] {
        let output = counter(&pool, |command| {
            command.env(name, "0");
        });
        assert_refused(
            &output,
            &format!("{name}=0: expected a number of MiB from 1 to 1048576"),
        );
        assert!(!pool.exists(), "no pool is made for {name}=0");
    }
    let output = counter(&pool, |command| {
        command.env("NVT_HEAP_MB", "1048576");
    });
    assert_refused(&output, "not enough space");
    assert!(
        stderr(&output).contains("NVT_HEAP_MB of heap"),
        "{}",
        stderr(&output)
    );
    assert!(!pool.exists(), "no half-made pool is left");
}

/// The current lap's records of every lane of the pool image `bytes`, as pool offsets (the
/// runtime header's geometry, the lap word's value, each record's length from its header).
fn current_records(bytes: &[u8]) -> Vec<Vec<usize>> {
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
    let root = (0..bytes.len())
        .step_by(64)
        .find(|&at| bytes[at..].starts_with(&nvthreads::journal::MAGIC))
        .expect("runtime header");
    let (log_off, log_len) = (u64_at(root + 32) as usize, u64_at(root + 40) as usize);
    let lanes = u16::from_le_bytes([bytes[root + 58], bytes[root + 59]]) as usize;
    let lap = u64_at(root + nvthreads::journal::LAP_WORD as usize) & ((1 << 48) - 1);
    let lane_len = log_len / lanes;
    (0..lanes)
        .map(|lane| {
            let (start, mut at, mut found) = (log_off + lane * lane_len, 0, Vec::new());
            while at + 48 <= lane_len {
                let record = start + at;
                let body = u32::from_le_bytes(bytes[record + 36..record + 40].try_into().unwrap());
                if !bytes[record..].starts_with(b"NVTR") || u64_at(record + 8) != lap {
                    break;
                }
                found.push(record);
                at += (48 + body as usize).div_ceil(64) * 64;
            }
            found
        })
        .collect()
}

/// A crashed counter run (killed after a number of log fences) whose log holds a lane with
/// at least two records of the current lap: the pool and that lane's records.
fn crashed_with_records() -> (tempfile::TempDir, std::path::PathBuf, Vec<usize>) {
    let (dir, pool) = common::pool_path("damage");
    let program = &common::program("counter").linked;
    let mut command = common::command(program, &pool, &["2", "40"]);
    // NVT_CRASH_AT kills the run's process group: a group of its own, not the test's.
    command
        .env("NVT_CRASH_AT", "60")
        .stderr(Stdio::piped())
        .process_group(0);
    let crashed = command.output().expect("spawn counter");
    assert!(!crashed.status.success(), "the run was to be killed");
    let lanes = current_records(&std::fs::read(&pool).expect("read pool"));
    let lane = lanes
        .into_iter()
        .find(|records| records.len() >= 2)
        .expect("a lane with two records");
    (dir, pool, lane)
}

/// A record in the middle of a lane damaged (no crash leaves that) ends the program with
/// status 78 naming the damage, at every start, and the pool stays byte for byte as it was
/// (no replay, no lap advance). A torn append after the lane's last record instead (what a
/// crash leaves: a record of the lap whose header or body did not all reach the media) is
/// discarded and the run goes on.
#[test]
fn a_log_damaged_in_the_middle_of_a_lane_is_refused_and_kept() {
    common::require_cc();
    let (_dir, pool, lane) = crashed_with_records();
    let pristine = std::fs::read(&pool).expect("read pool");
    let torn = pool.with_extension("torn");
    let last = lane[lane.len() - 1];
    let body = u32::from_le_bytes(pristine[last + 36..last + 40].try_into().unwrap()) as usize;
    let next = last + (48 + body).div_ceil(64) * 64;
    for (field, at) in [("magic", 2), ("sequence", 17), ("body", 60)] {
        let mut bytes = pristine.clone();
        bytes[lane[0] + at] ^= 0x5a;
        std::fs::write(&pool, &bytes).expect("write pool");
        for _ in 0..2 {
            let output = counter(&pool, |_| {});
            assert_refused(&output, "damaged redo log: lane");
            assert!(
                stderr(&output).contains("left unchanged"),
                "{}",
                stderr(&output)
            );
            assert!(
                std::fs::read(&pool).expect("read") == bytes,
                "{field}: the pool changed"
            );
        }
        // The next append of the lane, torn: the last record's bytes again, with this
        // field differing, where the next record would go.
        let mut bytes = pristine.clone();
        let record = (48 + body).div_ceil(64) * 64;
        bytes.copy_within(last..last + record, next);
        bytes[next + at] ^= 0x5a;
        std::fs::write(&torn, &bytes).expect("write pool");
        let output = counter(&torn, |_| {});
        assert!(
            output.status.success(),
            "torn {field}: {:?} {} {}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            stderr(&output)
        );
    }
}
