//! A model-based property test of the allocator: random sequences of reserve, cancel,
//! publish, prepare_free, free, cancel_free, reopen and crashes (also in the middle of a run
//! creation) against a model that knows which chunks are runs or spans and which blocks are
//! reserved, published or being freed. After every step the heap's usage must match the
//! model; every reservation must be rounded as docs/heap-format.md §6–7 says and must overlap
//! neither metadata nor another block; `OutOfSpace` must come exactly when the model has no
//! room (at every size class boundary, the chunk size, the whole heap and `u64::MAX`); every
//! published block must survive a reopen or a crash, and nothing else may.

use crashsim::{SimConfig, SimPm};
use heap::{Action, Freeing, Heap, HeapError, Layout, Reservation, SIZE_CLASSES, apply_durably};
use pmem::Region;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

mod common;
use common::commit;

/// The allocating engine's error: the heap's own, or a failure of its system commit.
#[derive(Debug)]
enum EngineError {
    Heap(HeapError),
    SystemCommitFailed,
}

impl From<HeapError> for EngineError {
    fn from(error: HeapError) -> Self {
        EngineError::Heap(error)
    }
}

/// What the next run creation's system commit does.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Fails before making anything durable (a full log): the reservation fails, nothing
    /// changes.
    Fail,
    /// Makes the first `n` of its actions durable, then the machine crashes.
    CrashAfter(usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Free,
    Run(usize),
    SpanHead,
    SpanBody,
}

/// Units per run of `class` for `chunk`-byte chunks, computed from the rule in
/// docs/heap-format.md §6 (48 units per bitmap word, marker and bitmap padded to 64 bytes),
/// or `None` if fewer than 8 fit.
fn units_per_run(chunk: u64, class: usize) -> Option<u64> {
    let unit = SIZE_CLASSES[class];
    (0..=chunk / unit)
        .rev()
        .find(|&units| (8 + 8 * units.div_ceil(48)).next_multiple_of(64) + units * unit <= chunk)
        .filter(|&units| units >= 8)
}

fn data_offset(units: u64) -> u64 {
    (8 + 8 * units.div_ceil(48)).next_multiple_of(64)
}

/// What a reservation of `size` must take: `Ok(class)` or `Err(chunks of the span)`.
fn expected_block(chunk: u64, size: u64) -> Result<usize, u64> {
    let size = size.max(1);
    (0..SIZE_CLASSES.len())
        .find(|&c| SIZE_CLASSES[c] >= size && units_per_run(chunk, c).is_some())
        .ok_or(size.div_ceil(chunk))
}

struct Model {
    region: Region,
    layout: Layout,
    pm: SimPm,
    heap: Heap,
    chunks: Vec<Kind>,
    /// Blocks that exist in the heap's DRAM index: reserved, published or being freed.
    blocks: BTreeMap<u64, u64>,
    reservations: Vec<Reservation>,
    published: BTreeSet<u64>,
    freeings: Vec<Freeing>,
    fault: Option<Fault>,
}

#[derive(Clone, Debug)]
enum Op {
    Reserve(usize),
    /// A size of the largest usable class: its runs of 10 units fill quickly.
    ReserveLargeClass(usize),
    Cancel(usize),
    Publish(usize),
    PrepareFree(usize),
    CommitFree(usize),
    CancelFree(usize),
    BadFree(usize),
    Fault(Fault),
    Reopen,
    Crash,
}

impl Model {
    fn new(region: Region, shift: u32) -> Self {
        let pm = SimPm::new(region.end(), SimConfig::default());
        let heap = Heap::format(&pm, region, shift).expect("format");
        let layout = *heap.layout();
        Model {
            region,
            layout,
            pm,
            heap,
            chunks: vec![Kind::Free; layout.chunk_count as usize],
            blocks: BTreeMap::new(),
            reservations: Vec::new(),
            published: BTreeSet::new(),
            freeings: Vec::new(),
            fault: None,
        }
    }

    fn chunk_size(&self) -> u64 {
        self.layout.chunk_size()
    }

