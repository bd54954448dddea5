//! Trace events: what one simulated core does, in program order.

/// One event of a core's stream.
///
/// Stores are split into pieces that never cross an 8-byte boundary, each with the old and
/// the new contents of those bytes (little-endian in the low `size` bytes of the word), so a
/// simulator can detect silent stores and merge log entries per word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Event {
    /// A transaction starts.
    TxBegin,
    /// The running transaction commits.
    TxEnd,
    /// A load of `size` bytes (1..=64; loads may span a whole cache line).
    Load {
        /// Byte address.
        addr: u64,
        /// Bytes read.
        size: u8,
    },
    /// A store of `size` bytes (1..=8) within one 8-byte word.
    Store {
        /// Byte address (`addr % 8 + size <= 8`).
        addr: u64,
        /// Bytes written.
        size: u8,
        /// The bytes' previous contents.
        old: u64,
        /// The bytes' new contents.
        new: u64,
    },
    /// `instructions` non-memory instructions.
    Compute {
        /// Instruction count.
        instructions: u32,
    },
}

impl Event {
    /// Whether a store leaves memory unchanged (a silent store).
    pub fn is_silent_store(&self) -> bool {
        matches!(self, Event::Store { old, new, .. } if old == new)
    }

    /// The 8-byte-aligned word a store or load starts in.
    pub fn word(&self) -> Option<u64> {
        match self {
            Event::Load { addr, .. } | Event::Store { addr, .. } => Some(addr & !7),
            _ => None,
        }
    }

    /// The 64-byte cache line a store or load starts in.
    pub fn line(&self) -> Option<u64> {
        match self {
            Event::Load { addr, .. } | Event::Store { addr, .. } => Some(addr & !63),
            _ => None,
        }
    }
}

/// Splits a store of `old` → `new` bytes at `addr` into [`Event::Store`] pieces that do not
/// cross 8-byte boundaries (the recorder's job; public for tests and synthetic traces).
pub fn store_pieces(addr: u64, old: &[u8], new: &[u8]) -> Vec<Event> {
    debug_assert_eq!(old.len(), new.len());
    let mut events = Vec::with_capacity(new.len() / 8 + 2);
    let mut at = 0usize;
    while at < new.len() {
        let here = addr + at as u64;
        let take = ((8 - here % 8) as usize).min(new.len() - at);
        let word = |bytes: &[u8]| {
            let mut w = [0u8; 8];
            w[..take].copy_from_slice(&bytes[at..at + take]);
            u64::from_le_bytes(w)
        };
        events.push(Event::Store {
            addr: here,
            size: take as u8,
            old: word(old),
            new: word(new),
        });
        at += take;
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_split_at_word_boundaries() {
        let old = [0u8; 12];
        let new: Vec<u8> = (1..=12).collect();
        let pieces = store_pieces(6, &old, &new);
        let shape: Vec<(u64, u8)> = pieces
            .iter()
            .map(|e| match e {
                Event::Store { addr, size, .. } => (*addr, *size),
                other => panic!("not a store: {other:?}"),
            })
            .collect();
        assert_eq!(shape, vec![(6, 2), (8, 8), (16, 2)]);
        assert_eq!(
            pieces[0],
            Event::Store {
                addr: 6,
                size: 2,
                old: 0,
                new: 0x0201
            }
        );
        assert!(!pieces[1].is_silent_store());
        assert!(store_pieces(0, &[5; 8], &[5; 8])[0].is_silent_store());
    }
}
