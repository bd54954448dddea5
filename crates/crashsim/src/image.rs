//! Crash points, crash images and how they are chosen.
//!
//! A [`Snapshot`] is the simulator's state at one crash point: the durable bytes plus every
//! store that may or may not have reached the media. A [`Choice`] picks one crash image
//! from it: for ADR, how long a prefix of each line's pending stores persisted; for eADR, how
//! long a prefix of the global store order persisted; in both, which pending non-temporal
//! chunks persisted. [`choices`] decides which images a harness tests at a point.

use crate::sim::{Chunk, SimMode};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

/// Where in the run a snapshot was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum SnapshotKind {
    /// Just before fence number `n` (1-based, counted over the whole run) takes effect.
    Fence(u64),
    /// Just before `clflush` call number `n` takes effect (clflush is durable on return, so
    /// each one is a crash point of its own).
    Clflush(u64),
    /// At declared durability point number `n` (1-based).
    Durability(u64),
    /// At the end of the run, or when `SimPm::crash_now` was called.
    End,
}

impl fmt::Display for SnapshotKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotKind::Fence(n) => write!(f, "fence #{n}"),
            SnapshotKind::Clflush(n) => write!(f, "clflush #{n}"),
            SnapshotKind::Durability(n) => write!(f, "durability point #{n}"),
            SnapshotKind::End => write!(f, "end of run"),
        }
    }
}

/// A store piece that may or may not have persisted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingChunk {
    /// Absolute offset.
    pub off: u64,
    /// Length (1..=8, never crossing an 8-byte boundary).
    pub len: u8,
    /// Position in the global store order.
    pub seq: u64,
    pub(crate) data: [u8; 8],
}

impl From<&Chunk> for PendingChunk {
    fn from(chunk: &Chunk) -> Self {
        PendingChunk {
            off: chunk.off,
            len: chunk.len,
            seq: chunk.seq,
            data: chunk.data,
        }
    }
}

impl PendingChunk {
    fn apply(&self, image: &mut [u8]) {
        let off = self.off as usize;
        image[off..off + self.len as usize].copy_from_slice(&self.data[..self.len as usize]);
    }
}

/// The simulator's state at one crash point.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Which crash point.
    pub kind: SnapshotKind,
    /// Persistence domain the images follow.
    pub mode: SimMode,
    /// Bytes guaranteed durable.
    pub durable: Arc<Vec<u8>>,
    /// Pending write-back chunks per cache line (line index, chunks in program order).
    pub lines: Vec<(u64, Vec<PendingChunk>)>,
    /// Pending non-temporal chunks, in program order.
    pub nt: Vec<PendingChunk>,
    /// Fences executed so far (including the one about to take effect at a fence point).
    pub fences: u64,
    /// Durability points declared before (and including) this point.
    pub durability_points: u64,
}

/// One crash image of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Choice {
    /// ADR: persisted prefix length for each pending line, in line order.
    /// eADR: a single entry, the persisted prefix of all pending write-back chunks.
    pub prefixes: Vec<u32>,
    /// Whether each pending non-temporal chunk persisted.
    pub nt: Vec<bool>,
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefixes: Vec<String> = self.prefixes.iter().map(u32::to_string).collect();
        let nt: String = self.nt.iter().map(|&b| if b { '1' } else { '0' }).collect();
        write!(f, "prefixes=[{}] nt=[{nt}]", prefixes.join(","))
    }
}

impl Snapshot {
    /// The number of pending units for each choice slot (the radices of the image space).
    fn radices(&self) -> Vec<u32> {
        match self.mode {
            SimMode::Adr => self
                .lines
                .iter()
                .map(|(_, chunks)| chunks.len() as u32)
                .collect(),
            SimMode::Eadr => vec![self.lines.iter().map(|(_, c)| c.len() as u32).sum()],
        }
    }

    /// How many distinct choices exist (saturating).
    pub fn image_count(&self) -> u128 {
        let wb = self
            .radices()
            .iter()
            .fold(1u128, |acc, &n| acc.saturating_mul(u128::from(n) + 1));
        let nt = 1u128.checked_shl(self.nt.len() as u32).unwrap_or(u128::MAX);
        wb.saturating_mul(nt)
    }

    /// Whether any store is pending (otherwise the only image is the durable one).
    pub fn has_pending(&self) -> bool {
        !self.lines.is_empty() || !self.nt.is_empty()
    }

    /// The choice in which nothing pending persisted.
    pub fn nothing(&self) -> Choice {
        Choice {
            prefixes: vec![0; self.radices().len()],
            nt: vec![false; self.nt.len()],
        }
    }

