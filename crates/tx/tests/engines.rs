//! Behaviour of the undo and redo engines outside crashes: commit, abort, panic, heap
//! accounting, concurrency, reopening, bad input.

use crashsim::{SimConfig, SimPm};
use pmem::{CreateOptions, Persist, Pool};
use tx::{Engine, EngineOptions, LogMode, PPtr, Redo, Tx, TxError, TxResult, Undo};

const SIZE: u64 = 1 << 20;

fn sim_pool() -> Pool<SimPm> {
    Pool::format(
        SimPm::new(SIZE, SimConfig::default()),
        &CreateOptions::new("engines", SIZE),
    )
    .expect("format")
}

/// Runs `check` on a fresh undo and a fresh redo engine, in every log mode.
fn on_each_engine(check: impl Fn(&dyn Fn() -> Box<dyn Probe>)) {
    for mode in LogMode::ALL {
        let options = EngineOptions::small().with_log_mode(mode);
        check(&move || Box::new(Undo::create(sim_pool(), &options).expect("undo")));
        check(&move || Box::new(Redo::create(sim_pool(), &options).expect("redo")));
    }
}

/// The engine operations these tests use, object-safe so one test body covers both engines.
trait Probe {
    fn name(&self) -> &'static str;
    fn set(&self, field: u64, value: u64) -> TxResult<()>;
    fn get(&self, field: u64) -> TxResult<u64>;
    fn alloc_and_link(&self, size: u64) -> TxResult<()>;
    fn free_linked(&self) -> TxResult<()>;
    fn fail_after_writing(&self, value: u64) -> TxResult<()>;
    fn panic_after_writing(&self, value: u64);
    fn blocks(&self) -> u64;
    fn zeroed_block_is_zero(&self, size: u64) -> TxResult<bool>;
}

impl<E: Engine + HasHeap> Probe for E {
    fn name(&self) -> &'static str {
        Engine::name(self)
    }
    fn set(&self, field: u64, value: u64) -> TxResult<()> {
        self.transaction(|tx| tx.write_u64(tx.root::<()>(), field, value))
    }
    fn get(&self, field: u64) -> TxResult<u64> {
        self.transaction(|tx| tx.read_u64(tx.root::<()>(), field))
    }
    fn alloc_and_link(&self, size: u64) -> TxResult<()> {
        self.transaction(|tx| {
            let block: PPtr = tx.alloc(size)?;
            tx.write_u64(block, 0, 0xAB)?;
            tx.write_ptr(tx.root::<()>(), 64, block)
        })
    }
    fn free_linked(&self) -> TxResult<()> {
        self.transaction(|tx| {
            let block: PPtr = tx.read_ptr(tx.root::<()>(), 64)?;
            tx.free(block)?;
            tx.write_ptr(tx.root::<()>(), 64, PPtr::<()>::null())
        })
    }
    fn fail_after_writing(&self, value: u64) -> TxResult<()> {
        self.transaction(|tx| {
            tx.write_u64(tx.root::<()>(), 0, value)?;
            let _: PPtr = tx.alloc(100)?;
            Err(TxError::abort("on purpose"))
        })
    }
    fn panic_after_writing(&self, value: u64) {
        let _: TxResult<()> = self.transaction(|tx| {
            tx.write_u64(tx.root::<()>(), 0, value)?;
            let _: PPtr = tx.alloc(100)?;
            panic!("on purpose");
        });
    }
    fn blocks(&self) -> u64 {
        self.heap_blocks()
    }
    fn zeroed_block_is_zero(&self, size: u64) -> TxResult<bool> {
        let before = self.counters();
        let block: PPtr = self.transaction(|tx| {
            let block: PPtr = tx.alloc_zeroed(size)?;
            let mut inside = vec![1u8; size as usize];
            tx.read(block, 0, &mut inside)?;
            assert!(
                inside.iter().all(|&b| b == 0),
                "zeroed block not zero inside its transaction"
            );
            tx.write_u64(block, 8, 5)?;
            tx.write_ptr(tx.root::<()>(), 64, block)?;
            Ok::<_, TxError>(block)
        })?;
        let logged = self
            .counters()
            .since(&before)
            .class_bytes(pmem::WriteClass::Log);
        assert!(
            logged < size / 4,
            "{}: {logged} log bytes for a {size}-byte zeroed block",
            self.name()
        );
        let mut back = vec![1u8; size as usize];
        self.transaction(|tx| tx.read(block, 0, &mut back))?;
        Ok(back
            .iter()
            .enumerate()
            .all(|(i, &b)| b == if i == 8 { 5 } else { 0 }))
    }
}

