//! `ferrite pool create` in a mode that does not make the media durable: adr or eadr on a
//! file in the page cache (no DAX) is accepted, as an explicit choice, with a warning on
//! stderr that what it writes is not durable there; msync, and tmpfs (the emulation), are
//! not warned about.

use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::{stderr, stdout};

fn create(path: &Path, mode: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    command
        .args(["pool", "create"])
        .arg(path)
        .args(["--size", "1M"]);
    if let Some(mode) = mode {
        command.args(["--mode", mode]);
    }
    command
        .env_remove("FERRITE_PERSIST_MODE")
        .output()
        .expect("the ferrite binary runs")
}

#[test]
fn eadr_or_adr_on_the_page_cache_is_warned_about() {
    // The default temporary directory, on the disk here; where it is tmpfs there is no
    // page-cache file to make, and the created line says so.
    let dir = tempfile::tempdir().expect("scratch on the default temporary directory");
    let probe = create(&dir.path().join("probe.pool"), Some("msync"));
    assert_eq!(probe.status.code(), Some(0), "{}", stderr(&probe));
    if !stdout(&probe).contains("(media page-cache") {
        eprintln!("skipped: {} is not in the page cache", dir.path().display());
        return;
    }
    assert!(
        stderr(&probe).is_empty(),
        "msync is durable: {}",
        stderr(&probe)
    );
    for mode in ["eadr", "adr"] {
        let output = create(&dir.path().join(format!("{mode}.pool")), Some(mode));
        assert_eq!(output.status.code(), Some(0), "{mode}: {}", stderr(&output));
        let err = stderr(&output);
        assert!(err.starts_with("ferrite: warning: "), "{mode}: {err}");
        assert!(
            err.contains("the page cache is not persistent memory")
                || err.contains("page cache, which is not persistent memory"),
            "{mode}: {err}"
        );
        assert!(
            err.contains(&format!("written in mode {mode}")),
            "{mode}: {err}"
        );
        assert!(err.contains("--mode msync"), "{mode}: {err}");
        assert_eq!(err.lines().count(), 1, "{mode}: {err}");
    }
    let default = create(&dir.path().join("default.pool"), None);
    assert!(stderr(&default).is_empty(), "{}", stderr(&default));
}

#[test]
fn eadr_on_tmpfs_is_not_warned_about() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch in /dev/shm");
    let output = create(&dir.path().join("eadr.pool"), Some("eadr"));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("(media emulated-tmpfs, mode eadr"),
        "{}",
        stdout(&output)
    );
    assert!(stderr(&output).is_empty(), "{}", stderr(&output));
}
