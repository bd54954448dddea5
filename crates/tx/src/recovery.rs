//! What recovery finds in the logs before it changes anything: the records to replay, the
//! torn tails a crash left (discarded), and damage (refused, unless the user salvages). The
//! engines' `open` and the deep check (`crate::check`) share these scans, so the check
//! reports exactly what an open would refuse.

use crate::api::{TxError, TxResult};
use crate::lanecheck::{Found, LaneShape, verify_lane};
use crate::layout::EngineLayout;
use crate::record::{self, Record};
use crate::record_search::LaneChecksums;
use pmem::integrity::{Finding, Severity};
use pmem::{CACHE_LINE, Persist, checked};

/// The redo watermark's name in errors.
pub(crate) const WATERMARK: &str = "redo watermark";

/// Whether recovery refuses damage or replays around it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecoveryMode {
    /// Refuse a pool whose logs are damaged (`TxError::Corrupted`, naming the lane and the
    /// record).
    #[default]
    Strict,
    /// Recover anyway: replay every intact record (roll back every intact undo entry) and
    /// report the damage skipped. The result may mix states; it is for getting data out.
    Salvage,
}

/// What a recovery found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Records replayed (redo, mvcc) or undo entries rolled back.
    pub replayed: usize,
    /// Torn log tails discarded and transactions rolled back ([`Severity::Recovery`]), and,
    /// when salvaging, the damage skipped ([`Severity::Damage`]).
    pub findings: Vec<Finding>,
}

impl RecoveryReport {
    /// The damage a salvage skipped.
    pub fn damage(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.is_damage())
    }
}

/// A redo log read back: the live records in sequence order, and what the lanes say.
#[derive(Debug, Default)]
pub(crate) struct RedoScan {
    /// The persisted watermark.
    pub watermark: u64,
    /// The highest sequence number of any intact record (at least the watermark).
    pub newest: u64,
    /// Intact records above the watermark, in sequence order.
    pub pending: Vec<Record>,
    /// Damage and torn tails, as findings.
    pub findings: Vec<Finding>,
}

impl RedoScan {
    pub fn damage(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.is_damage())
    }
}

/// The structure name of redo lane `lane` in findings.
pub(crate) fn redo_lane_name(lane: usize) -> String {
    format!("redo lane {lane}")
}

/// Reads the watermark and every lane. A watermark that fails its check and an intact but
/// malformed record are errors (nothing sensible can be replayed); damage the lane rules
/// detect is returned as findings for the caller to refuse or salvage.
pub(crate) fn scan_redo<P: Persist>(pm: &P, layout: &EngineLayout) -> TxResult<RedoScan> {
    let at = layout.watermark();
    let watermark = checked::open(pm.read_u64(at), at, WATERMARK)?;
    let mut scan = RedoScan {
        watermark,
        newest: watermark,
        ..RedoScan::default()
    };
    let shape = LaneShape {
        size: layout.lane_size,
        exact_wrap: true,
    };
    let mut newest_per_lane = Vec::with_capacity(layout.lane_count as usize);
    // Lanes without an intact live record, and where their next record would have gone.
    let mut idle = Vec::new();
    for lane in 0..layout.lane_count as usize {
        let base = layout.lane(lane);
        let intact = read_redo_lane(pm, base, layout.lane_size, watermark, &mut scan)?;
        let verdict = verify_lane(shape, &intact, watermark);
        let name = redo_lane_name(lane);
        for (pos, message) in verdict.damage {
            scan.findings
                .push(Finding::damage(name.clone(), base + pos, message));
        }
        let limit = base + layout.lane_size;
        if let Some(&pos) = verdict
            .next
            .iter()
            .find(|&&pos| written(pm, base + pos, limit))
        {
            let stamp = record::claimed_seq(pm, base + pos, limit, watermark);
            scan.findings.push(torn_finding(&name, base + pos, stamp));
        }
        let lane_newest = intact
            .iter()
            .map(|r| r.stamp)
            .filter(|&s| s > watermark)
            .max();
        if lane_newest.is_none() {
            idle.push((lane, idle_lane_next(shape, &intact)));
        }
        newest_per_lane.push(lane_newest.unwrap_or(watermark));
    }
    report_idle_torn_tails(pm, layout, &idle, &mut scan);
    scan.pending.sort_by_key(|r| r.seq);
    account_sequences(&mut scan, &newest_per_lane);
    Ok(scan)
}

/// Where the next record of a lane with no intact live record went: at the lane start (a
/// ring whose records the watermark all covers places its next one there), or after the
/// lane's newest intact record (its ring may still have held records the persisted watermark
/// covers, but the in-memory one did not yet), minus the places that hold an intact record.
fn idle_lane_next(shape: LaneShape, intact: &[Found]) -> Vec<u64> {
    let after_newest = intact
        .iter()
        .max_by_key(|r| r.stamp)
        .map(|r| (r.pos + r.len).next_multiple_of(CACHE_LINE) % shape.size);
    let mut next: Vec<u64> = std::iter::once(0)
        .chain(after_newest)
        .filter(|&pos| !intact.iter().any(|r| r.pos == pos))
        .collect();
    next.dedup();
    next
}

