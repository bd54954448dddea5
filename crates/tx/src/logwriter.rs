//! The log writer: how log bytes travel to PM, in the modes studied by "Logging in
//! persistent memory: to cache, or not to cache?" (Li, Ogleari and Zhao, MemSys 2017).
//!
//! - `Cacheable`: ordinary stores; the dirty lines are written back with the flush
//!   instruction when the log is sealed (store + clwb).
//! - `NonTemporal`: streaming stores straight to memory, any size and alignment (partial
//!   lines leave the write-combining buffers as partial, slower transfers).
//! - `Packed`: write-combining aware; records are assembled into whole 64-byte lines in DRAM
//!   and only full lines are streamed; a partial last line is streamed (padded) at seal.
//! - `Auto`: packed for appends shorter than a line, non-temporal for the rest
//!   ([`AUTO_THRESHOLD`], from the log-writer study of `ferrite eval`).
//!
//! Appends become durable at the first fence after [`LogWriter::seal`].

use pmem::{CACHE_LINE, Persist, WriteClass};

/// How log bytes are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogMode {
    /// Stores, then flush at seal.
    Cacheable,
    /// Streaming stores.
    NonTemporal,
    /// Full-line streaming stores assembled in DRAM.
    Packed,
    /// Chosen per append by size ([`AUTO_THRESHOLD`]).
    Auto,
}

/// In `Auto` mode, appends of at least this many bytes are streamed as they are
/// (non-temporal); smaller ones are packed into whole lines. Chosen from the log-writer study
/// (`ferrite eval`, section `logstudy`) for the engines' pattern, where every append is
/// followed by a fence: streaming beat cacheable stores plus flush at every record size there.
/// Between packing and plain streaming the study finds a tie at one record per fence (the
/// threshold is not where a measured advantage turns); packing wins only when several small
/// records share a fence (`docs/tx-format.md`, the log-writer study).
pub const AUTO_THRESHOLD: usize = 64;

impl LogMode {
    /// Every mode.
    pub const ALL: [LogMode; 4] = [
        LogMode::Cacheable,
        LogMode::NonTemporal,
        LogMode::Packed,
        LogMode::Auto,
    ];

    /// Name as used on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            LogMode::Cacheable => "cacheable",
            LogMode::NonTemporal => "non-temporal",
            LogMode::Packed => "packed",
            LogMode::Auto => "auto",
        }
    }

    /// Parses a name as printed by [`LogMode::name`].
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|mode| mode.name() == text)
    }

    /// The concrete mode for an append of `len` bytes.
    pub fn resolve(self, len: usize) -> LogMode {
        match self {
            LogMode::Auto if len >= AUTO_THRESHOLD => LogMode::NonTemporal,
            LogMode::Auto => LogMode::Packed,
            other => other,
        }
    }
}

/// Writes log bytes to PM in one [`LogMode`].
#[derive(Debug)]
pub struct LogWriter {
    mode: LogMode,
    /// Cacheable bytes stored but not yet flushed: `[start, end)`.
    dirty: Option<(u64, u64)>,
    /// The line being assembled in packed mode: its offset and content. It stays after a
    /// seal (already streamed, `dirty == false`) so that the next record in the same line does
    /// not have to read the line back from PM.
    staged: Option<Staged>,
}

#[derive(Debug)]
struct Staged {
    line: u64,
    content: [u8; CACHE_LINE as usize],
    dirty: bool,
}

impl LogWriter {
    /// A writer in `mode`.
    pub fn new(mode: LogMode) -> Self {
        LogWriter {
            mode,
            dirty: None,
            staged: None,
        }
    }

    /// The configured mode.
    pub fn mode(&self) -> LogMode {
        self.mode
    }

    /// Appends `bytes` at absolute offset `at` (log class).
    pub fn append<P: Persist>(&mut self, pm: &P, at: u64, bytes: &[u8]) {
        match self.mode.resolve(bytes.len()) {
            LogMode::Packed | LogMode::Auto => self.append_packed(pm, at, bytes),
            other => {
                // A staged line must not be streamed later over these bytes.
                self.drop_staged(pm);
                if other == LogMode::Cacheable {
                    self.append_cached(pm, at, bytes);
                } else {
                    pm.write_nt(at, bytes, WriteClass::Log);
                }
            }
        }
    }

    fn append_cached<P: Persist>(&mut self, pm: &P, at: u64, bytes: &[u8]) {
        pm.write(at, bytes, WriteClass::Log);
        let end = at + bytes.len() as u64;
        self.dirty = match self.dirty {
            Some((start, stop)) if at <= stop && at >= start => Some((start, stop.max(end))),
            Some((start, stop)) => {
                pm.flush(start, stop - start);
                Some((at, end))
            }
            None => Some((at, end)),
        };
    }

