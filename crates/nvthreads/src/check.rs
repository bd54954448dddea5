//! The read-only check of an NVthreads pool: what the runtime verifies when its program
//! starts, without writing a byte — the runtime header, the lap word, every lane's records
//! of the current lap (damage in the middle of a lane against a torn tail, `docs/nvthreads.md`
//! §6), and the heap metadata as recovery would leave it (the home image's page 0 with the
//! committed records that write it replayed over a private copy). A pool this check passes
//! without damage is one the runtime starts on; a pool it reports damaged is one the
//! runtime refuses (exit status 78). `ferrite pool check` runs it.

#![forbid(unsafe_code)]

use crate::NvtError;
use crate::heapmeta::{self, MetaState};
use crate::journal::{self, Geometry, Mutation, Scan};
use crate::record::{self, Entry};
use pmem::integrity::{Finding, Severity};
use pmem::{Persist, Region, checked};

/// The findings of the NVthreads pool whose root region is `root` and arena `arena` on
/// `pm` (the pool's bytes; nothing is written). `Severity::Damage` for what the runtime
/// refuses at start, naming the structure; `Severity::Recovery` for records the next start
/// replays; notes for the rest.
pub fn check_pool<P: Persist>(pm: &P, root: Region, arena: Region) -> Vec<Finding> {
    let mut magic = [0u8; 8];
    pm.read(root.offset, &mut magic);
    if magic == [0; 8] {
        return vec![note(
            "runtime header",
            Some(root.offset),
            "not written yet (a pool made but never run: its program's first start \
             writes it, and nothing can have been logged)",
        )];
    }
    let geo = match journal::geometry_at(pm, root.offset, arena) {
        Ok(geo) => geo,
        Err(error) => return vec![damage("runtime header", Some(root.offset), error)],
    };
    let lap = match checked::open(pm.read_u64(geo.lap_word), geo.lap_word, journal::LAP_WHAT) {
        Ok(lap) => lap,
        Err(error) => {
            return vec![damage(
                "lap word",
                Some(geo.lap_word),
                NvtError::from(error),
            )];
        }
    };
    let mut findings = vec![note(
        "runtime header",
        Some(root.offset),
        format!(
            "NVthreads format {}: heap {} bytes at {:#x}, log {} bytes in {} lanes at {:#x}, \
             lap {lap}",
            journal::VERSION,
            geo.heap_len,
            geo.heap_off,
            geo.log_len,
            geo.lanes,
            geo.log_off
        ),
    )];
    let scan = Scan::read(pm, &geo, lap);
    let mut rest = Vec::new();
    for (lane, &end) in scan.ends.iter().enumerate() {
        if let Err(error) = journal::damage_after(pm, &geo, lane, lap, end, &mut rest) {
            findings.push(damage(
                &format!("redo log lane {lane}"),
                Some(geo.lane_off(lane) + end),
                error,
            ));
        }
    }
    if findings.iter().any(|f| f.severity == Severity::Damage) {
        return findings;
    }
    let (committed, pending) = journal::split_committed(&scan, Mutation::None);
    if !committed.is_empty() || !pending.is_empty() {
        findings.push(Finding::new(
            Severity::Recovery,
            "redo log",
            Some(geo.log_off),
            format!(
                "{} committed records of lap {lap} to replay at the next start, {} of \
                 sections that never ended to drop",
                committed.len(),
                pending.len()
            ),
        ));
    }
    match recovered_metadata(pm, &geo, &scan, &committed) {
        Ok(meta) => findings.extend(check_metadata(&meta, &geo)),
        Err((lane, error)) => findings.push(damage(
            &format!("redo log lane {lane}"),
            Some(geo.lane_off(lane)),
            error,
        )),
    }
    findings
}

/// The heap metadata (heap page 0) as recovery leaves it: the home image's, with every
/// committed record's writes to it applied in replay order. A CRC-valid record whose entries
/// do not fit the heap fails recovery: `Err` names its lane.
fn recovered_metadata<P: Persist>(
    pm: &P,
    geo: &Geometry,
    scan: &Scan,
    committed: &[&journal::Scanned],
) -> Result<Vec<u8>, (usize, NvtError)> {
    let mut meta = vec![0u8; heapmeta::META_LEN];
    pm.read(geo.heap_off, &mut meta);
    let len = meta.len() as u64;
    for scanned in committed {
        let entries = record::parse_body(scan.body(scanned), geo.heap_len)
            .map_err(|error| (scanned.lane, error))?;
        for entry in entries {
            match entry {
                Entry::Run(run) if run.offset < len => {
                    let end = (run.offset + run.bytes.len() as u64).min(len);
                    let take = (end - run.offset) as usize;
                    meta[run.offset as usize..end as usize].copy_from_slice(&run.bytes[..take]);
                }
                Entry::Masked(page) if page.offset < len => page.for_each_byte(|at, byte| {
                    if let Some(slot) = meta.get_mut(page.offset as usize + at) {
                        *slot = byte;
                    }
                }),
                _ => {}
            }
        }
    }
    Ok(meta)
}

/// The runtime's start-up checks of the heap metadata.
fn check_metadata(meta: &[u8], geo: &Geometry) -> Vec<Finding> {
    const WHAT: &str = "heap metadata";
    let at = Some(geo.heap_off);
    match heapmeta::state(meta) {
        MetaState::Blank => vec![note(WHAT, at, "blank (no object allocated yet)")],
        MetaState::Damaged(why) => vec![Finding::new(Severity::Damage, WHAT, at, why)],
        MetaState::Formatted => match heapmeta::validate(meta, geo.heap_len) {
            Ok(()) => Vec::new(),
            Err(why) => vec![Finding::new(Severity::Damage, WHAT, at, why)],
        },
    }
}

fn note(structure: &str, offset: Option<u64>, message: impl Into<String>) -> Finding {
    Finding::new(Severity::Note, structure, offset, message)
}

fn damage(structure: &str, offset: Option<u64>, error: NvtError) -> Finding {
    Finding::new(
        Severity::Damage,
        structure,
        offset,
        format!("{error}; the runtime refuses this pool at start (exit status 78)"),
    )
}
