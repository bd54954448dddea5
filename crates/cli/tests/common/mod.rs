//! What the CLI's test binaries share: running the built `ferrite` binary and reading its
//! output.
// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use std::process::{Command, Output};

/// Runs `ferrite` with `args` and waits for it.
pub fn ferrite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .output()
        .expect("the ferrite binary runs")
}

/// The command's standard output as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The command's standard error as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
