//! The persistent state: the PM data image (word → value), each core's PM log region (as
//! structured records), and per-core persistent commit registers.
//!
//! Only value-tracking runs (crash checks) keep values and records; timing runs keep nothing
//! here, so a long trace costs no memory for them.

use crate::mem::Payload;
use crate::util::FastMap;
use serde::{Deserialize, Serialize};
use trace::{Event, Trace};

/// What a log record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RecordKind {
    /// Metadata + old word (for rolling back an uncommitted transaction).
    Undo,
    /// Metadata + new word (for replaying a committed one).
    Redo,
    /// Both words.
    UndoRedo,
}

/// One record in a core's PM log region. The byte layout is not modelled (its size is, in the
/// write that carries it); recovery reads these fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRecord {
    /// Kind.
    pub kind: RecordKind,
    /// Transaction id (per core, from 1).
    pub txid: u64,
    /// Word address (8-byte aligned).
    pub word: u64,
    /// Old word (undo part).
    pub old: u64,
    /// New word (redo part).
    pub new: u64,
}

/// The persistent state of the machine.
#[derive(Clone, Debug)]
pub struct PmImage {
    tracking: bool,
    words: FastMap<u64, u64>,
    initial: FastMap<u64, u64>,
    /// Each core's log region, in the order records became persistent.
    pub logs: Vec<Vec<LogRecord>>,
    /// Each core's persistent "last committed transaction id" register (0 = none yet). It lives
    /// at the memory controller in the persistence domain (ADR for Base, the battery for Silo),
    /// like Silo's log head/tail registers; a design writes it at its commit point.
    pub committed: Vec<u64>,
}

impl PmImage {
    /// An image for `cores` cores; `initial` holds the words the trace touches, with their
    /// values before the trace (`None`: a timing run that tracks nothing).
    pub fn new(cores: usize, initial: Option<FastMap<u64, u64>>) -> Self {
        let tracking = initial.is_some();
        let initial = initial.unwrap_or_default();
        PmImage {
            tracking,
            words: initial.clone(),
            initial,
            logs: vec![Vec::new(); cores],
            committed: vec![0; cores],
        }
    }

    /// Whether values and records are kept.
    pub fn tracking(&self) -> bool {
        self.tracking
    }

    /// A word's persistent value (0 for words the trace never stores to).
    pub fn read(&self, word: u64) -> u64 {
        self.words.get(&word).copied().unwrap_or(0)
    }

    /// Sets a word's persistent value (recovery, or data reaching the persistence domain).
    pub fn write(&mut self, word: u64, value: u64) {
        if self.tracking {
            self.words.insert(word, value);
        }
    }

    /// A word's value before the trace ran.
    pub fn initial(&self, word: u64) -> u64 {
        self.initial.get(&word).copied().unwrap_or(0)
    }

    /// Applies the data words of a write to byte address `addr` (called when the MC
    /// accepts it).
    pub fn apply(&mut self, addr: u64, data: &Payload) {
        if !self.tracking || data.mask == 0 {
            return;
        }
        let base = addr & !63;
        for i in 0..8 {
            if data.mask & (1 << i) != 0 {
                self.words.insert(base + 8 * i as u64, data.words[i]);
            }
        }
    }

    /// Appends a record to core `core`'s log region.
    pub fn append(&mut self, core: usize, record: LogRecord) {
        if self.tracking {
            self.logs[core].push(record);
        }
    }

    /// Every word whose persistent value differs from its initial value.
    pub fn changed_words(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.words
            .iter()
            .filter(|(w, v)| self.initial.get(w) != Some(v))
            .map(|(&w, &v)| (w, v))
    }
}

/// The architectural (newest, coherent) value of every word the trace stores to.
#[derive(Clone, Debug, Default)]
pub struct Values {
    words: FastMap<u64, u64>,
}

impl Values {
    /// Values starting from the initial image.
    pub fn new(initial: &FastMap<u64, u64>) -> Self {
        Values {
            words: initial.clone(),
        }
    }

    /// A word's current value.
    #[inline]
    pub fn get(&self, word: u64) -> u64 {
        self.words.get(&word).copied().unwrap_or(0)
    }

    /// Sets a word.
    #[inline]
    pub fn set(&mut self, word: u64, value: u64) {
        self.words.insert(word, value);
    }

    /// The current values of the words of 64 B line `line` the trace stores to.
    pub fn line(&self, line: u64) -> Payload {
        let mut p = Payload::default();
        for i in 0..8 {
            if let Some(&v) = self.words.get(&((line << 6) + 8 * i as u64)) {
                p.mask |= 1 << i;
                p.words[i] = v;
            }
        }
        p
    }
}

/// Merges the bytes of a `size`-byte store piece at `addr` (value in the low bytes of `piece`)
/// into `word`.
#[inline]
pub fn merge_piece(word: u64, addr: u64, size: u8, piece: u64) -> u64 {
    let mask = piece_mask(addr, size);
    (word & !mask) | ((piece << ((addr % 8) * 8)) & mask)
}

/// The bits of its word that a store piece covers.
#[inline]
pub fn piece_mask(addr: u64, size: u8) -> u64 {
    let low = if size >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * u64::from(size))) - 1
    };
    low << ((addr % 8) * 8)
}

/// The initial value of every word the first `cores` streams store to: each byte is taken
/// from the `old` value of the first store that covers it (bytes never stored to are 0).
pub fn initial_words(trace: &Trace, cores: usize) -> FastMap<u64, u64> {
    let mut known: FastMap<u64, (u64, u64)> = FastMap::default();
    for stream in 0..cores.min(trace.cores()) {
        for event in trace.events(stream) {
            if let Event::Store {
                addr, size, old, ..
            } = event
            {
                let (value, mask) = known.entry(addr & !7).or_insert((0, 0));
                let fresh = piece_mask(addr, size) & !*mask;
                *value = (*value & !fresh) | (merge_piece(0, addr, size, old) & fresh);
                *mask |= fresh;
            }
        }
    }
    known.into_iter().map(|(w, (v, _))| (w, v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use trace::{Encoder, TraceMeta};

    #[test]
    fn pieces_merge_into_words() {
        assert_eq!(
            merge_piece(0x1111_1111_1111_1111, 2, 2, 0xABCD),
            0x1111_1111_ABCD_1111
        );
        assert_eq!(merge_piece(5, 8, 8, 9), 9);
        assert_eq!(
            merge_piece(0, 7, 1, 0x1FF),
            0xFF00_0000_0000_0000,
            "extra bits are masked"
        );
    }

    #[test]
    fn initial_words_take_the_first_old_bytes() {
        let mut e = Encoder::default();
        for ev in [
            Event::Store {
                addr: 8,
                size: 8,
                old: 0x1122_3344_5566_7788,
                new: 1,
            },
            Event::Store {
                addr: 8,
                size: 8,
                old: 1,
                new: 2,
            },
            Event::Store {
                addr: 16,
                size: 2,
                old: 0xAAAA,
                new: 0,
            },
            Event::Store {
                addr: 20,
                size: 4,
                old: 0xBBBB_BBBB,
                new: 0,
            },
        ] {
            e.push(&ev);
        }
        let mut t = Trace::new(TraceMeta::default());
        t.add_stream(0, e);
        let init = initial_words(&t, 1);
        assert_eq!(init[&8], 0x1122_3344_5566_7788);
        assert_eq!(init[&16], 0xBBBB_BBBB_0000_AAAA);
    }
}