    /// Packed: partial lines are assembled in the staged buffer; the whole lines in between
    /// are streamed straight from `bytes` in one call.
    fn append_packed<P: Persist>(&mut self, pm: &P, at: u64, bytes: &[u8]) {
        let end = at + bytes.len() as u64;
        let first_full = at.next_multiple_of(CACHE_LINE).min(end);
        let last_full = (end / CACHE_LINE * CACHE_LINE).max(first_full);
        let (head, rest) = bytes.split_at((first_full - at) as usize);
        let (middle, tail) = rest.split_at((last_full - first_full) as usize);
        if !head.is_empty() {
            self.stage_bytes(pm, at, head);
        }
        if !middle.is_empty() {
            pm.write_nt(first_full, middle, WriteClass::Log);
        }
        if !tail.is_empty() {
            self.stage_bytes(pm, last_full, tail);
        }
    }

    /// Copies `bytes` (all within one line) into the staged line, streaming it when full.
    fn stage_bytes<P: Persist>(&mut self, pm: &P, at: u64, bytes: &[u8]) {
        let line = at / CACHE_LINE * CACHE_LINE;
        let within = (at - line) as usize;
        let staged = self.stage(pm, line, within);
        staged.content[within..within + bytes.len()].copy_from_slice(bytes);
        staged.dirty = true;
        if within + bytes.len() == CACHE_LINE as usize {
            self.drop_staged(pm);
        }
    }

    /// Streams the staged line if needed and forgets it.
    fn drop_staged<P: Persist>(&mut self, pm: &P) {
        self.seal_staged(pm);
        self.staged = None;
    }

    /// The staged buffer for `line`, starting one if needed. A line started mid-way keeps the
    /// bytes already in PM before `within`, since streaming the line rewrites all of it.
    fn stage<P: Persist>(&mut self, pm: &P, line: u64, within: usize) -> &mut Staged {
        if self.staged.as_ref().is_none_or(|s| s.line != line) {
            self.seal_staged(pm);
            let mut content = [0u8; CACHE_LINE as usize];
            if within > 0 {
                pm.read(line, &mut content[..within]);
            }
            self.staged = Some(Staged {
                line,
                content,
                dirty: false,
            });
        }
        self.staged.as_mut().expect("staged above")
    }

    /// Streams the staged line if it has bytes not yet streamed (and keeps it staged).
    fn seal_staged<P: Persist>(&mut self, pm: &P) {
        if let Some(staged) = self.staged.as_mut().filter(|s| s.dirty) {
            pm.write_nt(staged.line, &staged.content, WriteClass::Log);
            staged.dirty = false;
        }
    }

    /// Appends a record that starts on a cache line and owns the rest of its last line (a
    /// redo record), and seals: the next fence makes it durable. In packed mode the record is
    /// padded with zeros to whole lines in `record` and streamed in one call (only whole lines
    /// are ever streamed). In auto mode it is streamed as it is, whatever its length: its
    /// bytes are all the log stores (the rest of its last line is not part of the record), and
    /// streaming a short record measured as fast as streaming it padded (`docs/tx-format.md`
    /// §5). The other modes append and seal as usual.
    pub fn append_line_record<P: Persist>(&mut self, pm: &P, at: u64, record: &mut Vec<u8>) {
        debug_assert!(at.is_multiple_of(CACHE_LINE));
        // The record's lines are fresh: nothing staged can belong to them.
        match self.mode {
            LogMode::Auto => {
                self.drop_staged(pm);
                pm.write_nt(at, record, WriteClass::Log);
            }
            LogMode::Packed => {
                self.drop_staged(pm);
                let padded = record.len().next_multiple_of(CACHE_LINE as usize);
                record.resize(padded, 0);
                pm.write_nt(at, record, WriteClass::Log);
            }
            _ => {
                self.append(pm, at, record);
                self.seal(pm);
            }
        }
    }

