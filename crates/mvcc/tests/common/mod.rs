//! Helpers shared by the MVCC engine's test binaries.

use tx::{Tx, TxResult};

/// Words of one account: every word holds the balance, so a torn write (some words from one
/// commit, some from another) shows as unequal words.
pub const ACCOUNT_WORDS: u64 = 12;

/// Reads the account at root offset `at`: its balance, or its words if they are not all
/// equal (torn).
pub fn read_account_words<T: Tx>(tx: &mut T, at: u64) -> TxResult<Result<u64, Vec<u64>>> {
    let root = tx.root::<()>();
    let mut bytes = [0u8; (ACCOUNT_WORDS * 8) as usize];
    tx.read(root, at, &mut bytes)?;
    let words: Vec<u64> = bytes
        .chunks(8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8")))
        .collect();
    if words.iter().any(|&w| w != words[0]) {
        return Ok(Err(words));
    }
    Ok(Ok(words[0]))
}

/// Writes `balance` to every word of the account at root offset `at`.
pub fn write_account_words<T: Tx>(tx: &mut T, at: u64, balance: u64) -> TxResult<()> {
    let root = tx.root::<()>();
    let bytes: Vec<u8> = (0..ACCOUNT_WORDS)
        .flat_map(|_| balance.to_le_bytes())
        .collect();
    tx.write(root, at, &bytes)
}

/// Word `i` of a logged operation's arguments (little-endian `u64`s; the caller checked the
/// length).
pub fn arg_word(args: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(args[8 * i..8 * i + 8].try_into().expect("8 bytes"))
}