trait HasHeap {
    fn heap_blocks(&self) -> u64;
}
impl<P: Persist> HasHeap for Undo<P> {
    fn heap_blocks(&self) -> u64 {
        self.heap().usage().allocated_blocks
    }
}
impl<P: Persist> HasHeap for Redo<P> {
    fn heap_blocks(&self) -> u64 {
        self.heap().usage().allocated_blocks
    }
}

#[test]
fn committed_writes_are_visible_and_aborts_change_nothing() {
    on_each_engine(|make| {
        let engine = make();
        engine.set(0, 11).expect("commit");
        engine.set(8, 22).expect("commit");
        assert!(matches!(
            engine.fail_after_writing(99),
            Err(TxError::Aborted(_))
        ));
        assert_eq!(engine.get(0).expect("read"), 11, "{}", engine.name());
        assert_eq!(
            engine.blocks(),
            0,
            "{}: aborted allocation leaked",
            engine.name()
        );
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            engine.panic_after_writing(77)
        }));
        assert!(caught.is_err());
        assert_eq!(
            engine.get(0).expect("read after panic"),
            11,
            "{}",
            engine.name()
        );
        assert_eq!(engine.blocks(), 0);
    });
}

#[test]
fn alloc_and_free_balance() {
    on_each_engine(|make| {
        let engine = make();
        for size in [8, 64, 500, 5000, 20_000] {
            engine.alloc_and_link(size).expect("alloc");
            assert_eq!(engine.blocks(), 1, "{}", engine.name());
            engine.free_linked().expect("free");
            assert_eq!(engine.blocks(), 0, "{}", engine.name());
        }
    });
}

#[test]
fn reads_see_the_transactions_own_writes() {
    let engine = Redo::create(sim_pool(), &EngineOptions::small()).expect("redo");
    let seen = engine
        .transaction(|tx| {
            let root = tx.root::<()>();
            tx.write(root, 4, &[1, 2, 3, 4, 5, 6, 7, 8])?;
            tx.write(root, 6, &[9, 9])?;
            let mut back = [0u8; 12];
            tx.read(root, 0, &mut back)?;
            Ok::<_, TxError>(back)
        })
        .expect("commit");
    assert_eq!(seen, [0, 0, 0, 0, 1, 2, 9, 9, 5, 6, 7, 8]);
}

#[test]
fn writes_outside_the_heap_and_root_are_refused() {
    let engine = Redo::create(sim_pool(), &EngineOptions::small()).expect("redo");
    let header = engine.transaction(|tx| tx.write_raw(0, &[0; 8]));
    assert!(
        matches!(header, Err(TxError::OutOfBounds { .. })),
        "{header:?}"
    );
    let past_end = engine.transaction(|tx| tx.read_raw(SIZE - 4, &mut [0; 8]));
    assert!(matches!(past_end, Err(TxError::OutOfBounds { .. })));
}