    /// Sizes at every boundary the docs name, for this geometry.
    fn sizes(&self) -> Vec<u64> {
        let chunk = self.chunk_size();
        let whole = self.layout.chunk_count * chunk;
        let mut sizes = vec![0, 1, chunk - 1, chunk, chunk + 1, 2 * chunk + 1];
        sizes.extend([
            whole - 1,
            whole,
            whole + 1,
            u64::MAX,
            u64::from(u32::MAX) * chunk + 1,
        ]);
        for unit in SIZE_CLASSES {
            sizes.extend([unit - 1, unit, unit + 1]);
        }
        sizes
    }

    fn units_in_use(&self, chunk: u64) -> u64 {
        let start = self.layout.chunk_start(chunk);
        self.blocks.range(start..start + self.chunk_size()).count() as u64
    }

    /// Whether chunk `c` is free space: free, or (`counting_empty_runs`) a run with no block
    /// in it, which the heap returns to the free chunks when it finds no free one.
    fn is_space(&self, c: u64, counting_empty_runs: bool) -> bool {
        match self.chunks[c as usize] {
            Kind::Free => true,
            Kind::Run(_) => counting_empty_runs && self.units_in_use(c) == 0,
            Kind::SpanHead | Kind::SpanBody => false,
        }
    }

    /// Whether the model has room for a block of `size`; with `counting_empty_runs`, the
    /// empty runs count as the free chunks they can become.
    fn has_room(&self, size: u64, counting_empty_runs: bool) -> bool {
        let space: Vec<bool> = (0..self.layout.chunk_count)
            .map(|c| self.is_space(c, counting_empty_runs))
            .collect();
        match expected_block(self.chunk_size(), size) {
            Ok(class) => {
                let units = units_per_run(self.chunk_size(), class).expect("usable");
                space.iter().any(|&s| s)
                    || (0..self.layout.chunk_count).any(|c| {
                        self.chunks[c as usize] == Kind::Run(class) && self.units_in_use(c) < units
                    })
            }
            Err(span) => {
                span <= u64::from(u32::MAX)
                    && space
                        .windows(usize::try_from(span).unwrap_or(usize::MAX).max(1))
                        .any(|w| w.iter().all(|&s| s))
            }
        }
    }

    /// The chunk whose descriptor is at `addr`.
    fn chunk_of_descriptor(&self, addr: u64) -> u64 {
        (0..self.layout.chunk_count)
            .find(|&c| self.layout.descriptor_at(c) == addr)
            .expect("a descriptor's address")
    }

    /// Applies to the model one system change the heap made durable (`actions`, of which
    /// `durable` reached the media): a run creation, or runs returned to the free chunks.
    fn system_change(&mut self, actions: &[Action], durable: usize, could_do_without: bool) {
        match actions[0] {
            Action::InitRun { .. } => {
                if durable >= actions.len() {
                    self.run_created(actions[0]);
                }
            }
            Action::Set { value: 0, .. } => {
                assert!(
                    !could_do_without,
                    "runs returned while the request fitted without"
                );
                for (i, action) in actions[..durable].iter().enumerate() {
                    let Action::Set { addr, value: 0 } = *action else {
                        panic!("a run return sets descriptors and markers to 0, not {action:?}");
                    };
                    if i % 2 == 1 {
                        // The marker of the run whose descriptor the action before freed.
                        let Action::Set {
                            addr: descriptor, ..
                        } = actions[i - 1]
                        else {
                            unreachable!("checked on the previous action");
                        };
                        let chunk = self.chunk_of_descriptor(descriptor);
                        assert_eq!(addr, self.layout.chunk_start(chunk), "not its marker");
                        continue;
                    }
                    let chunk = self.chunk_of_descriptor(addr);
                    assert!(
                        matches!(self.chunks[chunk as usize], Kind::Run(_)),
                        "chunk {chunk} returned but not a run"
                    );
                    assert_eq!(self.units_in_use(chunk), 0, "a run returned with blocks");
                    self.chunks[chunk as usize] = Kind::Free;
                }
            }
            other => panic!("unexpected system change starting with {other:?}"),
        }
    }

