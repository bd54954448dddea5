//! Run creation, and runs returned to the free chunks, crashed at every fence.
//!
//! A new run is two actions made durable one after the other by `apply_durably`: the run's
//! marker and empty bitmap, then the descriptor that says "run". The descriptor and the run
//! are on different cache lines, so under ADR the descriptor may reach the media before the
//! marker unless a fence separates them; the heap then reads a run whose marker is missing
//! and refuses to open (damage no crash may leave). A run return is a batch of descriptors
//! set to FREE, each followed by its run's marker cleared, one fence each; a crash in between
//! leaves some runs returned (with or without their marker) and the others
//! empty runs, both of which a reopened heap must accept and may reuse. The model test
//! (`model.rs`) crashes only between whole actions, on the durable image, so it cannot see a
//! missing fence between two of them: these tests explore every pending store at each fence.

use crashsim::{Config, Scenario, SimMode, SimPm, check};
use heap::{Action, Heap, HeapError, SIZE_CLASSES, apply_durably, check_heap};
use pmem::Persist;

mod common;
use common::{CHUNK_SHIFT, REGION};

/// Operation `i` allocates one block of size class `CLASSES[i]`: a class with no run yet,
/// so every operation creates a run before it publishes its block.
const CLASSES: [usize; 6] = [0, 3, 6, 9, 1, 12];

/// Chunks of operation `i`'s large block in the run-return scenario. The first finds no free
/// chunk (setup left an empty run in every one) and returns every empty run.
const SPANS: [u64; 4] = [3, 1, 8, 2];

/// One block allocated and published per operation, system changes made durable at once.
struct Allocations {
    name: &'static str,
    /// Bytes of operation `i`'s block.
    sizes: Vec<u64>,
    /// Setup fills the heap with 16-byte units (a run in every chunk) and frees them all.
    emptied_runs_first: bool,
}

impl Allocations {
    fn run_creation() -> Self {
        Allocations {
            name: "heap run creation",
            sizes: CLASSES.iter().map(|&c| SIZE_CLASSES[c]).collect(),
            emptied_runs_first: false,
        }
    }

    fn run_return() -> Self {
        Allocations {
            name: "heap run return",
            sizes: SPANS.iter().map(|&span| span << CHUNK_SHIFT).collect(),
            emptied_runs_first: true,
        }
    }
}

/// Reserves `size` bytes, every system change made durable at once (as `undo` and `mvcc` do).
fn reserve_now(pm: &SimPm, heap: &Heap, size: u64) -> Result<heap::Reservation, HeapError> {
    heap.reserve(size, &mut |actions: &[Action]| {
        apply_durably(pm, actions);
        Ok::<(), HeapError>(())
    })
}

fn publish(pm: &SimPm, heap: &Heap, reservation: &heap::Reservation) {
    common::commit(pm, &[heap.publish_action(reservation)]).expect("publish");
}

impl Scenario for Allocations {
    /// Allocated blocks as the reopened heap counts them.
    type Model = u64;
    type Live = (SimPm, Heap);

    fn name(&self) -> String {
        self.name.into()
    }

    fn pool_size(&self) -> u64 {
        REGION.end()
    }

    fn op_count(&self) -> usize {
        self.sizes.len()
    }

    fn initial_model(&self) -> u64 {
        0
    }

    fn apply_to_model(&self, model: &mut u64, _op: usize) {
        *model += 1;
    }

    fn setup(&self, pm: SimPm) -> (SimPm, Heap) {
        let heap = Heap::format(&pm, REGION, CHUNK_SHIFT).expect("format");
        if self.emptied_runs_first {
            let units: Vec<_> = std::iter::from_fn(|| reserve_now(&pm, &heap, 16).ok()).collect();
            units.iter().for_each(|unit| publish(&pm, &heap, unit));
            assert_eq!(heap.usage().free_chunks, 0, "16-byte units fill the heap");
            for unit in units {
                let freeing = heap.prepare_free(unit.addr).expect("prepare_free");
                common::commit(&pm, &[heap.free_action(&freeing)]).expect("free");
                heap.finish_free(&freeing);
            }
        }
        (pm, heap)
    }

    fn run_op(&self, (pm, heap): &mut (SimPm, Heap), op: usize) {
        let runs = heap.usage().runs;
        let reservation = reserve_now(pm, heap, self.sizes[op]).expect("reserve");
        if self.emptied_runs_first {
            assert_eq!(
                heap.usage().runs,
                0,
                "operation {op}: every empty run returned"
            );
        } else {
            assert_eq!(heap.usage().runs, runs + 1, "operation {op} creates a run");
        }
        publish(pm, heap, &reservation);
        pm.durability_point();
    }

    /// Opens the heap, runs the deep check, and allocates the operations still to come:
    /// whatever a crash left returned or not, the heap must still take them. Each large
    /// block gets, at its byte 8, an integer that reads as a bitmap word with a unit set and
    /// its first 8 bytes are left alone, and the heap must then open again: a run marker a
    /// crash left over a returned run's chunk (between its descriptor and its marker) would
    /// make that block read as a run whose descriptor was lost, unless the open after the
    /// crash cleared it.
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
        let blocks = heap.usage().allocated_blocks;
        drop(heap);
        // On a copy of the image: recovery itself commits nothing, and a crash during it
        // must recover to the same state.
        let copy = SimPm::from_image(pm.durable_image(), pm.config());
        let heap = Heap::open(&copy, REGION).map_err(|e| format!("open the copy: {e}"))?;
        for &size in self.sizes.get(blocks as usize..).unwrap_or_default() {
            let reservation = reserve_now(&copy, &heap, size)
                .map_err(|e| format!("after recovery, {size} bytes: {e}"))?;
            publish(&copy, &heap, &reservation);
            if size >= 1 << CHUNK_SHIFT {
                let at = reservation.addr + 8;
                let integer = common::integer_that_reads_as_a_bitmap_word(at);
                copy.write(at, &integer.to_le_bytes(), pmem::WriteClass::User);
                copy.persist(at, 8);
            }
        }
        drop(heap);
        Heap::open(&copy, REGION).map_err(|e| format!("reopen after the new blocks: {e}"))?;
        Ok(blocks)
    }
}

fn crash_at_every_fence(scenario: &Allocations) {
    for mode in [SimMode::Adr, SimMode::Eadr] {
        let report = check(scenario, &Config::thorough(mode, 11));
        eprintln!("{report}");
        report.assert_passed();
        assert!(
            report.crash_points > scenario.sizes.len() as u64,
            "{report}"
        );
    }
}

#[test]
fn run_creation_survives_a_crash_at_every_fence() {
    crash_at_every_fence(&Allocations::run_creation());
}

#[test]
fn run_return_survives_a_crash_at_every_fence() {
    crash_at_every_fence(&Allocations::run_return());
}