#[test]
fn a_transaction_larger_than_its_lane_fails_cleanly() {
    let engine = Redo::create(sim_pool(), &EngineOptions::small()).expect("redo");
    let big: PPtr = engine.transaction(|tx| tx.alloc(64 * 1024)).expect("alloc");
    let result = engine.transaction(|tx| tx.write(big, 0, &vec![7u8; 32 * 1024]));
    assert!(matches!(result, Err(TxError::LogFull { .. })), "{result:?}");
    let undo = Undo::create(sim_pool(), &EngineOptions::small()).expect("undo");
    let big: PPtr = undo.transaction(|tx| tx.alloc(64 * 1024)).expect("alloc");
    undo.transaction(|tx| tx.write(big, 0, &[1u8; 32]))
        .expect("small write");
    let result = undo.transaction(|tx| tx.write(big, 0, &vec![7u8; 32 * 1024]));
    assert!(matches!(result, Err(TxError::LogFull { .. })), "{result:?}");
    let first = undo.transaction(|tx| tx.read_u64(big, 0)).expect("read");
    assert_eq!(
        first,
        u64::from_le_bytes([1; 8]),
        "the failed transaction was rolled back"
    );
}

#[test]
fn many_small_transactions_wrap_the_redo_lanes() {
    let engine = Redo::create(sim_pool(), &EngineOptions::small()).expect("redo");
    for i in 0..5000u64 {
        engine.set(8 * (i % 32), i).expect("commit");
    }
    assert_eq!(engine.get(8 * (4999 % 32)).expect("read"), 4999);
}

#[test]
fn pools_reopen_with_their_contents_and_refuse_the_other_engine() {
    let pm = SimPm::new(SIZE, SimConfig::default());
    let pool = Pool::format(pm.clone(), &CreateOptions::new("engines", SIZE)).expect("format");
    let engine = Redo::create(pool, &EngineOptions::small()).expect("redo");
    engine.set(0, 5).expect("commit");
    engine.alloc_and_link(100).expect("alloc");
    drop(engine);
    let reopen = || {
        Pool::attach(
            SimPm::from_image(pm.durable_image(), SimConfig::default()),
            "engines",
        )
        .expect("attach")
    };
    let wrong = Undo::open(reopen(), &EngineOptions::small());
    assert!(
        matches!(wrong, Err(TxError::WrongEngine { .. })),
        "{wrong:?}"
    );
    let engine = Redo::open(reopen(), &EngineOptions::small()).expect("reopen");
    assert_eq!(engine.get(0).expect("read"), 5);
    assert_eq!(engine.heap().usage().allocated_blocks, 1);
}

#[test]
fn unformatted_pool_is_an_error_not_a_panic() {
    let result = Redo::open(sim_pool(), &EngineOptions::small());
    assert!(matches!(result, Err(TxError::Corrupted(_))), "{result:?}");
}

#[test]
fn threads_with_external_locks_do_not_lose_updates() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir");
    for kind in ["undo", "redo"] {
        let pool = Pool::create(
            dir.path().join(kind),
            &CreateOptions::new("engines", 32 << 20),
        )
        .expect("create");
        let lock = parking_lot::Mutex::new(());
        let run = |engine: &(dyn Probe + Sync)| {
            std::thread::scope(|scope| {
                for thread in 0..2u64 {
                    let lock = &lock;
                    scope.spawn(move || {
                        for _ in 0..2000 {
                            let _held = lock.lock();
                            let value = engine.get(0).expect("read");
                            engine.set(0, value + 1).expect("write");
                            engine.set(8 + 8 * thread, value).expect("write own");
                        }
                    });
                }
            });
            assert_eq!(engine.get(0).expect("read"), 4000, "{}", engine.name());
        };
        if kind == "undo" {
            run(&Undo::create(pool, &EngineOptions::default()).expect("undo"));
        } else {
            run(&Redo::create(pool, &EngineOptions::default()).expect("redo"));
        }
    }
}

