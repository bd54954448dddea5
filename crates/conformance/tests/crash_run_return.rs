//! Run return crashed at every fence: a workload whose operations free blocks of one size
//! class and allocate blocks of another class or a large block in a heap with no free chunk
//! left, so every operation after the first can allocate only once the heap gives back runs
//! that an earlier operation emptied (docs/heap-format.md §14). Redo, undo and MVCC, under
//! ADR and eADR, through the crash simulator: a crash before every fence (structured and
//! random images), recovery, a crash during recovery, the workload's check of the durable
//! bytes of every live block, the model of durable operations and the heap's block count.
//!
//! Before runs were returned, the crash-free run that builds the model failed at operation
//! 1 with `OutOfSpace`.

use conformance::catalogue::POOL;
use conformance::{EngineScenario, Factory, LAYOUT, MvccFactory, RedoFactory, UndoFactory};
use crashsim::{Config, SimMode, SimPm, check};
use mvcc::Mvcc;
use pmem::{CreateOptions, Pool};
use tx::{Engine, LogMode, NoReplay, PPtr, Redo, Tx, TxError, TxResult, Undo};
use workloads::{OpKind, Workload};

/// Seed of the random image choices.
const SEED: u64 = 11;

/// Slots for the churned blocks: pointer words at the start of the root object (whose
/// first word heads the ballast chain).
const SLOTS: usize = 16;
const SLOT_BASE: u64 = 8;

/// Sizes of the churned blocks at the crash tests' 4 KiB chunks: four small classes and
/// large blocks of one and two chunks (spans).
const A: u64 = 384;
const B: u64 = 256;
const C: u64 = 192;
const D: u64 = 128;
const L: u64 = 4096;
const L2: u64 = 8192;
/// The ballast: spans of 16 chunks and of one that hold all but `FREE_CHUNKS` chunks for
/// good.
const BALLAST: u64 = 4096;
const FREE_CHUNKS: usize = 4;
/// What setup allocates in the chunks the ballast leaves, in slot order: one run of each
/// class, two blocks in each (Q0: A, Q1: B, Q2: C, Q3: D).
const INITIAL: [u64; 8] = [A, A, B, B, C, C, D, D];

/// Operation `i` frees `free.1` blocks of size `free.0` (the live ones in the lowest slots)
/// and allocates `alloc.1` blocks of size `alloc.0` (into the lowest empty slots), in one
/// transaction. The heap has no free chunk before any of them, and blocks freed by an
/// operation are reusable only after it commits, so what an operation allocates must come
/// from runs that earlier operations emptied. In the chunks Q0..Q3 the ballast leaves:
///
/// | op | frees | allocates | into (returned runs) |
/// |---|---|---|---|
/// | 0 | the A (Q0) | — | — |
/// | 1 | the B (Q1) | — | — |
/// | 2 | the C (Q2) | a large block of 2 chunks | Q0 and Q1 (its head and body) |
/// | 3 | the D (Q3) | a run of A | Q2 |
/// | 4 | the A (Q2) | a run of B | Q3 |
/// | 5 | the B (Q3) | a large block of 1 chunk | Q2 |
/// | 6 | the large block of 2 chunks | a run of C | Q3 |
///
/// Operation 2 is the one a return that is not durable before the span's publish breaks:
/// recovery would find the span's body chunk still described as a run.
const PLAN: [((u64, usize), (u64, usize)); 7] = [
    ((A, 2), (L, 0)),
    ((B, 2), (L, 0)),
    ((C, 2), (L2, 1)),
    ((D, 2), (A, 2)),
    ((A, 2), (B, 2)),
    ((B, 2), (L, 1)),
    ((L2, 1), (C, 2)),
];

/// Runs in the heap after setup and after each operation of [`PLAN`] (the ballast and the
/// large blocks are spans).
const RUNS: [u64; 8] = [4, 4, 4, 2, 2, 2, 1, 1];

/// A slot's block: its size and the stamp its bytes carry.
type Slot = Option<(u64, u64)>;

/// The stamp of the `j`-th block operation `op` allocates (`None`: setup).
fn stamp(op: Option<usize>, j: usize) -> u64 {
    (op.map_or(0, |op| op as u64 + 1) << 20) | j as u64
}

/// The bytes written at the start of a block (and, for large blocks, at its end): the stamp, the
/// size and two words derived from both, so a torn, stale or misplaced write shows.
fn stamp_bytes(stamp: u64, size: u64, tail: bool) -> [u8; 32] {
    let mix = stamp.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(tail);
    let words = [stamp, size, mix, mix ^ size.rotate_left(17)];
    let mut bytes = [0u8; 32];
    for (at, word) in words.iter().enumerate() {
        bytes[8 * at..8 * at + 8].copy_from_slice(&word.to_le_bytes());
    }
    bytes
}

