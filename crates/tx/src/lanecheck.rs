//! Telling a torn log tail from damage in the middle of a lane.
//!
//! A lane of records (a redo lane, an MVCC operation log) is written in order: each record
//! starts on a cache line right after the lane's previous record, or at the lane start when
//! it does not fit before the lane end ([`crate::ring::LogRing`]). A record whose stamp
//! (sequence number or timestamp) is above the recovery floor (the watermark) is *live*: it
//! is still needed, and the ring never reuses its bytes. A crash can tear only the record a
//! lane was writing, which is that lane's newest. So among a lane's live records:
//!
//! 1. consecutive ones are placed one after the other (**chain**): a gap between them is a
//!    record that was there and is no longer readable;
//! 2. the record before the oldest live one ends where that one starts, or was overwritten
//!    by newer live records, or lies where the lane's torn tail may be (**predecessor**).
//!
//! Whatever breaks these rules is damage in the middle: recovery refuses the pool (unless the
//! user asks to salvage it) and the deep check reports it. Damage confined to the newest
//! record of a lane looks exactly like a torn write and is read as one; no per-record check
//! can tell them apart.
//!
//! Bytes that do not verify prove nothing by themselves: a torn write mixes old and new
//! words, so where the torn record lies a record magic can sit next to any word as its
//! "sequence number", and such bytes outlive the recovery that discards them. The verdict
//! only names where the lane's next record goes, so the caller can report what lies there
//! as the torn tail.

use pmem::CACHE_LINE;

/// An intact record found in a lane: its offset from the lane start, its length in bytes
/// (as the ring placed it) and its stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// Offset from the lane start.
    pub pos: u64,
    /// Bytes (the extent ends at the next cache line).
    pub len: u64,
    /// Sequence number or timestamp.
    pub stamp: u64,
}

/// What a lane's records say about its state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneVerdict {
    /// Damage: the offset from the lane start where a record is missing or damaged, and why.
    pub damage: Vec<(u64, String)>,
    /// Where the lane's next record goes (after its newest live record, or at the lane start
    /// if it wrapped), when the lane has live records: a record there that does not verify
    /// is the torn tail, the commit a crash interrupted.
    pub next: Vec<u64>,
}

/// How a lane places its records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneShape {
    /// Bytes in the lane.
    pub size: u64,
    /// Whether a record goes to the lane start only when it does not fit before the lane end
    /// (true for redo lanes). The MVCC engine sizes its room for the larger of two encodings
    /// and writes the smaller, so only "after the previous one, or at the start" holds.
    pub exact_wrap: bool,
}

impl LaneShape {
    /// Where the next record goes after `record` when it does not wrap.
    fn head(&self, record: &Found) -> u64 {
        (record.pos + record.len)
            .next_multiple_of(CACHE_LINE)
            .min(self.size)
    }

    fn follows(&self, previous: &Found, next: &Found) -> bool {
        let head = self.head(previous);
        next.pos == head || (next.pos == 0 && (!self.exact_wrap || head + next.len > self.size))
    }
}

/// Checks one lane. `intact` holds every intact record (live or not), `floor` the stamp at
/// and below which records are dead.
pub fn verify_lane(shape: LaneShape, intact: &[Found], floor: u64) -> LaneVerdict {
    let mut live: Vec<Found> = intact.iter().copied().filter(|r| r.stamp > floor).collect();
    live.sort_by_key(|r| r.stamp);
    let mut verdict = LaneVerdict::default();
    for pair in live.windows(2) {
        if !shape.follows(&pair[0], &pair[1]) {
            verdict.damage.push((
                shape.head(&pair[0]),
                format!(
                    "the record after stamp {} (expected at lane offset {:#x}) is missing or \
                     damaged: the newer intact record of stamp {} is at lane offset {:#x}",
                    pair[0].stamp,
                    shape.head(&pair[0]),
                    pair[1].stamp,
                    pair[1].pos
                ),
            ));
        }
    }
    if let Some(oldest) = live.first()
        && let Some(message) = missing_predecessor(shape, intact, &live, oldest)
    {
        verdict.damage.push((oldest.pos - CACHE_LINE, message));
    }
    if let (Some(oldest), Some(newest)) = (live.first(), live.last()) {
        let after = shape.head(newest) % shape.size;
        let wrapped = next_may_wrap(shape, oldest, newest).then_some(0);
        verdict.next = std::iter::once(after)
            .chain(wrapped)
            .filter(|&pos| !intact.iter().any(|r| r.pos == pos))
            .collect();
        verdict.next.dedup();
    }
    verdict
}

/// Whether the record after `newest` may have gone to the lane start. It never overwrites a
/// live record, so it must end by the oldest live one; and in a lane that wraps exactly, it
/// went there only because it did not fit before the lane end.
fn next_may_wrap(shape: LaneShape, oldest: &Found, newest: &Found) -> bool {
    if newest.pos < oldest.pos {
        // The live records already wrap: the lane start holds live records.
        return false;
    }
    let room_before_end = shape.size - shape.head(newest);
    oldest.pos > 0 && (!shape.exact_wrap || room_before_end < oldest.pos)
}