    fn run_created(&mut self, action: Action) {
        let Action::InitRun { addr, class, .. } = action else {
            panic!("a run creation starts with InitRun, not {action:?}");
        };
        let chunk = self.layout.chunk_of(addr).expect("in the chunk area");
        assert_eq!(self.layout.chunk_start(chunk), addr, "a run starts a chunk");
        assert_eq!(
            self.chunks[chunk as usize],
            Kind::Free,
            "run over a busy chunk"
        );
        // No free space is lost: a new run only when every run of its class is full.
        let class = usize::from(class);
        let units = units_per_run(self.chunk_size(), class).expect("usable");
        let roomy = (0..self.layout.chunk_count)
            .find(|&c| self.chunks[c as usize] == Kind::Run(class) && self.units_in_use(c) < units);
        assert_eq!(
            roomy, None,
            "a new run of class {class} while this one has room"
        );
        self.chunks[chunk as usize] = Kind::Run(class);
    }

    fn check_usage(&self) {
        let usage = self.heap.usage();
        assert_eq!(usage.allocated_blocks, self.blocks.len() as u64, "blocks");
        assert_eq!(
            usage.allocated_bytes,
            self.blocks.values().sum::<u64>(),
            "bytes"
        );
        let count = |k: fn(&Kind) -> bool| self.chunks.iter().filter(|c| k(c)).count() as u64;
        assert_eq!(
            usage.free_chunks,
            count(|c| *c == Kind::Free),
            "free chunks"
        );
        assert_eq!(usage.runs, count(|c| matches!(c, Kind::Run(_))), "runs");
    }

    fn reserve(&mut self, size: u64) {
        let has_room = self.has_room(size, true);
        let fits_as_is = self.has_room(size, false);
        let fault = self.fault.take();
        let pm = self.pm.clone();
        // Each system change the heap asked for, with how many of its actions are durable.
        let mut changes: Vec<(Vec<Action>, usize)> = Vec::new();
        let mut system = |actions: &[Action]| match fault {
            None => {
                apply_durably(&pm, actions);
                changes.push((actions.to_vec(), actions.len()));
                Ok(())
            }
            Some(Fault::Fail) => Err(EngineError::SystemCommitFailed),
            Some(Fault::CrashAfter(n)) => {
                let durable = n.min(actions.len());
                apply_durably(&pm, &actions[..durable]);
                // What is durable exists, even if the engine never returned.
                changes.push((actions.to_vec(), durable));
                Err(EngineError::SystemCommitFailed)
            }
        };
        let result = self.heap.reserve(size, &mut system);
        for (actions, durable) in changes {
            self.system_change(&actions, durable, fits_as_is);
        }
        match result {
            Ok(r) => self.reserved(size, r),
            Err(EngineError::Heap(HeapError::OutOfSpace { .. })) => {
                assert!(!has_room, "OutOfSpace for {size} bytes with room left");
            }
            Err(EngineError::SystemCommitFailed) => {
                assert!(fault.is_some(), "the system commit failed unasked");
                if matches!(fault, Some(Fault::CrashAfter(_))) {
                    self.crash();
                }
            }
            Err(other) => panic!("reserve({size}): {other:?}"),
        }
    }

