//! Run creation, and runs returned to the free chunks, crashed at every fence. A new run is two actions made durable one after the
//! other by `apply_durably`: the run's marker and empty bitmap, then the descriptor that says
//! "run". The descriptor and the run are on different cache lines, so under ADR the
//! descriptor may reach the media before the marker unless a fence separates them; the
//! heap then reads a run whose marker is missing and refuses to open (damage no crash may
//! leave). The model test (`model.rs`) crashes only between whole actions, on the durable
//! image, so it cannot see a missing fence between two of them: this test explores every
//! pending store at each fence.

use crashsim::{Config, Scenario, SimMode, SimPm, check};
use heap::{Heap, SIZE_CLASSES, apply_durably, check_heap};
use pmem::Persist;

mod common;
use common::{CHUNK_SHIFT, REGION};

/// Operation `i` allocates one block of size class `CLASSES[i]`: a class with no run yet,
/// so every operation creates a run before it publishes its block.
const CLASSES: [usize; 6] = [0, 3, 6, 9, 1, 12];

struct RunCreation;

impl Scenario for RunCreation {
    /// Allocated blocks as the reopened heap counts them.
    type Model = u64;
    type Live = (SimPm, Heap);

    fn name(&self) -> String {
        "heap run creation".into()
    }

    fn pool_size(&self) -> u64 {
        REGION.end()
    }

    fn op_count(&self) -> usize {
        CLASSES.len()
    }

    fn initial_model(&self) -> u64 {
        0
    }

    fn apply_to_model(&self, model: &mut u64, _op: usize) {
        *model += 1;
    }

    fn setup(&self, pm: SimPm) -> (SimPm, Heap) {
        let heap = Heap::format(&pm, REGION, CHUNK_SHIFT).expect("format");
        (pm, heap)
    }

    fn run_op(&self, (pm, heap): &mut (SimPm, Heap), op: usize) {
        let size = SIZE_CLASSES[CLASSES[op]];
        let runs = heap.usage().runs;
        let reservation = heap
            .reserve(size, &mut |actions: &[heap::Action]| {
                apply_durably(pm, actions);
                Ok::<(), heap::HeapError>(())
            })
            .expect("reserve");
        assert_eq!(heap.usage().runs, runs + 1, "operation {op} creates a run");
        common::commit(pm, &[heap.publish_action(&reservation)]).expect("publish");
        pm.durability_point();
    }

    fn recover(&self, pm: SimPm) -> Result<u64, String> {
        let heap = Heap::open(&pm, REGION).map_err(|e| format!("open: {e}"))?;
        let damage: Vec<String> = check_heap(&pm, REGION)
            .findings
            .iter()
            .filter(|f| f.is_damage())
            .map(ToString::to_string)
            .collect();
        if !damage.is_empty() {
            return Err(format!("deep check: {damage:?}"));
        }
        Ok(heap.usage().allocated_blocks)
    }
}

#[test]
fn run_creation_survives_a_crash_at_every_fence() {
    for mode in [SimMode::Adr, SimMode::Eadr] {
        let report = check(&RunCreation, &Config::thorough(mode, 11));
        eprintln!("{report}");
        report.assert_passed();
        assert!(report.crash_points > CLASSES.len() as u64, "{report}");
    }
}

/// Runs returned to the free chunks, crashed at every fence. Setup fills the heap with
/// 16-byte units (a run in every chunk) and frees them all; operation `i` then allocates a
/// block of `SPANS[i]` chunks. The first finds no free chunk and returns every empty run,
/// [`heap`]'s batches of descriptors set to FREE, one fence each; a crash anywhere in
/// between leaves some runs returned and the others empty runs, both of which a reopened
/// heap must accept and both of which it may reuse.
const SPANS: [u64; 4] = [3, 1, 8, 2];

struct RunReturn;

impl Scenario for RunReturn {
    /// Allocated blocks as the reopened heap counts them.
    type Model = u64;
    type Live = (SimPm, Heap);

    fn name(&self) -> String {
        "heap run return".into()
    }

    fn pool_size(&self) -> u64 {
        REGION.end()
    }

    fn op_count(&self) -> usize {
        SPANS.len()
    }

    fn initial_model(&self) -> u64 {
        0
    }

    fn apply_to_model(&self, model: &mut u64, _op: usize) {
        *model += 1;
    }

    fn setup(&self, pm: SimPm) -> (SimPm, Heap) {
        let heap = Heap::format(&pm, REGION, CHUNK_SHIFT).expect("format");
        let mut units = Vec::new();
        while let Ok(reservation) = heap.reserve(16, &mut |actions: &[heap::Action]| {
            apply_durably(&pm, actions);
            Ok::<(), heap::HeapError>(())
        }) {
            common::commit(&pm, &[heap.publish_action(&reservation)]).expect("publish");
            units.push(reservation);
        }
        assert_eq!(heap.usage().free_chunks, 0, "16-byte units fill the heap");
        for reservation in units {
            let freeing = heap.prepare_free(reservation.addr).expect("prepare_free");
            common::commit(&pm, &[heap.free_action(&freeing)]).expect("free");
            heap.finish_free(&freeing);
        }
        (pm, heap)
    }

    fn run_op(&self, (pm, heap): &mut (SimPm, Heap), op: usize) {
        let size = SPANS[op] << CHUNK_SHIFT;
        let reservation = heap
            .reserve(size, &mut |actions: &[heap::Action]| {
                apply_durably(pm, actions);
                Ok::<(), heap::HeapError>(())
            })
            .expect("a span over returned runs");
        common::commit(pm, &[heap.publish_action(&reservation)]).expect("publish");
        pm.durability_point();
    }

    fn recover(&self, pm: SimPm) -> Result<u64, String> {
        let heap = Heap::open(&pm, REGION).map_err(|e| format!("open: {e}"))?;
        let damage: Vec<String> = check_heap(&pm, REGION)
            .findings
            .iter()
            .filter(|f| f.is_damage())
            .map(ToString::to_string)
            .collect();
        if !damage.is_empty() {
            return Err(format!("deep check: {damage:?}"));
        }
        // Whatever was returned or not, the rest of the heap still takes the spans to come.
        let blocks = heap.usage().allocated_blocks;
        let mut system = |actions: &[heap::Action]| {
            apply_durably(&pm, actions);
            Ok::<(), heap::HeapError>(())
        };
        for &span in &SPANS[blocks as usize..] {
            heap.reserve(span << CHUNK_SHIFT, &mut system)
                .map_err(|e| format!("after recovery, a span of {span}: {e}"))?;
        }
        Ok(blocks)
    }
}

#[test]
fn run_return_survives_a_crash_at_every_fence() {
    for mode in [SimMode::Adr, SimMode::Eadr] {
        let report = check(&RunReturn, &Config::thorough(mode, 11));
        eprintln!("{report}");
        report.assert_passed();
        assert!(report.crash_points > SPANS.len() as u64, "{report}");
    }
}
