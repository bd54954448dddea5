//! The MVCC engine without the crash harness: visibility, aborts, recovery by
//! re-execution, checkpoints and write-back, typed errors for bad pools, isolation levels,
//! and a two-thread bank stress test.

use crashsim::SimPm;
use mvcc::{Level, Mvcc, MvccOptions};
use pmem::{CreateOptions, Native, Pool};
use std::sync::atomic::{AtomicBool, Ordering};
use tx::{Engine, EngineOptions, NoReplay, Op, OpId, Redo, Replay, Tx, TxError, TxResult};

const LAYOUT: &str = "mvcc-test";
const POOL: u64 = 1 << 20;

/// Operation 1: add the `u64` in `args` to the root's first word, record it in a list node
/// (so re-execution allocates too) and in one of 60 slots of the root (so checkpoints carry
/// many chunks and the checkpoint log fills).
#[derive(Clone, Copy, Debug)]
struct Adder;

const ADD: OpId = OpId(1);

fn add<T: Tx>(tx: &mut T, amount: u64) -> TxResult<()> {
    let root = tx.root::<()>();
    let sum = tx.read_u64(root, 0)?;
    tx.write_u64(root, 0, sum + amount)?;
    tx.write_u64(root, 64 * (1 + amount % 60), amount)?;
    let node = tx.alloc::<()>(16)?;
    tx.write_u64(node, 0, amount)?;
    let head = tx.read_u64(root, 8)?;
    tx.write_u64(node, 8, head)?;
    tx.write_ptr(root, 8, node)
}

impl Replay for Adder {
    fn replay<T: Tx>(&self, tx: &mut T, op: tx::Op<'_>) -> TxResult<()> {
        assert_eq!(op.id, ADD);
        add(tx, u64::from_le_bytes(op.args.try_into().expect("8 bytes")))
    }
}

fn run_add<E: Engine>(engine: &E, amount: u64) {
    let args = amount.to_le_bytes();
    engine
        .transaction_op(
            Op {
                id: ADD,
                args: &args,
            },
            |tx| add(tx, amount),
        )
        .expect("add");
}

/// Sum and list contents.
fn state<E: Engine>(engine: &E) -> (u64, Vec<u64>) {
    engine
        .read_only(|tx| {
            let root = tx.root::<()>();
            let sum = tx.read_u64(root, 0)?;
            let mut items = Vec::new();
            let mut cur: tx::PPtr = tx.read_ptr(root, 8)?;
            while !cur.is_null() {
                items.push(tx.read_u64(cur, 0)?);
                cur = tx.read_ptr(cur, 8)?;
            }
            Ok::<_, TxError>((sum, items))
        })
        .expect("read")
}

fn sim_pool() -> Pool<SimPm> {
    Pool::format(
        SimPm::new(POOL, Default::default()),
        &CreateOptions::new(LAYOUT, POOL),
    )
    .expect("format")
}

/// The pool image as a power failure right now would leave it (nothing pending persisted).
fn crash<R: Replay>(engine: Mvcc<SimPm, R>) -> Pool<SimPm> {
    let snapshot = engine.pool().pm().crash_now();
    let image = snapshot.image(&snapshot.nothing());
    std::mem::forget(engine);
    Pool::attach(SimPm::from_image(image, Default::default()), LAYOUT).expect("attach")
}

#[test]
fn committed_operations_survive_a_crash_by_re_execution() {
    let options = MvccOptions::small();
    let engine = Mvcc::create(sim_pool(), &options, Adder).expect("create");
    let mut amount = 0;
    // Many operations (checkpoints and write-backs happen), ending with at least one that
    // no checkpoint covers.
    loop {
        let before = engine.stats().checkpoints;
        amount += 1;
        run_add(&engine, amount);
        let stats = engine.stats();
        if amount >= 300 && stats.writebacks > 0 && stats.checkpoints == before {
            break;
        }
        assert!(
            amount < 20_000,
            "no write-back in 20 000 operations: {stats:?}"
        );
    }
    let expected = state(&engine);
    assert_eq!(expected.0, amount * (amount + 1) / 2);
    let stats = engine.stats();
    assert_eq!(stats.commits_logical, amount);
    // Every record is compact: a 16-byte header, 8 argument bytes, one 8-byte publish.
    assert_eq!(stats.olog_bytes, 32 * amount, "{stats:?}");
    assert!(stats.checkpoints > 0, "{stats:?}");
    assert!(stats.writebacks > 0, "{stats:?}");
    let blocks = engine.heap().usage().allocated_blocks;
    let recovered = Mvcc::open(crash(engine), &options, Adder).expect("recover");
    assert!(recovered.stats().replayed > 0, "nothing was re-executed");
    assert_eq!(state(&recovered), expected);
    assert_eq!(recovered.heap().usage().allocated_blocks, blocks);
    // A second recovery after a clean open replays nothing and changes nothing.
    let again = Mvcc::open(crash(recovered), &options, Adder).expect("reopen");
    assert_eq!(again.stats().replayed, 0);
    assert_eq!(state(&again), expected);
}

#[test]
fn an_unknown_operation_is_logged_as_data() {
    let options = MvccOptions::small();
    let engine = Mvcc::create(sim_pool(), &options, NoReplay).expect("create");
    for amount in 1..=5 {
        run_add(&engine, amount);
    }
    assert_eq!(engine.stats().commits_logical, 0);
    assert_eq!(engine.stats().commits_physical, 5);
    let expected = state(&engine);
    let recovered = Mvcc::open(crash(engine), &options, NoReplay).expect("recover");
    assert_eq!(state(&recovered), expected);
}

#[test]
fn aborts_leave_nothing_and_reads_see_own_writes() {
    let engine = Mvcc::create(sim_pool(), &MvccOptions::small(), NoReplay).expect("create");
    let result: Result<(), TxError> = engine.transaction(|tx| {
        let root = tx.root::<()>();
        tx.write_u64(root, 0, 7)?;
        assert_eq!(tx.read_u64(root, 0)?, 7);
        tx.alloc::<()>(100)?;
        Err(TxError::abort("no"))
    });
    assert!(result.is_err());
    assert_eq!(state(&engine).0, 0);
    assert_eq!(engine.heap().usage().allocated_blocks, 0);
    // Writes crossing chunk boundaries read back whole.
    let bytes: Vec<u8> = (0..200u8).collect();
    engine
        .transaction(|tx| {
            let root = tx.root::<()>();
            tx.write(root, 100, &bytes)?;
            let mut back = vec![0u8; 200];
            tx.read(root, 100, &mut back)?;
            assert_eq!(back, bytes);
            Ok::<_, TxError>(())
        })
        .expect("write");
    let mut back = vec![0u8; 200];
    engine
        .read_only(|tx| tx.read(tx.root::<()>(), 100, &mut back))
        .expect("read");
    assert_eq!(back, bytes);
}