/// Reports the torn tail of lanes with no intact live record. A torn record there is the
/// only trace of the commit a crash interrupted (or of damage to the lane's only live
/// record); without a live record to follow, what lies where the next record goes is most
/// often what an earlier lap of the ring left, so only a header that claims a sequence
/// number the lane could have been writing counts: above the watermark, and at most one
/// per lane above the newest intact record.
fn report_idle_torn_tails<P: Persist>(
    pm: &P,
    layout: &EngineLayout,
    idle: &[(usize, Vec<u64>)],
    scan: &mut RedoScan,
) {
    let highest = scan.newest + u64::from(layout.lane_count);
    for (lane, next) in idle {
        let (base, limit) = (layout.lane(*lane), layout.lane(*lane) + layout.lane_size);
        let torn = next.iter().find_map(|&pos| {
            let claimed = record::claimed_seq(pm, base + pos, limit, scan.watermark)?;
            (scan.watermark < claimed && claimed <= highest).then_some((pos, claimed))
        });
        if let Some((pos, claimed)) = torn {
            let name = redo_lane_name(*lane);
            scan.findings
                .push(torn_finding(&name, base + pos, Some(claimed)));
        }
    }
}

/// Whether the record header at `at` holds anything (the lane is zeroed at creation).
pub(crate) fn written<P: Persist>(pm: &P, at: u64, limit: u64) -> bool {
    let mut header = [0u8; record::HEADER_LEN];
    at + header.len() as u64 <= limit && {
        pm.read(at, &mut header);
        header.iter().any(|&b| b != 0)
    }
}

fn torn_finding(lane: &str, at: u64, stamp: Option<u64>) -> Finding {
    let which = stamp.map_or_else(String::new, |s| format!(" (its header says sequence {s})"));
    Finding::new(
        Severity::Recovery,
        lane,
        Some(at),
        format!(
            "the record where the lane's next commit goes fails its check{which}: the commit a \
             crash interrupted, discarded by recovery (damage to a lane's newest record looks \
             the same)"
        ),
    )
}

/// Every intact record of one lane (`pending` gets the live ones).
fn read_redo_lane<P: Persist>(
    pm: &P,
    base: u64,
    size: u64,
    watermark: u64,
    scan: &mut RedoScan,
) -> TxResult<Vec<Found>> {
    let limit = base + size;
    let checksums = LaneChecksums::read(pm, base, size, record::CRC_START);
    let mut intact = Vec::new();
    for at in (base..limit).step_by(CACHE_LINE as usize) {
        if !record::may_hold_record(&checksums, at, limit, watermark) {
            continue;
        }
        let Some(rec) = record::read(pm, at, limit, watermark)? else {
            continue;
        };
        if rec.seq > checked::MAX_VALUE {
            return Err(TxError::Corrupted(format!(
                "intact redo record at {at:#x} with sequence number {:#x}, past 48 bits",
                rec.seq
            )));
        }
        intact.push(Found {
            pos: at - base,
            len: u64::from(rec.len),
            stamp: rec.seq,
        });
        scan.newest = scan.newest.max(rec.seq);
        if rec.seq > watermark {
            scan.pending.push(rec);
        }
    }
    Ok(intact)
}

/// Sequence numbers are handed out one by one, so every number between the watermark and
/// the newest intact record belongs to a record that is still in the log (a live record is
/// never overwritten), except the record each lane was writing when the crash came. So each
/// missing number must be the torn newest record of a distinct lane whose own intact
/// records are all older; and no number may appear twice.
fn account_sequences(scan: &mut RedoScan, newest_per_lane: &[u64]) {
    let mut missing = Vec::new();
    let mut expected = scan.watermark + 1;
    for rec in &scan.pending {
        if rec.seq < expected {
            scan.findings.push(Finding::new(
                Severity::Damage,
                "redo log",
                None,
                format!("two intact records carry sequence number {}", rec.seq),
            ));
            continue;
        }
        for seq in expected..rec.seq {
            if missing.len() > newest_per_lane.len() {
                break;
            }
            missing.push(seq);
        }
        expected = rec.seq + 1;
    }
    let mut lanes = newest_per_lane.to_vec();
    lanes.sort_unstable();
    for (i, &seq) in missing.iter().enumerate() {
        let eligible = lanes.iter().filter(|&&newest| newest < seq).count();
        if eligible > i {
            // A commit is lost: say so, even when no lane shows where it was torn (a lane
            // whose only live record was being written, or damage to a lane's oldest live
            // record that such a lane's torn commit would explain).
            scan.findings.push(Finding::new(
                Severity::Recovery,
                "redo log",
                None,
                format!(
                    "no intact record carries sequence number {seq}, below the newest \
                     ({}): the commit a crash interrupted in a lane with no newer intact \
                     record, discarded by recovery (damage to that record looks the same)",
                    scan.pending.last().map_or(scan.newest, |r| r.seq)
                ),
            ));
        } else {
            scan.findings.push(Finding::new(
                Severity::Damage,
                "redo log",
                None,
                format!(
                    "the record of sequence {seq} is missing, but it cannot be a torn commit: \
                     every lane that could have been writing it holds newer intact records"
                ),
            ));
            return;
        }
    }
}

/// The error a strict recovery returns for damage, naming the first problem.
pub(crate) fn refuse<'a>(what: &str, mut damage: impl Iterator<Item = &'a Finding>) -> TxError {
    let first = damage.next().map(ToString::to_string).unwrap_or_default();
    let more = damage.count();
    let more = if more > 0 {
        format!(" (and {more} more)")
    } else {
        String::new()
    };
    TxError::Corrupted(format!(
        "{what} is damaged, not torn: {first}{more}; `pool check` lists every problem, and \
         opening with salvage replays what is intact"
    ))
}
