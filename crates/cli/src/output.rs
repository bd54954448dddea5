//! Output paths checked before the work that fills them: a benchmark, an evaluation or a
//! simulation can run for minutes, and an output it cannot write (a missing or read-only
//! directory, a path that is a directory) must fail at once, as a usage error, not after.

use crate::UsageError;
use std::fs::OpenOptions;
use std::path::Path;

/// Checks that a file can be written at `path` without changing what is there: its
/// directory exists, `path` is not a directory, and the file opens for writing (an existing
/// file is opened without truncation; a new one is created, then removed again).
pub fn file_can_be_written(path: &Path) -> anyhow::Result<()> {
    if path.is_dir() {
        return Err(usage(path, "is a directory, not a file to write"));
    }
    parent_is_a_directory(path)?;
    let opened = if path.exists() {
        OpenOptions::new().write(true).open(path).map(|_| ())
    } else {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .and_then(|_| std::fs::remove_file(path))
    };
    opened.map_err(|error| usage(path, &format!("cannot be written: {error}")))
}

/// Makes the folder `path` (with its missing parents) and checks that files can be created
/// in it: the nearest existing one of `path` and its ancestors must be a directory, and a
/// probe file is created and removed.
pub fn folder_can_be_written(path: &Path) -> anyhow::Result<()> {
    let nearest = path
        .ancestors()
        .filter(|at| !at.as_os_str().is_empty())
        .find(|at| at.symlink_metadata().is_ok());
    if let Some(at) = nearest.filter(|at| !at.is_dir()) {
        return Err(usage(
            path,
            &format!("{} exists and is not a directory", at.display()),
        ));
    }
    std::fs::create_dir_all(path)
        .map_err(|error| usage(path, &format!("cannot create the folder: {error}")))?;
    let probe = path.join(format!(".ferrite-write-probe-{}", std::process::id()));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .and_then(|_| std::fs::remove_file(&probe))
        .map_err(|error| usage(path, &format!("cannot write in the folder: {error}")))
}

/// Checks that the scratch pool directory `--pool-dir` exists and is a directory, before
/// any section or configuration runs (each would fail on it, one after the other): a
/// missing one exits with the table's "no such file" code, anything else is a usage error.
pub fn pool_dir_exists(path: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(UsageError(format!("--pool-dir {}: not a directory", path.display())).into()),
        Err(error) => {
            let failure = crate::pool_cmd::PoolFailure {
                path: path.to_owned(),
                error: pmem::PoolError::from(error),
            };
            Err(anyhow::Error::new(failure).context("--pool-dir"))
        }
    }
}

/// Checks that the directory a new pool file goes in exists, so a missing one is named as
/// such (the table's "no such file" code) rather than the pool path being reported missing.
pub fn directory_of_new_file_exists(path: &Path) -> anyhow::Result<()> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => return Ok(()),
    };
    match std::fs::metadata(parent) {
        Ok(_) => Ok(()),
        Err(error) => {
            let failure = crate::pool_cmd::PoolFailure {
                path: parent.to_owned(),
                error: pmem::PoolError::from(error),
            };
            Err(anyhow::Error::new(failure)
                .context(format!("{}: the directory to create it in", path.display())))
        }
    }
}

fn parent_is_a_directory(path: &Path) -> anyhow::Result<()> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    match std::fs::metadata(parent) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(usage(
            path,
            &format!("{} is not a directory", parent.display()),
        )),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Err(usage(
            path,
            &format!("the directory {} does not exist", parent.display()),
        )),
        Err(error) => Err(usage(path, &format!("{}: {error}", parent.display()))),
    }
}

fn usage(path: &Path, reason: &str) -> anyhow::Error {
    UsageError(format!("{}: {reason}", path.display())).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_existing_file_is_checked_without_being_changed() {
        let dir = tempfile::tempdir().expect("scratch");
        let file = dir.path().join("kept.json");
        std::fs::write(&file, b"old").expect("write");
        file_can_be_written(&file).expect("writable");
        assert_eq!(std::fs::read(&file).expect("read"), b"old");
        let new = dir.path().join("new.json");
        file_can_be_written(&new).expect("creatable");
        assert!(!new.exists(), "the check left its file behind");
    }

    #[test]
    fn a_missing_directory_is_named_missing_not_a_non_directory() {
        let dir = tempfile::tempdir().expect("scratch");
        let file = dir.path().join("nope").join("x.json");
        let error = file_can_be_written(&file).expect_err("no directory");
        assert!(error.to_string().contains("does not exist"), "{error}");
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"").expect("write");
        let error = file_can_be_written(&plain.join("x.json")).expect_err("a file");
        assert!(error.to_string().contains("is not a directory"), "{error}");
    }

    #[test]
    fn a_folder_is_made_and_left_without_its_probe() {
        let dir = tempfile::tempdir().expect("scratch");
        let folder = dir.path().join("a").join("report");
        folder_can_be_written(&folder).expect("writable");
        assert!(folder.is_dir());
        assert_eq!(std::fs::read_dir(&folder).expect("list").count(), 0);
    }
}
