//! Damage that reaches a program as `EIO`: the server says which object is damaged and how,
//! once per object, on stderr (its log with `--background --log`), so that corruption is
//! not known only as "Input/output error" to whoever tripped over it.

use parking_lot::Mutex;
use std::collections::HashSet;

/// Damaged objects one server reports at most; the last report says that no more follow.
pub(crate) const MAX_REPORTED: usize = 100;

/// The damage already reported by one server.
#[derive(Debug, Default)]
pub(crate) struct DamageLog {
    /// One key per damaged object: the library's description of the damage (which names
    /// the object and the bad word), or the inode when it gave none.
    seen: Mutex<HashSet<String>>,
}

impl DamageLog {
    /// The line reporting that request `op` on inode `ino` met damage `what` (the library's
    /// description, if it left one), or `None` when that damage was reported already or
    /// [`MAX_REPORTED`] objects were.
    pub(crate) fn line(&self, op: &str, ino: u64, what: Option<String>) -> Option<String> {
        let key = what.clone().unwrap_or_else(|| format!("inode {ino}"));
        let mut seen = self.seen.lock();
        if seen.len() >= MAX_REPORTED || !seen.insert(key) {
            return None;
        }
        let what = what.unwrap_or_else(|| "no description".to_owned());
        let mut line = format!(
            "ferrite-fs: {op} of inode {ino} answered EIO: the file system is damaged: {what}"
        );
        if seen.len() == MAX_REPORTED {
            line.push_str(&format!(
                " (the {MAX_REPORTED}th damaged object reported; no more are: \
                 `ferrite fs fsck` lists all damage)"
            ));
        }
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_damaged_object_is_reported_once_and_the_reports_stop() {
        let log = DamageLog::default();
        let tree = || Some("inode 2: tree word at 0x12100 fails its check".to_owned());
        let first = log.line("read", 2, tree()).expect("first report");
        assert!(
            first.contains("read of inode 2") && first.contains("tree word at 0x12100"),
            "{first}"
        );
        assert_eq!(log.line("getattr", 2, tree()), None, "reported once");
        let bare = log.line("lookup", 7, None).expect("no description");
        assert!(
            bare.contains("inode 7") && bare.contains("no description"),
            "{bare}"
        );
        assert_eq!(log.line("lookup", 7, None), None);
        for ino in 100..(100 + MAX_REPORTED as u64 - 3) {
            assert!(log.line("read", ino, None).is_some());
        }
        let last = log.line("read", 1, None).expect("the last report");
        assert!(last.contains("no more are"), "{last}");
        assert_eq!(log.line("read", 3, None), None, "no more reports");
    }
}
