//! The runtime's counters of one run, as the line `NVT_STATS=1` prints on stderr at exit:
//! `nvthreads-stats commits=… records=… logged_bytes=… merged_pages=… checkpoints=…
//! log_bytes=… groups=…`. The benchmark harness reads the line back with [`Stats::parse`].

#![forbid(unsafe_code)]

/// The counters of one run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Commit points: records that commit on their own, and close records of groups.
    pub commits: u64,
    /// Redo records written.
    pub records: u64,
    /// Bytes of runs logged.
    pub logged_bytes: u64,
    /// Dirty pages merged (each was a write fault and a twin).
    pub merged_pages: u64,
    /// Checkpoints (and compactions) of the log.
    pub checkpoints: u64,
    /// Bytes of records written to the log (headers and padding included).
    pub log_bytes: u64,
    /// Groups of open sections (sections that blocked holding locks) started.
    pub groups: u64,
}

/// The prefix of the line.
pub const LINE_PREFIX: &str = "nvthreads-stats";

impl Stats {
    /// The fields in line order.
    fn fields(&self) -> [(&'static str, u64); 7] {
        [
            ("commits", self.commits),
            ("records", self.records),
            ("logged_bytes", self.logged_bytes),
            ("merged_pages", self.merged_pages),
            ("checkpoints", self.checkpoints),
            ("log_bytes", self.log_bytes),
            ("groups", self.groups),
        ]
    }

    /// The line printed at exit.
    pub fn line(&self) -> String {
        let mut line = LINE_PREFIX.to_owned();
        for (name, value) in self.fields() {
            line.push_str(&format!(" {name}={value}"));
        }
        line
    }

    /// The counters of the first stats line in `text` (a program's stderr); `None` if it
    /// has none. Fields missing from the line read as 0.
    pub fn parse(text: &str) -> Option<Stats> {
        let line = text.lines().find(|line| line.starts_with(LINE_PREFIX))?;
        let get = |name: &str| -> u64 {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Some(Stats {
            commits: get("commits"),
            records: get("records"),
            logged_bytes: get("logged_bytes"),
            merged_pages: get("merged_pages"),
            checkpoints: get("checkpoints"),
            log_bytes: get("log_bytes"),
            groups: get("groups"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_parses_back() {
        let stats = Stats {
            commits: 1,
            records: 2,
            logged_bytes: 3,
            merged_pages: 4,
            checkpoints: 5,
            log_bytes: 6,
            groups: 7,
        };
        let text = format!("noise\n{}\nmore\n", stats.line());
        assert_eq!(Stats::parse(&text), Some(stats));
        assert_eq!(Stats::parse("nothing here"), None);
    }
}
