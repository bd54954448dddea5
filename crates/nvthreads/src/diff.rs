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

/// Bytes compared with one `memcmp` inside a page known to differ: a page changed in a few
/// places is mostly equal chunks, each skipped at `memcmp`'s speed (about 8 instructions per
/// 64 bytes with AVX2, where the block test below takes about 25).
const CHUNK: usize = 256;

/// Bytes compared as one block inside a differing chunk before looking at words.
const BLOCK: usize = 64;

/// Appends to `out` the maximal runs of bytes where `page` differs from `twin`, in
/// ascending order. An equal page costs one `memcmp`; otherwise skips equal 256-byte chunks
/// (one `memcmp` each), then equal 64-byte blocks inside the others, compares 8 bytes at a
/// time inside differing blocks, and refines to bytes only inside differing words.
pub fn spans(page: &[u8], twin: &[u8], out: &mut Vec<Span>) {
    assert_eq!(page.len(), twin.len(), "page and twin differ in size");
    if page == twin {
        return;
    }
    let mut open: Option<usize> = None;
    let chunks_end = page.len() / CHUNK * CHUNK;
    for at in (0..chunks_end).step_by(CHUNK) {
        if page[at..at + CHUNK] == twin[at..at + CHUNK] {
            close(&mut open, at, out);
            continue;
        }
        blocks_into(page, twin, at, at + CHUNK, &mut open, out);
    }
    let blocks_end = page.len() / BLOCK * BLOCK;
    blocks_into(page, twin, chunks_end, blocks_end, &mut open, out);
    let words_end = blocks_end + (page.len() - blocks_end) / 8 * 8;
    words_into(page, twin, blocks_end, words_end, &mut open, out);
    bytes_into(page, twin, words_end, page.len(), &mut open, out);
    close(&mut open, page.len(), out);
}

/// The runs of `[from, to)` (a multiple of [`BLOCK`] bytes), block by block.
fn blocks_into(
    page: &[u8],
    twin: &[u8],
    from: usize,
    to: usize,
    open: &mut Option<usize>,
    out: &mut Vec<Span>,
) {
    for at in (from..to).step_by(BLOCK) {
        if block_differs(page, twin, at) {
            words_into(page, twin, at, at + BLOCK, open, out);
        } else {
            close(open, at, out);
        }
    }
}

/// Whether the [`BLOCK`] (64) bytes at `at` differ: the XORs of their words ORed together,
/// in one branch-free pass (a slice comparison would call `memcmp` once per block, which
/// costs more than comparing 64 bytes).
pub(crate) fn block_differs(page: &[u8], twin: &[u8], at: usize) -> bool {
    let (mine, before) = (&page[at..at + BLOCK], &twin[at..at + BLOCK]);
    mine.chunks_exact(8)
        .zip(before.chunks_exact(8))
        .fold(0, |acc, (a, b)| acc | (word(a) ^ word(b)))
        != 0
}

/// The 8 bytes of `bytes` (exactly 8 long) as a word.
fn word(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8 bytes"))
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

/// The runs of `[from, to)` (a multiple of 8 bytes), word by word: an equal word closes the
/// open run, a word changed in all 8 bytes extends (or opens) it, and only a word changed in
/// part is looked at byte by byte.
fn words_into(
    page: &[u8],
    twin: &[u8],
    from: usize,
    to: usize,
    open: &mut Option<usize>,
    out: &mut Vec<Span>,
) {
    for at in (from..to).step_by(8) {
        let changed = word(&page[at..at + 8]) ^ word(&twin[at..at + 8]);
        if changed == 0 {
            close(open, at, out);
        } else if all_bytes_nonzero(changed) {
            open.get_or_insert(at);
        } else {
            bytes_into(page, twin, at, at + 8, open, out);
        }
    }
}

/// Whether every byte of `x` is non-zero.
fn all_bytes_nonzero(x: u64) -> bool {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    // Per byte: the high bit of ((b & 0x7f) + 0x7f) | b is set exactly when b != 0 (no
    // carry crosses a byte).
    (((x & LOW7) + LOW7) | x) & !LOW7 == !LOW7
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
    fn all_bytes_nonzero_needs_every_byte() {
        assert!(all_bytes_nonzero(u64::MAX));
        assert!(all_bytes_nonzero(0x0101_0101_0101_0101));
        assert!(all_bytes_nonzero(0x8080_8080_8080_8080));
        for byte in 0..8 {
            assert!(
                !all_bytes_nonzero(!(0xff << (byte * 8))),
                "byte {byte} zero"
            );
            assert!(!all_bytes_nonzero(0x80 << (byte * 8)), "only byte {byte}");
        }
    }

    /// Pages changed in a few places, as a section leaves them: runs across chunk, block and
    /// word boundaries, whole and partial words, in pages of every tail length.
    #[test]
    fn matches_the_naive_diff_on_sparsely_changed_pages() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let edges = [0, 1, 7, 8, 63, 64, 255, 256, 257, 511, 512, 4088, 4095];
        for round in 0..2000 {
            let (twin, mut page) = random_twin(&mut rng, round % 2 == 0, 1100);
            let len = twin.len();
            for _ in 0..rng.random_range(1..6) {
                let start = if rng.random_bool(0.5) {
                    edges[rng.random_range(0..edges.len())].min(len - 1)
                } else {
                    rng.random_range(0..len)
                };
                let end = (start + rng.random_range(1..20)).min(len);
                for byte in &mut page[start..end] {
                    *byte = byte.wrapping_add(rng.random_range(1..=255));
                }
            }
            assert_same_as_naive(&page, &twin, round);
        }
    }

    #[test]
    fn matches_the_naive_diff_on_random_pages() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for round in 0..300 {
            let (twin, mut page) = random_twin(&mut rng, round % 3 == 0, 300);
            let density = rng.random_range(0.0..1.0);
            for byte in page.iter_mut() {
                if rng.random_bool(density) {
                    *byte = byte.wrapping_add(rng.random_range(1..=255));
                }
            }
            assert_same_as_naive(&page, &twin, round);
        }
    }

    /// A random twin (a whole page, or shorter than `short_below` bytes) and an equal copy.
    fn random_twin(rng: &mut impl Rng, whole: bool, short_below: usize) -> (Vec<u8>, Vec<u8>) {
        let len = if whole {
            4096
        } else {
            rng.random_range(1..short_below)
        };
        let twin: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        (twin.clone(), twin)
    }

    fn assert_same_as_naive(page: &[u8], twin: &[u8], round: usize) {
        let mut out = Vec::new();
        spans(page, twin, &mut out);
        assert_eq!(out, naive(page, twin), "round {round}");
    }
}
