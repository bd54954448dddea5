//! Output paths checked before the work that fills them: a benchmark, an evaluation or a
//! simulation can run for minutes, and an output it cannot write (a missing or read-only
//! directory, a path that is a directory) must fail at once, as a usage error, not after.

use crate::UsageError;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Checks that a file can be written at `path` without changing what is there: its
/// directory exists, `path` is not a directory, and the file opens for writing (an existing
/// file is opened without truncation, and a replacement can be made beside it, as
/// [`replace_file`] makes one; a new file is created, then removed again).
pub fn file_can_be_written(path: &Path) -> anyhow::Result<()> {
    if path.is_dir() {
        return Err(usage(path, "is a directory, not a file to write"));
    }
    parent_is_a_directory(path)?;
    let cannot_write = |error: io::Error| usage(path, &format!("cannot be written: {error}"));
    if !path.exists() {
        return OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .and_then(|_| std::fs::remove_file(path))
            .map_err(cannot_write);
    }
    OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(cannot_write)?;
    replacement_can_be_staged(path).map_err(|error| {
        usage(
            path,
            &format!("cannot be replaced: no new file can be made beside it ({error})"),
        )
    })
}

/// Whether [`replace_file`] can stage a new copy of the existing regular file at `path`
/// beside it (the directory may refuse new files where the file itself opens for writing,
/// as `/proc` does); other kinds of file are written directly and need nothing beside them.
fn replacement_can_be_staged(path: &Path) -> io::Result<()> {
    let target = std::fs::canonicalize(path)?;
    if !std::fs::metadata(&target)?.is_file() {
        return Ok(());
    }
    Staged::new(&target).map(drop)
}

/// Writes `contents` to the file at `path` so that a failure (a full file system, a quota)
/// leaves what was there unchanged: the bytes go to a new file beside it, which then
/// replaces it by `rename`, so a reader sees the old file or the whole new one, never a
/// truncated mix. A path that names something other than a regular file (`/dev/stdout`, a
/// FIFO, a terminal) is written directly: it has no contents to keep, and renaming over it
/// would replace the device node itself. A symbolic link is followed, so the file it points
/// to is replaced and the link is kept.
pub fn replace_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    let target = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => match std::fs::canonicalize(path) {
            Ok(resolved) => resolved,
            // A dangling link: writing through it creates its target.
            Err(_) => return std::fs::write(path, contents),
        },
        _ => path.to_owned(),
    };
    let existing = match std::fs::metadata(&target) {
        Ok(meta) if !meta.is_file() => return std::fs::write(&target, contents),
        Ok(meta) => Some(meta.permissions()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => None,
        Err(error) => return Err(error),
    };
    let staged = Staged::new(&target)?;
    staged.fill(contents, existing)?;
    staged.commit()
}

/// A file written beside its destination (same directory, so the rename stays on one file
/// system), removed again unless [`Staged::commit`] renamed it into place.
pub(crate) struct Staged {
    temp: PathBuf,
    destination: PathBuf,
    committed: bool,
}

impl Staged {
    /// Reserves a fresh hidden name beside `destination` (created exclusively, so two
    /// processes writing the same output never share one).
    pub(crate) fn new(destination: &Path) -> io::Result<Staged> {
        let dir = match destination.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let name = destination
            .file_name()
            .map_or_else(|| "output".into(), |name| name.to_string_lossy());
        for attempt in 0u32.. {
            let temp = dir.join(format!(
                ".{name}.ferrite-{}-{attempt}.tmp",
                std::process::id()
            ));
            match OpenOptions::new().write(true).create_new(true).open(&temp) {
                Ok(_) => {
                    return Ok(Staged {
                        temp,
                        destination: destination.to_owned(),
                        committed: false,
                    });
                }
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => {}
                Err(error) => return Err(error),
            }
        }
        unreachable!("the loop returns by its 100th attempt")
    }

    /// Writes `contents` in full (and to stable storage, so the rename cannot publish a file
    /// whose data a crash would lose), with `permissions` when it replaces a file.
    pub(crate) fn fill(
        &self,
        contents: &[u8],
        permissions: Option<std::fs::Permissions>,
    ) -> io::Result<()> {
        let mut file = OpenOptions::new().write(true).open(&self.temp)?;
        file.write_all(contents)?;
        file.sync_all()?;
        if let Some(permissions) = permissions {
            file.set_permissions(permissions)?;
        }
        Ok(())
    }

    /// Renames the file into place.
    pub(crate) fn commit(mut self) -> io::Result<()> {
        std::fs::rename(&self.temp, &self.destination)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
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
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(usage(
            path,
            &format!("{} is not a directory", parent.display()),
        )),
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
    fn a_replaced_file_keeps_its_mode_and_the_link_that_named_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("scratch");
        let file = dir.path().join("result.json");
        std::fs::write(&file, b"old").expect("write");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        let link = dir.path().join("latest.json");
        std::os::unix::fs::symlink("result.json", &link).expect("symlink");
        replace_file(&link, b"new").expect("replace");
        assert!(link.symlink_metadata().expect("link").is_symlink());
        assert_eq!(std::fs::read(&file).expect("read"), b"new");
        let mode = std::fs::metadata(&file).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["latest.json", "result.json"]);
        // Not a regular file: written in place, the device node left as it is.
        replace_file(Path::new("/dev/null"), b"x").expect("/dev/null");
        assert!(!Path::new("/dev/null").metadata().expect("stat").is_file());
    }

    #[test]
    fn a_folder_is_made_and_left_without_its_probe() {
        let dir = tempfile::tempdir().expect("scratch");
        let folder = dir.path().join("a").join("report");
        folder_can_be_written(&folder).expect("writable");
        assert!(folder.is_dir());
        assert_eq!(std::fs::read_dir(&folder).expect("list").count(), 0);
    }

    #[test]
    fn a_new_file_under_a_file_is_a_usage_error() {
        let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
        let file = dir.path().join("plain");
        std::fs::write(&file, b"x").expect("file");
        let error = directory_of_new_file_exists(&file.join("pool")).expect_err("under a file");
        assert!(error.downcast_ref::<UsageError>().is_some(), "{error:#}");
        assert!(
            format!("{error:#}").contains("not a directory"),
            "{error:#}"
        );
    }

    #[test]
    fn an_existing_file_whose_directory_takes_no_new_file_is_refused_up_front() {
        // /proc/version opens for writing, but nothing can be staged beside it to replace it.
        let error = file_can_be_written(Path::new("/proc/version")).expect_err("in /proc");
        assert!(error.downcast_ref::<UsageError>().is_some(), "{error:#}");
    }
}
