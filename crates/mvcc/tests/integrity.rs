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
