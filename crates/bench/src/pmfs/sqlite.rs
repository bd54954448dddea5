//! The sqlite workload: the `sqlite3` shell inserting rows one transaction each (autocommit,
//! the default rollback journal, `synchronous=FULL`): every insert writes and `fsync`s a
//! journal, rewrites database pages, `fsync`s, and deletes the journal. Timed from the
//! shell's start to its exit; the row count is checked.

use super::targets::TargetDir;
use crate::scratch::child_command;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

/// How big the workload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SqliteSettings {
    /// Rows inserted, one transaction each.
    pub inserts: u64,
    /// Runs per target (the median is reported).
    pub runs: usize,
    /// Runs on the FUSE mounts, each some ten times slower (a minute at 50,000 inserts).
    pub mount_runs: usize,
}

impl SqliteSettings {
    /// 50,000 inserts, three runs (one on each mount).
    pub const DEFAULT: SqliteSettings = SqliteSettings {
        inserts: 50_000,
        runs: 3,
        mount_runs: 1,
    };
    /// 2,000 inserts, one run.
    pub const QUICK: SqliteSettings = SqliteSettings {
        inserts: 2_000,
        runs: 1,
        mount_runs: 1,
    };
}

/// `sqlite3`, if installed.
pub fn sqlite_path() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("sqlite3"))
            .find(|p| p.is_file())
    })
}

/// The script: a table, `inserts` single-row transactions, the row count.
fn script(inserts: u64) -> String {
    let mut text = String::from("create table t(id integer primary key, v text);\n");
    for i in 0..inserts {
        text.push_str(&format!(
            "insert into t(v) values('row {i:08} of the sqlite workload');\n"
        ));
    }
    text.push_str("select count(*) from t;\n");
    text
}

/// Runs the workload once on `target`; returns the seconds it took.
pub fn run_once(sqlite: &Path, target: &dyn TargetDir, inserts: u64) -> Result<f64, String> {
    let db = target.dir().join("workload.db");
    let env = target.env();
    let remove = || {
        let _ = child_command("rm")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .arg("-f")
            .arg(&db)
            .arg(db.with_extension("db-journal"))
            .status();
    };
    remove();
    let text = script(inserts);
    let start = Instant::now();
    let mut child = child_command(sqlite)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("sqlite3: {e}"))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(text.as_bytes())
        .map_err(|e| format!("sqlite3 input: {e}"))?;
    let output = child
        .wait_with_output()
        .map_err(|e| format!("sqlite3: {e}"))?;
    let seconds = start.elapsed().as_secs_f64();
    remove();
    let out = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || out.trim() != inserts.to_string() {
        return Err(format!(
            "sqlite3 on {}: {} {}",
            target.dir().display(),
            out.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_inserts_one_row_per_statement() {
        let text = script(3);
        assert_eq!(text.matches("insert into").count(), 3);
        assert!(text.ends_with("select count(*) from t;\n"));
    }
}
