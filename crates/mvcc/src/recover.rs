//! Reading the logs back before recovery changes anything (`docs/mvcc-format.md` §6): the
//! checkpoint records above the write-back watermark, the operation records above the newest
//! checkpoint, the torn tails a crash left, and damage. `Mvcc::open` refuses damage (unless
//! salvaging); the deep check (`crate::check`) reports the same findings.
//!
//! The checkpoint log is written from its start after every write-back, one record after
//! another, and nothing in it above the watermark is ever overwritten: its live records form
//! a chain from offset 0, and only the newest may be torn; a chain that does not start at 0
//! or has a gap is damage. Each operation log is a ring of records placed one after the
//! other (`tx::lanecheck`), and each record names the time of the lane's previous live
//! record (`record::link`): a record still needed (above the floor) that a newer intact one
//! names but that is not intact is damage, however the ring wrapped.

use crate::layout::{MvccLayout, Watermark};
use crate::record::{self, Kind, Record};
use pmem::integrity::{Finding, Severity};
use pmem::{CACHE_LINE, Persist};
use tx::lanecheck::{Found, LaneShape, verify_lane};
use tx::record_search::LaneChecksums;
use tx::{TxError, TxResult};

/// The checkpoint log's name in findings.
pub(crate) const CLOG: &str = "mvcc checkpoint log";

/// The logs as found.
#[derive(Debug)]
pub(crate) struct Logs {
    /// The write-back watermark.
    pub watermark: Watermark,
    /// Checkpoint records above the watermark, oldest first.
    pub checkpoints: Vec<Record>,
    /// The newest durable checkpoint's time (at least the watermark): operation records at
    /// or below it are covered.
    pub floor: u64,
    /// The newest timestamp of any intact record (at least `floor`).
    pub newest: u64,
    /// Operation records above `floor`, in timestamp order.
    pub pending: Vec<Record>,
    /// Torn tails and damage.
    pub findings: Vec<Finding>,
}

impl Logs {
    pub fn damage(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.is_damage())
    }
}

/// Reads the watermark, the checkpoint log and every operation log, writing nothing.
pub(crate) fn read_logs<P: Persist>(pm: &P, layout: &MvccLayout) -> TxResult<Logs> {
    let watermark = layout.read_watermark(pm)?;
    let mut findings = Vec::new();
    let checkpoints = read_clog(pm, layout, watermark.value, &mut findings)?;
    let floor = checkpoints.last().map_or(watermark.value, |r| r.ts);
    let mut logs = Logs {
        watermark,
        checkpoints,
        floor,
        newest: floor,
        pending: Vec::new(),
        findings,
    };
    for lane in 0..layout.lane_count as usize {
        read_olog(pm, layout, lane, &mut logs)?;
    }
    logs.pending.sort_by_key(|r| (r.ts, r.pos));
    Ok(logs)
}

/// The live checkpoint records, oldest first, after checking that they form a chain from
/// the log's start.
fn read_clog<P: Persist>(
    pm: &P,
    layout: &MvccLayout,
    watermark: u64,
    findings: &mut Vec<Finding>,
) -> TxResult<Vec<Record>> {
    let (base, end) = (layout.clog, layout.clog + layout.clog_size);
    let mut live = Vec::new();
    let mut starts = Vec::new();
    // Records of the watermark's own time: dead, but earlier builds wrote such records
    // (checkpoints whose boundary had not moved) at the log's start right after a
    // write-back, before the live ones; the chain steps over them.
    let mut at_watermark = Vec::new();
    let log = LaneChecksums::read(pm, base, end - base, record::HEADER_LEN);
    for pos in (base..end).step_by(CACHE_LINE as usize) {
        if !record::may_hold_record(&log, pos, end) {
            continue;
        }
        match record::read(pm, pos, end)? {
            Some(rec) if rec.kind != Kind::Checkpoint => {
                return Err(TxError::Corrupted(format!(
                    "an operation record in the checkpoint log at {pos:#x}"
                )));
            }
            Some(rec) if rec.ts > watermark => live.push(rec),
            Some(rec) => {
                if rec.ts == watermark {
                    at_watermark.push((rec.pos, rec.len));
                }
                starts.push(rec.pos);
            }
            None => {}
        }
    }
    live.sort_by_key(|r| r.ts);
    // The chain starts at 0, after any records of the watermark's own time there: those
    // were written after the write-back that restarted the log (a record of an older
    // generation at 0 was overwritten by the first new one).
    let mut expected = base;
    while let Some(&(_, len)) = at_watermark.iter().find(|&&(pos, _)| pos == expected) {
        expected = (expected + len).next_multiple_of(CACHE_LINE);
    }
    if live.is_empty() {
        expected = base;
    }
    for rec in &live {
        if rec.pos != expected {
            findings.push(Finding::damage(
                CLOG,
                expected,
                format!(
                    "the checkpoint record expected at {expected:#x} is missing or damaged: \
                     the newer intact checkpoint of time {} is at {:#x}",
                    rec.ts, rec.pos
                ),
            ));
            break;
        }
        expected = (rec.pos + rec.len).next_multiple_of(CACHE_LINE);
    }
    // What does not verify where the next checkpoint record goes is the one the crash
    // interrupted. (Bytes elsewhere prove nothing: torn writes mix old and new words.)
    if !live.is_empty() && !starts.contains(&expected) && written(pm, expected, end) {
        let ts = record::claimed(pm, expected, end).map(|(_, ts)| ts);
        findings.push(torn(CLOG, expected, ts, "checkpoint"));
    }
    Ok(live)
}

