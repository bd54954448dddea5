//! The heap's part of the deep check (`ferrite pool check`): the header, every descriptor,
//! every run's marker and bitmap words, descriptors against markers (a run's class, a large
//! span's body), and the allocated-block accounting. Read-only; it reports what
//! [`Heap::open`](crate::Heap::open) would refuse, and every such problem, not only the first.

use crate::layout::Layout;
use crate::scan::scan;
use crate::{HeapError, Usage};
use pmem::integrity::{Finding, Severity};
use pmem::{Persist, Region};

/// The structure name in findings.
pub const STRUCTURE: &str = "heap";

/// What the check found, and the heap's usage as its bitmaps and descriptors record it (when
/// the header could be read).
#[derive(Clone, Debug, Default)]
pub struct HeapCheck {
    /// Problems (damage), then a note with the usage.
    pub findings: Vec<Finding>,
    /// Allocated blocks and bytes, runs and free chunks, as recorded on the media.
    pub usage: Option<Usage>,
}

/// Checks the heap in `region` without writing anything.
pub fn check_heap<P: Persist>(pm: &P, region: Region) -> HeapCheck {
    let layout = match Layout::read(pm, region) {
        Ok(layout) => layout,
        Err(error) => {
            let message = match error {
                HeapError::Corrupted(text) | HeapError::InvalidArgument(text) => text,
                other => other.to_string(),
            };
            return HeapCheck {
                findings: vec![Finding::damage(STRUCTURE, region.offset, message)],
                usage: None,
            };
        }
    };
    let scanned = scan(pm, &layout, false);
    let state = scanned.state;
    let mut findings: Vec<Finding> = scanned
        .problems
        .into_iter()
        .map(|p| Finding::damage(STRUCTURE, p.offset, p.message))
        .collect();
    let usage = state.usage();
    findings.push(Finding::new(
        Severity::Note,
        STRUCTURE,
        None,
        format!(
            "{} chunks of {} bytes: {} allocated blocks ({} bytes), {} runs, {} free chunks",
            layout.chunk_count,
            layout.chunk_size(),
            usage.allocated_blocks,
            usage.allocated_bytes,
            usage.runs,
            usage.free_chunks
        ),
    ));
    if let Some(&first) = scanned.stale_markers.first() {
        findings.push(Finding::new(
            Severity::Note,
            STRUCTURE,
            Some(layout.chunk_start(first)),
            format!(
                "{} free chunks (the first is chunk {first}) keep the run marker of an empty \
                 run, left by a crash while a run was created or returned; harmless, the next \
                 open clears them",
                scanned.stale_markers.len()
            ),
        ));
    }
    HeapCheck {
        findings,
        usage: Some(usage),
    }
}
