//! Heap actions: the persistent changes an allocation or free makes, carried in a
//! transaction's commit record and applied at commit (and again by recovery).
//!
//! Every action is idempotent. Recovery replays committed records in commit order, always
//! including every later record, so applying a record again gives the same final state as
//! applying the sequence once.

use crate::HeapError;
use crate::layout::{BITMAP_WORD, MARKER_WORD, RUN_MARKER_LEN, SIZE_CLASSES, run_marker};
use pmem::checked::{self, MAX_VALUE};
use pmem::{Persist, WriteClass};

/// Encoded size of one action.
pub const ACTION_LEN: usize = 16;

/// One persistent change to heap metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Store `value` at `addr`.
    Set {
        /// Absolute offset (8-byte aligned).
        addr: u64,
        /// New word.
        value: u64,
    },
    /// Set the bits of `mask` in the checked bitmap word at `addr`.
    Or {
        /// Absolute offset (8-byte aligned).
        addr: u64,
        /// Bits to set.
        mask: u64,
    },
    /// Clear the bits of `mask` in the checked bitmap word at `addr`.
    AndNot {
        /// Absolute offset (8-byte aligned).
        addr: u64,
        /// Bits to clear.
        mask: u64,
    },
    /// Zero `len` bytes at `addr`.
    Zero {
        /// Absolute offset (8-byte aligned).
        addr: u64,
        /// Bytes (a multiple of 8).
        len: u64,
    },
    /// Make the chunk at `addr` an empty run of class `class`: its marker, then `words`
    /// bitmap words holding no unit (each a checked word of 0).
    InitRun {
        /// Absolute offset of the chunk.
        addr: u64,
        /// Size class.
        class: u8,
        /// Bitmap words.
        words: u64,
    },
}

const OP_SHIFT: u32 = 56;
const ADDR_MASK: u64 = (1 << OP_SHIFT) - 1;

impl Action {
    fn parts(self) -> (u64, u64, u64) {
        match self {
            Action::Set { addr, value } => (1, addr, value),
            Action::Or { addr, mask } => (2, addr, mask),
            Action::AndNot { addr, mask } => (3, addr, mask),
            Action::Zero { addr, len } => (4, addr, len),
            Action::InitRun { addr, class, words } => (5, addr, u64::from(class) | words << 8),
        }
    }

    /// The absolute offset the action changes.
    pub fn addr(self) -> u64 {
        self.parts().1
    }

    /// Bytes the action changes.
    pub fn len(self) -> u64 {
        match self {
            Action::Zero { len, .. } => len,
            Action::InitRun { words, .. } => RUN_MARKER_LEN + 8 * words,
            _ => 8,
        }
    }

    /// Whether the action changes nothing (a zero-length `Zero`).
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The 16-byte encoding: op code in the top byte of the first word, then the operand
    /// (`InitRun`: the class in its low byte, the bitmap words above).
    pub fn encode(self) -> [u8; ACTION_LEN] {
        let (op, addr, operand) = self.parts();
        debug_assert!(
            addr <= ADDR_MASK,
            "heap action address {addr:#x} needs more than 56 bits"
        );
        let mut bytes = [0u8; ACTION_LEN];
        bytes[..8].copy_from_slice(&((op << OP_SHIFT) | addr).to_le_bytes());
        bytes[8..].copy_from_slice(&operand.to_le_bytes());
        bytes
    }

    /// Decodes an action, checking that it stays inside a region of `pool_len` bytes.
    pub fn decode(bytes: &[u8; ACTION_LEN], pool_len: u64) -> Result<Self, HeapError> {
        let first = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        let operand = u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes"));
        let addr = first & ADDR_MASK;
        let action = match first >> OP_SHIFT {
            1 => Action::Set {
                addr,
                value: operand,
            },
            2 => Action::Or {
                addr,
                mask: operand,
            },
            3 => Action::AndNot {
                addr,
                mask: operand,
            },
            4 => Action::Zero { addr, len: operand },
            5 => Action::InitRun {
                addr,
                class: operand as u8,
                words: operand >> 8,
            },
            op => return Err(HeapError::Corrupted(format!("unknown heap action {op}"))),
        };
        if !action.operand_is_valid() {
            return Err(HeapError::Corrupted(format!(
                "heap action {action:?} has an invalid operand"
            )));
        }
        let in_bounds = addr
            .checked_add(action.len())
            .is_some_and(|end| end <= pool_len);
        if !in_bounds || !addr.is_multiple_of(8) || !action.len().is_multiple_of(8) {
            return Err(HeapError::Corrupted(format!(
                "heap action {action:?} out of bounds"
            )));
        }
        Ok(action)
    }

    /// Masks fit a bitmap word's 48 value bits; a run has a known class and at least one
    /// bitmap word (and fewer than a chunk can hold).
    fn operand_is_valid(self) -> bool {
        match self {
            Action::Or { mask, .. } | Action::AndNot { mask, .. } => mask <= MAX_VALUE,
            Action::InitRun { class, words, .. } => {
                usize::from(class) < SIZE_CLASSES.len() && (1..1 << 24).contains(&words)
            }
            Action::Set { .. } | Action::Zero { .. } => true,
        }
    }

