//! Model-based tests of the redo and undo engines: random histories of transactions (writes
//! of random sizes and alignments across cache lines and pages, allocations of units and of
//! multi-chunk spans, frees, `alloc_zeroed`, a block allocated and freed in one transaction,
//! reads checked inside the transaction, aborts by error and by panic) run against a
//! sequential model, under lanes of 4 KiB so that the redo rings wrap and checkpoint all the
//! time; random crash images after transactions (a committed transaction must survive every
//! one), with a second crash inside recovery and the run continued on the recovered pool;
//! crashes at every fence of short random histories (`crashsim::check`, double crash on);
//! 2–4 threads under invariants (conserved sums, untorn multi-line records, objects whose
//! bytes name their seed), crashed at arbitrary moments while they run; and damaged pools,
//! which must open as a typed error or as a state the damage can explain, never panic.
//!
//! `TX_MODEL_SOAK=N` multiplies the number of cases (a longer run outside CI).

use crashsim::image::choices;
use crashsim::{Budget, Config, DoubleCrash, Scenario, SimMode, SimPm, Snapshot};
use parking_lot::Mutex;
use pmem::{CreateOptions, Pool};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tx::{Engine, EngineOptions, LogMode, PPtr, Redo, Tx, TxError, TxResult, Undo};

const LAYOUT: &str = "tx-model";
/// Object slots at the start of the root: 16 bytes each, the object's pointer and length.
const SLOTS: usize = 6;
/// A byte array in the root written at any offset and length.
const BLOB: u64 = 128;
const BLOB_LEN: usize = 2400;
/// Largest object: two 4 KiB chunks and a bit, so its writes cross pages.
const MAX_OBJECT: u16 = 8500;

fn soak() -> u32 {
    std::env::var("TX_MODEL_SOAK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// Engine options that make every mechanism run constantly: 4 KiB lanes (redo rings wrap
/// every few transactions, undo's entry area holds about 3 KiB), two lanes, 4 KiB chunks.
fn options(mode: LogMode) -> EngineOptions {
    EngineOptions {
        lanes: 2,
        lane_size: 4096,
        chunk_shift: 12,
        log_mode: mode,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Undo,
    Redo,
}

enum Live {
    Undo(Undo<SimPm>),
    Redo(Redo<SimPm>),
}

/// Runs `$body` with `$e` bound to the engine of `$live`, whichever it is.
macro_rules! with_engine {
    ($live:expr, $e:ident => $body:expr) => {
        match $live {
            Live::Undo($e) => $body,
            Live::Redo($e) => $body,
        }
    };
}

impl Live {
    fn create(kind: Kind, pm: SimPm, pool_size: u64, mode: LogMode) -> Live {
        let pool = Pool::format(pm, &CreateOptions::new(LAYOUT, pool_size)).expect("format");
        match kind {
            Kind::Undo => Live::Undo(Undo::create(pool, &options(mode)).expect("undo")),
            Kind::Redo => Live::Redo(Redo::create(pool, &options(mode)).expect("redo")),
        }
    }

    fn open(kind: Kind, pm: SimPm, mode: LogMode) -> TxResult<Live> {
        let pool = Pool::attach(pm, LAYOUT)?;
        Ok(match kind {
            Kind::Undo => Live::Undo(Undo::open(pool, &options(mode))?),
            Kind::Redo => Live::Redo(Redo::open(pool, &options(mode))?),
        })
    }

    fn blocks(&self) -> u64 {
        with_engine!(self, e => e.heap().usage().allocated_blocks)
    }
}

/// The byte at position `i` of a write made with `seed`.
fn fill(seed: u8, i: usize) -> u8 {
    (u32::from(seed) * 131 + i as u32 * 17 + (i as u32 >> 8) * 3) as u8
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| fill(seed, i)).collect()
}

/// The logical state: the blob, each slot's object bytes, and the heap's block count.
#[derive(Clone, PartialEq, Eq)]
struct Model {
    blob: Vec<u8>,
    slots: Vec<Option<Vec<u8>>>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let digest = crc32fast::hash;
        let slots: Vec<String> = self
            .slots
            .iter()
            .map(|s| {
                s.as_ref()
                    .map_or("-".into(), |b| format!("{}:{:08x}", b.len(), digest(b)))
            })
            .collect();
        write!(f, "blob {:08x} slots {slots:?}", digest(&self.blob))
    }
}

impl Model {
    fn new() -> Self {
        Model {
            blob: vec![0; BLOB_LEN],
            slots: vec![None; SLOTS],
        }
    }

    fn blocks(&self) -> u64 {
        self.slots.iter().filter(|s| s.is_some()).count() as u64
    }
}

/// One step of a transaction.
#[derive(Clone, Copy, Debug)]
enum Step {
    BlobWrite {
        off: u16,
        len: u16,
        seed: u8,
    },
    BlobRead {
        off: u16,
        len: u16,
    },
    /// Allocates `size` bytes into `slot` (freeing the object there first, if any). A zeroed
    /// allocation writes only its first third; the rest must read as zeros.
    Alloc {
        slot: u8,
        size: u16,
        seed: u8,
        zeroed: bool,
    },
    Free {
        slot: u8,
    },
    ObjWrite {
        slot: u8,
        off: u16,
        len: u16,
        seed: u8,
    },
    ObjRead {
        slot: u8,
        off: u16,
        len: u16,
    },
    /// Allocates a block and frees it again in the same transaction.
    AllocFree {
        size: u16,
        zeroed: bool,
    },
}

/// How a transaction ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Commit,
    Abort,
    Panic,
}

#[derive(Clone, Debug)]
struct Plan {
    steps: Vec<Step>,
    end: End,
}