    /// The choice in which everything pending persisted.
    pub fn everything(&self) -> Choice {
        Choice {
            prefixes: self.radices(),
            nt: vec![true; self.nt.len()],
        }
    }

    /// Whether `choice` fits this snapshot (for replaying a reported failure).
    pub fn accepts(&self, choice: &Choice) -> bool {
        let radices = self.radices();
        choice.prefixes.len() == radices.len()
            && choice.prefixes.iter().zip(&radices).all(|(k, n)| k <= n)
            && choice.nt.len() == self.nt.len()
    }

    /// Builds the crash image for `choice` into `image` (replacing its contents).
    pub fn build(&self, choice: &Choice, image: &mut Vec<u8>) {
        debug_assert!(self.accepts(choice));
        image.clear();
        image.extend_from_slice(&self.durable);
        let mut chosen: Vec<&PendingChunk> = match self.mode {
            SimMode::Adr => self
                .lines
                .iter()
                .zip(&choice.prefixes)
                .flat_map(|((_, chunks), &k)| &chunks[..k as usize])
                .collect(),
            SimMode::Eadr => {
                let mut all: Vec<&PendingChunk> = self.lines.iter().flat_map(|(_, c)| c).collect();
                all.sort_by_key(|c| c.seq);
                all.truncate(choice.prefixes.first().copied().unwrap_or(0) as usize);
                all
            }
        };
        chosen.extend(
            self.nt
                .iter()
                .zip(&choice.nt)
                .filter(|(_, on)| **on)
                .map(|(c, _)| c),
        );
        // Later stores to the same bytes win, as on the machine.
        chosen.sort_by_key(|c| c.seq);
        for chunk in chosen {
            chunk.apply(image);
        }
    }

    /// The crash image for `choice`.
    pub fn image(&self, choice: &Choice) -> Vec<u8> {
        let mut image = Vec::with_capacity(self.durable.len());
        self.build(choice, &mut image);
        image
    }
}

/// The most images [`choices`] enumerates at one crash point: a budget whose
/// `exhaustive_max` lets a point with more through panics instead of exhausting memory.
pub const MAX_EXHAUSTIVE: u64 = 1 << 20;

/// How many images to test per crash point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Budget {
    /// Enumerate every image when there are at most this many.
    pub exhaustive_max: u64,
    /// Otherwise: nothing, everything, each line alone, all but each line, plus this many
    /// seeded random images.
    pub random: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            exhaustive_max: 256,
            random: 32,
        }
    }
}

/// The images to test at `snapshot`: all of them within budget, otherwise the structured
/// set plus seeded random ones (deterministic in `seed` and the snapshot's position).
///
/// # Panics
///
/// If the budget asks for every image of a crash point that has more than
/// [`MAX_EXHAUSTIVE`] (the list alone would not fit in memory long before the images were
/// tested).
pub fn choices(snapshot: &Snapshot, budget: &Budget, seed: u64) -> Vec<Choice> {
    let count = snapshot.image_count();
    if count <= u128::from(budget.exhaustive_max) {
        assert!(
            count <= u128::from(MAX_EXHAUSTIVE),
            "Budget.exhaustive_max {} asks for all {count} crash images at {}; at most {} can be \
             enumerated per crash point: lower exhaustive_max to sample them instead",
            budget.exhaustive_max,
            snapshot.kind,
            MAX_EXHAUSTIVE
        );
        return exhaustive(snapshot);
    }
    let radices = snapshot.radices();
    let mut set = BTreeSet::new();
    let (nothing, everything) = (snapshot.nothing(), snapshot.everything());
    if nothing == everything {
        // Nothing pending: the durable image is the only one (reached here only when
        // `exhaustive_max` is 0).
        return vec![nothing];
    }
    for (slot, &radix) in radices.iter().enumerate() {
        let mut only = nothing.clone();
        only.prefixes[slot] = radix;
        set.insert(only);
        let mut all_but = everything.clone();
        all_but.prefixes[slot] = 0;
        set.insert(all_but);
    }
    for slot in 0..snapshot.nt.len() {
        let mut only = nothing.clone();
        only.nt[slot] = true;
        set.insert(only);
        let mut all_but = everything.clone();
        all_but.nt[slot] = false;
        set.insert(all_but);
    }
    let position = snapshot.fences.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ snapshot.durability_points;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ position);
    for _ in 0..budget.random {
        let prefixes = radices.iter().map(|&n| rng.random_range(0..=n)).collect();
        let nt = (0..snapshot.nt.len())
            .map(|_| rng.random_bool(0.5))
            .collect();
        set.insert(Choice { prefixes, nt });
    }
    set.remove(&nothing);
    set.remove(&everything);
    let mut list = vec![nothing, everything];
    list.extend(set);
    list
}

