//! The deep check of an undo or redo engine area (`ferrite pool check`): the engine header,
//! the redo watermark and lanes or the undo lanes, then the heap. It runs the same scans as
//! recovery (`crate::recovery`, `crate::undo_recovery`), so it reports damage exactly when
//! opening the engine would refuse the pool, and it names every problem. When the logs are
//! sound it then stores what recovery would replay or roll back — on `pm`, which must
//! therefore be a private copy of the pool (`pmem::MemPm`) — and checks the heap as the open
//! would find it: heap metadata the log rewrites is not damage.

use crate::layout::{EngineKind, EngineLayout, MAGIC};
use crate::recovery::scan_redo;
use crate::undo_recovery::{LaneState, LaneView, action_area, examine_lane};
use pmem::integrity::{Finding, Severity};
use pmem::{Persist, Region};

/// The structure name of the engine header in findings.
pub const HEADER: &str = "engine header";

/// Which engine formatted the arena, from its header's magic and kind (without validating
/// the rest): `Some(Undo | Redo)` for a transaction area.
pub fn engine_kind<P: Persist>(pm: &P, arena: Region) -> Option<EngineKind> {
    if !pm.check_range(arena.offset, 16) {
        return None;
    }
    let mut magic = [0u8; 8];
    pm.read(arena.offset, &mut magic);
    (magic == MAGIC)
        .then(|| EngineKind::from_code(pm.read_u32(arena.offset + 12)))
        .flatten()
}

/// Checks the undo or redo engine area in `arena` (formatted by `kind`) and its heap, on a
/// private copy of the pool (it stores the logs' effects into it).
pub fn check_area<P: Persist>(pm: &P, arena: Region, kind: EngineKind) -> Vec<Finding> {
    let layout = match EngineLayout::read(pm, arena, kind) {
        Ok(layout) => layout,
        Err(error) => return vec![Finding::damage(HEADER, arena.offset, error.to_string())],
    };
    let mut findings = vec![Finding::new(
        Severity::Note,
        HEADER,
        Some(arena.offset),
        format!(
            "{} engine, {} lanes of {} bytes",
            kind.name(),
            layout.lane_count,
            layout.lane_size
        ),
    )];
    match kind {
        EngineKind::Redo => check_redo(pm, &layout, &mut findings),
        EngineKind::Undo => check_undo(pm, &layout, &mut findings),
    }
    if !findings.iter().any(Finding::is_damage) {
        findings.extend(heap::check_heap(pm, layout.heap).findings);
    }
    findings
}

/// The deep check of whatever transaction engine formatted `arena` (`None` when no
/// transaction area's magic is there): a header with this crate's magic but an unknown kind
/// is damage too.
pub fn check_tx_area<P: Persist>(pm: &P, arena: Region) -> Option<Vec<Finding>> {
    if !pm.check_range(arena.offset, 16) {
        return None;
    }
    let mut magic = [0u8; 8];
    pm.read(arena.offset, &mut magic);
    if magic != MAGIC {
        return None;
    }
    Some(match engine_kind(pm, arena) {
        Some(kind) => check_area(pm, arena, kind),
        None => {
            let error = EngineLayout::read(pm, arena, EngineKind::Redo)
                .err()
                .map_or_else(|| "unknown engine kind".to_owned(), |e| e.to_string());
            vec![Finding::damage(HEADER, arena.offset, error)]
        }
    })
}

fn check_redo<P: Persist>(pm: &P, layout: &EngineLayout, findings: &mut Vec<Finding>) {
    match scan_redo(pm, layout) {
        Err(error) => findings.push(Finding::damage(
            "redo log",
            layout.watermark(),
            error.to_string(),
        )),
        Ok(scan) => {
            findings.extend(scan.findings.iter().cloned());
            if scan.damage().next().is_none() {
                crate::redo::store_pending(pm, &scan.pending);
            }
            if !scan.pending.is_empty() {
                findings.push(Finding::new(
                    Severity::Recovery,
                    "redo log",
                    Some(layout.watermark()),
                    format!(
                        "{} committed records above the watermark ({}) are replayed at the \
                         next open",
                        scan.pending.len(),
                        scan.watermark
                    ),
                ));
            }
        }
    }
}

fn check_undo<P: Persist>(pm: &P, layout: &EngineLayout, findings: &mut Vec<Finding>) {
    for index in 0..layout.lane_count as usize {
        let view = LaneView {
            index,
            base: layout.lane(index),
            action_area: action_area(layout.lane_size),
            end: layout.lane(index) + layout.lane_size,
        };
        match examine_lane(pm, view) {
            Ok(mut state) => {
                if state.generation >= pmem::checked::MAX_VALUE {
                    state.findings.push(Finding::damage(
                        format!("undo lane {index}"),
                        view.base,
                        "the lane's generation is at the 48-bit limit: the engine refuses to \
                         start work on it (CounterExhausted)",
                    ));
                }
                if !state.findings.iter().any(Finding::is_damage) {
                    undo_in_place(pm, &state);
                }
                findings.extend(state.findings);
            }
            Err(error) => findings.push(Finding::damage(
                format!("undo lane {index}"),
                view.base,
                error.to_string(),
            )),
        }
    }
}

/// What recovery stores for a lane (its pending heap actions, its rolled-back entries),
/// without the fences and counter updates.
fn undo_in_place<P: Persist>(pm: &P, state: &LaneState) {
    if let Some(actions) = &state.pending {
        actions.iter().for_each(|a| a.store(pm));
    }
    for entry in state.rollback.iter().rev() {
        pm.write(entry.addr, &entry.old, pmem::WriteClass::User);
    }
}