/// Offsets: mostly anywhere, sometimes word-aligned, sometimes just before a line end.
fn offset(max: u16) -> impl Strategy<Value = u16> {
    prop_oneof![
        4 => 0..max,
        2 => (0..max / 8).prop_map(|w| w * 8),
        1 => (1..max / 64).prop_map(|l| l * 64 - 3),
    ]
}

fn length(max: u16) -> impl Strategy<Value = u16> {
    prop_oneof![
        3 => 0..16u16,
        3 => 16..200u16,
        1 => 200..max,
        1 => Just(8u16),
    ]
}

fn size() -> impl Strategy<Value = u16> {
    prop_oneof![
        3 => 1..64u16,
        2 => 64..=384u16,
        1 => 385..MAX_OBJECT,
    ]
}

fn step(large: bool) -> impl Strategy<Value = Step> {
    let max_len = if large { 1200 } else { 400 };
    let slot = 0..SLOTS as u8;
    prop_oneof![
        4 => (offset(BLOB_LEN as u16), length(max_len), any::<u8>())
            .prop_map(|(off, len, seed)| Step::BlobWrite { off, len, seed }),
        2 => (offset(BLOB_LEN as u16), length(max_len))
            .prop_map(|(off, len)| Step::BlobRead { off, len }),
        2 => (slot.clone(), size(), any::<u8>(), any::<bool>())
            .prop_map(|(slot, size, seed, zeroed)| Step::Alloc { slot, size, seed, zeroed }),
        1 => slot.clone().prop_map(|slot| Step::Free { slot }),
        3 => (slot.clone(), offset(MAX_OBJECT), length(max_len), any::<u8>())
            .prop_map(|(slot, off, len, seed)| Step::ObjWrite { slot, off, len, seed }),
        2 => (slot, offset(MAX_OBJECT), length(max_len))
            .prop_map(|(slot, off, len)| Step::ObjRead { slot, off, len }),
        1 => (size(), any::<bool>()).prop_map(|(size, zeroed)| Step::AllocFree { size, zeroed }),
    ]
}

fn plan(max_steps: usize, large: bool) -> impl Strategy<Value = Plan> {
    let end = prop_oneof![8 => Just(End::Commit), 2 => Just(End::Abort), 1 => Just(End::Panic)];
    (proptest::collection::vec(step(large), 1..max_steps), end)
        .prop_map(|(steps, end)| Plan { steps, end })
}

/// The message of an error that means "the engine disagrees with the model".
const MISMATCH: &str = "model mismatch";

fn mismatch(what: String) -> TxError {
    TxError::Corrupted(format!("{MISMATCH}: {what}"))
}

/// Clips `[off, off + len)` to an object of `size` bytes.
fn clip(off: u16, len: u16, size: usize) -> (usize, usize) {
    let off = usize::from(off) % size.max(1);
    (off, usize::from(len).min(size - off))
}

fn slot_ptr<T: Tx>(tx: &mut T, slot: usize) -> TxResult<(PPtr, u64)> {
    let root = tx.root::<()>();
    let ptr: PPtr = tx.read_ptr(root, 16 * slot as u64)?;
    let len = tx.read_u64(root, 16 * slot as u64 + 8)?;
    Ok((ptr, len))
}

fn set_slot<T: Tx>(tx: &mut T, slot: usize, ptr: PPtr, len: u64) -> TxResult<()> {
    let root = tx.root::<()>();
    tx.write_ptr(root, 16 * slot as u64, ptr)?;
    tx.write_u64(root, 16 * slot as u64 + 8, len)
}

/// Runs `steps` in `tx`, updating `m` (the transaction's view of the model) as it goes and
/// comparing every read with it.
fn run_steps<T: Tx>(tx: &mut T, steps: &[Step], m: &mut Model) -> TxResult<()> {
    let root = tx.root::<()>();
    for (index, &step) in steps.iter().enumerate() {
        match step {
            Step::BlobWrite { off, len, seed } => {
                let (off, len) = clip(off, len, BLOB_LEN);
                let bytes = pattern(seed, len);
                tx.write(root, BLOB + off as u64, &bytes)?;
                m.blob[off..off + len].copy_from_slice(&bytes);
            }
            Step::BlobRead { off, len } => {
                let (off, len) = clip(off, len, BLOB_LEN);
                let mut got = vec![0u8; len];
                tx.read(root, BLOB + off as u64, &mut got)?;
                if got != m.blob[off..off + len] {
                    return Err(mismatch(format!("step {index}: blob read {off}+{len}")));
                }
            }
            Step::Alloc {
                slot,
                size,
                seed,
                zeroed,
            } => {
                let slot = usize::from(slot);
                let (old, _) = slot_ptr(tx, slot)?;
                if !old.is_null() {
                    tx.free(old)?;
                }
                let size = usize::from(size);
                let (ptr, content): (PPtr, Vec<u8>) = if zeroed {
                    let ptr = tx.alloc_zeroed(size as u64)?;
                    let mut content = vec![0u8; size];
                    let head = pattern(seed, size / 3);
                    tx.write(ptr, 0, &head)?;
                    content[..head.len()].copy_from_slice(&head);
                    (ptr, content)
                } else {
                    let ptr = tx.alloc(size as u64)?;
                    let content = pattern(seed, size);
                    tx.write(ptr, 0, &content)?;
                    (ptr, content)
                };
                set_slot(tx, slot, ptr, size as u64)?;
                m.slots[slot] = Some(content);
            }
            Step::Free { slot } => {
                let slot = usize::from(slot);
                let (old, _) = slot_ptr(tx, slot)?;
                if !old.is_null() {
                    tx.free(old)?;
                    set_slot(tx, slot, PPtr::null(), 0)?;
                }
                m.slots[slot] = None;
            }
            Step::ObjWrite {
                slot,
                off,
                len,
                seed,
            } => {
                let slot = usize::from(slot);
                let Some(content) = m.slots[slot].as_mut() else {
                    continue;
                };
                let (ptr, _) = slot_ptr(tx, slot)?;
                let (off, len) = clip(off, len, content.len());
                let bytes = pattern(seed, len);
                tx.write(ptr, off as u64, &bytes)?;
                content[off..off + len].copy_from_slice(&bytes);
            }
            Step::ObjRead { slot, off, len } => {
                let slot = usize::from(slot);
                let Some(content) = m.slots[slot].as_ref() else {
                    continue;
                };
                let (ptr, stored) = slot_ptr(tx, slot)?;
                if stored != content.len() as u64 {
                    return Err(mismatch(format!(
                        "step {index}: slot {slot} length {stored}"
                    )));
                }
                let (off, len) = clip(off, len, content.len());
                let mut got = vec![0u8; len];
                tx.read(ptr, off as u64, &mut got)?;
                if got != content[off..off + len] {
                    return Err(mismatch(format!(
                        "step {index}: slot {slot} read {off}+{len} of {}",
                        content.len()
                    )));
                }
            }
            Step::AllocFree { size, zeroed } => {
                let ptr: PPtr = if zeroed {
                    tx.alloc_zeroed(u64::from(size))?
                } else {
                    tx.alloc(u64::from(size))?
                };
                let bytes = pattern(size as u8, usize::from(size).min(100));
                tx.write(ptr, 0, &bytes)?;
                tx.free(ptr)?;
            }
        }
    }
    Ok(())
}