#[test]
fn redo_needs_about_one_fence_per_small_transaction() {
    let engine = Redo::create(sim_pool(), &EngineOptions::small()).expect("redo");
    engine.set(0, 1).expect("warm up");
    let before = engine.counters();
    for i in 0..100 {
        engine.set(8, i).expect("commit");
    }
    let delta = engine.counters().since(&before);
    assert!(
        delta.fences <= 110,
        "{} fences for 100 transactions",
        delta.fences
    );
    assert_eq!(delta.durability_points, 100);
}

#[test]
fn zeroed_allocations_read_as_zero_and_log_no_zero_bytes() {
    on_each_engine(|make| {
        let engine = make();
        engine.alloc_and_link(20_000).expect("dirty a big block");
        engine.free_linked().expect("free it");
        engine.set(0, 1).expect("warm up");
        let zeroed = engine.zeroed_block_is_zero(20_000).expect("alloc_zeroed");
        assert!(
            zeroed,
            "{}: a zeroed block read back non-zero",
            engine.name()
        );
    });
}

/// A transaction that only allocates (its writes go to the fresh block, so it logs no undo
/// entry) crashes after its action record is durable but before it commits. Recovery must
/// retire that record: otherwise a later commit without heap actions makes it look
/// committed, and the next open applies it (a leaked block).
#[test]
fn undo_recovery_retires_an_uncommitted_action_record() {
    let pm = SimPm::new(SIZE, SimConfig::default());
    let pool = Pool::format(pm.clone(), &CreateOptions::new("engines", SIZE)).expect("format");
    let engine = Undo::create(pool, &EngineOptions::small()).expect("undo");
    pm.set_capture(true);
    engine
        .transaction(|tx| {
            let block: PPtr = tx.alloc(64)?;
            tx.write_u64(block, 0, 1)
        })
        .expect("alloc-only transaction");
    let snapshots = pm.take_snapshots();
    assert!(!snapshots.is_empty());
    let reopen = |image: Vec<u8>| {
        let pm = SimPm::from_image(image, SimConfig::default());
        let pool = Pool::attach(pm.clone(), "engines").expect("attach");
        (
            pm,
            Undo::open(pool, &EngineOptions::small()).expect("recover"),
        )
    };
    for snapshot in snapshots {
        let (pm, recovered) = reopen(snapshot.image(&snapshot.everything()));
        let blocks = recovered.heap().usage().allocated_blocks;
        recovered.set(0, 9).expect("a commit without heap actions");
        drop(recovered);
        let (_, again) = reopen(pm.durable_image());
        assert_eq!(
            again.heap().usage().allocated_blocks,
            blocks,
            "at {}",
            snapshot.kind
        );
    }
}

/// The simulator with a switch that makes the pool report a failed write-back.
#[derive(Debug)]
struct Poisonable {
    inner: SimPm,
    poisoned: std::sync::atomic::AtomicBool,
}

