//! Concurrent commits crashed at every fence.
//!
//! Two or three threads run bank transfers (logged operations, re-executed at recovery, and
//! physical ones, at every level, with deliberate aborts) on shared accounts, so their
//! operation records interleave across the lanes, one transaction re-executes on another's
//! result, and checkpoints and write-backs (the lanes' own, or the background reclaimer's)
//! run between them. Each transfer also replaces its thread's receipt, a 16-byte block
//! (allocated, written in place, the old one freed), so the threads' heap actions interleave
//! too and their new blocks share chunks. Every fence and durability point of the run is a crash point: its
//! images (structured and random) are recovered, each recovery is crashed again at sampled
//! points and recovered a second time (it must reach the first recovery's state), and the
//! result must satisfy the model:
//!
//! - every acknowledged transfer is present: thread `t`'s counter is at least the number of
//!   its transfers whose `transaction` call had returned when the crash point was taken;
//! - an unacknowledged one is all or nothing: the counter is at most the number started,
//!   and every account equals its initial balance plus the transfers the counters say
//!   committed (transfers commute, so this does not depend on their order), untorn;
//! - the sum of the accounts is conserved;
//! - each thread's receipt names its counter, and the heap holds exactly the receipts.
//!
//! **The schedule.** The threads are driven step by step: a worker stops at *gates* — before
//! each transaction, at the start of each attempt of its body (after its snapshot is taken,
//! before it reads) and at each of its fences — and the test's main thread, once every worker
//! stands at a gate, checks the crash points recorded so far and lets one worker on, chosen
//! by a seeded generator among those that cannot block on another: a worker about to read
//! and write accounts that another, stopped at a fence of its commit, holds locked with
//! versions not yet published would wait for it (the versions' readers wait for pending
//! commits; a writer conflicts and retries). The interleaving is therefore a function of the
//! seed. Two things fall outside it, and the test reports how often they happened: the
//! background reclaimer (when on) is never stopped — its checkpoints and write-backs run
//! concurrently, and its fences are crash points like the others — and a worker that does
//! not reach its next gate within [`STUCK`] (it waits for something the rule cannot see,
//! e.g. a checkpoint lock held by a stopped worker) is passed over for that step.

mod common;
use common::{ACCOUNT_WORDS, arg_word, read_account_words, write_account_words};
use crashsim::image::choices;
use crashsim::{Budget, SimConfig, SimMode, SimPm, Snapshot};
use mvcc::{ClockMode, Level, Mutant, Mvcc, MvccOptions};
use pmem::{CreateOptions, Persist, Pool, WriteClass};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cell::Cell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tx::{Engine, Op, OpId, Replay, Tx, TxError, TxResult};

const LAYOUT: &str = "mvcc-crash-threads";
const POOL: u64 = 256 << 10;
const ACCOUNTS: u64 = 5;
/// Each account is 12 equal words at an offset that is not a multiple of 64, so it spans
/// two or three chunks: a torn commit or a half re-executed one shows as unequal words.
const ACCOUNT_AT: u64 = 24;
const INITIAL: u64 = 1000;
/// Thread `t`'s counter of committed transfers, each in a chunk of its own.
const COUNTER_AT: u64 = 1024;
const MAX_THREADS: usize = 3;
const TRANSFER: OpId = OpId(3);
/// How long a worker let on may take to reach its next gate before it is taken to be
/// blocked on a stopped one.
const STUCK: Duration = Duration::from_millis(40);

fn account_at(i: u64) -> u64 {
    ACCOUNT_AT + i * ACCOUNT_WORDS * 8
}

fn counter_at(thread: usize) -> u64 {
    COUNTER_AT + 64 * thread as u64
}

/// Thread `t`'s latest receipt (a pointer), beside its counter.
fn receipt_at(thread: usize) -> u64 {
    counter_at(thread) + 8
}

/// Transfer `k` of thread `t` in the run with `seed`: from, to, amount.
fn transfer_of(seed: u64, thread: usize, k: u64) -> (u64, u64, u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (thread as u64) << 32 ^ k << 40);
    let from = rng.random_range(0..ACCOUNTS);
    let to = (from + rng.random_range(1..ACCOUNTS)) % ACCOUNTS;
    (from, to, rng.random_range(1..100))
}

/// What can end a transfer's body.
#[derive(Debug)]
enum Fail {
    Tx(TxError),
    /// Something read disagreed with the invariants (a bug).
    Broken(String),
    /// The body chose to abort.
    Abort,
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Tx(e) => write!(f, "{e}"),
            Fail::Broken(what) => f.write_str(what),
            Fail::Abort => f.write_str("aborted"),
        }
    }
}

impl From<TxError> for Fail {
    fn from(error: TxError) -> Self {
        Fail::Tx(error)
    }
}

/// Reads account `i` whole and checks it is untorn.
fn read_account<T: Tx>(tx: &mut T, i: u64) -> Result<u64, Fail> {
    read_account_words(tx, account_at(i))?
        .map_err(|words| Fail::Broken(format!("account {i} is torn: {words:?}")))
}

fn write_account<T: Tx>(tx: &mut T, i: u64, balance: u64) -> TxResult<()> {
    write_account_words(tx, account_at(i), balance)
}

