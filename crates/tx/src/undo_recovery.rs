//! Reading an undo lane back (`docs/tx-format.md` §8–9): its generation and applied words,
//! its pending action record, and the live undo entries to roll back — and telling a torn
//! entry from a damaged one. Read-only; the engine's recovery and the deep check share it.
//!
//! Entries are written in batches, one fence per batch, and a batch's in-place writes follow
//! its fence. A crash can tear only the last batch, whose in-place writes have not begun.
//! So when an entry does not verify but a later entry of the same generation does, the later
//! entry's range tells which case it is: if its bytes in place differ from the old bytes it
//! logged, its batch was fenced and written, hence so was every earlier entry — the one that
//! does not verify is damaged, and rolling back around it would leave the transaction half
//! undone. If every later entry still matches its place, the entries may all belong to the
//! torn last batch; rolling them back is then a no-op, and the torn entry needs nothing.

use crate::api::{TxError, TxResult};
use heap::{ACTION_LEN, Action};
use pmem::integrity::{Finding, Severity};
use pmem::{Persist, checked};

/// Offset of the generation word in a lane.
pub(crate) const GENERATION_AT: u64 = 0;
/// Offset of the applied word in a lane.
pub(crate) const APPLIED_AT: u64 = 8;
/// Offset of the action record in a lane.
pub(crate) const ACTIONS_AT: u64 = 64;
/// Bytes of the action record's header.
pub(crate) const ACTION_HEADER_LEN: u64 = 16;
/// Bytes of an undo entry's header.
pub(crate) const ENTRY_HEADER_LEN: u64 = 24;
/// The lane words' names in errors.
pub(crate) const GENERATION: &str = "undo lane generation";
pub(crate) const APPLIED: &str = "undo lane applied counter";

/// Where a lane's parts are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaneView {
    /// Lane index, for messages.
    pub index: usize,
    /// Absolute offset of the lane.
    pub base: u64,
    /// Bytes of the action area (after the header line).
    pub action_area: u64,
    /// End of the lane.
    pub end: u64,
}

impl LaneView {
    pub fn entries_start(&self) -> u64 {
        self.base + ACTIONS_AT + self.action_area
    }

    fn name(&self) -> String {
        format!("undo lane {}", self.index)
    }
}

/// The bytes of the action area of a lane of `lane_size` bytes.
pub(crate) fn action_area(lane_size: u64) -> u64 {
    (lane_size / 4).next_multiple_of(64).max(128)
}

/// One undo entry: where it is, the range it logged and the old bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub at: u64,
    pub addr: u64,
    pub old: Vec<u8>,
}

/// What a lane holds.
#[derive(Debug)]
pub(crate) struct LaneState {
    pub generation: u64,
    /// The committed transaction's heap actions, if they may not all have been applied.
    pub pending: Option<Vec<Action>>,
    /// The live entries to roll back, oldest first.
    pub rollback: Vec<Entry>,
    /// Damage, and what recovery will do (as `Recovery` findings).
    pub findings: Vec<Finding>,
}

/// Reads a lane. Words that fail their check, impossible counters and intact entries outside
/// the pool are errors; damage to entries or to a pending action record is a finding.
pub(crate) fn examine_lane<P: Persist>(pm: &P, lane: LaneView) -> TxResult<LaneState> {
    let read = |at: u64, what| checked::open(pm.read_u64(lane.base + at), lane.base + at, what);
    let generation = read(GENERATION_AT, GENERATION)?;
    let applied = read(APPLIED_AT, APPLIED)?;
    if generation == 0 || applied > generation + 1 {
        return Err(TxError::Corrupted(format!(
            "undo lane at {:#x}: generation {generation} applied {applied}",
            lane.base
        )));
    }
    let mut state = LaneState {
        generation,
        pending: None,
        rollback: Vec::new(),
        findings: Vec::new(),
    };
    if applied < generation {
        state.pending = pending_actions(pm, lane, generation, &mut state.findings)?;
    }
    state.rollback = live_entries(pm, lane, generation, &mut state.findings)?;
    if applied == generation + 1 {
        retired_entries_match(pm, lane, &mut state);
    }
    note_recovery(lane, &mut state);
    Ok(state)
}