impl Persist for Poisonable {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, off: u64, dst: &mut [u8]) {
        self.inner.read(off, dst);
    }
    fn write(&self, off: u64, src: &[u8], class: pmem::WriteClass) {
        self.inner.write(off, src, class);
    }
    fn write_nt(&self, off: u64, src: &[u8], class: pmem::WriteClass) {
        self.inner.write_nt(off, src, class);
    }
    fn flush(&self, off: u64, len: u64) {
        self.inner.flush(off, len);
    }
    fn fence(&self) {
        self.inner.fence();
    }
    fn stats(&self) -> &pmem::Stats {
        self.inner.stats()
    }
    fn is_poisoned(&self) -> bool {
        self.poisoned.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[test]
fn a_failed_run_creation_reaches_the_transaction_with_its_own_error() {
    let inner = SimPm::new(SIZE, SimConfig::default());
    let pm = Poisonable {
        inner,
        poisoned: false.into(),
    };
    let pool = Pool::format(pm, &CreateOptions::new("engines", SIZE)).expect("format");
    let engine = Redo::create(pool, &EngineOptions::small()).expect("redo");
    engine
        .pool()
        .pm()
        .poisoned
        .store(true, std::sync::atomic::Ordering::SeqCst);
    // The first allocation of a size class creates its run through a system record.
    let result = engine.transaction(|tx| tx.alloc::<()>(64).map(|_| ()));
    assert!(matches!(result, Err(TxError::Poisoned)), "{result:?}");
}

/// A write that failed because the pool is poisoned leaves its undo entries in the log; a
/// body that ignores the error must not see its transaction commit (it would return with
/// those entries live, and a later rollback could restore their stale bytes).
#[test]
fn an_undo_transaction_that_ignored_a_poisoned_write_does_not_commit() {
    let inner = SimPm::new(SIZE, SimConfig::default());
    let pm = Poisonable {
        inner,
        poisoned: false.into(),
    };
    let pool = Pool::format(pm, &CreateOptions::new("engines", SIZE)).expect("format");
    let engine = Undo::create(pool, &EngineOptions::small()).expect("undo");
    let block: PPtr = engine
        .transaction(|tx| tx.alloc(64))
        .expect("allocation before the failure");
    engine
        .pool()
        .pm()
        .poisoned
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let result = engine.transaction(|tx| {
        let write = tx.write_u64(block, 0, 7);
        assert!(matches!(write, Err(TxError::Poisoned)), "{write:?}");
        Ok(())
    });
    assert!(matches!(result, Err(TxError::Poisoned)), "{result:?}");
}

/// Opening a pool with the wrong engine is refused before anything is written, so the pool
/// keeps the clean flag it had: a cleanly closed pool is not left looking crashed, and a
/// crashed one is not made to look clean.
#[test]
fn a_refused_open_of_another_engines_pool_keeps_its_clean_flag() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("tempdir");
    let path = dir.path().join("redo");
    let options = EngineOptions::small();
    let pool = Pool::create(&path, &CreateOptions::new("engines", 1 << 20)).expect("create");
    drop(Redo::create(pool, &options).expect("redo"));
    let open = || Pool::open(&path, "engines", &pmem::NativeOptions::default()).expect("open");
    let refused = Undo::open(open(), &options).expect_err("a redo pool");
    assert!(matches!(refused, TxError::WrongEngine { .. }), "{refused}");
    assert!(
        open().was_clean(),
        "a refused open left the pool marked as crashed"
    );
    open().abandon();
    let refused = Undo::open(open(), &options).expect_err("a redo pool");
    assert!(matches!(refused, TxError::WrongEngine { .. }), "{refused}");
    assert!(
        !open().was_clean(),
        "a refused open marked a crashed pool clean"
    );
    // (That open, like any open, left the pool clean when it dropped it.)
    drop(Redo::open(open(), &options).expect("the right engine"));
    let refused = Redo::open(
        {
            let path = dir.path().join("undo");
            let pool =
                Pool::create(&path, &CreateOptions::new("engines", 1 << 20)).expect("create");
            drop(Undo::create(pool, &options).expect("undo"));
            Pool::open(&path, "engines", &pmem::NativeOptions::default()).expect("open")
        },
        &options,
    )
    .expect_err("an undo pool");
    assert!(matches!(refused, TxError::WrongEngine { .. }), "{refused}");
    let undo = Pool::open(dir.path().join("undo"), "engines", &Default::default()).expect("open");
    assert!(
        undo.was_clean(),
        "redo's refused open left the pool marked as crashed"
    );
}

