//! Checked words: 8-byte values updated in place with one failure-atomic store.
//!
//! The low 48 bits hold the value, the high 16 bits a check computed from the value and the
//! word's own pool offset (CRC-32 of both, truncated). A word copied to the wrong place, a
//! stray store or an all-zero line therefore fails to open instead of reading as a plausible
//! epoch. The same idea as the transaction engines' checked words (`docs/tx-format.md`
//! §2.1), re-derived here so this crate depends only on `pmem`.

#![forbid(unsafe_code)]

use crate::error::NvtError;

/// Bits available for the value.
pub const VALUE_BITS: u32 = 48;
/// Largest value a checked word can hold.
pub const MAX_VALUE: u64 = (1 << VALUE_BITS) - 1;

fn check(value: u64, offset: u64) -> u64 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&offset.to_le_bytes());
    hasher.update(&value.to_le_bytes());
    u64::from(hasher.finalize() & 0xffff)
}

/// Encodes `value` for the word at pool offset `offset`.
pub fn seal(value: u64, offset: u64) -> u64 {
    assert!(
        value <= MAX_VALUE,
        "checked word value {value:#x} exceeds 48 bits"
    );
    value | check(value, offset) << VALUE_BITS
}

/// Decodes the word read at `offset`; `what` names it in the error.
pub fn open(word: u64, offset: u64, what: &'static str) -> Result<u64, NvtError> {
    let value = word & MAX_VALUE;
    if word >> VALUE_BITS != check(value, offset) {
        return Err(NvtError::Corrupted(format!(
            "{what} at {offset:#x} fails its check ({word:#018x})"
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_binding_to_the_offset() {
        for value in [0, 1, 42, MAX_VALUE] {
            let word = seal(value, 0x1040);
            assert_eq!(open(word, 0x1040, "w").unwrap(), value);
            assert!(open(word, 0x1080, "w").is_err(), "moved word must fail");
        }
    }

    #[test]
    fn zero_word_is_not_a_valid_epoch() {
        // An unwritten (all-zero) word must not decode as epoch 0 at the offsets we use.
        for offset in [0x1040u64, 0x1080, 0x2040, 0x2080] {
            assert!(open(0, offset, "w").is_err());
        }
    }

    #[test]
    #[should_panic(expected = "exceeds 48 bits")]
    fn oversized_value_is_a_bug() {
        seal(MAX_VALUE + 1, 0);
    }
}