    /// Checks a new reservation against the model and records it.
    fn reserved(&mut self, requested: u64, r: Reservation) {
        let chunk_size = self.chunk_size();
        let chunk = self
            .layout
            .chunk_of(r.addr)
            .expect("block in the chunk area");
        let start = self.layout.chunk_start(chunk);
        match expected_block(chunk_size, requested) {
            Ok(class) => {
                assert_eq!(r.size, SIZE_CLASSES[class], "{requested} bytes rounded");
                assert_eq!(
                    self.chunks[chunk as usize],
                    Kind::Run(class),
                    "unit outside a run"
                );
                let units = units_per_run(chunk_size, class).expect("usable");
                let offset = r.addr - start;
                assert!(offset >= data_offset(units), "unit over the run's bitmap");
                assert_eq!((offset - data_offset(units)) % r.size, 0, "unit misaligned");
                assert!(offset + r.size <= chunk_size, "unit past its chunk");
            }
            Err(span) => {
                assert_eq!(r.size, span * chunk_size, "{requested} bytes rounded");
                assert_eq!(r.addr, start, "a span starts a chunk");
                for c in chunk..chunk + span {
                    assert_eq!(
                        self.chunks[c as usize],
                        Kind::Free,
                        "span over a busy chunk"
                    );
                    self.chunks[c as usize] = Kind::SpanBody;
                }
                self.chunks[chunk as usize] = Kind::SpanHead;
            }
        }
        let before = self.blocks.range(..r.addr + r.size).next_back();
        assert!(
            before.is_none_or(|(&a, &s)| a + s <= r.addr),
            "{r:?} overlaps the block at {before:?}"
        );
        self.blocks.insert(r.addr, r.size);
        self.reservations.push(r);
    }

    fn release(&mut self, addr: u64) {
        let size = self.blocks.remove(&addr).expect("a block");
        let chunk = self.layout.chunk_of(addr).expect("in the chunk area");
        if self.chunks[chunk as usize] == Kind::SpanHead {
            let span = size / self.chunk_size();
            for c in chunk..chunk + span {
                self.chunks[c as usize] = Kind::Free;
            }
        }
    }

    fn pick<T>(items: &[T], pick: usize) -> Option<usize> {
        (!items.is_empty()).then(|| pick % items.len())
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Reserve(pick) => {
                let sizes = self.sizes();
                self.reserve(sizes[pick % sizes.len()]);
            }
            Op::ReserveLargeClass(pick) => {
                let chunk = self.chunk_size();
                let usable = (0..SIZE_CLASSES.len())
                    .filter(|&c| units_per_run(chunk, c).is_some())
                    .count();
                self.reserve(SIZE_CLASSES[usable - 1] - (pick % 2) as u64);
            }
            Op::Cancel(pick) => {
                if let Some(i) = Self::pick(&self.reservations, pick) {
                    let r = self.reservations.swap_remove(i);
                    self.heap.cancel(&r);
                    self.release(r.addr);
                }
            }
            Op::Publish(pick) => {
                if let Some(i) = Self::pick(&self.reservations, pick) {
                    let r = self.reservations.swap_remove(i);
                    commit(&self.pm, &[self.heap.publish_action(&r)]).expect("publish");
                    self.published.insert(r.addr);
                }
            }
            Op::PrepareFree(pick) => {
                let candidates: Vec<u64> = self
                    .published
                    .iter()
                    .copied()
                    .filter(|a| self.freeings.iter().all(|f| f.addr != *a))
                    .collect();
                if let Some(i) = Self::pick(&candidates, pick) {
                    let freeing = self.heap.prepare_free(candidates[i]).expect("prepare_free");
                    assert_eq!(freeing.len, self.blocks[&freeing.addr], "freeing length");
                    self.freeings.push(freeing);
                }
            }
            Op::CommitFree(pick) => {
                if let Some(i) = Self::pick(&self.freeings, pick) {
                    let freeing = self.freeings.swap_remove(i);
                    commit(&self.pm, &[self.heap.free_action(&freeing)]).expect("free");
                    self.heap.finish_free(&freeing);
                    self.published.remove(&freeing.addr);
                    self.release(freeing.addr);
                }
            }
            Op::CancelFree(pick) => {
                if let Some(i) = Self::pick(&self.freeings, pick) {
                    let freeing = self.freeings.swap_remove(i);
                    self.heap.cancel_free(&freeing);
                }
            }
            Op::BadFree(pick) => {
                let published: Vec<u64> = self.published.iter().copied().collect();
                if let Some(i) = Self::pick(&published, pick) {
                    let addr = published[i];
                    for bad in [addr + 8, addr - 8] {
                        let refused = self.heap.prepare_free(bad);
                        assert!(
                            matches!(refused, Err(HeapError::InvalidFree(a)) if a == bad),
                            "free of {bad:#x}: {refused:?}"
                        );
                    }
                    if let Some(f) = self.freeings.iter().find(|f| f.addr == addr) {
                        let refused = self.heap.prepare_free(f.addr);
                        assert!(
                            matches!(refused, Err(HeapError::BeingFreed(_))),
                            "{refused:?}"
                        );
                    }
                }
            }
            Op::Fault(fault) => self.fault = Some(fault),
            Op::Reopen => {
                let region = self.region;
                self.forget_dram();
                self.heap = Heap::open(&self.pm, region).expect("reopen");
                self.check_survivors();
            }
            Op::Crash => self.crash(),
        }
        self.check_usage();
    }

    /// What a crash or a reopen loses: reservations (their chunks are free again) and
    /// frees not committed (their blocks stay allocated).
    fn forget_dram(&mut self) {
        for r in std::mem::take(&mut self.reservations) {
            self.release(r.addr);
        }
        self.freeings.clear();
    }

    fn crash(&mut self) {
        let region = self.region;
        self.forget_dram();
        self.pm = SimPm::from_image(self.pm.durable_image(), SimConfig::default());
        self.heap = Heap::open(&self.pm, region).expect("recover");
        self.check_survivors();
    }

    /// Every published block is allocated after a reopen, at its size.
    fn check_survivors(&self) {
        self.check_usage();
        for &addr in &self.published {
            let freeing = self
                .heap
                .prepare_free(addr)
                .expect("a published block survives");
            assert_eq!(freeing.len, self.blocks[&addr]);
            self.heap.cancel_free(&freeing);
        }
    }

    /// Frees everything, reopens, and checks the heap is empty.
    fn drain(&mut self) {
        self.apply(Op::Reopen);
        for addr in std::mem::take(&mut self.published) {
            let freeing = self.heap.prepare_free(addr).expect("prepare_free");
            commit(&self.pm, &[self.heap.free_action(&freeing)]).expect("free");
            self.heap.finish_free(&freeing);
            self.release(addr);
        }
        self.apply(Op::Crash);
        assert_eq!(self.heap.usage().allocated_blocks, 0);
    }
}