fn torn(structure: &str, pos: u64, ts: Option<u64>, what: &str) -> Finding {
    let which = ts.map_or_else(String::new, |ts| format!(" (its header says time {ts})"));
    Finding::new(
        Severity::Recovery,
        structure,
        Some(pos),
        format!(
            "the {what} record where the next one goes fails its check{which}: the one a \
             crash interrupted, discarded by recovery (damage to the newest record looks the \
             same)"
        ),
    )
}

/// Whether the record header at `pos` holds anything (the logs are zeroed at creation).
fn written<P: Persist>(pm: &P, pos: u64, limit: u64) -> bool {
    let mut header = [0u8; record::HEADER_LEN];
    pos + header.len() as u64 <= limit && {
        pm.read(pos, &mut header);
        header.iter().any(|&b| b != 0)
    }
}

/// The structure name of operation log `lane` in findings.
pub(crate) fn olog_name(lane: usize) -> String {
    format!("mvcc operation log {lane}")
}

fn read_olog<P: Persist>(
    pm: &P,
    layout: &MvccLayout,
    lane: usize,
    logs: &mut Logs,
) -> TxResult<()> {
    let (base, len) = layout.olog(lane);
    let (mut intact, mut links) = (Vec::new(), Vec::new());
    let log = LaneChecksums::read(pm, base, len, record::HEADER_LEN);
    for pos in (base..base + len).step_by(CACHE_LINE as usize) {
        if !record::may_hold_record(&log, pos, base + len) {
            continue;
        }
        let Some(rec) = record::read(pm, pos, base + len)? else {
            continue;
        };
        if rec.ts > logs.floor {
            links.push((rec.ts, rec.prev));
        }
        if rec.kind == Kind::Checkpoint {
            return Err(TxError::Corrupted(format!(
                "a checkpoint record in an operation log at {pos:#x}"
            )));
        }
        if rec.ts > crate::chain::MAX_TS {
            return Err(TxError::Corrupted(format!(
                "operation record at {pos:#x} with timestamp {:#x}",
                rec.ts
            )));
        }
        intact.push(Found {
            pos: pos - base,
            len: rec.len,
            stamp: rec.ts,
        });
        logs.newest = logs.newest.max(rec.ts);
        if rec.ts > logs.floor {
            logs.pending.push(rec);
        }
    }
    let shape = LaneShape {
        size: len,
        exact_wrap: false,
    };
    let verdict = verify_lane(shape, &intact, logs.floor);
    let name = olog_name(lane);
    for (pos, message) in verdict.damage {
        logs.findings
            .push(Finding::damage(name.clone(), base + pos, message));
    }
    for (ts, link) in links {
        let Some(previous) = record::linked(ts, link).filter(|&p| p > logs.floor) else {
            continue;
        };
        if !intact.iter().any(|r| r.stamp == previous) {
            logs.findings.push(Finding::damage(
                name.clone(),
                base,
                format!(
                    "the record of time {previous}, which the record of time {ts} follows and \
                     which is still needed, is missing or damaged"
                ),
            ));
        }
    }
    let limit = base + len;
    if let Some(&pos) = verdict
        .next
        .iter()
        .find(|&&pos| written(pm, base + pos, limit))
    {
        let ts = record::claimed(pm, base + pos, limit).map(|(_, ts)| ts);
        logs.findings.push(torn(&name, base + pos, ts, "operation"));
    }
    Ok(())
}

/// The error a strict recovery returns for damage, naming the first problem.
pub(crate) fn refuse<'a>(mut damage: impl Iterator<Item = &'a Finding>) -> TxError {
    let first = damage.next().map(ToString::to_string).unwrap_or_default();
    let more = damage.count();
    let more = if more > 0 {
        format!(" (and {more} more)")
    } else {
        String::new()
    };
    TxError::Corrupted(format!(
        "the mvcc logs are damaged, not torn: {first}{more}; `pool check` lists every \
         problem, and opening with salvage replays what is intact"
    ))
}

/// Stores the checkpoint records' ranges in place, oldest first (each byte ends with the
/// newest checkpoint's value), without write-backs; returns the lines touched.
pub(crate) fn store_checkpoints<P: Persist>(pm: &P, checkpoints: &[Record]) -> Vec<u64> {
    let mut lines = Vec::new();
    for rec in checkpoints {
        for (addr, bytes) in &rec.ranges {
            pm.write(*addr, bytes, pmem::WriteClass::User);
            lines.extend(pmem::lines_covering(*addr, bytes.len() as u64));
        }
    }
    lines
}

/// Stores the pending operations' heap actions in place, in timestamp order, without
/// write-backs; returns the lines touched.
pub(crate) fn store_actions<P: Persist>(pm: &P, pending: &[Record]) -> Vec<u64> {
    let mut lines = Vec::new();
    for rec in pending {
        for action in &rec.actions {
            action.store(pm);
            lines.extend(pmem::lines_covering(action.addr(), action.len()));
        }
    }
    lines
}
