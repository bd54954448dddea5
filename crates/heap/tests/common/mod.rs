//! What the heap's test binaries share: a simulated pool with a formatted heap region, and
//! allocation committed as an engine would commit it.
// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use crashsim::{SimConfig, SimPm};
use heap::{Action, Heap, HeapError};
use pmem::{Persist, Region};

pub const REGION: Region = Region {
    offset: 4096,
    len: 512 * 1024,
};
pub const CHUNK_SHIFT: u32 = 14;

pub fn fresh() -> (SimPm, Heap) {
    let pm = SimPm::new(REGION.end(), SimConfig::default());
    let heap = Heap::format(&pm, REGION, CHUNK_SHIFT).expect("format");
    (pm, heap)
}

/// Applies actions and a fence: what a committing engine does.
pub fn commit(pm: &SimPm, actions: &[Action]) -> Result<(), HeapError> {
    actions.iter().for_each(|a| a.apply(pm));
    pm.fence();
    Ok(())
}

pub fn alloc(pm: &SimPm, heap: &Heap, size: u64) -> u64 {
    let reservation = heap.reserve(size, &mut |a| commit(pm, a)).expect("reserve");
    commit(pm, &[heap.publish_action(&reservation)]).expect("publish");
    reservation.addr
}

/// The smallest integer that, stored as a plain little-endian `u64` at `addr`, reads as a
/// valid heap bitmap word with at least one unit set (about one value in 65 536 does).
pub fn integer_that_reads_as_a_bitmap_word(addr: u64) -> u64 {
    (1..1u64 << 24)
        .find(|&v| pmem::checked::seal(v, addr, "probe") == Ok(v))
        .expect("one integer in 65 536 passes")
}