/// `applied` one past the generation means a retire was under way: an abort or a recovery
/// had rolled the entries back (and fenced) before it started. Entries of that generation
/// whose bytes in place differ from what they logged were never rolled back, so the
/// counters do not belong to this log.
fn retired_entries_match<P: Persist>(pm: &P, lane: LaneView, state: &mut LaneState) {
    if let Some(entry) = state.rollback.iter().find(|e| !matches_in_place(pm, e)) {
        state.findings.push(Finding::damage(
            lane.name(),
            lane.base + APPLIED_AT,
            format!(
                "the applied word says generation {} was being retired, but its undo entry \
                 at {:#x} was never rolled back: the lane's counters do not match its log",
                state.generation, entry.at
            ),
        ));
    }
}

fn note_recovery(lane: LaneView, state: &mut LaneState) {
    if let Some(actions) = &state.pending {
        state.findings.push(Finding::new(
            Severity::Recovery,
            lane.name(),
            Some(lane.base + ACTIONS_AT),
            format!(
                "generation {} committed; its {} heap actions are applied again",
                state.generation - 1,
                actions.len()
            ),
        ));
    }
    if let Some(first) = state.rollback.first() {
        state.findings.push(Finding::new(
            Severity::Recovery,
            lane.name(),
            Some(first.at),
            format!(
                "a transaction of generation {} was in flight: {} entries are rolled back",
                state.generation,
                state.rollback.len()
            ),
        ));
    }
}

/// The action record of the transaction that committed `generation - 1`, if it is pending.
/// The transaction wrote it before its commit fence and moved the generation after, so once
/// the generation says it committed, a record tagged with it that does not verify is damage.
/// A tag that was damaged is caught by checking the record with the tag it must carry.
fn pending_actions<P: Persist>(
    pm: &P,
    lane: LaneView,
    generation: u64,
    findings: &mut Vec<Finding>,
) -> TxResult<Option<Vec<Action>>> {
    let at = lane.base + ACTIONS_AT;
    let expected = generation - 1;
    let found_tag = pm.read_u64(at);
    let count = u64::from(pm.read_u32(at + 8));
    let crc = pm.read_u32(at + 12);
    let fits = ACTION_HEADER_LEN + count * ACTION_LEN as u64 <= lane.action_area;
    let body = fits.then(|| {
        let mut body = vec![0u8; count as usize * ACTION_LEN];
        pm.read(at + ACTION_HEADER_LEN, &mut body);
        body
    });
    if let Some(body) = &body
        && action_crc(expected, body) == crc
    {
        let actions = body
            .chunks_exact(ACTION_LEN)
            .map(|c| Action::decode(c.try_into().expect("16 bytes"), pm.len()))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(Some(actions));
    }
    if found_tag == expected {
        findings.push(Finding::damage(
            lane.name(),
            at,
            format!(
                "the action record of committed generation {expected} fails its check: its \
                 heap actions (allocations and frees) are lost"
            ),
        ));
    }
    Ok(None)
}