fn op() -> impl Strategy<Value = Op> {
    let pick = any::<usize>;
    prop_oneof![
        6 => pick().prop_map(Op::Reserve),
        6 => pick().prop_map(Op::ReserveLargeClass),
        2 => pick().prop_map(Op::Cancel),
        5 => pick().prop_map(Op::Publish),
        3 => pick().prop_map(Op::PrepareFree),
        3 => pick().prop_map(Op::CommitFree),
        1 => pick().prop_map(Op::CancelFree),
        1 => pick().prop_map(Op::BadFree),
        1 => prop_oneof![
            Just(Fault::Fail),
            Just(Fault::CrashAfter(0)),
            Just(Fault::CrashAfter(1)),
            Just(Fault::CrashAfter(2)),
        ]
        .prop_map(Op::Fault),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn the_heap_behaves_as_its_model(
        shift in prop_oneof![Just(12u32), Just(14)],
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        // 96 KiB: 22 chunks of 4 KiB or 5 of 16 KiB, so random sequences run out of space.
        let region = Region { offset: 4096, len: 96 * 1024 };
        let mut model = Model::new(region, shift);
        for op in ops {
            model.apply(op);
        }
        model.drain();
    }
}

#[test]
fn the_model_knows_the_documented_rounding() {
    // docs/heap-format.md §6: 16 KiB chunks use classes 0..=12 (1536 bytes, 10 units).
    assert_eq!(units_per_run(1 << 14, 12), Some(10));
    assert_eq!(units_per_run(1 << 14, 13), None);
    assert_eq!(units_per_run(1 << 12, 0), Some(252));
    assert_eq!(units_per_run(1 << 18, 19), Some(15));
    assert_eq!(expected_block(1 << 14, 0), Ok(0));
    assert_eq!(expected_block(1 << 14, 1537), Err(1));
    assert_eq!(expected_block(1 << 12, 385), Err(1));
}