/// What a transaction did.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Committed,
    /// Aborted as planned, or by a log or heap that could not take it.
    Aborted(String),
}

/// Runs `plan` in `engine`: `Ok` with the outcome (and `m` updated if it committed), `Err`
/// when the engine disagreed with the model or failed in a way no plan can cause.
fn execute<E: Engine>(engine: &E, plan: &Plan, m: &mut Model) -> Result<Outcome, String> {
    let mut view = m.clone();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        engine.transaction(|tx| {
            view = m.clone();
            run_steps(tx, &plan.steps, &mut view)?;
            match plan.end {
                End::Commit => Ok(()),
                End::Abort => Err(TxError::abort("planned")),
                End::Panic => std::panic::panic_any(PlannedPanic),
            }
        })
    }));
    match result {
        Err(payload) if payload.is::<PlannedPanic>() => Ok(Outcome::Aborted("panic".into())),
        Err(payload) => std::panic::resume_unwind(payload),
        Ok(Ok(())) => {
            *m = view;
            Ok(Outcome::Committed)
        }
        Ok(Err(
            error @ (TxError::Aborted(_) | TxError::LogFull { .. } | TxError::OutOfSpace { .. }),
        )) => Ok(Outcome::Aborted(error.to_string())),
        Ok(Err(error)) => Err(format!("transaction failed: {error}")),
    }
}

/// The payload of a planned panic (silenced by [`quiet_planned_panics`]).
struct PlannedPanic;

fn quiet_planned_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<PlannedPanic>() {
                previous(info);
            }
        }));
    });
}

/// Reads the whole logical state back from `engine`.
fn read_model<E: Engine>(engine: &E) -> Result<Model, String> {
    engine
        .transaction(|tx| {
            let root = tx.root::<()>();
            let mut m = Model::new();
            tx.read(root, BLOB, &mut m.blob)?;
            for slot in 0..SLOTS {
                let (ptr, len) = slot_ptr(tx, slot)?;
                if ptr.is_null() {
                    if len != 0 {
                        return Err(mismatch(format!("empty slot {slot} with length {len}")));
                    }
                    continue;
                }
                if len == 0 || len > u64::from(MAX_OBJECT) {
                    return Err(mismatch(format!("slot {slot} with length {len}")));
                }
                let mut bytes = vec![0u8; len as usize];
                tx.read(ptr, 0, &mut bytes)?;
                m.slots[slot] = Some(bytes);
            }
            Ok::<_, TxError>(m)
        })
        .map_err(|e| e.to_string())
}

/// The state of `live`, with its heap's block count checked against the slots.
fn state(live: &Live) -> Result<Model, String> {
    let m = with_engine!(live, e => read_model(e))?;
    if live.blocks() != m.blocks() {
        return Err(format!(
            "the heap holds {} blocks, the slots {} (a leak or a lost block)",
            live.blocks(),
            m.blocks()
        ));
    }
    Ok(m)
}

/// Recovers a crash image: opens it and reads its state.
fn recover(
    kind: Kind,
    mode: LogMode,
    image: Vec<u8>,
    capture: bool,
) -> Result<(Live, SimPm, Model), String> {
    let pm = SimPm::from_image(image, pmem_config());
    pm.set_capture(capture);
    let live = Live::open(kind, pm.clone(), mode).map_err(|e| format!("open: {e}"))?;
    let m = state(&live)?;
    Ok((live, pm, m))
}

fn pmem_config() -> crashsim::SimConfig {
    crashsim::SimConfig::default()
}

/// A random image of `snapshot`: from the structured and random choices of a small budget.
fn random_image(snapshot: &Snapshot, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let picks = choices(
        snapshot,
        &Budget {
            exhaustive_max: 16,
            random: 6,
        },
        rng.random(),
    );
    snapshot.image(&picks[rng.random_range(0..picks.len())])
}