    /// Issues every write-back still owed, so the next fence makes all appends durable.
    pub fn seal<P: Persist>(&mut self, pm: &P) {
        if let Some((start, stop)) = self.dirty.take() {
            pm.flush(start, stop - start);
        }
        self.seal_staged(pm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crashsim::{SimConfig, SimPm};

    fn append_all(mode: LogMode, appends: &[(u64, Vec<u8>)]) -> SimPm {
        let pm = SimPm::new(8192, SimConfig::default());
        let mut writer = LogWriter::new(mode);
        for (at, bytes) in appends {
            writer.append(&pm, *at, bytes);
        }
        writer.seal(&pm);
        pm.fence();
        pm
    }

    #[test]
    fn every_mode_makes_every_append_durable_after_seal_and_fence() {
        let appends: Vec<(u64, Vec<u8>)> = vec![
            (100, vec![1; 4]),
            (104, vec![2; 30]),
            (134, vec![3; 200]),
            (1024, vec![4; 64]),
            (2000, vec![5; 9]),
        ];
        for mode in LogMode::ALL {
            let pm = append_all(mode, &appends);
            let durable = pm.durable_image();
            for (at, bytes) in &appends {
                let at = *at as usize;
                assert_eq!(
                    &durable[at..at + bytes.len()],
                    &bytes[..],
                    "{mode:?} at {at}"
                );
            }
            assert!(!pm.is_pending(0, 8192), "{mode:?} left stores pending");
        }
    }

    #[test]
    fn packed_mode_streams_only_whole_lines() {
        let pm = append_all(LogMode::Packed, &[(64, vec![7; 10]), (74, vec![8; 10])]);
        let counters = pmem::Persist::stats(&pm).snapshot();
        assert_eq!(
            counters.nt_bytes[WriteClass::Log.index()],
            64,
            "one padded line"
        );
        assert_eq!(counters.flushed_lines, 0);
    }

    #[test]
    fn cacheable_mode_flushes_each_dirty_line_once() {
        let pm = append_all(
            LogMode::Cacheable,
            &[(0, vec![1; 8]), (8, vec![2; 8]), (16, vec![3; 100])],
        );
        assert_eq!(pmem::Persist::stats(&pm).snapshot().flushed_lines, 2);
    }

    #[test]
    fn mixed_modes_in_one_line_never_stream_a_stale_copy() {
        // Auto packs a short append into a staged line, then streams a long one: the long
        // append must not be overwritten later by the staged copy of the line.
        let pm = SimPm::new(4096, SimConfig::default());
        let mut writer = LogWriter::new(LogMode::Auto);
        writer.append(&pm, 0, &[1; 16]);
        writer.append(&pm, 16, &[2; 100]);
        writer.append(&pm, 116, &[3; 4]);
        writer.seal(&pm);
        pm.fence();
        let image = pm.durable_image();
        assert_eq!(&image[..16], &[1; 16]);
        assert_eq!(&image[16..116], &[2; 100]);
        assert_eq!(&image[116..120], &[3; 4]);
    }

    #[test]
    fn line_records_are_durable_after_a_fence_in_every_mode() {
        for mode in LogMode::ALL {
            let pm = SimPm::new(4096, SimConfig::default());
            let mut writer = LogWriter::new(mode);
            for (at, len, byte) in [(0u64, 40usize, 1u8), (64, 64, 2), (128, 130, 3)] {
                let mut record = vec![byte; len];
                writer.append_line_record(&pm, at, &mut record);
            }
            pm.fence();
            let image = pm.durable_image();
            assert_eq!(&image[..40], &[1; 40], "{mode:?}");
            assert_eq!(&image[64..128], &[2; 64], "{mode:?}");
            assert_eq!(&image[128..258], &[3; 130], "{mode:?}");
            assert!(!pm.is_pending(0, 4096), "{mode:?} left stores pending");
        }
    }

    #[test]
    fn auto_line_records_store_exactly_their_bytes_and_packed_ones_whole_lines() {
        let stored = |mode: LogMode| {
            let pm = SimPm::new(4096, SimConfig::default());
            pm.write(32, &[7; 32], WriteClass::Log);
            pm.persist(32, 32);
            let mut writer = LogWriter::new(mode);
            writer.append_line_record(&pm, 0, &mut vec![5u8; 32]);
            pm.fence();
            let counters = pmem::Persist::stats(&pm).snapshot();
            let log = WriteClass::Log.index();
            let image = pm.durable_image();
            (counters.nt_bytes[log], image[32..64].to_vec())
        };
        assert_eq!(
            stored(LogMode::Auto),
            (32, vec![7; 32]),
            "the rest of the line kept"
        );
        assert_eq!(
            stored(LogMode::Packed),
            (64, vec![0; 32]),
            "padded to the line"
        );
    }

    #[test]
    fn packed_append_mid_line_keeps_earlier_bytes() {
        let pm = SimPm::new(4096, SimConfig::default());
        let mut writer = LogWriter::new(LogMode::Packed);
        writer.append(&pm, 0, &[9; 20]);
        writer.seal(&pm);
        pm.fence();
        let mut writer = LogWriter::new(LogMode::Packed);
        writer.append(&pm, 20, &[6; 20]);
        writer.seal(&pm);
        pm.fence();
        let image = pm.durable_image();
        assert_eq!(&image[..20], &[9; 20]);
        assert_eq!(&image[20..40], &[6; 20]);
    }
}