#[test]
fn bad_pools_are_typed_errors() {
    let pool = sim_pool();
    let redo = Redo::create(pool, &EngineOptions::small()).expect("redo");
    let image = redo.pool().pm().volatile_image();
    drop(redo);
    let attach = |image: Vec<u8>| {
        Pool::attach(SimPm::from_image(image, Default::default()), LAYOUT).expect("attach")
    };
    let err = Mvcc::open(attach(image), &MvccOptions::small(), NoReplay).expect_err("redo pool");
    assert!(matches!(err, TxError::WrongEngine { .. }), "{err}");
    let err = Mvcc::open(sim_pool(), &MvccOptions::small(), NoReplay).expect_err("blank");
    assert!(matches!(err, TxError::Corrupted(_)), "{err}");
    let engine = Mvcc::create(sim_pool(), &MvccOptions::small(), NoReplay).expect("create");
    let base = engine.pool().arena().offset;
    let image = engine.pool().pm().volatile_image();
    drop(engine);
    // Any damaged header byte or lane header byte is an error, not a panic.
    for at in (0..64).chain(4096..4096 + 64) {
        let mut damaged = image.clone();
        damaged[(base + at) as usize] ^= 0x10;
        let result = Mvcc::open(attach(damaged), &MvccOptions::small(), NoReplay);
        assert!(matches!(result, Err(TxError::Corrupted(_))), "byte {at}");
    }
    // A damaged watermark slot falls back to the other one (a torn update); both damaged
    // is an error.
    for at in 64..80 {
        let mut one = image.clone();
        one[(base + at) as usize] ^= 0x10;
        Mvcc::open(attach(one.clone()), &MvccOptions::small(), NoReplay).expect("other slot");
        one[(base + at + 16) as usize] ^= 0x10;
        let result = Mvcc::open(attach(one), &MvccOptions::small(), NoReplay);
        assert!(
            matches!(result, Err(TxError::Corrupted(_))),
            "watermark byte {at}"
        );
    }
}

fn native_pool(dir: &tempfile::TempDir) -> Pool<Native> {
    let path = dir.path().join("bank.pool");
    Pool::create(&path, &CreateOptions::new(LAYOUT, 16 << 20)).expect("pool")
}

const ACCOUNTS: u64 = 64;
const START: u64 = 1000;

fn total<T: Tx>(tx: &mut T) -> TxResult<u64> {
    let root = tx.root::<()>();
    (0..ACCOUNTS).try_fold(0, |sum, a| Ok(sum + tx.read_u64(root, 8 * a)?))
}

/// Transfers between accounts by two threads at `level`, with a third auditing the total
/// in read-only snapshots: the total never changes.
fn bank(level: Level) -> mvcc::MvccStats {
    let dir = tempfile::tempdir_in(pmem::DEFAULT_POOL_DIR).expect("tmp");
    let options = MvccOptions {
        lanes: 4,
        olog_size: 64 << 10,
        clog_size: 64 << 10,
        chunk_shift: 16,
        tlog_versions: 256,
        ..MvccOptions::small()
    }
    .with_isolation(level);
    let engine = Mvcc::create(native_pool(&dir), &options, NoReplay).expect("create");
    engine
        .transaction(|tx| {
            let root = tx.root::<()>();
            (0..ACCOUNTS).try_for_each(|a| tx.write_u64(root, 8 * a, START))
        })
        .expect("open accounts");
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let sum = engine.read_only(|tx| total(tx)).expect("audit");
                assert_eq!(sum, ACCOUNTS * START, "an audit saw a torn transfer");
            }
        });
        let workers: Vec<_> = (0..2u64)
            .map(|thread| {
                let engine = &engine;
                s.spawn(move || {
                    let mut x = thread * 7 + 1;
                    for _ in 0..3000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let (from, to, amount) =
                            (x % ACCOUNTS, (x >> 8) % ACCOUNTS, (x >> 16) % 50);
                        engine
                            .transaction(|tx| {
                                let root = tx.root::<()>();
                                let a = tx.read_u64(root, 8 * from)?;
                                if a < amount || from == to {
                                    return Ok(());
                                }
                                let b = tx.read_u64(root, 8 * to)?;
                                tx.write_u64(root, 8 * from, a - amount)?;
                                tx.write_u64(root, 8 * to, b + amount)
                            })
                            .expect("transfer");
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("worker");
        }
        done.store(true, Ordering::Relaxed);
    });
    assert_eq!(
        engine.read_only(|tx| total(tx)).expect("total"),
        ACCOUNTS * START
    );
    let stats = engine.stats();
    drop(engine);
    let pool =
        Pool::open(dir.path().join("bank.pool"), LAYOUT, &Default::default()).expect("reopen");
    let engine = Mvcc::open(pool, &options, NoReplay).expect("recover");
    assert_eq!(
        engine.read_only(|tx| total(tx)).expect("total"),
        ACCOUNTS * START
    );
    stats
}

#[test]
fn bank_transfers_keep_the_total_under_every_level() {
    for level in [Level::Snapshot, Level::Serializable, Level::Linearizable] {
        let stats = bank(level);
        assert!(stats.checkpoints > 0, "{level:?}: {stats:?}");
        assert!(
            stats.commits_logical + stats.commits_physical > 6000 / 2,
            "{stats:?}"
        );
    }
}

/// Write skew: two transactions each read both of two accounts and withdraw from a
/// different one if the pair stays non-negative. Snapshot isolation allows both to commit;
/// serializable must not.
#[test]
fn serializable_prevents_write_skew() {
    let engine = Mvcc::create(sim_pool(), &MvccOptions::small(), NoReplay).expect("create");
    // Accounts on different chunks, so the two writes never conflict.
    let (x, y) = (0u64, 512u64);
    let setup = |engine: &Mvcc<SimPm, NoReplay>| {
        engine
            .transaction(|tx| {
                let root = tx.root::<()>();
                tx.write_u64(root, x, 50)?;
                tx.write_u64(root, y, 50)
            })
            .expect("setup")
    };
    let skew = |level: Level| {
        setup(&engine);
        // Interleave by hand: both read, then both write and commit.
        let first_read = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            for (mine, _) in [(x, y), (y, x)] {
                let (engine, barrier) = (&engine, &first_read);
                s.spawn(move || {
                    let mut waited = false;
                    let _ = engine.transaction_with(level, |tx| {
                        let root = tx.root::<()>();
                        let sum = tx.read_u64(root, x)?.wrapping_add(tx.read_u64(root, y)?);
                        if !waited {
                            barrier.wait();
                            waited = true;
                        }
                        if sum == 100 {
                            let v = tx.read_u64(root, mine)?;
                            tx.write_u64(root, mine, v.wrapping_sub(100))?;
                        }
                        Ok::<_, TxError>(())
                    });
                });
            }
        });
        engine
            .read_only(|tx| {
                let root = tx.root::<()>();
                Ok::<_, TxError>(tx.read_u64(root, x)?.wrapping_add(tx.read_u64(root, y)?))
            })
            .expect("sum")
    };
    assert_eq!(skew(Level::Serializable), 0, "exactly one withdrawal");
    // Both read before either writes, and the write sets are disjoint: snapshot isolation
    // validates nothing else, so both withdrawals commit (the anomaly serializable stops).
    assert_eq!(
        skew(Level::Snapshot),
        100u64.wrapping_neg(),
        "both withdrawals"
    );
}

/// Lost update: two transactions read the same counter, meet, then both increment it.
/// The second to commit finds the chunk written after its snapshot, aborts and re-runs, at
/// every level; the engine counts the conflict.
#[test]
fn concurrent_increments_conflict_and_retry_at_every_level() {
    for level in [Level::Snapshot, Level::Serializable, Level::Linearizable] {
        let engine = Mvcc::create(sim_pool(), &MvccOptions::small(), NoReplay).expect("create");
        let met = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            for _ in 0..2 {
                let (engine, met) = (&engine, &met);
                s.spawn(move || {
                    let mut first_run = true;
                    engine
                        .transaction_with(level, |tx| {
                            let root = tx.root::<()>();
                            let v = tx.read_u64(root, 0)?;
                            if std::mem::take(&mut first_run) {
                                met.wait();
                            }
                            tx.write_u64(root, 0, v + 1)
                        })
                        .expect("increment");
                });
            }
        });
        let value = engine
            .read_only(|tx| {
                let root = tx.root::<()>();
                tx.read_u64(root, 0)
            })
            .expect("read");
        assert_eq!(value, 2, "{level:?}: an increment was lost");
        assert!(
            engine.stats().conflicts >= 1,
            "{level:?}: {:?}",
            engine.stats()
        );
    }
}