/// Transfer `k` of `thread`: moves `amount` from `from` to `to` and counts it. The counter
/// must read `k` (the thread's transfers are sequential), at recovery too.
fn transfer<T: Tx>(tx: &mut T, args: [u64; 5]) -> Result<(), Fail> {
    let [thread, k, from, to, amount] = args;
    let root = tx.root::<()>();
    let counter = tx.read_u64(root, counter_at(thread as usize))?;
    if counter != k {
        return Err(Fail::Broken(format!(
            "thread {thread}'s transfer {k} found its counter at {counter}"
        )));
    }
    let a = read_account(tx, from)?;
    let b = read_account(tx, to)?;
    write_account(tx, from, a.wrapping_sub(amount))?;
    write_account(tx, to, b.wrapping_add(amount))?;
    tx.write_u64(root, counter_at(thread as usize), k + 1)?;
    // A receipt replaces the previous one: a 16-byte block (the threads' receipts share
    // chunks), written in place, published with the commit, and the old one freed.
    let at = receipt_at(thread as usize);
    let old: tx::PPtr = tx.read_ptr(root, at)?;
    if !old.is_null() {
        // Read before it is freed, at recovery too: a block reused before a checkpoint
        // covers its free shows another receipt to the re-execution.
        let named = (tx.read_u64(old, 0)?, tx.read_u64(old, 8)?);
        if named != (thread, k) {
            return Err(Fail::Broken(format!(
                "thread {thread}'s transfer {k} found its receipt naming {named:?}"
            )));
        }
        tx.free(old)?;
    }
    let receipt: tx::PPtr = tx.alloc(16)?;
    tx.write_u64(receipt, 0, thread)?;
    tx.write_u64(receipt, 8, k + 1)?;
    tx.write_ptr(root, at, receipt)?;
    Ok(())
}

/// Re-executes logged transfers.
#[derive(Clone, Copy, Debug)]
struct Transfers;

impl Replay for Transfers {
    fn handles(&self, id: OpId) -> bool {
        id == TRANSFER
    }