/// A transaction started inside another transaction of the same engine on the same thread
/// is refused: with one lane it used to wait forever for the lane the outer one holds, and
/// with more it committed on its own what it read from the outer one's uncommitted writes
/// (which then survived the outer one's abort). Another engine's transaction still nests.
#[test]
fn a_nested_transaction_of_the_same_engine_is_refused_not_a_deadlock() {
    let options = EngineOptions {
        lanes: 1,
        ..EngineOptions::small()
    };
    fn nest<E: Engine, F: Engine>(engine: &E, other: &F) {
        let outcome = engine.transaction(|tx| {
            tx.write_u64(tx.root::<()>(), 0, 1)?;
            let inner = engine.transaction(|inner| {
                let seen = inner.read_u64(inner.root::<()>(), 0)?;
                inner.write_u64(inner.root::<()>(), 64, seen + 5)
            });
            assert!(
                matches!(inner, Err(TxError::InvalidArgument(_))),
                "{}: {inner:?}",
                engine.name()
            );
            other.transaction(|tx| {
                // Two levels down, under the other engine's transaction: still refused.
                let deeper: Result<u64, TxError> =
                    engine.transaction(|inner| inner.read_u64(inner.root::<()>(), 0));
                assert!(
                    matches!(deeper, Err(TxError::InvalidArgument(_))),
                    "{}: {deeper:?}",
                    engine.name()
                );
                tx.write_u64(tx.root::<()>(), 128, 7)
            })?;
            // Once the other engine's transaction ended, this thread is inside `engine`'s
            // transaction alone again: still refused.
            let again: Result<u64, TxError> =
                engine.transaction(|inner| inner.read_u64(inner.root::<()>(), 0));
            assert!(
                matches!(again, Err(TxError::InvalidArgument(_))),
                "{again:?}"
            );
            Err::<(), _>(TxError::abort("outer aborts"))
        });
        assert!(matches!(outcome, Err(TxError::Aborted(_))), "{outcome:?}");
        let after = engine.transaction(|tx| {
            Ok::<_, TxError>((
                tx.read_u64(tx.root::<()>(), 0)?,
                tx.read_u64(tx.root::<()>(), 64)?,
            ))
        });
        assert_eq!(after.expect("read"), (0, 0), "{}", engine.name());
        let other = other.transaction(|tx| tx.read_u64(tx.root::<()>(), 128));
        assert_eq!(other.expect("read"), 7);
    }
    let (undo, redo) = (
        Undo::create(sim_pool(), &options).expect("undo"),
        Redo::create(sim_pool(), &options).expect("redo"),
    );
    let mem = tx::MemEngine::new(SIZE);
    let (done_tx, done) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        nest(&undo, &redo);
        nest(&redo, &undo);
        nest(&mem, &undo);
        done_tx.send(()).expect("report");
    });
    done.recv_timeout(std::time::Duration::from_secs(30))
        .expect("a nested transaction hung (or the test panicked)");
}

/// A pool whose engine header has a damaged magic is named as damaged, not as a pool no
/// engine formatted (both are `Corrupted`; only the zeros of a blank area mean the latter).
#[test]
fn a_damaged_engine_magic_is_not_called_unformatted() {
    let blank = Redo::open(sim_pool(), &EngineOptions::small()).expect_err("blank");
    assert!(
        blank.to_string().contains("not formatted"),
        "blank pool: {blank}"
    );
    for undo in [false, true] {
        let pool = sim_pool();
        let at = pool.arena().offset;
        let image = if undo {
            let engine = Undo::create(pool, &EngineOptions::small()).expect("undo");
            engine.pool().pm().volatile_image()
        } else {
            let engine = Redo::create(pool, &EngineOptions::small()).expect("redo");
            engine.pool().pm().volatile_image()
        };
        let mut image = image;
        image[at as usize + 3] ^= 0x40;
        let pool =
            Pool::attach(SimPm::from_image(image, SimConfig::default()), "engines").expect("pool");
        let error = if undo {
            Undo::open(pool, &EngineOptions::small()).map(drop)
        } else {
            Redo::open(pool, &EngineOptions::small()).map(drop)
        }
        .expect_err("damaged magic");
        assert!(matches!(error, TxError::Corrupted(_)), "{error:?}");
        assert!(
            error.to_string().contains("damaged") && !error.to_string().contains("not formatted"),
            "{error}"
        );
    }
}