/// A stack of values at the root (word 0: sum of the values, word 8: the top node) with
/// two registered operations, so re-execution reads what the original run read.
#[derive(Clone, Copy, Debug)]
struct Stack;

const PUSH: OpId = OpId(10);
const POP: OpId = OpId(11);

fn push<T: Tx>(tx: &mut T, value: u64) -> TxResult<()> {
    let root = tx.root::<()>();
    let node = tx.alloc::<()>(16)?;
    tx.write_u64(node, 0, value)?;
    let top = tx.read_u64(root, 8)?;
    tx.write_u64(node, 8, top)?;
    tx.write_ptr(root, 8, node)?;
    let sum = tx.read_u64(root, 0)?;
    tx.write_u64(root, 0, sum + value)
}

fn pop<T: Tx>(tx: &mut T) -> TxResult<()> {
    let root = tx.root::<()>();
    let top: tx::PPtr = tx.read_ptr(root, 8)?;
    let value = tx.read_u64(top, 0)?;
    let next = tx.read_u64(top, 8)?;
    tx.write_u64(root, 8, next)?;
    let sum = tx.read_u64(root, 0)?;
    tx.write_u64(root, 0, sum.wrapping_sub(value))?;
    tx.free(top)
}

impl Replay for Stack {
    fn replay<T: Tx>(&self, tx: &mut T, op: tx::Op<'_>) -> TxResult<()> {
        match op.id {
            PUSH => push(tx, u64::from_le_bytes(op.args.try_into().expect("8 bytes"))),
            _ => pop(tx),
        }
    }
}

fn stack_run(mutant: mvcc::Mutant) -> (u64, Vec<u64>) {
    let options = MvccOptions {
        mutant,
        ..MvccOptions::small()
    };
    let engine = Mvcc::create(sim_pool(), &options, Stack).expect("create");
    let op_push = |value: u64| {
        let args = value.to_le_bytes();
        engine
            .transaction_op(
                Op {
                    id: PUSH,
                    args: &args,
                },
                |tx| push(tx, value),
            )
            .expect("push");
    };
    op_push(1);
    op_push(2);
    engine.sync().expect("checkpoint");
    engine
        .transaction_op(Op { id: POP, args: &[] }, |tx| pop(tx))
        .expect("pop");
    op_push(3);
    // Power fails with every pending store persisted (the reused block's new bytes too).
    let snapshot = engine.pool().pm().crash_now();
    let image = snapshot.image(&snapshot.everything());
    std::mem::forget(engine);
    let pool = Pool::attach(SimPm::from_image(image, Default::default()), LAYOUT).expect("attach");
    let recovered = Mvcc::open(pool, &options, Stack).expect("recover");
    state(&recovered)
}

/// A block freed by a commit is reused only after a checkpoint covers the free: recovery
/// re-executes the free from the checkpoint before it and must read the block's old bytes.
/// Reusing it at once (the mutant) breaks exactly that.
#[test]
fn freed_blocks_wait_for_the_checkpoint_that_covers_the_free() {
    assert_eq!(stack_run(mvcc::Mutant::None), (4, vec![3, 1]));
    assert_ne!(
        stack_run(mvcc::Mutant::EagerFree),
        (4, vec![3, 1]),
        "eager reuse went unnoticed"
    );
}

/// The adder's state: its sum and the amounts added, newest first.
type AdderState = (u64, Vec<u64>);

/// Recovers `image` and returns the adder's state.
fn recover_adder(image: Vec<u8>, options: &MvccOptions) -> AdderState {
    let pool = Pool::attach(SimPm::from_image(image, Default::default()), LAYOUT).expect("attach");
    state(&Mvcc::open(pool, options, Adder).expect("recover"))
}

/// Runs adds until one of them triggers a write-back of a filling checkpoint log (of
/// chunks that still have versions), and returns the states a crash at each fence of that
/// add recovers to (nothing pending persisted), with the states before and after it.
fn write_back_crashes(mutant: mvcc::Mutant) -> (Vec<AdderState>, [AdderState; 2]) {
    // Reclamation inline: the write-back then runs inside the captured operation, so every
    // one of its fences is a crash point. A background write-back can straddle the end of
    // the capture, and the mutant's fence then falls outside it now and then.
    let options = MvccOptions {
        mutant,
        background: false,
        ..MvccOptions::small()
    };
    let engine = Mvcc::create(sim_pool(), &options, Adder).expect("create");
    let after = |n: u64| (n * (n + 1) / 2, (1..=n).rev().collect::<Vec<u64>>());
    for amount in 1..5000 {
        let writebacks = engine.stats().writebacks;
        engine.pool().pm().set_capture(true);
        run_add(&engine, amount);
        engine.pool().pm().set_capture(false);
        let snapshots = engine.pool().pm().take_snapshots();
        if engine.stats().writebacks > writebacks {
            let recovered = snapshots
                .iter()
                .map(|s| recover_adder(s.image(&s.nothing()), &options))
                .collect();
            return (recovered, [after(amount - 1), after(amount)]);
        }
    }
    panic!("no write-back in 5000 adds");
}

/// A write-back makes the masters durable before it moves the watermark that retires the
/// checkpoint log: a crash at any fence of the operation that triggers it recovers to the
/// state before or after that operation. Moving the watermark first (the mutant) loses
/// checkpointed updates whose masters were not yet durable.
#[test]
fn the_write_back_watermark_follows_durable_masters() {
    let (recovered, allowed) = write_back_crashes(mvcc::Mutant::None);
    for state in recovered {
        assert!(allowed.contains(&state), "{state:?} is neither {allowed:?}");
    }
    let (recovered, allowed) = write_back_crashes(mvcc::Mutant::EarlyWatermark);
    assert!(
        recovered.iter().any(|state| !allowed.contains(state)),
        "an early watermark went unnoticed"
    );
}