/// The live entries to roll back, oldest first: the chain of intact entries tagged with the
/// current generation from the start of the entry area, then any intact entry of the
/// generation found after the point where the chain stops (see the module comment).
fn live_entries<P: Persist>(
    pm: &P,
    lane: LaneView,
    generation: u64,
    findings: &mut Vec<Finding>,
) -> TxResult<Vec<Entry>> {
    let mut entries = Vec::new();
    let mut at = lane.entries_start();
    while let Some(entry) = entry_at(pm, lane, at, generation)? {
        at = entry.at + ENTRY_HEADER_LEN + (entry.old.len() as u64).next_multiple_of(8);
        entries.push(entry);
    }
    let stop = at;
    if torn_at(pm, lane, stop) {
        findings.push(Finding::new(
            Severity::Recovery,
            lane.name(),
            Some(stop),
            format!(
                "the bytes after the last intact undo entry (generation {generation}) are not \
                 an entry: older contents, or a snapshot the crash interrupted before its write \
                 began (damage to the last entry looks the same)"
            ),
        ));
    }
    let mut later = Vec::new();
    let mut scan = stop + 8;
    while scan + ENTRY_HEADER_LEN <= lane.end {
        match entry_at(pm, lane, scan, generation)? {
            Some(entry) => {
                scan = entry.at + ENTRY_HEADER_LEN + (entry.old.len() as u64).next_multiple_of(8);
                later.push(entry);
            }
            None => scan += 8,
        }
    }
    if let Some(applied) = later.iter().find(|e| !matches_in_place(pm, e)) {
        findings.push(Finding::damage(
            lane.name(),
            stop,
            format!(
                "the undo entry at {stop:#x} (generation {generation}) is damaged: the entry \
                 at {:#x}, logged after it, was already written in place, so the damaged one \
                 was complete; rolling back without it would leave the transaction half undone",
                applied.at
            ),
        ));
    }
    entries.extend(later);
    Ok(entries)
}

/// Whether the entry header at `at`, where the chain of live entries stops, holds something
/// that is not an intact entry of any generation (an older transaction's entry there is the
/// normal end; zeros are a lane never used so far).
fn torn_at<P: Persist>(pm: &P, lane: LaneView, at: u64) -> bool {
    if at + ENTRY_HEADER_LEN > lane.end {
        return false;
    }
    let mut header = [0u8; ENTRY_HEADER_LEN as usize];
    pm.read(at, &mut header);
    if header.iter().all(|&b| b == 0) {
        return false;
    }
    let tag = pm.read_u64(at);
    !matches!(entry_at(pm, lane, at, tag), Ok(Some(_)))
}

fn matches_in_place<P: Persist>(pm: &P, entry: &Entry) -> bool {
    let mut now = vec![0u8; entry.old.len()];
    pm.read(entry.addr, &mut now);
    now == entry.old
}

/// The intact entry of `generation` at `at`, if there is one.
fn entry_at<P: Persist>(
    pm: &P,
    lane: LaneView,
    at: u64,
    generation: u64,
) -> TxResult<Option<Entry>> {
    if at + ENTRY_HEADER_LEN > lane.end || pm.read_u64(at) != generation {
        return Ok(None);
    }
    let addr = pm.read_u64(at + 8);
    let len = u64::from(pm.read_u32(at + 16));
    let crc = pm.read_u32(at + 20);
    if at + ENTRY_HEADER_LEN + len.next_multiple_of(8) > lane.end {
        return Ok(None);
    }
    let mut old = vec![0u8; len as usize];
    pm.read(at + ENTRY_HEADER_LEN, &mut old);
    if entry_crc(generation, addr, &old, at) != crc {
        return Ok(None);
    }
    if !pm.check_range(addr, len) {
        return Err(TxError::Corrupted(format!(
            "intact undo entry at {at:#x} for {addr:#x}+{len} outside the pool"
        )));
    }
    Ok(Some(Entry { at, addr, old }))
}

/// The action record's CRC: tag, then the action bytes.
pub(crate) fn action_crc(tag: u64, body: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&tag.to_le_bytes());
    hasher.update(body);
    hasher.finalize()
}

/// An entry's CRC: tag, range, old bytes, then the entry's own pool offset, so a copy of an
/// entry anywhere else (inside logged old bytes, say) never verifies there.
pub(crate) fn entry_crc(tag: u64, addr: u64, old: &[u8], at: u64) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&tag.to_le_bytes());
    hasher.update(&addr.to_le_bytes());
    hasher.update(&(old.len() as u32).to_le_bytes());
    hasher.update(old);
    hasher.update(&at.to_le_bytes());
    hasher.finalize()
}

/// A strict recovery's refusal of damaged undo lanes.
pub(crate) fn check_damage(findings: &[Finding]) -> TxResult<()> {
    let mut damage = findings.iter().filter(|f| f.is_damage()).peekable();
    if damage.peek().is_some() {
        return Err(crate::recovery::refuse("the undo log", damage));
    }
    Ok(())
}