/// Crashes `pm` now with a random image, recovers it (and, half the time, crashes that
/// recovery at a random point and recovers again), and requires `expected` every time.
/// Returns the recovered engine and region, to continue the run on.
fn crash_and_recover(
    kind: Kind,
    mode: LogMode,
    pm: &SimPm,
    expected: &Model,
    rng: &mut ChaCha8Rng,
) -> Result<(Live, SimPm), String> {
    let snapshot = pm.crash_now();
    let image = random_image(&snapshot, rng);
    let (live, recovered_pm, got) = recover(kind, mode, image.clone(), true)?;
    if got != *expected {
        return Err(format!("after a crash: {got:?}, expected {expected:?}"));
    }
    if rng.random_bool(0.5) {
        // Crash inside that recovery (or at its end), and recover again.
        let mut points = recovered_pm.take_snapshots();
        points.push(recovered_pm.crash_now());
        let point = &points[rng.random_range(0..points.len())];
        let second = random_image(point, rng);
        let (live, pm, got) = recover(kind, mode, second, false)?;
        if got != *expected {
            return Err(format!(
                "after a crash in recovery at {}: {got:?}, expected {expected:?}",
                point.kind
            ));
        }
        return Ok((live, pm));
    }
    recovered_pm.set_capture(false);
    Ok((live, recovered_pm))
}

/// Runs a history, checking the state after every transaction, and at random points crashes
/// (a random image, sometimes a second crash in recovery) and continues on the recovered pool.
fn run_history(kind: Kind, mode: LogMode, history: &[Plan], seed: u64) -> Result<(), String> {
    quiet_planned_panics();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let pool_size = 512 << 10;
    let mut pm = SimPm::new(pool_size, pmem_config());
    let mut live = Live::create(kind, pm.clone(), pool_size, mode);
    let mut model = Model::new();
    for (i, plan) in history.iter().enumerate() {
        let outcome = with_engine!(&live, e => execute(e, plan, &mut model))
            .map_err(|e| format!("tx {i}: {e}"))?;
        if plan.end == End::Commit && outcome != Outcome::Committed {
            // Only the heap or log being too small may turn a commit into an abort.
            if let Outcome::Aborted(why) = &outcome
                && !(why.contains("exceeds the lane") || why.contains("out of persistent memory"))
            {
                return Err(format!("tx {i}: {why}"));
            }
        }
        if std::env::var("TX_MODEL_DEBUG").is_ok() {
            eprintln!("{kind:?} tx {i}: {outcome:?}");
        }
        let got = state(&live).map_err(|e| format!("after tx {i}: {e}"))?;
        if got != model {
            return Err(format!(
                "after tx {i} ({outcome:?}): {got:?}, expected {model:?}"
            ));
        }
        if rng.random_ratio(1, 4) {
            let (recovered, recovered_pm) = crash_and_recover(kind, mode, &pm, &model, &mut rng)
                .map_err(|e| format!("crash after tx {i}: {e}"))?;
            // The old engine's drop would write to a region nobody reads again.
            drop(std::mem::replace(&mut live, recovered));
            pm = recovered_pm;
        }
    }
    Ok(())
}

/// Histories of mostly short transactions, some with up to 40 steps (past the write set's
/// 24-write index threshold).
fn history(max_txs: usize, large: bool) -> impl Strategy<Value = Vec<Plan>> {
    let plan = prop_oneof![4 => plan(8, large), 1 => plan(40, large)];
    proptest::collection::vec(plan, 1..max_txs)
}

