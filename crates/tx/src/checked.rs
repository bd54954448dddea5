//! Self-checked 8-byte words: a 48-bit value and a 16-bit check bound to the word's address,
//! stored with one failure-atomic store. Used for the words an engine updates in place (the
//! redo watermark, the undo lanes' generation and applied counters), so a flipped bit is a
//! `Corrupted` error instead of silently replaying, skipping or re-applying log records.

use crate::api::{TxError, TxResult};

const VALUE_BITS: u32 = 48;
/// Largest value a checked word holds.
pub const MAX_VALUE: u64 = (1 << VALUE_BITS) - 1;

fn check(value: u64, addr: u64) -> u64 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&value.to_le_bytes());
    hasher.update(&addr.to_le_bytes());
    u64::from(hasher.finalize() as u16)
}

/// The stored form of `value` (at most [`MAX_VALUE`]) at absolute offset `addr`.
pub fn seal(value: u64, addr: u64) -> u64 {
    debug_assert!(
        value <= MAX_VALUE,
        "checked word value {value} exceeds 48 bits"
    );
    (check(value, addr) << VALUE_BITS) | (value & MAX_VALUE)
}

/// The value of the stored word at `addr`, or `Corrupted` naming `what`.
pub fn open(word: u64, addr: u64, what: &str) -> TxResult<u64> {
    let value = word & MAX_VALUE;
    if word >> VALUE_BITS != check(value, addr) {
        return Err(TxError::Corrupted(format!(
            "{what} at {addr:#x} fails its check ({word:#x})"
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_catches_every_single_bit_flip() {
        for (value, addr) in [(0, 64), (1, 4096), (MAX_VALUE, 8), (123_456_789, 1 << 30)] {
            let word = seal(value, addr);
            assert_eq!(open(word, addr, "w").expect("valid"), value);
            assert!(open(word, addr + 8, "w").is_err(), "bound to its address");
            for bit in 0..64 {
                assert!(
                    open(word ^ (1 << bit), addr, "w").is_err(),
                    "flip of bit {bit} of {value}"
                );
            }
        }
    }
}