    fn replay<T: Tx>(&self, tx: &mut T, op: Op<'_>) -> TxResult<()> {
        if op.id != TRANSFER || op.args.len() != 40 {
            return Err(TxError::Corrupted(format!("not a transfer: {op:?}")));
        }
        let word = |i| arg_word(op.args, i);
        match transfer(tx, [word(0), word(1), word(2), word(3), word(4)]) {
            Ok(()) => Ok(()),
            Err(Fail::Tx(e)) => Err(e),
            Err(other) => Err(TxError::Corrupted(format!("re-execution: {other}"))),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The scheduler

/// Where a worker stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    /// Before a transaction (holds nothing).
    Begin,
    /// Before a `sync` or `quiesce` (holds nothing; its checkpoints cannot pass the
    /// snapshot of a transaction that runs, or a commit not yet published).
    Sync,
    /// At the start of an attempt of its body, about to touch the accounts in the mask (it
    /// holds no lock and no version yet).
    Body(u64),
    /// At a fence. `commit`: its body has returned, so the fence is its commit's (or a
    /// retry's reclamation after a failed commit); it may hold the accounts of its mask
    /// locked, with versions not yet published.
    Fence { commit: bool, mask: u64 },
}

#[derive(Default)]
struct Plan {
    /// Each worker's gate, `None` while it runs (or once it is done).
    at: [Option<Gate>; MAX_THREADS],
    done: [bool; MAX_THREADS],
    /// The accounts of each worker's current transaction, and whether its body returned.
    mask: [u64; MAX_THREADS],
    committing: [bool; MAX_THREADS],
    /// Whether each worker is inside a transaction call (it may hold a lane).
    in_txn: [bool; MAX_THREADS],
    /// The worker let on, until it takes its turn.
    go: Option<usize>,
}

/// Bounds on each thread's counter at a crash point: transfers acknowledged, started.
type Bounds = ([u64; MAX_THREADS], [u64; MAX_THREADS]);

struct Schedule {
    plan: Mutex<Plan>,
    moved: Condvar,
    acked: [AtomicU64; MAX_THREADS],
    started: [AtomicU64; MAX_THREADS],
    /// Crash points not yet checked, with the bounds when each was taken.
    points: Mutex<Vec<(Snapshot, Bounds)>>,
}

thread_local! {
    /// The worker this thread is (`usize::MAX`: not a worker, never stopped).
    static WORKER: Cell<usize> = const { Cell::new(usize::MAX) };
}

impl Schedule {
    fn new() -> Self {
        Schedule {
            plan: Mutex::new(Plan::default()),
            moved: Condvar::new(),
            acked: Default::default(),
            started: Default::default(),
            points: Mutex::new(Vec::new()),
        }
    }

    fn bounds(&self) -> Bounds {
        let load =
            |a: &[AtomicU64; MAX_THREADS]| std::array::from_fn(|t| a[t].load(Ordering::SeqCst));
        (load(&self.acked), load(&self.started))
    }

    /// Stops the calling worker at `gate` until the main thread lets it on.
    fn stop(&self, gate: Gate) {
        let me = WORKER.with(Cell::get);
        if me == usize::MAX {
            return;
        }
        let mut plan = self.plan.lock().expect("plan");
        plan.at[me] = Some(gate);
        self.moved.notify_all();
        while plan.go != Some(me) {
            plan = self.moved.wait(plan).expect("plan");
        }
        plan.go = None;
        plan.at[me] = None;
        // Past this gate a transaction takes a lane.
        plan.in_txn[me] |= gate == Gate::Begin;
    }

    /// The calling worker's transaction call returned: it holds no lane.
    fn end_txn(&self) {
        let me = WORKER.with(Cell::get);
        self.plan.lock().expect("plan").in_txn[me] = false;
    }

    fn fence_gate(&self) {
        let me = WORKER.with(Cell::get);
        if me == usize::MAX {
            return;
        }
        let (commit, mask) = {
            let plan = self.plan.lock().expect("plan");
            (plan.committing[me], plan.mask[me])
        };
        self.stop(Gate::Fence { commit, mask });
    }

    fn set_phase(&self, mask: u64, committing: bool) {
        let me = WORKER.with(Cell::get);
        let mut plan = self.plan.lock().expect("plan");
        plan.mask[me] = mask;
        plan.committing[me] = committing;
    }

    fn finish(&self, me: usize) {
        let mut plan = self.plan.lock().expect("plan");
        plan.done[me] = true;
        self.moved.notify_all();
    }
}

/// The simulator, with the workers stopped at each of their fences, and every crash point
/// recorded with the counters' bounds at that moment.
#[derive(Clone)]
struct Gated {
    pm: SimPm,
    schedule: Arc<Schedule>,
}

impl Gated {
    /// Runs `op` on the simulator and records the crash points it took.
    fn recorded(&self, op: impl FnOnce(&SimPm)) {
        let mut points = self.schedule.points.lock().expect("points");
        let bounds = self.schedule.bounds();
        op(&self.pm);
        points.extend(self.pm.take_snapshots().into_iter().map(|s| (s, bounds)));
    }
}

impl Persist for Gated {
    fn len(&self) -> u64 {
        self.pm.len()
    }
    fn read(&self, off: u64, dst: &mut [u8]) {
        self.pm.read(off, dst);
    }
    fn write(&self, off: u64, src: &[u8], class: WriteClass) {
        self.pm.write(off, src, class);
    }
    fn write_nt(&self, off: u64, src: &[u8], class: WriteClass) {
        self.pm.write_nt(off, src, class);
    }
    fn flush(&self, off: u64, len: u64) {
        self.recorded(|pm| pm.flush(off, len));
    }
    fn fence(&self) {
        self.schedule.fence_gate();
        self.recorded(|pm| pm.fence());
    }
    fn stats(&self) -> &pmem::Stats {
        self.pm.stats()
    }
    fn durability_point(&self) {
        self.recorded(|pm| pm.durability_point());
    }
    fn is_poisoned(&self) -> bool {
        self.pm.is_poisoned()
    }
}

// ---------------------------------------------------------------------------------------
// Recovery and the oracle

/// The state a recovery reads: each thread's counter and each account.
#[derive(Clone, Debug, PartialEq, Eq)]
struct State {
    counters: Vec<u64>,
    accounts: Vec<u64>,
    /// Each thread's receipt (its two words), if it has one.
    receipts: Vec<Option<(u64, u64)>>,
    /// Blocks the recovered heap holds.
    blocks: u64,
}

fn recovery_options() -> MvccOptions {
    // Recovery is single-threaded; no reclaimer after it, so its crash points are the same
    // on every run.
    MvccOptions {
        background: false,
        ..run_options(false, 4)
    }
}

/// Small logs and version logs: a lane checkpoints every few transfers, and the checkpoint
/// log fills (a write-back) every few checkpoints.
fn run_options(background: bool, lanes: u32) -> MvccOptions {
    MvccOptions {
        lanes,
        olog_size: 4 << 10,
        clog_size: 4 << 10,
        // With the reclaimer, short enough that the lanes hand it work often.
        tlog_versions: if background { 48 } else { 96 },
        // `MVCC_MODEL_CLOCK=tsc` (outside CI): the TSC clock, whose stamps wait out its
        // uncertainty and whose commits always validate by walking.
        clock: match std::env::var("MVCC_MODEL_CLOCK").as_deref() {
            Ok("tsc") => ClockMode::Tsc,
            _ => ClockMode::Counter,
        },
        cool_headers: 0,
        background,
        ..MvccOptions::small()
    }
}

fn recover(pm: SimPm, threads: usize) -> Result<State, String> {
    let pool = Pool::attach(pm, LAYOUT).map_err(|e| format!("attach: {e}"))?;
    let engine =
        Mvcc::open(pool, &recovery_options(), Transfers).map_err(|e| format!("open: {e}"))?;
    let state = engine
        .read_only(|tx| {
            let root = tx.root::<()>();
            let counters = (0..threads)
                .map(|t| tx.read_u64(root, counter_at(t)).map_err(Fail::Tx))
                .collect::<Result<Vec<_>, _>>()?;
            let accounts = (0..ACCOUNTS)
                .map(|i| read_account(tx, i))
                .collect::<Result<Vec<_>, _>>()?;
            let receipts = (0..threads)
                .map(|t| {
                    let receipt: tx::PPtr = tx.read_ptr(root, receipt_at(t))?;
                    if receipt.is_null() {
                        return Ok(None);
                    }
                    Ok(Some((tx.read_u64(receipt, 0)?, tx.read_u64(receipt, 8)?)))
                })
                .collect::<Result<Vec<_>, Fail>>()?;
            Ok::<_, Fail>(State {
                counters,
                accounts,
                receipts,
                blocks: 0,
            })
        })
        .map_err(|e| format!("reading the recovered state: {e}"))?;
    Ok(State {
        blocks: engine.allocated_blocks(),
        ..state
    })
}

/// Whether `state` is one the model allows at a crash point with `bounds`.
fn judge(seed: u64, threads: usize, state: &State, bounds: &Bounds) -> Result<(), String> {
    let (acked, started) = bounds;
    let mut expected = vec![INITIAL; ACCOUNTS as usize];
    for t in 0..threads {
        let c = state.counters[t];
        if c < acked[t] || c > started[t] {
            return Err(format!(
                "thread {t}'s counter is {c}: {} acknowledged, {} started",
                acked[t], started[t]
            ));
        }
        for k in 0..c {
            let (from, to, amount) = transfer_of(seed, t, k);
            expected[from as usize] = expected[from as usize].wrapping_sub(amount);
            expected[to as usize] = expected[to as usize].wrapping_add(amount);
        }
    }
    for t in 0..threads {
        let c = state.counters[t];
        let want = (c > 0).then_some((t as u64, c));
        if state.receipts[t] != want {
            return Err(format!(
                "thread {t}'s receipt is {:?}, its counter {c}",
                state.receipts[t]
            ));
        }
    }
    let receipts = state.receipts.iter().flatten().count() as u64;
    if state.blocks != receipts {
        return Err(format!(
            "{} blocks allocated for {receipts} receipts",
            state.blocks
        ));
    }
    let sum = state.accounts.iter().fold(0u64, |s, &a| s.wrapping_add(a));
    if sum != INITIAL * ACCOUNTS {
        return Err(format!("the accounts sum to {sum}: {state:?}"));
    }
    if state.accounts != expected {
        return Err(format!(
            "accounts {:?}, the counters {:?} say {expected:?}",
            state.accounts, state.counters
        ));
    }
    Ok(())
}

struct Checker {
    seed: u64,
    threads: usize,
    mode: SimMode,
    budget: Budget,
    second_points: usize,
    second_budget: Budget,
    passed: HashSet<(u64, Bounds)>,
    points: usize,
    images: usize,
    second_images: usize,
}

impl Checker {
    fn sim(&self) -> SimConfig {
        SimConfig {
            mode: self.mode,
            ..SimConfig::default()
        }
    }

    /// Checks every image chosen at one crash point.
    fn check(&mut self, snapshot: &Snapshot, bounds: &Bounds) -> Result<(), String> {
        self.points += 1;
        for choice in choices(snapshot, &self.budget, self.seed) {
            let image = snapshot.image(&choice);
            let hash = image_hash(&image);
            if !self.passed.insert((hash, *bounds)) {
                continue;
            }
            self.images += 1;
            let pm = SimPm::from_image(image, self.sim());
            pm.set_step_limit(Some(50_000_000));
            pm.set_capture(true);
            let where_ = format!("crash point {:?}, image {choice:?}", snapshot.kind);
            let state = caught(|| recover(pm.clone(), self.threads))
                .map_err(|e| format!("{where_}: recovery failed: {e}"))?;
            judge(self.seed, self.threads, &state, bounds).map_err(|e| format!("{where_}: {e}"))?;
            // Crash the recovery again at sampled points: the second recovery must reach
            // the first one's state.
            let mut inner = pm.take_snapshots();
            inner.push(pm.crash_now());
            let len = inner.len();
            let keep: HashSet<usize> = (0..self.second_points)
                .map(|i| (i + 1) * len / self.second_points - 1)
                .collect();
            for (i, second) in inner.iter().enumerate() {
                if len > self.second_points && !keep.contains(&i) {
                    continue;
                }
                for choice2 in choices(second, &self.second_budget, self.seed) {
                    self.second_images += 1;
                    let pm2 = SimPm::from_image(second.image(&choice2), self.sim());
                    pm2.set_step_limit(Some(50_000_000));
                    let again = caught(|| recover(pm2, self.threads)).map_err(|e| {
                        format!("{where_}, recovery crashed at {:?}: {e}", second.kind)
                    })?;
                    if again != state {
                        return Err(format!(
                            "{where_}, recovery crashed at {:?} ({choice2:?}): the second \
                             recovery read {again:?}, the first {state:?}",
                            second.kind
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

fn image_hash(image: &[u8]) -> u64 {
    // FNV-1a over 8-byte words: enough to skip images already checked.
    image.chunks(8).fold(0xcbf2_9ce4_8422_2325u64, |h, w| {
        let word = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        (h ^ word).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Runs `f`, turning a panic into an error.
fn caught<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic".to_owned());
        Err(format!("panicked: {message}"))
    })
}

// ---------------------------------------------------------------------------------------
// The run

/// One thread's transfers: each worker runs `count` of them, a deliberate abort (writes,
/// then an error) before some, logged (re-executed) or physical at a random level.
fn worker(engine: &Mvcc<Gated, Transfers>, schedule: &Schedule, seed: u64, me: usize, count: u64) {
    WORKER.with(|w| w.set(me));
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xabcd ^ me as u64);
    for k in 0..count {
        let (from, to, amount) = transfer_of(seed, me, k);
        let mask = 1 << from | 1 << to;
        if rng.random_bool(0.04) {
            // A checkpoint of everything (and a write-back, for `quiesce`) among the
            // other threads' commits.
            schedule.stop(Gate::Sync);
            schedule.set_phase(0, false);
            let synced = if rng.random_bool(0.5) {
                engine.sync()
            } else {
                engine.quiesce()
            };
            synced.unwrap_or_else(|e| panic!("thread {me}'s sync failed: {e}"));
        }
        if rng.random_bool(0.15) {
            schedule.stop(Gate::Begin);
            schedule.set_phase(mask, false);
            let aborted = engine.transaction(|tx| {
                schedule.stop(Gate::Body(mask));
                let junk: tx::PPtr = tx.alloc(16)?;
                tx.write_u64(junk, 0, u64::MAX)?;
                write_account(tx, from, 7)?;
                tx.write_u64(tx.root::<()>(), counter_at(me), u64::MAX)?;
                Err::<(), _>(Fail::Abort)
            });
            schedule.end_txn();
            if let Err(e) = aborted
                && !matches!(e, Fail::Abort)
            {
                panic!("thread {me}'s aborted transaction failed: {e}");
            }
        }
        let args = [me as u64, k, from, to, amount];
        let body = |tx: &mut mvcc::MvccTx<'_, Gated, Transfers>| {
            schedule.set_phase(mask, false);
            schedule.stop(Gate::Body(mask));
            transfer(tx, args)?;
            schedule.set_phase(mask, true);
            Ok::<_, Fail>(())
        };
        schedule.stop(Gate::Begin);
        schedule.set_phase(mask, false);
        schedule.started[me].store(k + 1, Ordering::SeqCst);
        let result = if rng.random_bool(0.5) {
            let bytes: Vec<u8> = args.iter().flat_map(|w| w.to_le_bytes()).collect();
            engine.transaction_op(
                Op {
                    id: TRANSFER,
                    args: &bytes,
                },
                body,
            )
        } else {
            let level =
                [Level::Snapshot, Level::Serializable, Level::Linearizable][rng.random_range(0..3)];
            engine.transaction_with(level, body)
        };
        schedule.end_txn();
        if let Err(e) = result {
            panic!("thread {me}'s transfer {k} failed: {e}");
        }
        schedule.acked[me].store(k + 1, Ordering::SeqCst);
        schedule.set_phase(0, false);
    }
}

/// What a run did, for the report.
#[derive(Debug, Default)]
struct Counts {
    steps: usize,
    passed_over: usize,
    stats: Option<mvcc::MvccStats>,
}

/// Runs `threads` workers of `count` transfers each under the schedule of `seed`, checking
/// the crash points as they are taken.
#[allow(clippy::too_many_arguments)]
fn crash_run(
    seed: u64,
    threads: usize,
    lanes: u32,
    count: u64,
    background: bool,
    mode: SimMode,
    mutant: Mutant,
) -> Result<(Counts, Checker), String> {
    let sim = SimConfig {
        mode,
        ..SimConfig::default()
    };
    let schedule = Arc::new(Schedule::new());
    let pm = SimPm::new(POOL, sim);
    let gated = Gated {
        pm: pm.clone(),
        schedule: Arc::clone(&schedule),
    };
    let pool = Pool::format(gated, &CreateOptions::new(LAYOUT, POOL)).expect("format");
    let options = MvccOptions {
        mutant,
        ..run_options(background, lanes)
    };
    let engine = Mvcc::create(pool, &options, Transfers).expect("create");
    engine
        .transaction(|tx| {
            for i in 0..ACCOUNTS {
                write_account(tx, i, INITIAL)?;
            }
            Ok::<_, TxError>(())
        })
        .expect("setup");
    // The initial balances in the masters, durable whatever the mutant.
    engine.quiesce().expect("quiesce");
    pm.set_capture(true);
    let mut checker = Checker {
        seed,
        threads,
        mode,
        budget: Budget {
            exhaustive_max: 8,
            random: 2,
        },
        second_points: 3,
        second_budget: Budget {
            exhaustive_max: 2,
            random: 1,
        },
        passed: HashSet::new(),
        points: 0,
        images: 0,
        second_images: 0,
    };
    let mut counts = Counts::default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut failure = None;
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|me| {
                let (engine, schedule) = (&engine, &*schedule);
                scope.spawn(move || {
                    let result = caught(|| {
                        worker(engine, schedule, seed, me, count);
                        Ok(())
                    });
                    // Done, also when it failed: the main thread stops waiting for it.
                    schedule.finish(me);
                    result
                })
            })
            .collect();
        let mut plan = schedule.plan.lock().expect("plan");
        // Workers passed over (blocked) until they reach a gate again.
        let mut passed = [false; MAX_THREADS];
        loop {
            // Wait until every worker stands at a gate (or is done, or was passed over), or
            // the one let on has not reached one in time.
            let since = Instant::now();
            let mut stuck = false;
            loop {
                for (t, passed) in passed.iter_mut().enumerate().take(threads) {
                    *passed &= plan.at[t].is_none() && !plan.done[t];
                }
                let running =
                    (0..threads).any(|t| !plan.done[t] && plan.at[t].is_none() && !passed[t]);
                // Something to decide: a worker stopped, or all done (not only workers
                // passed over, still blocked on something that runs).
                let decidable = (0..threads).any(|t| plan.at[t].is_some())
                    || (0..threads).all(|t| plan.done[t]);
                if !running && plan.go.is_none() && decidable {
                    break;
                }
                if since.elapsed() > STUCK && plan.go.is_none() && running {
                    stuck = true;
                    for (t, passed) in passed.iter_mut().enumerate().take(threads) {
                        *passed |= !plan.done[t] && plan.at[t].is_none();
                    }
                    break;
                }
                plan = schedule
                    .moved
                    .wait_timeout(plan, Duration::from_millis(5))
                    .expect("plan")
                    .0;
            }
            if (0..threads).all(|t| plan.done[t]) {
                break;
            }
            // Check the crash points taken so far (every worker is stopped).
            let points = std::mem::take(&mut *schedule.points.lock().expect("points"));
            if failure.is_none() {
                for (snapshot, bounds) in &points {
                    if let Err(e) = checker.check(snapshot, bounds) {
                        failure = Some(e);
                        break;
                    }
                }
            }
            let stopped: Vec<usize> = (0..threads).filter(|&t| plan.at[t].is_some()).collect();
            if stuck {
                counts.passed_over += 1;
            }
            // A worker about to touch accounts that another, stopped in its commit, holds
            // would wait for it: not that one.
            let blocked = |t: usize| {
                match plan.at[t] {
                Some(Gate::Body(mask)) => stopped.iter().any(|&o| {
                    o != t
                        && matches!(plan.at[o], Some(Gate::Fence { commit: true, mask: m }) if m & mask != 0)
                }),
                // Every lane taken by a stopped transaction: it would wait for one.
                Some(Gate::Begin) => {
                    stopped
                        .iter()
                        .filter(|&&o| o != t && plan.in_txn[o])
                        .count()
                        >= lanes as usize
                }
                // Its checkpoints wait for every transaction that runs, and for the lock
                // a stopped checkpoint holds.
                Some(Gate::Sync) => stopped
                    .iter()
                    .any(|&o| o != t && !matches!(plan.at[o], Some(Gate::Begin | Gate::Sync))),
                _ => false,
            }
            };
            let free: Vec<usize> = stopped.iter().copied().filter(|&t| !blocked(t)).collect();
            let pick = if free.is_empty() { &stopped } else { &free };
            let chosen = pick[rng.random_range(0..pick.len())];
            plan.go = Some(chosen);
            counts.steps += 1;
            schedule.moved.notify_all();
        }
        drop(plan);
        for (me, w) in workers.into_iter().enumerate() {
            if let Err(e) = w.join().expect("worker") {
                failure.get_or_insert(format!("worker {me}: {e}"));
            }
        }
    });
    if let Some(failure) = failure {
        return Err(failure);
    }
    // The end: every transfer acknowledged; then the engine's drop (its quiesce) too.
    counts.stats = Some(engine.stats());
    let end = engine.pool().pm().pm.crash_now();
    let bounds = schedule.bounds();
    checker.check(&end, &bounds)?;
    drop(engine);
    let rest = std::mem::take(&mut *schedule.points.lock().expect("points"));
    for (snapshot, bounds) in &rest {
        checker.check(snapshot, bounds)?;
    }
    checker.check(&pm.crash_now(), &bounds)?;
    Ok((counts, checker))
}

fn run_and_report(
    seed: u64,
    threads: usize,
    lanes: u32,
    count: u64,
    background: bool,
    mode: SimMode,
) {
    let start = Instant::now();
    match crash_run(seed, threads, lanes, count, background, mode, Mutant::None) {
        Ok((counts, checker)) => {
            if std::env::var_os("MVCC_MODEL_STATS").is_some() {
                eprintln!(
                    "seed {seed}, {threads} threads × {count} on {lanes} lanes, background \
                     {background}, {}: \
                     {} steps ({} passed over), {} crash points, {} images, {} second-level \
                     images, {:.1} s\n  {:?}",
                    mode.name(),
                    counts.steps,
                    counts.passed_over,
                    checker.points,
                    checker.images,
                    checker.second_images,
                    start.elapsed().as_secs_f64(),
                    counts.stats,
                );
            }
        }
        Err(e) => panic!(
            "seed {seed}, {threads} threads × {count} on {lanes} lanes, background {background}, \
             {}: {e}",
            mode.name()
        ),
    }
}

fn soak() -> u64 {
    std::env::var("MVCC_MODEL_SOAK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// Two and three threads of interleaved transfers, with the lanes reclaiming for
/// themselves and with the background reclaimer, crashed at every fence.
#[test]
fn concurrent_commits_survive_a_crash_at_every_fence() {
    let count = if cfg!(debug_assertions) { 4 } else { 20 };
    for seed in 0..soak() {
        run_and_report(seed * 4, 2, 4, count, false, SimMode::Adr);
        run_and_report(seed * 4 + 1, 2, 4, count, true, SimMode::Adr);
        // Three threads on two lanes: a lane's log holds records of different threads.
        run_and_report(
            seed * 4 + 2,
            3,
            2,
            count * 2 / 3,
            seed % 2 == 0,
            SimMode::Adr,
        );
        run_and_report(seed * 4 + 3, 2, 4, count, true, SimMode::Eadr);
    }
}

/// The check is not vacuous: a commit that returns before its record is durable, and a
/// write-back that moves the watermark before the masters are, fail it.
#[test]
fn the_concurrent_crash_check_catches_the_mutants() {
    for mutant in [
        Mutant::NoCommitFence,
        Mutant::EarlyWatermark,
        Mutant::EagerFree,
    ] {
        // Without the background reclaimer the schedule follows the seed (the reclaimer is
        // never stopped, so with it a mutant's window may fall between crash points: it
        // escaped 4 seeds in 1 of 13 runs under load). Seed 0 catches each today.
        let caught = (0..8).find_map(|seed| {
            crash_run(seed, 2, 4, 12, false, SimMode::Adr, mutant)
                .err()
                .map(|e| (seed, e))
        });
        let Some(failure) = caught else {
            panic!("{mutant:?} passed the concurrent crash check");
        };
        if std::env::var_os("MVCC_MODEL_STATS").is_some() {
            eprintln!(
                "{mutant:?}: seed {} {}",
                failure.0,
                failure.1.lines().next().unwrap_or("")
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// A re-execution that needs versions its commit did not

const GROW: OpId = OpId(4);
/// Where `GROW` stores the pointers to its new blocks (one chunk).
const GROWN_AT: u64 = 2048;
/// Where the setup keeps pointers to its 16-byte blocks (`NEIGHBOURS` of them).
const NEIGHBOURS_AT: u64 = 2560;
const NEIGHBOURS: u64 = 32;

/// Re-executes `GROW`: allocates `n` 16-byte blocks, fills block `i` with `seed + i`, and
/// stores their pointers at `GROWN_AT`.
#[derive(Clone, Copy, Debug)]
struct Grow;

fn grow_blocks<T: Tx>(tx: &mut T, n: u64, seed: u64) -> TxResult<Vec<u64>> {
    (0..n)
        .map(|i| {
            let block: tx::PPtr = tx.alloc(16)?;
            tx.write_u64(block, 0, seed + i)?;
            tx.write_u64(block, 8, seed + i)?;
            Ok(block.offset())
        })
        .collect()
}

fn link_grown<T: Tx>(tx: &mut T, blocks: &[u64]) -> TxResult<()> {
    let root = tx.root::<()>();
    let tag = root.tag();
    for (i, &at) in blocks.iter().enumerate() {
        tx.write_ptr(
            root,
            GROWN_AT + 8 * i as u64,
            tx::PPtr::<()>::from_parts(tag, at),
        )?;
    }
    Ok(())
}

impl Replay for Grow {
    fn handles(&self, id: OpId) -> bool {
        id == GROW
    }

    fn replay<T: Tx>(&self, tx: &mut T, op: Op<'_>) -> TxResult<()> {
        if op.id != GROW || op.args.len() != 16 {
            return Err(TxError::Corrupted(format!("not a GROW: {op:?}")));
        }
        let word = |i| arg_word(op.args, i);
        let blocks = grow_blocks(tx, word(0), word(1))?;
        link_grown(tx, &blocks)
    }
}

/// A logged operation writes its new 16-byte blocks in place: their chunks have no header
/// then. Before it commits, another thread's commits write the blocks' neighbours, which
/// share those chunks, through versions (headers over the in-place bytes). Recovery replays
/// those commits first (their timestamps are older), so when it re-executes the operation
/// every block's chunk has a header, and the blocks' writes go through versions: the
/// re-execution needs a version per block, which the commit never needed. With more blocks
/// than a transaction may lock (3/4 of the lane's versions), recovery refused the pool
/// (`InvalidArgument` "raise tlog_versions", as `Corrupted`) although every commit had been
/// acknowledged.
#[test]
fn a_re_execution_that_needs_versions_its_commit_did_not_still_recovers() {
    // Logged (re-executed by the handler), then physical (its ranges written again, those
    // inside its blocks in place): both met the same headers.
    re_execution_after_headered_neighbours(true);
    re_execution_after_headered_neighbours(false);
}

fn re_execution_after_headered_neighbours(logged: bool) {
    let options = MvccOptions {
        lanes: 3,
        tlog_versions: 8,
        background: false,
        ..MvccOptions::small()
    };
    let pm = SimPm::new(POOL, SimConfig::default());
    let pool = Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, POOL)).expect("format");
    let engine = Mvcc::create(pool, &options, Grow).expect("create");
    let root = engine
        .read_only(|tx| Ok::<_, TxError>(tx.root::<()>()))
        .expect("root");
    // 32 blocks of 16 bytes: 8 chunks of 4 neighbours. Unit 1 of each chunk is freed, so the
    // operation's 8 blocks land one per chunk, next to live neighbours.
    let neighbours: Vec<u64> = (0..NEIGHBOURS)
        .map(|i| {
            engine
                .transaction(|tx| {
                    let block: tx::PPtr = tx.alloc(16)?;
                    tx.write_u64(block, 0, 1000 + i)?;
                    tx.write_ptr(root, NEIGHBOURS_AT + 8 * i, block)?;
                    Ok::<_, TxError>(block.offset())
                })
                .expect("a neighbour")
        })
        .collect();
    let chunk_of = |at: u64| at / 64;
    for i in (1..NEIGHBOURS).step_by(4) {
        assert_eq!(
            chunk_of(neighbours[i as usize]),
            chunk_of(neighbours[i as usize - 1])
        );
        engine
            .transaction(|tx| {
                let block: tx::PPtr = tx.read_ptr(root, NEIGHBOURS_AT + 8 * i)?;
                tx.free(block)?;
                tx.write_ptr(root, NEIGHBOURS_AT + 8 * i, tx::PPtr::<()>::null())
            })
            .expect("a free");
    }
    engine.quiesce().expect("quiesce");

    let grown = std::sync::mpsc::channel::<()>();
    let neighbours_written = std::sync::mpsc::channel::<()>();
    let (seed, n) = (7000u64, NEIGHBOURS / 4);
    std::thread::scope(|scope| {
        let engine = &engine;
        let grower = scope.spawn(move || {
            let mut args = Vec::new();
            args.extend_from_slice(&n.to_le_bytes());
            args.extend_from_slice(&seed.to_le_bytes());
            let mut first = true;
            let body = |tx: &mut mvcc::MvccTx<'_, SimPm, Grow>| {
                let blocks = grow_blocks(tx, n, seed)?;
                if first {
                    first = false;
                    grown.0.send(()).expect("send");
                    neighbours_written.1.recv().expect("recv");
                }
                link_grown(tx, &blocks)?;
                Ok::<_, TxError>(blocks)
            };
            let committed = if logged {
                engine.transaction_op(
                    Op {
                        id: GROW,
                        args: &args,
                    },
                    body,
                )
            } else {
                engine.transaction(body)
            };
            committed.expect("the operation commits")
        });
        grown.1.recv().expect("recv");
        // The neighbours (unit 0 of each chunk), half a transaction at a time: each locks
        // 4 chunks, within the 6 a transaction may lock.
        for half in [0..4u64, 4..8] {
            engine
                .transaction(|tx| {
                    for c in half.clone() {
                        let block: tx::PPtr = tx.read_ptr(root, NEIGHBOURS_AT + 8 * 4 * c)?;
                        tx.write_u64(block, 8, 2000 + c)?;
                    }
                    Ok::<_, TxError>(())
                })
                .expect("a neighbour's write");
        }
        neighbours_written.0.send(()).expect("send");
        let blocks = grower.join().expect("grower");
        let chunks: HashSet<u64> = blocks.iter().map(|&b| chunk_of(b)).collect();
        let shared: HashSet<u64> = neighbours.iter().map(|&b| chunk_of(b)).collect();
        assert_eq!(chunks.len(), n as usize, "one block per chunk: {blocks:x?}");
        assert!(chunks.is_subset(&shared), "next to neighbours: {blocks:x?}");
    });
    assert_eq!(
        engine.stats().commits_logical,
        u64::from(logged),
        "the operation is logged as such, or as data"
    );
    // A crash now: nothing checkpointed since the quiesce.
    let snapshot = pm.crash_now();
    drop(engine);
    let read_back = |pm: SimPm| {
        let pool = Pool::attach(pm, LAYOUT).expect("attach");
        let engine = match Mvcc::open(pool, &options, Grow) {
            Ok(engine) => engine,
            Err(e) => panic!("recovery refused a pool whose every commit was acknowledged: {e}"),
        };
        read_grown(&engine, root, n)
    };
    let pm = SimPm::from_image(snapshot.image(&snapshot.nothing()), SimConfig::default());
    pm.set_capture(true);
    let (grown, neighbours) = read_back(pm.clone());
    assert_eq!(
        grown,
        (0..n).map(|i| (seed + i, seed + i)).collect::<Vec<_>>()
    );
    assert_eq!(
        neighbours,
        (0..n).map(|c| (1000 + 4 * c, 2000 + c)).collect::<Vec<_>>()
    );
    // The recovery (its write-back before the re-execution included) crashed at any of its
    // fences recovers to the same state.
    let budget = Budget {
        exhaustive_max: 4,
        random: 2,
    };
    for inner in pm.take_snapshots() {
        for choice in choices(&inner, &budget, 1) {
            let again = SimPm::from_image(inner.image(&choice), SimConfig::default());
            assert_eq!(
                read_back(again),
                (grown.clone(), neighbours.clone()),
                "recovery crashed at {:?}",
                inner.kind
            );
        }
    }
}

/// The blocks `GROW` linked (both words of each) and the neighbours of unit 0 of each chunk.
type Grown = (Vec<(u64, u64)>, Vec<(u64, u64)>);

fn read_grown(engine: &Mvcc<SimPm, Grow>, root: tx::PPtr, n: u64) -> Grown {
    engine
        .read_only(|tx| {
            let grown = (0..n)
                .map(|i| {
                    let block: tx::PPtr = tx.read_ptr(root, GROWN_AT + 8 * i)?;
                    Ok((tx.read_u64(block, 0)?, tx.read_u64(block, 8)?))
                })
                .collect::<TxResult<Vec<_>>>()?;
            let neighbours = (0..n)
                .map(|c| {
                    let block: tx::PPtr = tx.read_ptr(root, NEIGHBOURS_AT + 8 * 4 * c)?;
                    Ok((tx.read_u64(block, 0)?, tx.read_u64(block, 8)?))
                })
                .collect::<TxResult<Vec<_>>>()?;
            Ok::<_, TxError>((grown, neighbours))
        })
        .expect("reading back")
}