fn cases(base: u32) -> ProptestConfig {
    ProptestConfig {
        cases: base * soak(),
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases(64))]

    #[test]
    fn redo_histories_match_the_model(history in history(40, true), seed: u64, mode in 0..4usize) {
        let result = run_history(Kind::Redo, LogMode::ALL[mode], &history, seed);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }

    #[test]
    fn undo_histories_match_the_model(history in history(40, true), seed: u64, mode in 0..4usize) {
        let result = run_history(Kind::Undo, LogMode::ALL[mode], &history, seed);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// A short random history for the crash harness: every fence of every transaction is a crash
/// point, every image must recover to the state before or after the transaction in flight
/// (after, once it declared its durability point), and each recovery is crashed again.
struct Crashing {
    kind: Kind,
    mode: LogMode,
    history: Vec<Plan>,
    /// The model after each prefix of the history, from a run without crashes.
    models: Vec<Model>,
}

const CRASH_POOL: u64 = 160 << 10;

impl Crashing {
    fn new(kind: Kind, mode: LogMode, history: Vec<Plan>) -> Self {
        quiet_planned_panics();
        let live = Live::create(
            kind,
            SimPm::new(CRASH_POOL, pmem_config()),
            CRASH_POOL,
            mode,
        );
        let mut model = Model::new();
        let mut models = vec![model.clone()];
        for plan in &history {
            with_engine!(&live, e => execute(e, plan, &mut model)).expect("dry run");
            models.push(model.clone());
        }
        Crashing {
            kind,
            mode,
            history,
            models,
        }
    }
}

impl Scenario for Crashing {
    type Model = Model;
    type Live = (Live, Model);

    fn name(&self) -> String {
        format!("model/{:?}/{}", self.kind, self.mode.name())
    }
    fn pool_size(&self) -> u64 {
        CRASH_POOL
    }
    fn op_count(&self) -> usize {
        self.history.len()
    }
    fn initial_model(&self) -> Model {
        self.models[0].clone()
    }
    fn apply_to_model(&self, model: &mut Model, op: usize) {
        assert_eq!(*model, self.models[op]);
        *model = self.models[op + 1].clone();
    }
    fn setup(&self, pm: SimPm) -> (Live, Model) {
        (
            Live::create(self.kind, pm, CRASH_POOL, self.mode),
            Model::new(),
        )
    }
    fn run_op(&self, (live, model): &mut (Live, Model), op: usize) {
        with_engine!(&*live, e => execute(e, &self.history[op], model)).expect("transaction");
        assert_eq!(*model, self.models[op + 1], "the run left its dry run");
    }
    fn recover(&self, pm: SimPm) -> Result<Model, String> {
        let live = Live::open(self.kind, pm, self.mode).map_err(|e| e.to_string())?;
        state(&live)
    }
}

fn crash_config(sim: SimMode, seed: u64) -> Config {
    Config {
        budget: Budget {
            exhaustive_max: 64,
            random: 12,
        },
        double_crash: Some(DoubleCrash {
            points: 64,
            budget: Budget {
                exhaustive_max: 4,
                random: 2,
            },
        }),
        max_failures: 1,
        ..Config::thorough(sim, seed)
    }
}

fn crash_history() -> impl Strategy<Value = Vec<Plan>> {
    proptest::collection::vec(plan(5, false), 1..7)
}

proptest! {
    #![proptest_config(cases(16))]

    #[test]
    fn redo_histories_survive_a_crash_at_every_fence(history in crash_history(), seed: u64, mode in 0..4usize, eadr: bool) {
        let sim = if eadr { SimMode::Eadr } else { SimMode::Adr };
        let report = crashsim::check(&Crashing::new(Kind::Redo, LogMode::ALL[mode], history), &crash_config(sim, seed));
        prop_assert!(report.passed(), "{}", report.failures[0]);
    }

    #[test]
    fn undo_histories_survive_a_crash_at_every_fence(history in crash_history(), seed: u64, mode in 0..4usize, eadr: bool) {
        let sim = if eadr { SimMode::Eadr } else { SimMode::Adr };
        let report = crashsim::check(&Crashing::new(Kind::Undo, LogMode::ALL[mode], history), &crash_config(sim, seed));
        prop_assert!(report.passed(), "{}", report.failures[0]);
    }
}

/// Accounts of the threaded test: 8 words in the root, 40 bytes apart (some share a line).
const ACCOUNTS: usize = 8;
const ACCOUNT_STRIDE: u64 = 40;
const START: u64 = 1000;
/// A record of `WIDE_LEN` bytes in the root, rewritten whole (in pieces, in random order)
/// under one lock: its first word names the seed every byte follows.
const WIDE: u64 = 1024;
const WIDE_LEN: usize = 600;
/// Per-thread object slots (pointer and length) in the root.
const OWNED: u64 = 2048;

/// Whether `bytes` is the content made with the seed its first word names (the seed word
/// itself included, as `u64`).
fn self_describing(bytes: &[u8]) -> bool {
    if bytes.len() < 8 {
        return false;
    }
    let seed = u64::from_le_bytes(bytes[..8].try_into().expect("8")) as u8;
    bytes[8..]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == fill(seed, i + 8))
}

fn self_describing_content(seed: u8, len: usize) -> Vec<u8> {
    let mut bytes = pattern(seed, len);
    bytes[..8].copy_from_slice(&u64::from(seed).to_le_bytes());
    bytes
}

/// The invariants of the threaded test, in one transaction: the accounts' sum, the wide
/// record and every owned object self-describing, and the heap holding exactly the owned
/// objects. Returns the accounts, the wide record's seed and the owned objects' seeds.
fn threaded_state(live: &Live, threads: usize) -> Result<Threaded, String> {
    let result = with_engine!(live, e => e.transaction(|tx| {
        let root = tx.root::<()>();
        let accounts = (0..ACCOUNTS)
            .map(|a| tx.read_u64(root, a as u64 * ACCOUNT_STRIDE))
            .collect::<TxResult<Vec<u64>>>()?;
        let mut wide = vec![0u8; WIDE_LEN];
        tx.read(root, WIDE, &mut wide)?;
        let mut owned = Vec::new();
        for t in 0..threads {
            let ptr: PPtr = tx.read_ptr(root, OWNED + 16 * t as u64)?;
            let len = tx.read_u64(root, OWNED + 16 * t as u64 + 8)?;
            if ptr.is_null() {
                owned.push(None);
                continue;
            }
            if !(8..=u64::from(MAX_OBJECT)).contains(&len) {
                return Err(mismatch(format!("thread {t}'s object has length {len}")));
            }
            let mut bytes = vec![0u8; len as usize];
            tx.read(ptr, 0, &mut bytes)?;
            if !self_describing(&bytes) {
                return Err(mismatch(format!("thread {t}'s object of {len} bytes is torn")));
            }
            owned.push(Some((len, bytes[0])));
        }
        Ok::<_, TxError>((accounts, wide, owned))
    }))
    .map_err(|e| e.to_string())?;
    let (accounts, wide, owned) = result;
    let sum: u64 = accounts.iter().sum();
    if sum != START * ACCOUNTS as u64 {
        return Err(format!("money created or destroyed: {accounts:?}"));
    }
    let fresh = wide.iter().all(|&b| b == 0);
    if !fresh && !self_describing(&wide) {
        return Err("the wide record is torn".into());
    }
    let objects = owned.iter().filter(|o| o.is_some()).count() as u64;
    if live.blocks() != objects {
        return Err(format!(
            "the heap holds {} blocks, the threads {objects}",
            live.blocks()
        ));
    }
    Ok((accounts, wide[0], owned))
}

/// The threaded test's logical state: the accounts, the wide record's seed, and each
/// thread's object (length and seed) if it has one.
type Threaded = (Vec<u64>, u8, Vec<Option<(u64, u8)>>);

