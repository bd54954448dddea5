//! The deep check of an MVCC engine area (`ferrite pool check`): the engine and lane headers,
//! the write-back watermark, the checkpoint log and every operation log (torn tails against
//! damage, with the same scan `Mvcc::open` runs), then the heap as the open finds it: when
//! the logs are sound, the checkpoint records and the pending heap actions are stored first —
//! on `pm`, which must be a private copy of the pool (`pmem::MemPm`). It cannot re-execute
//! logged operations (that needs the application's handler), so it says how many the next
//! open will re-execute; a record only re-execution proves wrong is not seen here.

use crate::layout::MvccLayout;
use crate::recover::{CLOG, read_logs, store_actions, store_checkpoints};
use pmem::integrity::{Finding, Severity};
use pmem::{Persist, Region};

/// The structure name of the engine header in findings.
pub const HEADER: &str = "mvcc header";

/// Whether `arena` starts with the MVCC engine's magic.
pub fn is_mvcc_area<P: Persist>(pm: &P, arena: Region) -> bool {
    if !pm.check_range(arena.offset, 8) {
        return false;
    }
    let mut magic = [0u8; 8];
    pm.read(arena.offset, &mut magic);
    magic == crate::layout::MAGIC
}

/// Checks the MVCC engine area in `arena` and its heap, on a private copy of the pool.
pub fn check_area<P: Persist>(pm: &P, arena: Region) -> Vec<Finding> {
    let layout = match MvccLayout::read(pm, arena) {
        Ok(layout) => layout,
        Err(error) => return vec![Finding::damage(HEADER, arena.offset, error.to_string())],
    };
    let mut findings = vec![Finding::new(
        Severity::Note,
        HEADER,
        Some(arena.offset),
        format!(
            "mvcc engine, {} operation logs of {} bytes, a checkpoint log of {} bytes",
            layout.lane_count, layout.olog_size, layout.clog_size
        ),
    )];
    match read_logs(pm, &layout) {
        Err(error) => findings.push(Finding::damage(CLOG, layout.clog, error.to_string())),
        Ok(logs) => {
            findings.extend(logs.findings.iter().cloned());
            if logs.damage().next().is_none() {
                store_checkpoints(pm, &logs.checkpoints);
                store_actions(pm, &logs.pending);
            }
            if !logs.checkpoints.is_empty() || !logs.pending.is_empty() {
                findings.push(Finding::new(
                    Severity::Recovery,
                    CLOG,
                    Some(layout.clog),
                    format!(
                        "{} checkpoint records are replayed and {} logged commits \
                         re-executed at the next open",
                        logs.checkpoints.len(),
                        logs.pending.len()
                    ),
                ));
            }
        }
    }
    if !findings.iter().any(Finding::is_damage) {
        findings.extend(heap::check_heap(pm, layout.heap).findings);
    }
    findings
}
