//! Output files that cannot be written whole (a full file system, a file size limit) leave
//! what was at their path before, and a full device is the exit table's "out of space".

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::ferrite;

/// `pmem::PoolError::OutOfSpace`'s exit code.
const OUT_OF_SPACE: i32 = 18;

fn text(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

/// Runs `ferrite args` unable to make any file larger than `limit` bytes: `RLIMIT_FSIZE`,
/// with `SIGXFSZ` ignored so a write past it fails with `EFBIG`, as a full file system fails
/// one with `ENOSPC`, instead of killing the process.
fn ferrite_with_file_limit(args: &[&str], limit: u64) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    command.args(args);
    // SAFETY: the closure runs in the forked child before `exec` and calls only `signal` and
    // `setrlimit`, which are async-signal-safe and touch no state of the parent.
    unsafe {
        command.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let rlimit = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &rlimit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.output().expect("the ferrite binary runs")
}

/// Every name in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

#[test]
fn a_json_or_trace_that_does_not_fit_keeps_the_file_it_would_replace() {
    let dir = tempfile::tempdir().expect("scratch");
    let kept = dir.path().join("result.json");
    std::fs::write(&kept, b"{\"earlier\": true}\n").expect("write");
    let runs: [&[&str]; 2] = [
        &[
            "sim",
            "run",
            "--design",
            "silo",
            "--workload",
            "hash",
            "--tx",
            "10",
            "--json",
            text(&kept),
        ],
        &[
            "sim",
            "trace",
            "--workload",
            "hash",
            "--tx",
            "10",
            "--out",
            text(&kept),
        ],
    ];
    for args in runs {
        let output = ferrite_with_file_limit(args, 512);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("File too large"), "{args:?}: {stderr}");
        assert_eq!(
            std::fs::read(&kept).expect("read"),
            b"{\"earlier\": true}\n",
            "{args:?} truncated the file it could not replace"
        );
        assert_eq!(names(dir.path()), ["result.json"], "{args:?} left a file");
    }
}

#[test]
fn a_report_that_does_not_fit_keeps_the_earlier_report_whole() {
    let dir = tempfile::tempdir().expect("scratch");
    let out = dir.path().join("report");
    let args = [
        "sim",
        "reproduce",
        "--quick",
        "--quiet",
        "--transactions",
        "20",
        "--out",
        text(&out),
    ];
    let first = ferrite(&args);
    assert!(first.status.success(), "{first:?}");
    let before: Vec<(String, Vec<u8>)> = names(&out)
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(out.join(&name)).expect("read");
            (name, bytes)
        })
        .collect();
    // Its small files fit, its `report.json` (over a megabyte) does not.
    let second = ferrite_with_file_limit(&args, 64 << 10);
    assert_eq!(second.status.code(), Some(1), "{second:?}");
    let after: Vec<(String, Vec<u8>)> = names(&out)
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(out.join(&name)).expect("read");
            (name, bytes)
        })
        .collect();
    assert_eq!(
        before.iter().map(|(name, _)| name).collect::<Vec<_>>(),
        after.iter().map(|(name, _)| name).collect::<Vec<_>>(),
        "the failed report added or removed files"
    );
    for ((name, old), (_, new)) in before.iter().zip(&after) {
        assert!(
            old == new,
            "{name} changed although the report was not written"
        );
    }
}

#[test]
fn an_output_on_a_full_device_exits_out_of_space() {
    let output = ferrite(&[
        "sim",
        "run",
        "--design",
        "silo",
        "--workload",
        "hash",
        "--tx",
        "10",
        "--json",
        "/dev/full",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(OUT_OF_SPACE), "{stderr}");
    assert!(stderr.contains("/dev/full"), "{stderr}");
}