fn write_block<T: Tx>(tx: &mut T, block: PPtr, size: u64, stamp: u64) -> TxResult<()> {
    tx.write(block, 0, &stamp_bytes(stamp, size, false))?;
    if size >= L {
        tx.write(block, size - 32, &stamp_bytes(stamp, size, true))?;
    }
    Ok(())
}

/// The stamp of a block of `size`, if its bytes are intact.
fn read_block<T: Tx>(tx: &mut T, block: PPtr, size: u64) -> TxResult<Result<u64, String>> {
    let mut head = [0u8; 32];
    tx.read(block, 0, &mut head)?;
    let stamp = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    if head != stamp_bytes(stamp, size, false) {
        return Ok(Err(format!(
            "block {block:?} of {size} bytes: head {head:?}"
        )));
    }
    if size >= L {
        let mut tail = [0u8; 32];
        tx.read(block, size - 32, &mut tail)?;
        if tail != stamp_bytes(stamp, size, true) {
            return Ok(Err(format!(
                "block {block:?} of {size} bytes: tail {tail:?}"
            )));
        }
    }
    Ok(Ok(stamp))
}

/// The slots' pointers and the sizes their blocks' heads record.
fn read_slots<T: Tx>(tx: &mut T) -> TxResult<Vec<Option<(PPtr, u64)>>> {
    let root = tx.root::<()>();
    let mut slots = Vec::with_capacity(SLOTS);
    for i in 0..SLOTS as u64 {
        let block: PPtr = tx.read_ptr(root, SLOT_BASE + 8 * i)?;
        slots.push(if block.is_null() {
            None
        } else {
            Some((block, tx.read_u64(block, 8)?))
        });
    }
    Ok(slots)
}

/// Which slots operation `op` frees and fills, from the slots' sizes (the same choice for
/// the engine and the model).
fn choose(sizes: &[Option<u64>], op: usize) -> (Vec<usize>, Vec<usize>) {
    let ((free_size, frees), (_, allocs)) = PLAN[op];
    let freed: Vec<usize> = (0..SLOTS)
        .filter(|&i| sizes[i] == Some(free_size))
        .take(frees)
        .collect();
    let filled: Vec<usize> = (0..SLOTS)
        .filter(|&i| sizes[i].is_none() || freed.contains(&i))
        .take(allocs)
        .collect();
    (freed, filled)
}

/// The churn: setup fills the heap (ballast spans, then a run of each class in the last
/// chunks);
/// each operation is a row of [`PLAN`].
#[derive(Debug)]
struct Churn;

impl Workload for Churn {
    type Model = Vec<Slot>;

    fn name(&self) -> String {
        "run-churn".into()
    }

    fn setup<E: Engine>(&self, engine: &E) -> TxResult<()> {
        // The chunks the churn uses: the first `FREE_CHUNKS`, held while the ballast takes
        // every other chunk, then freed.
        let reserved: Vec<PPtr> = engine.transaction(|tx| {
            (0..FREE_CHUNKS)
                .map(|_| tx.alloc(L))
                .collect::<TxResult<Vec<PPtr>>>()
        })?;
        // Ballast: spans of 16 chunks, then of one, until the heap is full, chained from
        // the root's first word (each block's word 4 links the one allocated before it).
        let mut ballast = 0u64;
        for size in [16 * BALLAST, BALLAST] {
            loop {
                let added = engine.transaction(|tx| {
                    let root = tx.root::<()>();
                    let block: PPtr = match tx.alloc(size) {
                        Ok(block) => block,
                        Err(TxError::OutOfSpace { .. }) => return Ok(false),
                        Err(other) => return Err(other),
                    };
                    write_block(tx, block, size, u64::MAX - ballast)?;
                    let head: PPtr = tx.read_ptr(root, 0)?;
                    tx.write_ptr(block, 32, head)?;
                    tx.write_ptr(root, 0, block)?;
                    Ok::<_, TxError>(true)
                })?;
                if !added {
                    break;
                }
                ballast += 1;
            }
        }
        engine.transaction(|tx| reserved.iter().try_for_each(|&block| tx.free(block)))?;
        // A run of each class in them, two blocks in each.
        engine.transaction(|tx| {
            let root = tx.root::<()>();
            for (j, &size) in INITIAL.iter().enumerate() {
                let block: PPtr = tx.alloc(size)?;
                write_block(tx, block, size, stamp(None, j))?;
                tx.write_ptr(root, SLOT_BASE + 8 * j as u64, block)?;
            }
            Ok::<_, TxError>(())
        })?;
        // Recovery then starts from a checkpointed setup: it replays only the crash-tested
        // operations (and a crash during it has only their writes pending).
        engine.sync()
    }

