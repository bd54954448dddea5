//! A runtime that cannot start ends the program with one line and status 78 (`EX_CONFIG`),
//! never an abort; damaged heap metadata is refused, never formatted over.

mod common;

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

/// A pool path in a missing directory names the path the user gave.
#[test]
fn a_pool_in_a_missing_directory_names_the_path() {
    common::require_cc();
    let pool = Path::new("/nonexistent-nvthreads-dir/x.pool");
    let output = counter(pool, |_| {});
    assert_refused(&output, "/nonexistent-nvthreads-dir/x.pool:");
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
    for name in ["FERRITE_PERSIST_MODE", "FERRITE_FLUSH"] {
        let output = counter(&pool, |command| {
            command.env(name, "bogus");
        });
        assert_refused(&output, name);
        assert!(!pool.exists(), "no pool is made for a bad {name}");
    }
}
