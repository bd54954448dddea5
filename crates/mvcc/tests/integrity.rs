//! Frees under concurrency, and typed errors naming the engine a pool belongs to.

use crashsim::SimPm;
use mvcc::{Mvcc, MvccOptions};
use pmem::{CreateOptions, Native, Pool};
use tx::{Engine, EngineOptions, NoReplay, PPtr, Redo, Tx, TxError, TxResult, Undo};

const LAYOUT: &str = "mvcc-integrity";
const POOL: u64 = 1 << 20;
const SLOTS: u64 = 2;

fn sim_pool() -> Pool<SimPm> {
    Pool::format(
        SimPm::new(POOL, Default::default()),
        &CreateOptions::new(LAYOUT, POOL),
    )
    .expect("format")
}

#[test]
fn undo_and_redo_name_mvcc_when_they_open_its_pool() {
    let engine = Mvcc::create(sim_pool(), &MvccOptions::small(), NoReplay).expect("create");
    let image = engine.pool().pm().volatile_image();
    drop(engine);
    let attach = || {
        Pool::attach(SimPm::from_image(image.clone(), Default::default()), LAYOUT).expect("pool")
    };
    let redo = Redo::open(attach(), &EngineOptions::small()).expect_err("mvcc pool");
    assert!(
        matches!(
            redo,
            TxError::WrongEngine {
                expected: "redo",
                found: "mvcc"
            }
        ),
        "{redo}"
    );
    let undo = Undo::open(attach(), &EngineOptions::small()).expect_err("mvcc pool");
    assert!(
        matches!(
            undo,
            TxError::WrongEngine {
                expected: "undo",
                found: "mvcc"
            }
        ),
        "{undo}"
    );
}

/// One transfer: reads the block in `slot`, allocates a new one holding the old value plus
/// one, frees the old block and links the new one. No caller lock: the engine isolates.
fn replace<T: Tx>(tx: &mut T, slot: u64) -> TxResult<()> {
    let root = tx.root::<()>();
    let old: PPtr<()> = tx.read_ptr(root, 8 * slot)?;
    let value = tx.read_u64(old, 0)?;
    let new = tx.alloc::<()>(64)?;
    tx.write_u64(new, 0, value + 1)?;
    // Let the other thread read the same block before this one frees it.
    std::thread::yield_now();
    tx.free(old)?;
    tx.write_ptr(root, 8 * slot, new)
}

#[test]
fn concurrent_frees_of_the_same_block_retry_instead_of_failing() {
    let dir = tempfile::tempdir_in(pmem::DEFAULT_POOL_DIR).expect("tmp");
    let pool: Pool<Native> =
        Pool::create(dir.path().join("p"), &CreateOptions::new(LAYOUT, 16 << 20)).expect("pool");
    let options = MvccOptions {
        lanes: 4,
        olog_size: 64 << 10,
        clog_size: 64 << 10,
        chunk_shift: 16,
        tlog_versions: 256,
        ..MvccOptions::small()
    };
    let engine = Mvcc::create(pool, &options, NoReplay).expect("create");
    engine
        .transaction(|tx| {
            let root = tx.root::<()>();
            (0..SLOTS).try_for_each(|slot| {
                let block = tx.alloc::<()>(64)?;
                tx.write_u64(block, 0, 0)?;
                tx.write_ptr(root, 8 * slot, block)
            })
        })
        .expect("setup");
    const ROUNDS: u64 = 2000;
    std::thread::scope(|s| {
        for thread in 0..2u64 {
            let engine = &engine;
            s.spawn(move || {
                for round in 0..ROUNDS {
                    let slot = (round + thread) % SLOTS;
                    engine
                        .transaction(|tx| replace(tx, slot))
                        .unwrap_or_else(|e| panic!("thread {thread} round {round}: {e}"));
                }
            });
        }
    });
    let sum = engine
        .read_only(|tx| {
            let root = tx.root::<()>();
            (0..SLOTS).try_fold(0, |sum, slot| {
                let block: PPtr<()> = tx.read_ptr(root, 8 * slot)?;
                Ok::<_, TxError>(sum + tx.read_u64(block, 0)?)
            })
        })
        .expect("sum");
    assert_eq!(sum, 2 * ROUNDS, "every replacement counted once");
    assert_eq!(engine.allocated_blocks(), SLOTS, "no block leaked");
}