/// Two threads allocate blocks of every size class (each class's first block creates a run:
/// a system change that takes the checkpoint lock inside the heap's lock) and free them
/// again (frees are released by checkpoints, under the checkpoint lock). Lock order between
/// the heap and the checkpointer must not deadlock: a watchdog fails the test instead of
/// hanging it. With the old order reinstated (`reusable` in `reclaim.rs` taking the heap's
/// lock under the checkpoint lock) it deadlocks on every try; the deadlock was first seen
/// in a benchmark (bst, 80 % updates, 2 threads).
#[test]
fn allocation_and_checkpointing_threads_do_not_deadlock() {
    let dir = tempfile::tempdir_in(pmem::DEFAULT_POOL_DIR).expect("tmp");
    let options = MvccOptions {
        clog_size: 16 << 10,
        tlog_versions: 64,
        ..MvccOptions::small()
    };
    let engine = Mvcc::create(native_pool(&dir), &options, NoReplay).expect("create");
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let start = std::time::Instant::now();
            while !finished.load(Ordering::Relaxed) {
                if start.elapsed() > std::time::Duration::from_secs(120) {
                    // A panic here would wait for the deadlocked threads at the scope's end.
                    eprintln!("allocating and checkpointing threads deadlocked");
                    std::process::abort();
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        });
        let workers: Vec<_> = (0..2u64)
            .map(|thread| {
                let engine = &engine;
                s.spawn(move || {
                    // Half the blocks are freed in batches (their frees wait for
                    // checkpoints) while the other half fill runs, so new runs keep coming.
                    let mut live = Vec::new();
                    for round in 0..20_000u64 {
                        let size = 16 << ((round + thread) % 4);
                        let block = engine
                            .transaction(|tx| {
                                let block = tx.alloc::<()>(size)?;
                                tx.write_u64(block, 0, round)?;
                                tx.write_u64(tx.root::<()>(), 64 * (thread + 1), round)?;
                                Ok::<_, TxError>(block)
                            })
                            .expect("allocate");
                        // Every other block stays: the heap keeps creating runs.
                        if round % 2 == 0 {
                            live.push(block);
                        }
                        if live.len() == 16 {
                            for block in live.drain(..) {
                                engine.transaction(|tx| tx.free(block)).expect("free");
                            }
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("worker");
        }
        finished.store(true, Ordering::Relaxed);
    });
    assert!(engine.stats().checkpoints > 0, "{:?}", engine.stats());
}

/// Checks that the root's word 0 holds `hot` and word 0 of chunk `c` holds `c` for every `c`
/// of `chunks`, in `engine` and again after it is dropped and its pool (in `dir`) recovered.
fn check_root_survives_reopen(
    engine: Mvcc<Native, NoReplay>,
    dir: &tempfile::TempDir,
    options: &MvccOptions,
    hot: u64,
    chunks: std::ops::RangeInclusive<u64>,
) {
    let check = |engine: &Mvcc<Native, NoReplay>| {
        engine
            .read_only(|tx| {
                let root = tx.root::<()>();
                assert_eq!(tx.read_u64(root, 0)?, hot);
                for chunk in chunks.clone() {
                    assert_eq!(tx.read_u64(root, 64 * chunk)?, chunk, "chunk {chunk}");
                }
                Ok::<_, TxError>(())
            })
            .expect("read back");
    };
    check(&engine);
    drop(engine);
    let pool =
        Pool::open(dir.path().join("bank.pool"), LAYOUT, &Default::default()).expect("reopen");
    check(&Mvcc::open(pool, options, NoReplay).expect("recover"));
}

/// Writes 32 chunks of the root once, then rewrites one word until many checkpoints have
/// run, then checks every value before and after a reopen. Returns the headers cooled.
fn quiet_chunks_then_a_hot_one(cool_headers: u32) -> u64 {
    let dir = tempfile::tempdir_in(pmem::DEFAULT_POOL_DIR).expect("tmp");
    let options = MvccOptions {
        cool_headers,
        ..MvccOptions::small()
    };
    let engine = Mvcc::create(native_pool(&dir), &options, NoReplay).expect("create");
    let quiet = 1..=32u64;
    for chunk in quiet.clone() {
        engine
            .transaction(|tx| tx.write_u64(tx.root::<()>(), 64 * chunk, chunk))
            .expect("quiet write");
    }
    for round in 0..2000u64 {
        engine
            .transaction(|tx| tx.write_u64(tx.root::<()>(), 0, round))
            .expect("hot write");
    }
    let stats = engine.stats();
    assert!(stats.checkpoints > 4, "{} checkpoints", stats.checkpoints);
    check_root_survives_reopen(engine, &dir, &options, 1999, quiet);
    stats.cooled
}

/// Cooling (empty headers back to their masters between write-backs) runs only above
/// `cool_headers` headers in use; below it the write-back takes empty headers out, and
/// nothing is lost either way.
#[test]
fn cooling_waits_for_pressure_on_the_table() {
    assert!(
        quiet_chunks_then_a_hot_one(0) > 0,
        "no pressure needed: cools"
    );
    assert_eq!(
        quiet_chunks_then_a_hot_one(u32::MAX),
        0,
        "no pressure: no cooling"
    );
}

/// One lane of the small geometry: 48 versions, so a lane asks for a trim past 24 in use
/// and reclaims by itself only past 42 (7/8).
fn one_lane(background: bool) -> MvccOptions {
    MvccOptions {
        lanes: 1,
        ..MvccOptions::small()
    }
    .with_background(background)
}

/// The lane asks and the background reclaimer does the work: after 18 additions (two
/// versions each: the root's sum chunk and one slot chunk; the node is written in place,
/// 36 versions at most, below the back-pressure mark) the committing thread stops, and the
/// reclaimer trims or checkpoints without it; the lane never reclaimed by itself. Dropping
/// the engine stops and joins the reclaimer and quiesces the pool.
#[test]
fn the_background_reclaimer_serves_the_lanes_requests() {
    let options = one_lane(true);
    let engine = Mvcc::create(sim_pool(), &options, Adder).expect("create");
    for amount in 1..=18 {
        run_add(&engine, amount);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while engine.stats().background_reclaims == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the reclaimer never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let stats = engine.stats();
    eprintln!("announcement fence: {}", stats.announcement_fence);
    assert_eq!(stats.inline_reclaims, 0, "{stats:?}");
    assert!(stats.trims + stats.checkpoints > 0, "{stats:?}");
    assert_eq!(state(&engine).0, (1..=18).sum::<u64>());
    let pool = engine.pool().pm().clone();
    drop(engine);
    let reopened =
        Mvcc::open(Pool::attach(pool, LAYOUT).expect("attach"), &options, Adder).expect("reopen");
    assert_eq!(reopened.recovery_report().replayed, 0, "drop quiesced");
    assert_eq!(state(&reopened).0, (1..=18).sum::<u64>());
}

/// With the reclaimer off, the lane reclaims by itself and nothing runs in the background.
#[test]
fn without_the_background_reclaimer_the_lanes_reclaim_themselves() {
    let engine = Mvcc::create(sim_pool(), &one_lane(false), Adder).expect("create");
    for amount in 1..=200 {
        run_add(&engine, amount);
    }
    let stats = engine.stats();
    assert!(stats.inline_reclaims > 0, "{stats:?}");
    assert_eq!(stats.background_reclaims, 0, "{stats:?}");
    assert_eq!(state(&engine).0, (1..=200).sum::<u64>());
}

/// Bounded memory: while a reader pins the grace period, no version can be reused, the
/// background reclaimer cannot help, and the committing thread must not run past its
/// version log; it reclaims by itself (back-pressure) and waits for the reader, then
/// finishes once the reader is gone.
#[test]
fn a_pinned_snapshot_makes_the_committer_wait_not_grow() {
    let options = MvccOptions {
        lanes: 2,
        ..one_lane(true)
    };
    let engine = Mvcc::create(sim_pool(), &options, Adder).expect("create");
    let engine = &engine;
    let (pinned_tx, pinned_rx) = std::sync::mpsc::channel::<()>();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let done = &AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(move || {
            engine
                .read_only(|tx| {
                    let sum = tx.read_u64(tx.root::<()>(), 0)?;
                    pinned_tx.send(()).expect("main waits");
                    release_rx.recv().expect("main releases");
                    Ok::<_, TxError>(sum)
                })
                .expect("reader");
        });
        pinned_rx.recv().expect("reader pinned");
        let writer = s.spawn(move || {
            for amount in 1..=100 {
                run_add(engine, amount);
            }
            done.store(true, Ordering::SeqCst);
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while engine.stats().inline_reclaims == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the lane never helped"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !done.load(Ordering::SeqCst),
            "100 commits fit 48 versions only by reusing what the reader may still read"
        );
        release_tx.send(()).expect("reader waits");
        writer.join().expect("writer");
    });
    assert_eq!(state(engine).0, (1..=100).sum::<u64>());
}

/// Writes 16 chunks of the root, syncs, then runs `reads` read-only transactions and one
/// more write before the next sync. Returns the write-backs and the bytes they wrote after
/// the first sync, having checked every value before and after a reopen.
fn writes_then_reads(read_mostly_writeback: bool, reads: u64) -> (u64, u64) {
    let (dir, options, engine) = sixteen_chunks_written(read_mostly_writeback, false);
    engine.sync().expect("sync");
    let before = engine.stats();
    assert_eq!(
        before.writebacks, 0,
        "an interval of writes only: no write-back"
    );
    for _ in 0..reads {
        engine
            .read_only(|tx| tx.read_u64(tx.root::<()>(), 64))
            .expect("read");
    }
    engine
        .transaction(|tx| tx.write_u64(tx.root::<()>(), 0, 99))
        .expect("write");
    engine.sync().expect("sync");
    let after = engine.stats();
    check_root_survives_reopen(engine, &dir, &options, 99, SIXTEEN);
    (
        after.writebacks - before.writebacks,
        after.writeback_bytes - before.writeback_bytes,
    )
}

/// A checkpoint that ends a read-mostly interval (at least 7 in 8 transactions only read)
/// writes everything back at once, so the quiet chunks leave the table; one that ends an
/// interval with more writes, or with the option off, leaves that to the full CLog.
#[test]
fn a_read_mostly_interval_ends_in_a_write_back() {
    let (writebacks, bytes) = writes_then_reads(true, 7);
    assert_eq!(writebacks, 1, "7 reads, 1 write: read-mostly");
    assert!(
        bytes >= 16 * 8,
        "the 16 quiet words reach their masters: {bytes} B"
    );
    assert_eq!(
        writes_then_reads(true, 6),
        (0, 0),
        "6 reads, 1 write: not read-mostly"
    );
    assert_eq!(writes_then_reads(false, 64), (0, 0), "option off");
}

/// The root chunks [`sixteen_chunks_written`] writes.
const SIXTEEN: std::ops::RangeInclusive<u64> = 1..=16;

/// A fresh engine (small geometry, cooling off, so only a write-back takes headers out)
/// whose transactions wrote word 0 of each root chunk of [`SIXTEEN`] (16 headers, below a
/// trim request), with its pool's directory and its options.
fn sixteen_chunks_written(
    read_mostly_writeback: bool,
    background: bool,
) -> (tempfile::TempDir, MvccOptions, Mvcc<Native, NoReplay>) {
    let dir = tempfile::tempdir_in(pmem::DEFAULT_POOL_DIR).expect("tmp");
    let options = MvccOptions {
        cool_headers: u32::MAX,
        read_mostly_writeback,
        ..MvccOptions::small()
    }
    .with_background(background);
    let engine = Mvcc::create(native_pool(&dir), &options, NoReplay).expect("create");
    for chunk in SIXTEEN {
        engine
            .transaction(|tx| tx.write_u64(tx.root::<()>(), 64 * chunk, chunk))
            .expect("write");
    }
    assert!(engine.stats().headers >= 16, "{:?}", engine.stats());
    (dir, options, engine)
}

/// [`sixteen_chunks_written`] with the background reclaimer on, then `body`, then checks
/// every value before and after a reopen.
fn sixteen_headers_then(read_mostly_writeback: bool, body: impl FnOnce(&Mvcc<Native, NoReplay>)) {
    let (dir, options, engine) = sixteen_chunks_written(read_mostly_writeback, true);
    body(&engine);
    check_root_survives_reopen(engine, &dir, &options, 0, SIXTEEN);
}

/// Reads the root's chunks until `done` holds (true) or 60 s pass (false).
fn read_until(engine: &Mvcc<Native, NoReplay>, done: impl Fn(&mvcc::MvccStats) -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if done(&engine.stats()) {
            return true;
        }
        engine
            .read_only(|tx| tx.read_u64(tx.root::<()>(), 64))
            .expect("read");
    }
    false
}

/// Reads the root's chunks for `millis` milliseconds.
fn read_for(engine: &Mvcc<Native, NoReplay>, millis: u64) {
    let until = std::time::Instant::now() + std::time::Duration::from_millis(millis);
    read_until(engine, |_| std::time::Instant::now() > until);
}

/// A bulk load followed by reads only: no version log fills, no checkpoint is asked for,
/// yet the reclaimer settles on its own (a checkpoint and a write-back after a quiet,
/// read-mostly interval), so the load's headers leave the table and reads go to the
/// masters again.
#[test]
fn reads_after_a_load_settle_its_headers_back_to_the_masters() {
    sixteen_headers_then(true, |engine| {
        assert!(
            read_until(engine, |s| s.settles > 0 && s.headers == 0),
            "never settled: {:?}",
            engine.stats()
        );
        let settled = engine.stats();
        assert_eq!(settled.inline_reclaims, 0, "{settled:?}");
        // Nothing left to settle: more reads write nothing (no checkpoint record either).
        let stored = engine.counters().stored_bytes;
        read_for(engine, 50);
        let after = engine.stats();
        assert_eq!(
            (after.settles, after.checkpoints, after.writebacks),
            (settled.settles, settled.checkpoints, settled.writebacks),
            "{after:?}"
        );
        assert_eq!(engine.counters().stored_bytes, stored);
    });
}

/// No settle without reads (every look finds writes only) or with the option off.
#[test]
fn writes_or_the_option_off_never_settle() {
    sixteen_headers_then(true, |engine| {
        let until = std::time::Instant::now() + std::time::Duration::from_millis(100);
        let mut round = 0;
        while std::time::Instant::now() < until {
            round += 1;
            engine
                .transaction(|tx| tx.write_u64(tx.root::<()>(), 0, round % 2))
                .expect("write");
        }
        engine
            .transaction(|tx| tx.write_u64(tx.root::<()>(), 0, 0))
            .expect("write");
        assert_eq!(engine.stats().settles, 0, "{:?}", engine.stats());
    });
    sixteen_headers_then(false, |engine| {
        read_for(engine, 100);
        assert_eq!(engine.stats().settles, 0, "{:?}", engine.stats());
    });
}

/// Objects take the heap's size class (an 80-byte object takes 96 bytes, not two whole
/// chunks), so neighbours share a chunk: a committed write to one's tail gives the shared
/// chunk a header, and the other's bytes there still read back — through the chain, after a
/// crash and recovery, and after a checkpoint.
#[test]
fn neighbours_that_share_a_chunk_keep_their_own_bytes() {
    let engine = Mvcc::create(sim_pool(), &MvccOptions::small(), NoReplay).expect("create");
    let fill = |seed: u8| -> Vec<u8> { (0..80u8).map(|i| i.wrapping_mul(3) ^ seed).collect() };
    let (a, b) = engine
        .transaction(|tx| {
            let a = tx.alloc::<()>(80)?;
            let b = tx.alloc::<()>(80)?;
            tx.write(a, 0, &fill(0xa0))?;
            tx.write(b, 0, &fill(0xb0))?;
            Ok::<_, TxError>((a, b))
        })
        .expect("allocate");
    let (first, second) = if a.offset() < b.offset() {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(
        second.offset() - first.offset(),
        96,
        "80-byte objects sit at their size class's stride"
    );
    assert_eq!(
        (first.offset() + 79) / 64,
        second.offset() / 64,
        "the two share a chunk"
    );
    // A committed write to the first object's tail: the shared chunk gets a header.
    engine
        .transaction(|tx| tx.write(first, 72, &[0xee; 8]))
        .expect("tail");
    let mut first_bytes = fill(if first == a { 0xa0 } else { 0xb0 });
    first_bytes[72..].copy_from_slice(&[0xee; 8]);
    let second_bytes = fill(if second == a { 0xa0 } else { 0xb0 });
    let check = |engine: &Mvcc<SimPm, NoReplay>| {
        let (mut x, mut y) = (vec![0u8; 80], vec![0u8; 80]);
        engine
            .read_only(|tx| {
                tx.read(first, 0, &mut x)?;
                tx.read(second, 0, &mut y)
            })
            .expect("read");
        assert_eq!(x, first_bytes, "the written neighbour");
        assert_eq!(y, second_bytes, "the neighbour sharing its chunk");
    };
    check(&engine);
    let recovered = Mvcc::open(crash(engine), &MvccOptions::small(), NoReplay).expect("recover");
    check(&recovered);
    recovered.sync().expect("checkpoint");
    check(&recovered);
}

/// The common read's one flag: a snapshot-level transaction reads the master or a header
/// until it writes through a chain; from then on every read of a chunk it wrote sees its
/// write set, at every level, and a read after a failed attempt's conflict is refused.
#[test]
fn reads_see_the_write_set_once_a_transaction_writes() {
    for level in [Level::Snapshot, Level::Serializable, Level::Linearizable] {
        let options = MvccOptions {
            isolation: level,
            ..MvccOptions::small()
        };
        let engine = Mvcc::create(sim_pool(), &options, NoReplay).expect("create");
        engine
            .transaction(|tx| {
                let root = tx.root::<()>();
                assert_eq!(tx.read_u64(root, 64)?, 0, "{level:?}: the master first");
                tx.write_u64(root, 64, 41)?;
                assert_eq!(tx.read_u64(root, 64)?, 41, "{level:?}: its own write");
                tx.write_u64(root, 72, 42)?;
                let mut both = [0u8; 16];
                tx.read(root, 64, &mut both)?;
                assert_eq!(both[8..], 42u64.to_le_bytes(), "{level:?}: a later write");
                assert_eq!(tx.read_u64(root, 128)?, 0, "{level:?}: an unwritten chunk");
                Ok::<_, TxError>(())
            })
            .expect("write then read");
        let read = engine
            .read_only(|tx| tx.read_u64(tx.root::<()>(), 64))
            .expect("read");
        assert_eq!(read, 41, "{level:?}: committed");
    }
}

/// A read across two chunks sees each chunk as its snapshot does: the common read tests both
/// chunks' header bits at once (`read_raw`), and a committed version of either chunk, not
/// yet written back to its master, must send the read through the versions.
#[test]
fn a_value_across_two_chunks_sees_a_new_version_of_either_chunk() {
    let engine = Mvcc::create(sim_pool(), &one_lane(false), NoReplay).expect("create");
    let root = engine
        .read_only(|tx| Ok::<_, TxError>(tx.root::<()>()))
        .expect("root");
    // 16 bytes whose first 8 end one chunk and whose last 8 start the next.
    let field = 128 - root.offset() % 64 - 8;
    let across = |engine: &Mvcc<SimPm, NoReplay>| {
        engine
            .read_only(|tx| {
                let mut both = [0u8; 16];
                tx.read(root, field, &mut both)?;
                Ok::<_, TxError>(both)
            })
            .expect("read across")
    };
    assert_eq!(across(&engine), [0; 16], "the masters, before any write");
    for (half, value) in [(8, 0x2222u64), (0, 0x1111)] {
        engine
            .transaction(|tx| tx.write_u64(root, field + half, value))
            .expect("write one half");
        let both = across(&engine);
        assert_eq!(
            both[half as usize..half as usize + 8],
            value.to_le_bytes(),
            "the chunk written last (bytes {half}..)"
        );
    }
    let mut expected = [0u8; 16];
    expected[..8].copy_from_slice(&0x1111u64.to_le_bytes());
    expected[8..].copy_from_slice(&0x2222u64.to_le_bytes());
    assert_eq!(across(&engine), expected, "both new versions");
    assert!(
        engine.stats().writebacks == 0,
        "the versions were read before any write-back (else the test proves nothing)"
    );
}

/// A zero-length read is in bounds anywhere up to the pool's end, including the end itself
/// (past the last chunk's slot), and one byte further is out of bounds.
#[test]
fn an_empty_read_at_the_pool_end_is_in_bounds() {
    let engine = Mvcc::create(sim_pool(), &MvccOptions::small(), NoReplay).expect("create");
    engine
        .read_only(|tx| {
            tx.read_raw(POOL, &mut [])?;
            tx.read_raw(POOL - 3, &mut [])?;
            assert!(matches!(
                tx.read_raw(POOL, &mut [0u8; 1]),
                Err(TxError::OutOfBounds { .. })
            ));
            Ok::<_, TxError>(())
        })
        .expect("empty reads");
}

/// The common read checks its range against the pool length it resolved at begin: the
/// last bytes of the pool read, a range one byte longer or wrapping past `u64::MAX` is out
/// of bounds, and a refused read does not fail the transaction.
#[test]
fn a_plain_read_is_bounded_by_the_pool_end() {
    let engine = Mvcc::create(sim_pool(), &MvccOptions::small(), NoReplay).expect("create");
    engine
        .read_only(|tx| {
            let mut last = [0xAAu8; 8];
            tx.read_raw(POOL - 8, &mut last)?;
            assert_eq!(last, [0; 8], "the pool's last bytes are unwritten");
            for (addr, len) in [(POOL - 7, 8), (POOL, 1), (u64::MAX - 3, 8), (u64::MAX, 1)] {
                let mut dst = vec![0u8; len];
                assert!(
                    matches!(
                        tx.read_raw(addr, &mut dst),
                        Err(TxError::OutOfBounds { addr: a, len: l }) if a == addr && l == len as u64
                    ),
                    "{addr:#x} + {len}"
                );
            }
            tx.read_raw(POOL - 8, &mut last)?;
            Ok::<_, TxError>(())
        })
        .expect("bounded reads");
}

#[test]
fn a_chunk_read_again_right_away_is_validated_once() {
    let engine = Mvcc::create(sim_pool(), &MvccOptions::small(), NoReplay).expect("create");
    let root = engine
        .transaction(|tx| -> TxResult<u64> {
            let block = tx.alloc_raw(256)?;
            tx.write_raw(block, &[7; 256])?;
            Ok(block)
        })
        .expect("alloc");
    let counts = engine
        .transaction_with(Level::Serializable, |tx| -> TxResult<Vec<usize>> {
            let mut word = [0u8; 8];
            let mut counts = Vec::new();
            for offset in [0, 8, 16] {
                tx.read_raw(root + offset, &mut word)?;
                counts.push(tx.tracked_reads());
            }
            tx.read_raw(root + 128, &mut word)?;
            counts.push(tx.tracked_reads());
            tx.read_raw(root, &mut word)?;
            counts.push(tx.tracked_reads());
            Ok(counts)
        })
        .expect("read");
    // Three reads of the block's first chunk, one of another chunk, the first again.
    assert_eq!(root % 64, 0, "the block starts a chunk");
    assert_eq!(counts, [1, 1, 1, 2, 3]);
    let untracked = engine
        .transaction_with(Level::Snapshot, |tx| -> TxResult<usize> {
            let mut word = [0u8; 8];
            tx.read_raw(root, &mut word)?;
            Ok(tx.tracked_reads())
        })
        .expect("read");
    assert_eq!(untracked, 0);
}

#[test]
fn an_operation_whose_reads_changed_commits_as_data_sized_then() {
    let options = MvccOptions::small();
    let engine = Mvcc::create(sim_pool(), &options, Adder).expect("create");
    run_add(&engine, 1);
    // A chunk of the root that `add` neither reads nor writes.
    const WATCHED: u64 = 64 * 62;
    let mut first = true;
    let args = 2u64.to_le_bytes();
    engine
        .transaction_op(
            Op {
                id: ADD,
                args: &args,
            },
            |tx| {
                let root = tx.root::<()>();
                let seen = tx.read_u64(root, WATCHED)?;
                if first {
                    first = false;
                    // Another lane changes the chunk this operation read after its snapshot:
                    // its logical record would not re-execute as it ran. (On another thread:
                    // a transaction nested in this one on the same thread is refused.)
                    std::thread::scope(|scope| {
                        scope
                            .spawn(|| {
                                engine.transaction(|other| {
                                    let root = other.root::<()>();
                                    other.write_u64(root, WATCHED, seen + 100)
                                })
                            })
                            .join()
                            .expect("thread")
                    })
                    .expect("concurrent write");
                }
                add(tx, 2)
            },
        )
        .expect("add");
    let stats = engine.stats();
    assert_eq!(stats.commits_logical, 1, "{stats:?}");
    // The concurrent write has no operation: physical; the add failed validation: physical.
    assert_eq!(stats.commits_physical, 2, "{stats:?}");
    let expected = state(&engine);
    assert_eq!(expected.0, 3);
    let recovered = Mvcc::open(crash(engine), &options, Adder).expect("recover");
    assert_eq!(state(&recovered), expected);
    let watched = recovered
        .read_only(|tx| {
            let root = tx.root::<()>();
            tx.read_u64(root, WATCHED)
        })
        .expect("read");
    assert_eq!(watched, 100);
}

/// When every free block of the heap is one that committed transactions freed and that waits
/// for a checkpoint (or for the checkpoint log to be written back) before it may be reused,
/// an allocation gets it after the engine checkpoints and writes back, instead of failing
/// with `OutOfSpace` until some later reclamation happens to run.
#[test]
fn an_allocation_does_not_fail_while_freed_blocks_wait_for_reuse() {
    for background in [false, true] {
        for linked in [false, true] {
            let options = MvccOptions::small().with_background(background);
            let engine = Mvcc::create(sim_pool(), &options, NoReplay).expect("create");
            // Fill the heap; `linked` chains the blocks through versioned writes, so their
            // chunks are in the checkpoint log when they are freed.
            let mut blocks = Vec::new();
            loop {
                let result = engine.transaction(|tx| {
                    let block: tx::PPtr = tx.alloc(1024)?;
                    tx.write_u64(block, 0, 0)?;
                    Ok::<_, TxError>(block)
                });
                match result {
                    Ok(block) => blocks.push(block),
                    Err(TxError::OutOfSpace { .. }) => break,
                    Err(other) => panic!("allocating: {other}"),
                }
                if linked && blocks.len() >= 2 {
                    let (a, b) = (blocks[blocks.len() - 2], blocks[blocks.len() - 1]);
                    engine
                        .transaction(|tx| tx.write_ptr(a, 0, b))
                        .expect("link");
                }
            }
            assert!(blocks.len() > 16, "only {} blocks fit", blocks.len());
            for block in &blocks {
                engine.transaction(|tx| tx.free(*block)).expect("free");
            }
            let again = engine.transaction(|tx| tx.alloc::<()>(1024));
            assert!(
                again.is_ok(),
                "background {background}, linked {linked}: {again:?} with {} blocks freed",
                blocks.len()
            );
        }
    }
}

/// After `quiesce` every free committed so far is reusable: none waits for the checkpoint
/// log to be written back. It used to leave the frees whose lines were in the checkpoint
/// log deferred (the write-back ran, but no release after it), so `allocated_blocks` and
/// the heap's own count differed after a quiesce.
#[test]
fn quiesce_leaves_no_free_deferred() {
    for background in [false, true] {
        let options = MvccOptions::small().with_background(background);
        let engine = Mvcc::create(sim_pool(), &options, NoReplay).expect("create");
        // Small blocks that share lines, each written after its allocation: their chunks have
        // headers and bytes in the checkpoint log when they are freed.
        let blocks: Vec<tx::PPtr> = (0..200)
            .map(|i| {
                engine.transaction(|tx| {
                    let block: tx::PPtr = tx.alloc(48)?;
                    tx.write_u64(block, 0, i)?;
                    Ok::<_, TxError>(block)
                })
            })
            .collect::<Result<_, _>>()
            .expect("allocate");
        for pair in blocks.windows(2) {
            engine
                .transaction(|tx| tx.write_u64(pair[0], 8, pair[1].offset()))
                .expect("link");
        }
        for block in &blocks {
            engine.transaction(|tx| tx.free(*block)).expect("free");
        }
        engine.quiesce().expect("quiesce");
        assert_eq!(
            engine.allocated_blocks(),
            engine.heap().usage().allocated_blocks,
            "background {background}: frees still deferred after a quiesce"
        );
    }
}

/// Run return under write skew (`Core::may_return_run`). Under snapshot isolation a
/// transaction B that read a pointer to block X before transaction A unlinked and freed X
/// may still write X and commit (nothing B wrote was written after its snapshot). A reader C
/// whose snapshot lies between the two commits holds the checkpoints' boundary there: A's
/// free is covered and X released, so X's run R is empty, while B's version of X's line is
/// newer than the boundary. Once C ends, a checkpoint puts that version in the CLog and
/// cooling takes its header out; R's chunk then has bytes in a live CLog record. A span
/// allocated over a returned R is written in place (no header), and a crash before the
/// next write-back replays B's bytes over it: the guard keeps R until a write-back has
/// emptied the CLog. Returns the span's first word at X's offset after the crash, and the
/// span's address.
fn span_over_a_run_with_bytes_in_the_clog(mutant: mvcc::Mutant) -> (u64, u64, u64) {
    use std::sync::mpsc::channel;
    const CHUNK: u64 = 4096;
    const STALE: u64 = 0x57a1e;
    const FRESH: u8 = 0xa5;
    let options = MvccOptions {
        lanes: 4,
        background: false,
        read_mostly_writeback: false,
        mutant,
        ..MvccOptions::small()
    };
    assert_eq!(options.chunk_shift, 12);
    let engine = Mvcc::create(sim_pool(), &options, NoReplay).expect("create");
    // X: a 256-byte block, the only block of its run, named by the root and never written.
    let x: tx::PPtr = engine
        .transaction(|tx| {
            let x: tx::PPtr = tx.alloc(256)?;
            let root = tx.root::<()>();
            tx.write_ptr(root, 0, x)?;
            Ok::<_, TxError>(x)
        })
        .expect("X");
    // Every other chunk holds a span: no free chunk is left.
    while engine.transaction(|tx| tx.alloc::<()>(CHUNK)).is_ok() {}
    assert_eq!(engine.heap().usage().free_chunks, 0);
    let attempts = std::sync::atomic::AtomicU32::new(0);
    let (b_read, b_has_read) = channel();
    let (b_go, b_may_go) = channel::<()>();
    let (c_in, c_is_in) = channel();
    let (c_go, c_may_go) = channel::<()>();
    let (engine_ref, attempts) = (&engine, &attempts);
    std::thread::scope(|s| {
        let b = s.spawn(move || {
            engine_ref.transaction(|tx| {
                let root = tx.root::<()>();
                let seen: tx::PPtr = tx.read_ptr(root, 0)?;
                if attempts.fetch_add(1, Ordering::SeqCst) == 0 {
                    b_read.send(()).expect("main waits");
                    b_may_go.recv().expect("main says go");
                }
                tx.write_u64(seen, 0, STALE)
            })
        });
        b_has_read.recv().expect("B read the pointer");
        engine_ref
            .transaction(|tx| {
                let root = tx.root::<()>();
                tx.write_ptr(root, 0, tx::PPtr::<()>::null())?;
                tx.free(x)
            })
            .expect("A unlinks and frees X");
        let c = s.spawn(move || {
            // A transaction first, so that this lane's announcement (its previous snapshot)
            // is past A's commit.
            engine_ref
                .read_only(|_| Ok::<_, TxError>(()))
                .expect("C's first");
            engine_ref.read_only(|_| {
                c_in.send(()).expect("main waits");
                c_may_go.recv().expect("main says go");
                Ok::<_, TxError>(())
            })
        });
        c_is_in.recv().expect("C runs");
        b_go.send(()).expect("B waits");
        b.join().expect("B").expect("B commits its write to X");
        assert_eq!(attempts.load(Ordering::SeqCst), 1, "B retried");
        // More than the heap: the allocation releases the deferred frees (X among them)
        // and fails without returning a run.
        let too_large = engine_ref.transaction(|tx| tx.alloc::<()>(1 << 30));
        assert!(
            matches!(too_large, Err(TxError::OutOfSpace { .. })),
            "{too_large:?}"
        );
        assert!(engine_ref.heap().has_empty_runs(), "X was not released");
        c_go.send(()).expect("C waits");
        c.join().expect("C").expect("C");
    });
    // B's version to the CLog, then its header cooled out (no write-back).
    engine.sync().expect("sync");
    engine.sync().expect("sync");
    let span: tx::PPtr = engine
        .transaction(|tx| {
            let span: tx::PPtr = tx.alloc(CHUNK)?;
            tx.write_raw(span.offset(), &[FRESH; CHUNK as usize])?;
            Ok::<_, TxError>(span)
        })
        .expect("a span over the returned run");
    // The span's commit covered by a checkpoint: recovery does not re-apply it.
    engine.sync().expect("sync");
    let reopened = Mvcc::open(crash(engine), &options, NoReplay).expect("recover");
    let word = reopened
        .read_only(|tx| tx.read_u64(span, x.offset() - span.offset()))
        .expect("read");
    (word, span.offset(), x.offset())
}

#[test]
fn a_run_with_bytes_in_the_checkpoint_log_is_returned_only_after_a_write_back() {
    let fresh = u64::from_le_bytes([0xa5; 8]);
    let (word, span, x) = span_over_a_run_with_bytes_in_the_clog(mvcc::Mutant::None);
    assert_eq!(span, x & !4095, "the span is not over X's run");
    assert_eq!(word, fresh, "the span's bytes after recovery");
    let (word, span, x) = span_over_a_run_with_bytes_in_the_clog(mvcc::Mutant::ReturnAnyRun);
    assert_eq!(span, x & !4095, "the span is not over X's run");
    assert_eq!(
        word, 0x57a1e,
        "without the guard, B's bytes are replayed over the span"
    );
}

/// Fills the heap with 1 KiB blocks, then frees one while a reader started before the free
/// is still running (its snapshot holds the checkpoints' boundary before the free), and
/// allocates 1 KiB on the main thread while the reader runs for `hold` (`None`: until the
/// allocation has returned). Returns the allocation's result and how long it took.
fn allocate_while_an_older_reader_runs(
    hold: Option<std::time::Duration>,
) -> (TxResult<tx::PPtr>, std::time::Duration) {
    use std::sync::mpsc::channel;
    let options = MvccOptions {
        lanes: 4,
        background: false,
        ..MvccOptions::small()
    };
    let engine = Mvcc::create(sim_pool(), &options, NoReplay).expect("create");
    let mut blocks = Vec::new();
    while let Ok(block) = engine.transaction(|tx| tx.alloc::<()>(1024)) {
        blocks.push(block);
    }
    let (reading, is_reading) = channel();
    let (done, is_done) = channel::<()>();
    let engine = &engine;
    std::thread::scope(|s| {
        let reader = s.spawn(move || {
            engine
                .read_only(|_| Ok::<_, TxError>(()))
                .expect("a first read");
            engine.read_only(|_| {
                reading.send(()).expect("main waits");
                match hold {
                    Some(hold) => std::thread::sleep(hold),
                    // Main drops the sender once its allocation returned.
                    None => is_done.recv().unwrap_or(()),
                }
                Ok::<_, TxError>(())
            })
        });
        is_reading.recv().expect("the reader runs");
        let block = blocks.pop().expect("a block");
        engine.transaction(|tx| tx.free(block)).expect("free");
        let start = std::time::Instant::now();
        let got = engine.transaction(|tx| tx.alloc::<()>(1024));
        let took = start.elapsed();
        drop(done);
        reader.join().expect("reader").expect("read");
        (got, took)
    })
}

/// A reader descheduled in the middle of a short transaction holds back the release of the
/// frees committed after its snapshot. An allocation that needs such a free waits for it to
/// end (up to 100 ms) instead of failing: it used to fail with `OutOfSpace` while the free
/// was about to become reusable (a two-thread upsert benchmark on a busy machine ran out
/// of space in 6 runs of 10 at a pool size one thread never ran out at).
#[test]
fn an_allocation_waits_for_an_older_reader_to_end_before_it_fails() {
    let hold = std::time::Duration::from_millis(30);
    let (got, took) = allocate_while_an_older_reader_runs(Some(hold));
    assert!(got.is_ok(), "{got:?} after {took:?}");
    assert!(took >= hold / 2, "the allocation did not wait: {took:?}");
}

/// The wait is bounded: a reader that never ends while the allocation runs (it may be
/// waiting for something the allocating thread holds) makes the allocation fail with
/// `OutOfSpace` after about 100 ms per attempt, not hang.
#[test]
fn the_wait_for_an_older_reader_is_bounded() {
    let (got, took) = allocate_while_an_older_reader_runs(None);
    assert!(matches!(got, Err(TxError::OutOfSpace { .. })), "{got:?}");
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
}

/// The engine's shared state is a public, documented type: a user can name it and call its
/// methods (they used to be reachable only through `Deref` to a type rustdoc did not show).
#[test]
fn the_engines_shared_state_is_nameable() {
    fn core<P: pmem::Persist, R: Replay>(engine: &Mvcc<P, R>) -> &mvcc::Core<P> {
        engine
    }
    let engine = Mvcc::create(sim_pool(), &MvccOptions::small(), NoReplay).expect("create");
    engine
        .transaction(|tx| tx.alloc::<()>(64).map(drop))
        .expect("allocate");
    let shared = core(&engine);
    assert_eq!(shared.allocated_blocks(), 1);
    assert_eq!(shared.stats().commits_physical, 1);
    shared.quiesce().expect("quiesce");
    assert_eq!(shared.heap().usage().allocated_blocks, 1);
    assert_eq!(shared.pool().header().layout, LAYOUT);
}

/// A transaction started inside another of the same engine on the same thread is refused:
/// one that wrote a chunk the outer one had written used to retry forever on the outer
/// one's lock.
#[test]
fn a_nested_transaction_is_refused_not_retried_forever() {
    let engine = Mvcc::create(sim_pool(), &MvccOptions::small(), NoReplay).expect("create");
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let outcome = engine.transaction(|tx| {
            tx.write_u64(tx.root::<()>(), 0, 1)?;
            let inner = engine.transaction(|inner| inner.write_u64(inner.root::<()>(), 8, 2));
            assert!(
                matches!(inner, Err(TxError::InvalidArgument(_))),
                "{inner:?}"
            );
            Ok::<_, TxError>(())
        });
        outcome.expect("the outer transaction commits");
        let words = engine.read_only(|tx| {
            Ok::<_, TxError>((
                tx.read_u64(tx.root::<()>(), 0)?,
                tx.read_u64(tx.root::<()>(), 8)?,
            ))
        });
        assert_eq!(words.expect("read"), (1, 0));
        done_tx.send(()).expect("report");
    });
    done.recv_timeout(std::time::Duration::from_secs(30))
        .expect("a nested transaction hung (or the test panicked)");
}