/// Every choice, in mixed-radix order (caller checks the count first).
fn exhaustive(snapshot: &Snapshot) -> Vec<Choice> {
    let radices = snapshot.radices();
    let nt_count = snapshot.nt.len();
    let total = snapshot.image_count() as u64;
    (0..total)
        .map(|mut index| {
            let prefixes = radices
                .iter()
                .map(|&n| {
                    let k = index % (u64::from(n) + 1);
                    index /= u64::from(n) + 1;
                    k as u32
                })
                .collect();
            let nt = (0..nt_count).map(|bit| index >> bit & 1 == 1).collect();
            Choice { prefixes, nt }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{SimConfig, SimPm};
    use pmem::{Persist, WriteClass};

    fn snapshot_after(mode: SimMode, program: impl FnOnce(&SimPm)) -> Snapshot {
        let pm = SimPm::new(
            1024,
            SimConfig {
                mode,
                ..SimConfig::default()
            },
        );
        program(&pm);
        pm.crash_now()
    }

    #[test]
    fn adr_images_are_per_line_prefixes() {
        let snapshot = snapshot_after(SimMode::Adr, |pm| {
            pm.write_u64(0, 1, WriteClass::User);
            pm.write_u64(8, 2, WriteClass::User); // same line: persists after the first
            pm.write_u64(64, 3, WriteClass::User); // another line: independent
        });
        assert_eq!(snapshot.image_count(), 3 * 2);
        let images: BTreeSet<(u64, u64, u64)> = exhaustive(&snapshot)
            .iter()
            .map(|c| {
                let image = snapshot.image(c);
                let word = |at: usize| u64::from_le_bytes(image[at..at + 8].try_into().unwrap());
                (word(0), word(8), word(64))
            })
            .collect();
        // Never the second store of line 0 without the first.
        assert!(!images.iter().any(|&(a, b, _)| a == 0 && b == 2));
        assert_eq!(images.len(), 6);
    }

    #[test]
    fn eadr_images_are_global_prefixes() {
        let snapshot = snapshot_after(SimMode::Eadr, |pm| {
            pm.write_u64(64, 3, WriteClass::User);
            pm.write_u64(0, 1, WriteClass::User);
        });
        assert_eq!(snapshot.image_count(), 3);
        let images: Vec<(u8, u8)> = exhaustive(&snapshot)
            .iter()
            .map(|c| snapshot.image(c))
            .map(|i| (i[64], i[0]))
            .collect();
        assert_eq!(images, vec![(0, 0), (3, 0), (3, 1)]);
    }

    #[test]
    fn nontemporal_chunks_persist_independently() {
        let snapshot = snapshot_after(SimMode::Adr, |pm| {
            pm.write_nt(0, &[1; 16], WriteClass::Log);
        });
        assert_eq!(snapshot.image_count(), 4);
        let images: BTreeSet<(u8, u8)> = exhaustive(&snapshot)
            .iter()
            .map(|c| snapshot.image(c))
            .map(|i| (i[0], i[8]))
            .collect();
        assert_eq!(images.len(), 4, "both 8-byte halves may persist alone");
    }

    #[test]
    fn sixteen_byte_store_may_tear() {
        let snapshot = snapshot_after(SimMode::Adr, |pm| pm.write(0, &[7; 16], WriteClass::User));
        let torn = exhaustive(&snapshot).iter().any(|c| {
            let image = snapshot.image(c);
            image[0] == 7 && image[8] == 0
        });
        assert!(torn);
    }

    #[test]
    fn large_snapshots_get_structured_and_random_choices() {
        let snapshot = snapshot_after(SimMode::Adr, |pm| {
            for line in 0..12 {
                pm.write_u64(line * 64, line + 1, WriteClass::User);
            }
        });
        assert_eq!(snapshot.image_count(), 4096);
        let budget = Budget {
            exhaustive_max: 256,
            random: 10,
        };
        let picked = choices(&snapshot, &budget, 7);
        assert!(picked.len() >= 2 + 24 && picked.len() <= 2 + 24 + 10);
        assert_eq!(picked[0], snapshot.nothing());
        assert_eq!(picked[1], snapshot.everything());
        assert_eq!(
            picked,
            choices(&snapshot, &budget, 7),
            "deterministic in the seed"
        );
        assert!(picked.iter().all(|c| snapshot.accepts(c)));
    }
}