    /// Applies the action through the seam and flushes what it changed (no fence).
    pub fn apply<P: Persist>(self, pm: &P) {
        self.store(pm);
        pm.flush(self.addr(), self.len());
    }

    /// Applies the action through the seam without writing it back (the caller flushes
    /// `addr()..addr() + len()` later).
    pub fn store<P: Persist>(self, pm: &P) {
        match self {
            Action::Set { addr, value } => pm.write_u64(addr, value, WriteClass::Meta),
            Action::Or { addr, mask } => update_bitmap_word(pm, addr, |bits| bits | mask),
            Action::AndNot { addr, mask } => update_bitmap_word(pm, addr, |bits| bits & !mask),
            Action::Zero { addr, len } => pm.fill(addr, len, 0, WriteClass::Meta),
            Action::InitRun { addr, class, words } => {
                store_checked(pm, addr, run_marker(class), MARKER_WORD);
                for word in 0..words {
                    let at = addr + RUN_MARKER_LEN + 8 * word;
                    store_checked(pm, at, 0, BITMAP_WORD);
                }
            }
        }
    }
}

/// Read-modify-writes the checked bitmap word at `addr`, as one 8-byte store. A word that
/// fails its check is left as it is: sealing a new value over it would turn damage into a
/// plausible bitmap, and the next open (or a deep check) must still see it. The engine's
/// DRAM index, not this word, decides allocations until then.
fn update_bitmap_word<P: Persist>(pm: &P, addr: u64, change: impl FnOnce(u64) -> u64) {
    if let Ok(bits) = checked::open(pm.read_u64(addr), addr, BITMAP_WORD) {
        store_checked(pm, addr, change(bits) & MAX_VALUE, BITMAP_WORD);
    }
}

fn store_checked<P: Persist>(pm: &P, addr: u64, value: u64, what: &'static str) {
    if let Ok(word) = checked::seal(value, addr, what) {
        pm.write_u64(addr, word, WriteClass::Meta);
    }
}

/// Makes `actions` durable now, in order: each is applied, written back and fenced before
/// the next. Run creation needs the order (its bitmap reads as zeros before its descriptor
/// says "run"), so a crash between two actions leaves a prefix, which is consistent. The
/// caller serialises this with its other action stores: actions read-modify-write bitmap
/// words that other blocks share.
pub fn apply_durably<P: Persist>(pm: &P, actions: &[Action]) {
    for action in actions {
        action.apply(pm);
        pm.fence();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_round_trip_and_reject_garbage() {
        let actions = [
            Action::Set { addr: 64, value: 7 },
            Action::Or {
                addr: 128,
                mask: 0b1010,
            },
            Action::AndNot { addr: 136, mask: 1 },
            Action::Zero { addr: 192, len: 64 },
            Action::InitRun {
                addr: 256,
                class: 3,
                words: 2,
            },
        ];
        for action in actions {
            assert_eq!(
                Action::decode(&action.encode(), 4096).expect("decodes"),
                action
            );
        }
        assert!(
            Action::decode(
                &Action::Set {
                    addr: 4096,
                    value: 0
                }
                .encode(),
                4096
            )
            .is_err()
        );
        assert!(Action::decode(&Action::Set { addr: 3, value: 0 }.encode(), 4096).is_err());
        assert!(Action::decode(&[0xFF; ACTION_LEN], 4096).is_err());
        let wide = Action::Or {
            addr: 64,
            mask: 1 << 48,
        };
        assert!(Action::decode(&wide.encode(), 4096).is_err(), "48 bits");
        let unknown_class = Action::InitRun {
            addr: 64,
            class: 20,
            words: 1,
        };
        assert!(Action::decode(&unknown_class.encode(), 4096).is_err());
    }

    #[test]
    fn bitmap_actions_keep_words_checked_and_never_reseal_a_damaged_one() {
        let pm = crashsim::SimPm::new(4096, Default::default());
        let run = Action::InitRun {
            addr: 128,
            class: 0,
            words: 2,
        };
        run.apply(&pm);
        let word = 136;
        Action::Or {
            addr: word,
            mask: 0b101,
        }
        .apply(&pm);
        Action::AndNot {
            addr: word,
            mask: 1,
        }
        .apply(&pm);
        assert_eq!(checked::open(pm.read_u64(word), word, "w"), Ok(0b100));
        assert_eq!(checked::open(pm.read_u64(144), 144, "w"), Ok(0));
        let damaged = pm.read_u64(word) ^ (1 << 7);
        pm.write_u64(word, damaged, WriteClass::Meta);
        Action::Or {
            addr: word,
            mask: 1,
        }
        .apply(&pm);
        assert_eq!(pm.read_u64(word), damaged, "damage stays visible");
    }
}