/// What the worker threads share.
struct Shared {
    live: Live,
    accounts: Vec<Mutex<()>>,
    wide: Mutex<()>,
    failure: Mutex<Option<String>>,
}

impl Shared {
    fn fail(&self, message: String) {
        self.failure.lock().get_or_insert(message);
    }
}

/// One worker's transaction `i`: a transfer between two accounts (under both their locks),
/// a rewrite of the wide record (under its lock), or a change to the thread's own object;
/// some abort after writing.
fn worker_tx(shared: &Shared, thread: usize, rng: &mut ChaCha8Rng) -> Result<(), String> {
    let abort = rng.random_ratio(1, 6);
    let finish = |result: TxResult<()>| match result {
        Ok(()) => Ok(()),
        Err(TxError::Aborted(_) | TxError::LogFull { .. } | TxError::OutOfSpace { .. }) => Ok(()),
        Err(e) => Err(e.to_string()),
    };
    let end = |abort: bool| {
        if abort {
            Err(TxError::abort("planned"))
        } else {
            Ok(())
        }
    };
    match rng.random_range(0..10) {
        0..5 => {
            let a = rng.random_range(0..ACCOUNTS);
            let b = (a + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
            let amount = rng.random_range(1..300);
            let (first, second) = (a.min(b), a.max(b));
            let _locks = (
                shared.accounts[first].lock(),
                shared.accounts[second].lock(),
            );
            finish(with_engine!(&shared.live, e => e.transaction(|tx| {
                let root = tx.root::<()>();
                let (at_a, at_b) = (a as u64 * ACCOUNT_STRIDE, b as u64 * ACCOUNT_STRIDE);
                let from = tx.read_u64(root, at_a)?;
                if from >= amount {
                    let to = tx.read_u64(root, at_b)?;
                    tx.write_u64(root, at_a, from - amount)?;
                    tx.write_u64(root, at_b, to + amount)?;
                    if tx.read_u64(root, at_a)? != from - amount {
                        return Err(mismatch("a transfer does not read its own write".into()));
                    }
                }
                end(abort)
            })))
        }
        5..7 => {
            let seed: u8 = rng.random();
            let content = self_describing_content(seed, WIDE_LEN);
            let mut cuts = [rng.random_range(0..WIDE_LEN), rng.random_range(0..WIDE_LEN)];
            cuts.sort_unstable();
            let mut pieces = [(0, cuts[0]), (cuts[0], cuts[1]), (cuts[1], WIDE_LEN)];
            let rotate = rng.random_range(0..3);
            pieces.rotate_left(rotate);
            let _lock = shared.wide.lock();
            finish(with_engine!(&shared.live, e => e.transaction(|tx| {
                let root = tx.root::<()>();
                let mut before = vec![0u8; WIDE_LEN];
                tx.read(root, WIDE, &mut before)?;
                if before.iter().any(|&b| b != 0) && !self_describing(&before) {
                    return Err(mismatch("the wide record read torn under its lock".into()));
                }
                for &(from, to) in &pieces {
                    tx.write(root, WIDE + from as u64, &content[from..to])?;
                }
                end(abort)
            })))
        }
        _ => {
            let seed: u8 = rng.random();
            let replace = rng.random_bool(0.5);
            let size = match rng.random_range(0..3) {
                0 => rng.random_range(8..64),
                1 => rng.random_range(64..=384),
                _ => rng.random_range(385..3000),
            };
            let slot = OWNED + 16 * thread as u64;
            finish(with_engine!(&shared.live, e => e.transaction(|tx| {
                let root = tx.root::<()>();
                let old: PPtr = tx.read_ptr(root, slot)?;
                let len = tx.read_u64(root, slot + 8)?;
                if !old.is_null() {
                    let mut bytes = vec![0u8; len as usize];
                    tx.read(old, 0, &mut bytes)?;
                    if !self_describing(&bytes) {
                        return Err(mismatch(format!("thread {thread}'s object read torn")));
                    }
                }
                if replace || old.is_null() {
                    if !old.is_null() {
                        tx.free(old)?;
                    }
                    if seed.is_multiple_of(4) {
                        tx.write_ptr(root, slot, PPtr::<()>::null())?;
                        tx.write_u64(root, slot + 8, 0)?;
                    } else {
                        let new: PPtr = tx.alloc(size)?;
                        tx.write(new, 0, &self_describing_content(seed, size as usize))?;
                        tx.write_ptr(root, slot, new)?;
                        tx.write_u64(root, slot + 8, size)?;
                    }
                } else {
                    tx.write(old, 0, &self_describing_content(seed, len as usize))?;
                }
                end(abort)
            })))
        }
    }
}

/// Runs `threads` workers for `ops` transactions each while another thread takes crash
/// snapshots at random moments; then recovers random images of every snapshot, which must
/// satisfy the invariants, and a crash after the last transaction, which must give exactly
/// the final state.
fn run_threads(
    kind: Kind,
    mode: LogMode,
    threads: usize,
    ops: usize,
    seed: u64,
    every_fence: bool,
) -> Result<(), String> {
    let pool_size = 512 << 10;
    // The platform varies with the seed: ADR or eADR, clwb or clflush.
    let sim = crashsim::SimConfig {
        mode: if seed & 1 == 0 {
            SimMode::Adr
        } else {
            SimMode::Eadr
        },
        flush: if seed & 2 == 0 {
            pmem::FlushInstr::Clwb
        } else {
            pmem::FlushInstr::Clflush
        },
    };
    let pm = SimPm::new(pool_size, sim);
    let live = Live::create(kind, pm.clone(), pool_size, mode);
    with_engine!(&live, e => e.transaction(|tx| {
        let root = tx.root::<()>();
        (0..ACCOUNTS).try_for_each(|a| tx.write_u64(root, a as u64 * ACCOUNT_STRIDE, START))
    }))
    .map_err(|e| e.to_string())?;
    let shared = Arc::new(Shared {
        live,
        accounts: (0..ACCOUNTS).map(|_| Mutex::new(())).collect(),
        wide: Mutex::new(()),
        failure: Mutex::new(None),
    });
    let done = Arc::new(AtomicBool::new(false));
    // Either a snapshot before every fence of the run, or some at random moments.
    pm.set_capture(every_fence);
    let mut snapshots = std::thread::scope(|scope| {
        let crasher = {
            let (pm, done) = (pm.clone(), Arc::clone(&done));
            scope.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC4A5);
                let mut taken = Vec::new();
                while !every_fence && !done.load(Ordering::Relaxed) && taken.len() < 24 {
                    for _ in 0..rng.random_range(0..300) {
                        std::thread::yield_now();
                    }
                    taken.push(pm.crash_now());
                }
                taken
            })
        };
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                let shared = Arc::clone(&shared);
                scope.spawn(move || {
                    let mut rng =
                        ChaCha8Rng::seed_from_u64(seed.wrapping_add(thread as u64 * 7919));
                    for _ in 0..ops {
                        if let Err(e) = worker_tx(&shared, thread, &mut rng) {
                            shared.fail(format!("thread {thread}: {e}"));
                            return;
                        }
                    }
                })
            })
            .collect();
        workers.into_iter().for_each(|w| w.join().expect("worker"));
        done.store(true, Ordering::Relaxed);
        crasher.join().expect("crasher")
    });
    pm.set_capture(false);
    snapshots.extend(pm.take_snapshots());
    if let Some(failure) = shared.failure.lock().take() {
        return Err(failure);
    }
    let last = threaded_state(&shared.live, threads).map_err(|e| format!("at the end: {e}"))?;
    if std::env::var("TX_MODEL_DEBUG").is_ok() {
        eprintln!(
            "{kind:?} {threads} threads: {} snapshots, final {last:?}",
            snapshots.len()
        );
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let end = pm.crash_now();
    for _ in 0..4 {
        let pm = SimPm::from_image(random_image(&end, &mut rng), pmem_config());
        let live = Live::open(kind, pm, mode)
            .map_err(|e| format!("crash after the last transaction: {e}"))?;
        let got =
            threaded_state(&live, threads).map_err(|e| format!("crash after the end: {e}"))?;
        if got != last {
            return Err(format!("crash after the end gave {got:?}, not {last:?}"));
        }
    }
    for (n, snapshot) in snapshots.iter().enumerate() {
        for _ in 0..3 {
            let image = random_image(snapshot, &mut rng);
            let pm = SimPm::from_image(image, pmem_config());
            let live =
                Live::open(kind, pm, mode).map_err(|e| format!("snapshot {n}: open: {e}"))?;
            threaded_state(&live, threads).map_err(|e| format!("snapshot {n}: {e}"))?;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(12))]

    #[test]
    fn redo_threads_keep_their_invariants_through_crashes(threads in 2..=4usize, seed: u64, mode in 0..4usize) {
        let result = run_threads(Kind::Redo, LogMode::ALL[mode], threads, 1000, seed, false);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }

    #[test]
    fn undo_threads_keep_their_invariants_through_crashes(threads in 2..=4usize, seed: u64, mode in 0..4usize) {
        let result = run_threads(Kind::Undo, LogMode::ALL[mode], threads, 1000, seed, false);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

proptest! {
    #![proptest_config(cases(4))]

    /// The threaded run, short, crashed before every one of its fences.
    #[test]
    fn redo_threads_keep_their_invariants_at_every_fence(threads in 2..=3usize, seed: u64, mode in 0..4usize) {
        let result = run_threads(Kind::Redo, LogMode::ALL[mode], threads, 40, seed, true);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }

    #[test]
    fn undo_threads_keep_their_invariants_at_every_fence(threads in 2..=3usize, seed: u64, mode in 0..4usize) {
        let result = run_threads(Kind::Undo, LogMode::ALL[mode], threads, 40, seed, true);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// The byte ranges of a pool that hold engine and heap metadata: the engine area (header,
/// watermark, lanes), the heap's header and descriptors, and each run's marker and bitmap.
fn metadata_zones(live: &Live) -> Vec<(u64, u64)> {
    with_engine!(live, e => {
        let pm = e.pool().pm();
        let layout = *e.heap().layout();
        let mut zones = vec![
            (e.pool().arena().offset, layout.start),
            (layout.start, layout.chunks),
        ];
        for chunk in 0..layout.chunk_count {
            let word = pmem::Persist::read_u64(pm, layout.descriptor_at(chunk));
            if let Ok(heap::Descriptor::Run { class }) = heap::Descriptor::decode(word, chunk)
                && let Some(geometry) = layout.run_geometry(usize::from(class))
            {
                let start = layout.chunk_start(chunk);
                zones.push((start, start + 8 + 8 * geometry.bitmap_words));
            }
        }
        zones
    })
}

fn findings(live: &Live) -> Vec<String> {
    with_engine!(live, e => e.recovery_report().findings.iter().map(ToString::to_string).collect())
}

/// Damages copies of a crashed pool (the last transaction of `history` interrupted at one of
/// its fences) in its metadata: a flipped bit, a byte or a word overwritten. Each copy must
/// open as a typed error, or as the undamaged pool's state, or — where the damage is
/// indistinguishable from a torn write (`docs/tx-format.md` §7.8, §9.7) — as another state
/// that recovery reports (a finding the undamaged pool's recovery does not have). A panic, or
/// a different state with nothing reported, fails.
fn damaged_pools(
    kind: Kind,
    mode: LogMode,
    history: &[Plan],
    seed: u64,
    copies: usize,
) -> Result<(), String> {
    quiet_planned_panics();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let pool_size = 256 << 10;
    let pm = SimPm::new(pool_size, pmem_config());
    let live = Live::create(kind, pm.clone(), pool_size, mode);
    let mut model = Model::new();
    let (last, before) = history.split_last().expect("a history");
    for plan in before {
        with_engine!(&live, e => execute(e, plan, &mut model))?;
    }
    pm.set_capture(true);
    with_engine!(&live, e => execute(e, last, &mut model))?;
    let mut points = pm.take_snapshots();
    points.push(pm.crash_now());
    let point = &points[rng.random_range(0..points.len())];
    let image = point.image(&point.nothing());
    let zones = metadata_zones(&live);
    drop(live);
    let (baseline, _, expected) = recover(kind, mode, image.clone(), false)?;
    let expected_findings = findings(&baseline);
    drop(baseline);
    for copy in 0..copies {
        let mut damaged = image.clone();
        let (start, end) = zones[rng.random_range(0..zones.len())];
        let at = rng.random_range(start..end) as usize;
        let what = match rng.random_range(0..3) {
            0 => {
                let bit = rng.random_range(0..8);
                damaged[at] ^= 1 << bit;
                format!("bit {bit} of byte {at:#x} flipped")
            }
            1 => {
                damaged[at] = rng.random();
                format!("byte {at:#x} overwritten")
            }
            _ => {
                let at = at & !7;
                let word: u64 = rng.random();
                damaged[at..at + 8].copy_from_slice(&word.to_le_bytes());
                format!("word {at:#x} overwritten")
            }
        };
        if damaged == image {
            continue;
        }
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let pm = SimPm::from_image(damaged, pmem_config());
            pm.set_step_limit(Some(50_000_000));
            Live::open(kind, pm, mode).map(|live| (state(&live), findings(&live)))
        }));
        match opened {
            Err(_) => return Err(format!("copy {copy} ({what}): the open panicked")),
            Ok(Err(_typed)) => {}
            Ok(Ok((Ok(got), _))) if got == expected => {}
            Ok(Ok((got, reported))) => {
                if reported == expected_findings {
                    return Err(format!(
                        "copy {copy} ({what}): opened as {got:?} instead of {expected:?}, \
                         and recovery reported nothing new ({reported:?})"
                    ));
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(24))]

    #[test]
    fn damaged_redo_pools_open_as_typed_errors_or_reported_states(history in proptest::collection::vec(plan(6, false), 2..10), seed: u64, mode in 0..4usize) {
        let result = damaged_pools(Kind::Redo, LogMode::ALL[mode], &history, seed, 150);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }

    #[test]
    fn damaged_undo_pools_open_as_typed_errors_or_reported_states(history in proptest::collection::vec(plan(6, false), 2..10), seed: u64, mode in 0..4usize) {
        let result = damaged_pools(Kind::Undo, LogMode::ALL[mode], &history, seed, 150);
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}

/// A long history of small transactions, so that redo's sequence numbers run past 2^16 (the
/// records keep only their low 16 bits) while the run crashes at random points and goes on
/// from the recovered pool.
fn long_history(kind: Kind, mode: LogMode, txs: usize, seed: u64) -> Result<u64, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let plans: Vec<Plan> = (0..txs)
        .map(|i| {
            let off = rng.random_range(0..BLOB_LEN as u16);
            let mut steps = vec![Step::BlobWrite {
                off,
                len: rng.random_range(1..24),
                seed: i as u8,
            }];
            if i % 97 == 0 {
                steps.push(Step::Alloc {
                    slot: rng.random_range(0..SLOTS as u8),
                    size: rng.random_range(1..600),
                    seed: i as u8,
                    zeroed: rng.random(),
                });
            }
            let end = if i % 13 == 0 { End::Abort } else { End::Commit };
            Plan { steps, end }
        })
        .collect();
    let crash_every = txs / 6;
    let mut offset = rng.random_range(0..crash_every);
    let pool_size = 512 << 10;
    let mut pm = SimPm::new(pool_size, pmem_config());
    let mut live = Live::create(kind, pm.clone(), pool_size, mode);
    let mut model = Model::new();
    let mut committed = 0;
    for (i, plan) in plans.iter().enumerate() {
        let outcome = with_engine!(&live, e => execute(e, plan, &mut model))
            .map_err(|e| format!("tx {i}: {e}"))?;
        committed += u64::from(outcome == Outcome::Committed);
        if i == offset {
            offset += crash_every;
            let (recovered, recovered_pm) = crash_and_recover(kind, mode, &pm, &model, &mut rng)
                .map_err(|e| format!("crash after tx {i}: {e}"))?;
            drop(std::mem::replace(&mut live, recovered));
            pm = recovered_pm;
        }
    }
    let got = state(&live)?;
    if got != model {
        return Err(format!("at the end: {got:?}, expected {model:?}"));
    }
    Ok(committed)
}

#[test]
fn redo_sequence_numbers_wrap_their_16_bits_across_crashes() {
    quiet_planned_panics();
    let txs = 80_000 * soak() as usize;
    let committed = long_history(Kind::Redo, LogMode::Auto, txs, 5).expect("history");
    assert!(committed > 70_000, "{committed} commits");
}
