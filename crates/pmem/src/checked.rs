//! Self-checked 8-byte words: a 48-bit value and a 16-bit check bound to the word's own pool
//! offset, stored with one failure-atomic 8-byte store.
//!
//! Persistent structures use them for the words they update in place (a redo watermark, an
//! undo lane's generation, a journal's generation, a commit epoch): a flipped bit, a word
//! copied to the wrong place, a stray store or an all-zero line then fails to open instead of
//! reading as a plausible value.
//!
//! Stored form (little-endian `u64`): bits 0..48 hold the value; bits 48..64 hold the low 16
//! bits of CRC-32 (IEEE) over the value's 8 little-endian bytes followed by the offset's 8
//! little-endian bytes. Every single-bit flip is caught (a flip in the value changes the CRC
//! in its low 16 bits, a flip in the check no longer matches).

use thiserror::Error;

/// Bits available for the value.
pub const VALUE_BITS: u32 = 48;
/// Largest value a checked word holds.
pub const MAX_VALUE: u64 = (1 << VALUE_BITS) - 1;

/// Why a checked word could not be sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CheckedError {
    /// The stored word at `offset` does not carry the check of its value and offset.
    #[error("{what} at {offset:#x} fails its check ({word:#018x})")]
    BadCheck {
        /// What the word is, for the message ("redo watermark", "journal generation").
        what: &'static str,
        /// The word's pool offset.
        offset: u64,
        /// The word as read.
        word: u64,
    },
    /// `value` does not fit the 48 bits of a checked word.
    #[error("{what} value {value:#x} exceeds the 48 bits of a checked word")]
    TooLarge {
        /// What the word is.
        what: &'static str,
        /// The value that does not fit.
        value: u64,
    },
}

fn check(value: u64, offset: u64) -> u64 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&value.to_le_bytes());
    hasher.update(&offset.to_le_bytes());
    u64::from(hasher.finalize() & 0xffff)
}

/// The stored form of `value` for the word at pool offset `offset`, or `TooLarge` when the
/// value needs more than 48 bits (checked in every build: a masked value would be persisted
/// with a check it cannot pass).
pub fn seal(value: u64, offset: u64, what: &'static str) -> Result<u64, CheckedError> {
    if value > MAX_VALUE {
        return Err(CheckedError::TooLarge { what, value });
    }
    Ok((check(value, offset) << VALUE_BITS) | value)
}

/// The value of `word` read at pool offset `offset`; `what` names it in the error.
pub fn open(word: u64, offset: u64, what: &'static str) -> Result<u64, CheckedError> {
    let value = word & MAX_VALUE;
    if word >> VALUE_BITS != check(value, offset) {
        return Err(CheckedError::BadCheck { what, offset, word });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_catches_every_single_bit_flip() {
        for (value, offset) in [(0, 64), (1, 4096), (MAX_VALUE, 8), (123_456_789, 1 << 30)] {
            let word = seal(value, offset, "w").expect("fits");
            assert_eq!(open(word, offset, "w"), Ok(value));
            assert!(open(word, offset + 8, "w").is_err(), "bound to its offset");
            for bit in 0..64 {
                assert!(
                    open(word ^ (1 << bit), offset, "w").is_err(),
                    "flip of bit {bit} of {value}"
                );
            }
        }
    }

    #[test]
    fn values_past_48_bits_are_refused_in_every_build() {
        assert_eq!(
            seal(MAX_VALUE + 1, 0, "w"),
            Err(CheckedError::TooLarge {
                what: "w",
                value: MAX_VALUE + 1
            })
        );
    }

    #[test]
    fn the_stored_form_is_stable() {
        // Pinned so an accidental change of the on-media form (hash order, bit placement)
        // fails here and not only against old pools.
        assert_eq!(seal(0, 0, "w").expect("fits"), 0x4b55_0000_0000_0000);
    }

    #[test]
    fn an_all_zero_word_is_not_a_valid_value_at_typical_offsets() {
        for offset in [0x1040u64, 0x1080, 0x2040, 0x2080, 0x1100, 64] {
            assert!(open(0, offset, "w").is_err());
        }
    }
}
