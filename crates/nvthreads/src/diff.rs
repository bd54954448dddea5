//! Byte-precise differences between a dirty page and its twin.
//!
//! A merge writes back only the bytes this process changed, so two processes that wrote
//! disjoint bytes of one page (false sharing, or data protected by different locks) both
//! keep their updates. Runs are never widened over unchanged bytes: a widened run would
//! write this process's stale copy of bytes another process may have changed since.

#![forbid(unsafe_code)]

/// A changed byte range `[start, start + len)` within a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// First changed byte.
    pub start: usize,
    /// Number of bytes.
    pub len: usize,
}

/// Bytes compared as one block before looking at words (a page written in a few places is
/// mostly equal blocks, each skipped by one vectorised comparison).
const BLOCK: usize = 64;

/// Appends to `out` the maximal runs of bytes where `page` differs from `twin`, in
/// ascending order. An equal page costs one `memcmp`; otherwise skips equal 64-byte blocks,
/// compares 8 bytes at a time inside the others, and refines to bytes only inside differing
/// words.
pub fn spans(page: &[u8], twin: &[u8], out: &mut Vec<Span>) {
    assert_eq!(page.len(), twin.len(), "page and twin differ in size");
    if page == twin {
        return;
    }
    let mut open: Option<usize> = None;
    let blocks = page.len() / BLOCK;
    for block in 0..blocks {
        let at = block * BLOCK;
        if !block_differs(page, twin, at) {
            close(&mut open, at, out);
            continue;
        }
        words_into(page, twin, at, at + BLOCK, &mut open, out);
    }
    let tail = blocks * BLOCK;
    let words_end = tail + (page.len() - tail) / 8 * 8;
    words_into(page, twin, tail, words_end, &mut open, out);
    bytes_into(page, twin, words_end, page.len(), &mut open, out);
    close(&mut open, page.len(), out);
}

/// Whether the [`BLOCK`] bytes at `at` differ: the XORs of their words ORed together, in
/// one branch-free pass the compiler vectorises (a slice comparison would call `memcmp`
/// once per block, which costs more than comparing 64 bytes). Only for pages already known
/// to differ: a whole-page `memcmp` is faster for the equal ones.
fn block_differs(page: &[u8], twin: &[u8], at: usize) -> bool {
    let words = |bytes: &[u8]| -> [u64; BLOCK / 8] {
        std::array::from_fn(|i| {
            u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
        })
    };
    let (mine, before) = (words(&page[at..at + BLOCK]), words(&twin[at..at + BLOCK]));
    mine.iter()
        .zip(&before)
        .fold(0, |acc, (a, b)| acc | (a ^ b))
        != 0
}

/// Ends the open run (if any) at `at`.
fn close(open: &mut Option<usize>, at: usize, out: &mut Vec<Span>) {
    if let Some(start) = open.take() {
        out.push(Span {
            start,
            len: at - start,
        });
    }
}

/// The runs of `[from, to)` (a multiple of 8 bytes), word by word.
fn words_into(
    page: &[u8],
    twin: &[u8],
    from: usize,
    to: usize,
    open: &mut Option<usize>,
    out: &mut Vec<Span>,
) {
    for at in (from..to).step_by(8) {
        let a = u64::from_le_bytes(page[at..at + 8].try_into().expect("8 bytes"));
        let b = u64::from_le_bytes(twin[at..at + 8].try_into().expect("8 bytes"));
        if a == b {
            close(open, at, out);
        } else {
            bytes_into(page, twin, at, at + 8, open, out);
        }
    }
}

fn bytes_into(
    page: &[u8],
    twin: &[u8],
    from: usize,
    to: usize,
    open: &mut Option<usize>,
    out: &mut Vec<Span>,
) {
    for at in from..to {
        match (page[at] != twin[at], *open) {
            (true, None) => *open = Some(at),
            (false, Some(start)) => {
                out.push(Span {
                    start,
                    len: at - start,
                });
                *open = None;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn naive(page: &[u8], twin: &[u8]) -> Vec<Span> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < page.len() {
            if page[at] == twin[at] {
                at += 1;
                continue;
            }
            let start = at;
            while at < page.len() && page[at] != twin[at] {
                at += 1;
            }
            out.push(Span {
                start,
                len: at - start,
            });
        }
        out
    }

    #[test]
    fn identical_pages_have_no_runs() {
        let page = vec![7u8; 4096];
        let mut out = Vec::new();
        spans(&page, &page, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn single_bytes_and_word_boundaries() {
        let twin = vec![0u8; 64];
        let mut page = twin.clone();
        page[7] = 1; // last byte of word 0
        page[8] = 1; // first byte of word 1: one run across the boundary
        page[63] = 1;
        let mut out = Vec::new();
        spans(&page, &twin, &mut out);
        assert_eq!(
            out,
            vec![Span { start: 7, len: 2 }, Span { start: 63, len: 1 }]
        );
    }

    #[test]
    fn matches_the_naive_diff_on_random_pages() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for round in 0..300 {
            let len = if round % 3 == 0 {
                4096
            } else {
                rng.random_range(1..300)
            };
            let twin: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            let mut page = twin.clone();
            let density = rng.random_range(0.0..1.0);
            for byte in page.iter_mut() {
                if rng.random_bool(density) {
                    *byte = byte.wrapping_add(rng.random_range(1..=255));
                }
            }
            let mut out = Vec::new();
            spans(&page, &twin, &mut out);
            assert_eq!(out, naive(&page, &twin), "round {round}");
        }
    }
}