#[test]
fn a_double_free_in_one_transaction_is_still_an_invalid_free() {
    let engine = Mvcc::create(sim_pool(), &MvccOptions::small(), NoReplay).expect("create");
    let block = engine
        .transaction(|tx| tx.alloc::<()>(64))
        .expect("allocate");
    let result = engine.transaction(|tx| {
        tx.free(block)?;
        tx.free(block)
    });
    assert!(matches!(result, Err(TxError::InvalidFree(_))), "{result:?}");
    let never = engine.transaction(|tx| tx.free(PPtr::<()>::from_parts(tx.pool_tag(), 0x1008)));
    assert!(matches!(never, Err(TxError::InvalidFree(_))), "{never:?}");
}

/// An MVCC pool after ten logged commits on one thread, as a process crash leaves it, and
/// the offsets and lengths of its live operation records (oldest first).
fn crashed_mvcc() -> (Vec<u8>, Vec<(u64, u64)>) {
    let pm = SimPm::new(POOL, Default::default());
    let pool = Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, POOL)).expect("format");
    let engine = Mvcc::create(pool, &MvccOptions::small(), NoReplay).expect("create");
    engine
        .transaction(|tx| {
            let root = tx.root::<()>();
            (0..4).try_for_each(|a| tx.write_u64(root, 64 * a, 100))
        })
        .expect("accounts");
    engine.sync().expect("checkpoint the setup");
    for i in 0..10u64 {
        let (from, to) = (i % 4, (i + 1) % 4);
        engine
            .transaction(|tx| {
                let root = tx.root::<()>();
                let (a, b) = (tx.read_u64(root, 64 * from)?, tx.read_u64(root, 64 * to)?);
                tx.write_u64(root, 64 * from, a - 1)?;
                tx.write_u64(root, 64 * to, b + 1)
            })
            .expect("transfer");
    }
    let image = pm.volatile_image();
    let layout =
        mvcc::layout::MvccLayout::read(engine.pool().pm(), engine.pool().arena()).expect("layout");
    std::mem::forget(engine);
    let view = SimPm::from_image(image.clone(), Default::default());
    let mut records: Vec<(u64, u64, u64)> = (0..layout.lane_count as usize)
        .flat_map(|lane| {
            let (base, len) = layout.olog(lane);
            (base..base + len)
                .step_by(64)
                .map(move |pos| (pos, base + len))
        })
        .filter_map(|(pos, limit)| {
            let rec = mvcc::record::read(&view, pos, limit).expect("read")?;
            Some((rec.ts, pos, rec.len))
        })
        .collect();
    records.sort_unstable();
    let live = records
        .into_iter()
        .map(|(_, pos, len)| (pos, len))
        .collect();
    (image, live)
}

fn total<E: Engine>(engine: &E) -> u64 {
    engine
        .read_only(|tx| {
            let root = tx.root::<()>();
            (0..4).try_fold(0, |sum, a| {
                Ok::<_, TxError>(sum + tx.read_u64(root, 64 * a)?)
            })
        })
        .expect("total")
}

fn check_damage(image: &[u8]) -> usize {
    let pool = Pool::attach(
        SimPm::from_image(image.to_vec(), Default::default()),
        LAYOUT,
    )
    .expect("pool");
    mvcc::check::check_area(pool.pm(), pool.arena())
        .iter()
        .filter(|f| f.is_damage())
        .count()
}

#[test]
fn a_damaged_operation_record_in_the_middle_of_a_log_is_refused_not_skipped() {
    let (image, live) = crashed_mvcc();
    assert!(live.len() >= 10, "{} records", live.len());
    let attach = |image: &[u8]| {
        Pool::attach(
            SimPm::from_image(image.to_vec(), Default::default()),
            LAYOUT,
        )
        .expect("pool")
    };
    let engine = Mvcc::open(attach(&image), &MvccOptions::small(), NoReplay).expect("intact");
    assert_eq!(total(&engine), 400);
    drop(engine);
    assert_eq!(check_damage(&image), 0);

    let (pos, len) = live[live.len() / 2];
    let mut damaged = image.clone();
    damaged[(pos + len - 5) as usize] ^= 0x20;
    let error = Mvcc::open(attach(&damaged), &MvccOptions::small(), NoReplay).expect_err("damaged");
    assert!(matches!(error, TxError::Corrupted(_)), "{error}");
    assert!(error.to_string().contains("operation log"), "{error}");
    assert!(check_damage(&damaged) > 0, "the check agrees");
    let salvaged =
        Mvcc::salvage(attach(&damaged), &MvccOptions::small(), NoReplay).expect("salvage");
    assert!(salvaged.recovery_report().damage().count() > 0);
}