    fn run_op<E: Engine>(&self, engine: &E, _thread: usize, index: u64) -> TxResult<OpKind> {
        let op = index as usize % PLAN.len();
        engine.transaction(|tx| {
            let root = tx.root::<()>();
            let slots = read_slots(tx)?;
            let sizes: Vec<Option<u64>> = slots.iter().map(|s| s.map(|(_, size)| size)).collect();
            let (freed, filled) = choose(&sizes, op);
            for &i in &freed {
                let (block, _) = slots[i].expect("chosen among live slots");
                tx.free(block)?;
                tx.write_ptr(root, SLOT_BASE + 8 * i as u64, PPtr::<()>::null())?;
            }
            let size = PLAN[op].1.0;
            for (j, &i) in filled.iter().enumerate() {
                let block: PPtr = tx.alloc(size)?;
                write_block(tx, block, size, stamp(Some(op), j))?;
                tx.write_ptr(root, SLOT_BASE + 8 * i as u64, block)?;
            }
            Ok(OpKind::Business)
        })
    }

    fn check<E: Engine>(&self, engine: &E) -> Result<Vec<Slot>, String> {
        engine
            .read_only(|tx| {
                let root = tx.root::<()>();
                let mut head: PPtr = tx.read_ptr(root, 0)?;
                let mut seen = 0u64;
                while !head.is_null() {
                    if seen > POOL / BALLAST {
                        return Ok(Err("the ballast chain loops".to_owned()));
                    }
                    let size = tx.read_u64(head, 8)?;
                    if size != BALLAST && size != 16 * BALLAST {
                        return Ok(Err(format!("ballast block {head:?} of {size} bytes")));
                    }
                    if let Err(bad) = read_block(tx, head, size)? {
                        return Ok(Err(format!("ballast: {bad}")));
                    }
                    head = tx.read_ptr(head, 32)?;
                    seen += 1;
                }
                let mut model = Vec::with_capacity(SLOTS);
                for slot in read_slots(tx)? {
                    model.push(match slot {
                        None => None,
                        Some((block, size)) => match read_block(tx, block, size)? {
                            Ok(stamp) => Some((size, stamp)),
                            Err(bad) => return Ok(Err(bad)),
                        },
                    });
                }
                Ok::<_, TxError>(Ok(model))
            })
            .map_err(|e| e.to_string())?
    }

    fn initial_model(&self) -> Vec<Slot> {
        (0..SLOTS)
            .map(|j| INITIAL.get(j).map(|&size| (size, stamp(None, j))))
            .collect()
    }

    fn apply_to_model(&self, model: &mut Vec<Slot>, _thread: usize, index: u64) {
        let op = index as usize % PLAN.len();
        let sizes: Vec<Option<u64>> = model.iter().map(|s| s.map(|(size, _)| size)).collect();
        let (freed, filled) = choose(&sizes, op);
        for i in freed {
            model[i] = None;
        }
        let size = PLAN[op].1.0;
        for (j, i) in filled.into_iter().enumerate() {
            model[i] = Some((size, stamp(Some(op), j)));
        }
    }
}

/// The heap of each engine the scenario runs.
trait Runs {
    fn runs(&self) -> u64;
}
impl Runs for Redo<SimPm> {
    fn runs(&self) -> u64 {
        self.heap().usage().runs
    }
}
impl Runs for Undo<SimPm> {
    fn runs(&self) -> u64 {
        self.heap().usage().runs
    }
}
impl Runs for Mvcc<SimPm, NoReplay> {
    fn runs(&self) -> u64 {
        self.heap().usage().runs
    }
}

/// Runs the churn without crashes and checks that it returns runs where [`PLAN`] says
/// (`RUNS`); then crashes it at every fence under ADR and eADR.
fn churn<F: Factory + Clone>(factory: &F)
where
    F::Engine<SimPm>: Runs,
{
    let pm = SimPm::new(POOL, Default::default());
    let pool = Pool::format(pm, &CreateOptions::new(LAYOUT, POOL)).expect("format");
    let engine = factory.create(pool).expect("create");
    Churn.setup(&engine).expect("setup");
    let mut runs = vec![engine.runs()];
    for op in 0..PLAN.len() {
        Churn
            .run_op(&engine, 0, op as u64)
            .unwrap_or_else(|e| panic!("{}: operation {op}: {e:?}", factory.name()));
        runs.push(engine.runs());
    }
    assert_eq!(
        runs,
        RUNS,
        "{}: runs after setup and each operation",
        factory.name()
    );
    drop(engine);

    for mode in [SimMode::Adr, SimMode::Eadr] {
        let scenario = EngineScenario::new(factory.clone(), Churn, PLAN.len(), POOL);
        let report = check(&scenario, &Config::thorough(mode, SEED));
        eprintln!("{report}");
        report.assert_passed();
        assert!(report.crash_points >= 3, "too few crash points: {report}");
    }
}

#[test]
fn redo_returns_runs_crash_consistently() {
    churn(&RedoFactory::small(LogMode::Auto));
}

#[test]
fn undo_returns_runs_crash_consistently() {
    churn(&UndoFactory::small(LogMode::Auto));
}

#[test]
fn mvcc_returns_runs_crash_consistently() {
    churn(&MvccFactory::small(NoReplay));
}