/// The record placed before the oldest live one ended where it starts. It may since have
/// been overwritten by newer live records, or by the lane's torn tail; otherwise it is
/// missing, and since it was placed while the oldest live record's predecessors were
/// needed, its absence is damage (to it, or to a live record between them).
fn missing_predecessor(
    shape: LaneShape,
    intact: &[Found],
    live: &[Found],
    oldest: &Found,
) -> Option<String> {
    if oldest.pos == 0 {
        return None;
    }
    let line = oldest.pos - CACHE_LINE;
    let ends_here = intact
        .iter()
        .any(|r| r.stamp < oldest.stamp && shape.head(r) == oldest.pos);
    let overwritten = live
        .iter()
        .any(|r| r.stamp > oldest.stamp && r.pos <= line && shape.head(r) > line);
    if ends_here || overwritten || torn_tail_may_cover(shape, live, oldest, line) {
        return None;
    }
    Some(format!(
        "nothing ends at lane offset {:#x}, where the oldest live record (stamp {}) starts: \
         the record before it is missing or damaged",
        oldest.pos, oldest.stamp
    ))
}

/// Whether the record the lane was writing at the crash (after its newest live record) may
/// cover the cache line at `line`.
fn torn_tail_may_cover(shape: LaneShape, live: &[Found], oldest: &Found, line: u64) -> bool {
    let Some(newest) = live.last() else {
        return true;
    };
    let head = shape.head(newest);
    if newest.pos < oldest.pos {
        // The live records wrap: the torn record would lie between the newest and the oldest.
        return head <= line;
    }
    // It lies after the newest one, or wraps to the lane start (up to the oldest one).
    !shape.exact_wrap || shape.size - head < oldest.pos
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: LaneShape = LaneShape {
        size: 4096,
        exact_wrap: true,
    };

    fn found(pos: u64, len: u64, stamp: u64) -> Found {
        Found { pos, len, stamp }
    }

    #[test]
    fn a_chain_of_live_records_with_a_torn_tail_is_sound() {
        let intact = [found(0, 100, 5), found(128, 64, 6), found(192, 40, 7)];
        let verdict = verify_lane(SHAPE, &intact, 4);
        assert!(verdict.damage.is_empty(), "{verdict:?}");
        assert_eq!(
            verdict.next,
            vec![256],
            "record 8 goes after 7 (0 holds record 5)"
        );
    }

    #[test]
    fn the_next_record_goes_to_the_lane_start_only_if_it_could_have_wrapped() {
        // Room before the lane end that no record fitting before the oldest live one can
        // exceed: the next record goes after the newest, never to the start.
        let intact = [found(128, 64, 5), found(192, 64, 6)];
        assert_eq!(verify_lane(SHAPE, &intact, 4).next, vec![256]);
        // At the lane end, the next record can only go to the start.
        let intact = [found(1024, 64, 5), found(4032, 64, 6)];
        assert_eq!(verify_lane(SHAPE, &intact, 4).next, vec![0]);
        // Near it, a record longer than the room left wraps to the start.
        let intact = [found(1024, 64, 5), found(3904, 64, 6)];
        assert_eq!(verify_lane(SHAPE, &intact, 4).next, vec![3968, 0]);
        // The oldest live record at the start: a wrap would overwrite it.
        let intact = [found(0, 64, 5), found(3904, 64, 6)];
        assert_eq!(verify_lane(SHAPE, &intact, 4).next, vec![3968]);
        // Without exact wraps, the start is possible whenever it is not live.
        let loose = LaneShape {
            exact_wrap: false,
            ..SHAPE
        };
        let intact = [found(128, 64, 5), found(192, 64, 6)];
        assert_eq!(verify_lane(loose, &intact, 4).next, vec![256, 0]);
    }

    #[test]
    fn a_gap_between_live_records_is_damage() {
        // The record at 128 (stamp 6) is unreadable; 7 follows it.
        let intact = [found(0, 100, 5), found(192, 40, 7)];
        let verdict = verify_lane(SHAPE, &intact, 4);
        assert_eq!(verdict.damage.len(), 1, "{verdict:?}");
        assert_eq!(verdict.damage[0].0, 128);
    }

    #[test]
    fn a_wrap_is_legal_only_when_the_record_did_not_fit() {
        let wrapped = [found(3968, 100, 5), found(0, 100, 6)];
        assert!(verify_lane(SHAPE, &wrapped, 4).damage.is_empty());
        let early = [found(1024, 100, 5), found(0, 100, 6)];
        assert_eq!(verify_lane(SHAPE, &early, 4).damage.len(), 1);
        let loose = LaneShape {
            exact_wrap: false,
            ..SHAPE
        };
        assert!(verify_lane(loose, &early, 4).damage.is_empty());
    }

    #[test]
    fn the_oldest_live_records_predecessor_must_be_accounted_for() {
        // A dead record ends where the oldest live one starts: sound.
        let intact = [found(0, 100, 3), found(128, 64, 5), found(192, 64, 6)];
        assert!(verify_lane(SHAPE, &intact, 4).damage.is_empty());
        // Nothing ends at 128 and no torn tail can reach it: the live record of stamp 4
        // that stood there is damaged.
        let intact = [found(128, 64, 5), found(192, 64, 6)];
        assert_eq!(verify_lane(SHAPE, &intact, 3).damage.len(), 1);
        // With the newest record at the lane end, a torn record may have wrapped to the
        // start and reached the line before the oldest live one.
        let intact = [found(3968, 64, 5), found(4032, 64, 6)];
        assert!(verify_lane(SHAPE, &intact, 3).damage.is_empty());
    }

    #[test]
    fn a_lane_without_live_records_has_no_next_position() {
        let intact = [found(0, 300, 3), found(320, 64, 4)];
        assert_eq!(verify_lane(SHAPE, &intact, 8), LaneVerdict::default());
    }
}
