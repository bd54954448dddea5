//! Frees under concurrency, and typed errors naming the engine a pool belongs to.

use crashsim::SimPm;
use mvcc::{Mvcc, MvccOptions};
use pmem::{CreateOptions, Native, Persist, Pool};
use tx::{
    Engine, EngineOptions, NoReplay, Op, OpId, PPtr, Redo, Replay, Tx, TxError, TxResult, Undo,
};

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
const TRANSFER: OpId = OpId(3);

/// Re-executes logged transfers.
#[derive(Clone, Copy, Debug)]
struct Transfers;

impl Replay for Transfers {
    fn replay<T: Tx>(&self, tx: &mut T, op: Op<'_>) -> TxResult<()> {
        assert_eq!(op.id, TRANSFER);
        transfer(tx, u64::from_le_bytes(op.args.try_into().expect("8 bytes")))
    }
}

/// Moves 1 from account `i % 4` to the next one.
fn transfer<T: Tx>(tx: &mut T, i: u64) -> TxResult<()> {
    let (from, to) = (i % 4, (i + 1) % 4);
    let root = tx.root::<()>();
    let (a, b) = (tx.read_u64(root, 64 * from)?, tx.read_u64(root, 64 * to)?);
    tx.write_u64(root, 64 * from, a - 1)?;
    tx.write_u64(root, 64 * to, b + 1)
}

/// A crashed pool after ten transfers no checkpoint covers, logged as data or (`logged`)
/// as operations, and the live records' `(pos, len)`, oldest first.
fn crashed_mvcc(logged: bool) -> (Vec<u8>, Vec<(u64, u64)>) {
    let pm = SimPm::new(POOL, Default::default());
    let pool = Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, POOL)).expect("format");
    let engine = Mvcc::create(pool, &MvccOptions::small(), Transfers).expect("create");
    engine
        .transaction(|tx| {
            let root = tx.root::<()>();
            (0..4).try_for_each(|a| tx.write_u64(root, 64 * a, 100))
        })
        .expect("accounts");
    engine.sync().expect("checkpoint the setup");
    for i in 0..10u64 {
        let args = i.to_le_bytes();
        let op = Op {
            id: TRANSFER,
            args: &args,
        };
        if logged {
            engine.transaction_op(op, |tx| transfer(tx, i))
        } else {
            engine.transaction(|tx| transfer(tx, i))
        }
        .expect("transfer");
    }
    let image = pm.volatile_image();
    let layout =
        mvcc::layout::MvccLayout::read(engine.pool().pm(), engine.pool().arena()).expect("layout");
    std::mem::forget(engine);
    let view = SimPm::from_image(image.clone(), Default::default());
    let mut records: Vec<(u64, u64, u64, bool)> = (0..layout.lane_count as usize)
        .flat_map(|lane| {
            let (base, len) = layout.olog(lane);
            (base..base + len)
                .step_by(64)
                .map(move |pos| (pos, base + len))
        })
        .filter_map(|(pos, limit)| {
            let rec = mvcc::record::read(&view, pos, limit).expect("read")?;
            // Logged transfers take the compact form (8 argument bytes, no heap change).
            let logical = rec.kind == mvcc::record::Kind::Logical;
            assert_eq!(rec.compact, logical, "{rec:?}");
            Some((rec.ts, pos, rec.len, logical))
        })
        .collect();
    records.sort_unstable();
    let logical = records.iter().filter(|r| r.3).count();
    assert_eq!(logical, if logged { 10 } else { 0 });
    let live = records
        .into_iter()
        .map(|(_, pos, len, _)| (pos, len))
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

fn attach(image: &[u8]) -> Pool<SimPm> {
    Pool::attach(
        SimPm::from_image(image.to_vec(), Default::default()),
        LAYOUT,
    )
    .expect("pool")
}

fn damaged_in_the_middle_is_refused_and_salvaged(logged: bool) {
    let (image, live) = crashed_mvcc(logged);
    assert!(live.len() >= 10, "{} records", live.len());
    let engine = Mvcc::open(attach(&image), &MvccOptions::small(), Transfers).expect("intact");
    assert_eq!(total(&engine), 400);
    drop(engine);
    assert_eq!(check_damage(&image), 0);

    let (pos, len) = live[live.len() / 2];
    let mut damaged = image.clone();
    damaged[(pos + len - 5) as usize] ^= 0x20;
    let error =
        Mvcc::open(attach(&damaged), &MvccOptions::small(), Transfers).expect_err("damaged");
    assert!(matches!(error, TxError::Corrupted(_)), "{error}");
    assert!(error.to_string().contains("operation log"), "{error}");
    assert!(check_damage(&damaged) > 0, "the check agrees");
    let salvaged =
        Mvcc::salvage(attach(&damaged), &MvccOptions::small(), Transfers).expect("salvage");
    assert!(salvaged.recovery_report().damage().count() > 0);
}

#[test]
fn a_damaged_operation_record_in_the_middle_of_a_log_is_refused_not_skipped() {
    damaged_in_the_middle_is_refused_and_salvaged(false);
}

#[test]
fn a_damaged_compact_record_in_the_middle_of_a_log_is_refused_not_skipped() {
    damaged_in_the_middle_is_refused_and_salvaged(true);
}

/// Any byte of the newest compact record torn is the crash's interrupted commit: recovery
/// drops exactly that transfer, and the check finds no damage.
#[test]
fn a_torn_newest_compact_record_is_discarded_not_refused() {
    let (image, live) = crashed_mvcc(true);
    let (pos, len) = *live.last().expect("records");
    assert!(len <= 40, "a compact record of {len} bytes");
    for at in pos..pos + len {
        let mut torn = image.clone();
        torn[at as usize] ^= 0x01;
        assert_eq!(
            check_damage(&torn),
            0,
            "byte {:#x} of the newest record",
            at - pos
        );
        let engine = Mvcc::open(attach(&torn), &MvccOptions::small(), Transfers).expect("open");
        assert_eq!(total(&engine), 400);
        let root_words: Vec<u64> = engine
            .read_only(|tx| {
                let root = tx.root::<()>();
                (0..4).map(|a| tx.read_u64(root, 64 * a)).collect()
            })
            .expect("read");
        // Transfers 0..=8 survive; the tenth (moving 1 from account 1 to 2) is gone.
        assert_eq!(root_words, [99, 101, 100, 100], "byte {:#x}", at - pos);
    }
}

/// Log lines that each claim a full record running to the log's end (user data reaches the
/// logs in physical and checkpoint records) once made recovery check a CRC over the rest of
/// the log at every line, in time quadratic in the log's size. With the logs' prefix
/// checksums each line is a logarithmic step (`record::may_hold_record`).
#[test]
fn logs_whose_every_line_claims_a_record_to_the_end_recover_the_committed_state() {
    const BIG: u64 = 16 << 20;
    let options = MvccOptions {
        lanes: 1,
        olog_size: 2 << 20,
        clog_size: 4 << 20,
        ..MvccOptions::small()
    };
    let pool = Pool::format(
        SimPm::new(BIG, Default::default()),
        &CreateOptions::new(LAYOUT, BIG),
    )
    .expect("format");
    let engine = Mvcc::create(pool, &options, NoReplay).expect("create");
    engine
        .transaction(|tx| tx.write_u64(tx.root::<()>(), 0, 41))
        .expect("commit");
    engine.sync().expect("sync");
    let layout =
        mvcc::layout::MvccLayout::read(engine.pool().pm(), engine.pool().arena()).expect("layout");
    let mut image = engine.pool().pm().volatile_image();
    drop(engine);
    let (olog, olog_len) = layout.olog(0);
    for (start, len, magic) in [
        (olog, olog_len, b"FMOP"),
        (layout.clog, layout.clog_size, b"FMCK"),
    ] {
        // The second half of each log: past the records the run wrote.
        let (from, end) = (start + len / 2, start + len);
        for pos in (from..end).step_by(64) {
            let line = &mut image[pos as usize..pos as usize + 64];
            line[..4].copy_from_slice(magic);
            line[4..8].copy_from_slice(&((end - pos) as u32).to_le_bytes());
        }
    }
    let pool = Pool::attach(SimPm::from_image(image, Default::default()), LAYOUT).expect("pool");
    let engine = Mvcc::open(pool, &options, NoReplay).expect("open");
    let value = engine
        .read_only(|tx| tx.read_u64(tx.root::<()>(), 0))
        .expect("read");
    assert_eq!(value, 41);
    assert_eq!(engine.recovery_report().damage().count(), 0);
}

/// The MVCC engine refuses a redo pool before writing anything, so the pool keeps the clean
/// flag it had.
#[test]
fn a_refused_open_of_a_redo_pool_keeps_its_clean_flag() {
    let dir = tempfile::tempdir_in(pmem::DEFAULT_POOL_DIR).expect("tmp");
    let path = dir.path().join("redo");
    let pool: Pool<Native> =
        Pool::create(&path, &CreateOptions::new(LAYOUT, 1 << 20)).expect("pool");
    drop(Redo::create(pool, &EngineOptions::small()).expect("redo"));
    let open = || Pool::open(&path, LAYOUT, &Default::default()).expect("open");
    let refused = Mvcc::open(open(), &MvccOptions::small(), NoReplay).expect_err("a redo pool");
    assert!(matches!(refused, TxError::WrongEngine { .. }), "{refused}");
    assert!(
        open().was_clean(),
        "a refused open left the pool marked as crashed"
    );
    open().abandon();
    let refused = Mvcc::open(open(), &MvccOptions::small(), NoReplay).expect_err("a redo pool");
    assert!(matches!(refused, TxError::WrongEngine { .. }), "{refused}");
    assert!(
        !open().was_clean(),
        "a refused open marked a crashed pool clean"
    );
}

/// The engine a test formats a pool with, or asks to format over one.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Undo,
    Redo,
    Mvcc,
}

const KINDS: [Kind; 3] = [Kind::Undo, Kind::Redo, Kind::Mvcc];

/// `kind`'s `create` on `pool`, the engine dropped at once.
fn create(kind: Kind, pool: Pool<Native>) -> TxResult<()> {
    match kind {
        Kind::Undo => Undo::create(pool, &EngineOptions::small()).map(drop),
        Kind::Redo => Redo::create(pool, &EngineOptions::small()).map(drop),
        Kind::Mvcc => Mvcc::create(pool, &MvccOptions::small(), NoReplay).map(drop),
    }
}

/// Commits `value` into the root's first word through `kind`'s engine on a fresh `pool`.
fn create_with_value(kind: Kind, pool: Pool<Native>, value: u64) {
    fn set<E: Engine>(engine: E, value: u64) {
        engine
            .transaction(|tx| {
                let root = tx.root::<()>();
                tx.write_u64(root, 0, value)
            })
            .expect("commit");
    }
    match kind {
        Kind::Undo => set(
            Undo::create(pool, &EngineOptions::small()).expect("undo"),
            value,
        ),
        Kind::Redo => set(
            Redo::create(pool, &EngineOptions::small()).expect("redo"),
            value,
        ),
        Kind::Mvcc => set(
            Mvcc::create(pool, &MvccOptions::small(), NoReplay).expect("mvcc"),
            value,
        ),
    }
}

/// The root's first word, read by `kind`'s engine opening `pool`.
fn value_in(kind: Kind, pool: Pool<Native>) -> u64 {
    fn get<E: Engine>(engine: E) -> u64 {
        engine
            .read_only(|tx| {
                let root = tx.root::<()>();
                tx.read_u64(root, 0)
            })
            .expect("read")
    }
    match kind {
        Kind::Undo => get(Undo::open(pool, &EngineOptions::small()).expect("undo")),
        Kind::Redo => get(Redo::open(pool, &EngineOptions::small()).expect("redo")),
        Kind::Mvcc => get(Mvcc::open(pool, &MvccOptions::small(), NoReplay).expect("mvcc")),
    }
}

/// `create` formats only a fresh pool: on a pool any engine formatted, or whose engine area
/// holds other data, every engine's `create` is `AlreadyFormatted`, the file is unchanged
/// byte for byte, and the engine that owns it still opens it with its data.
#[test]
fn create_refuses_a_pool_whose_engine_area_is_not_fresh() {
    let dir = tempfile::tempdir_in(pmem::DEFAULT_POOL_DIR).expect("tmp");
    let open = |path: &std::path::Path| {
        Pool::<Native>::open(path, LAYOUT, &Default::default()).expect("open")
    };
    for owner in KINDS {
        let path = dir.path().join(format!("{owner:?}"));
        let pool = Pool::create(&path, &CreateOptions::new(LAYOUT, POOL)).expect("pool");
        create_with_value(owner, pool, 0x5eed);
        let before = std::fs::read(&path).expect("read");
        for other in KINDS {
            let refused = create(other, open(&path)).expect_err("a formatted pool");
            assert!(
                matches!(refused, TxError::AlreadyFormatted { found } if found.contains(&format!("{owner:?}").to_lowercase())),
                "{other:?} over {owner:?}: {refused}"
            );
        }
        assert!(
            std::fs::read(&path).expect("read") == before,
            "a refused create changed the {owner:?} pool"
        );
        assert_eq!(value_in(owner, open(&path)), 0x5eed, "{owner:?}");
    }

    // Bytes no engine wrote at the arena's start: refused alike; zeros there are fresh.
    let path = dir.path().join("foreign");
    let pool: Pool<Native> = Pool::create(&path, &CreateOptions::new(LAYOUT, POOL)).expect("pool");
    let at = pool.arena().offset;
    pool.pm().write(at, b"not-ours", pmem::WriteClass::Meta);
    pool.pm().persist(at, 8);
    drop(pool);
    for kind in KINDS {
        let refused = create(kind, open(&path)).expect_err("foreign data");
        assert!(
            matches!(refused, TxError::AlreadyFormatted { found } if found.contains("no engine")),
            "{kind:?}: {refused}"
        );
    }
    let pool = open(&path);
    pool.pm().fill(at, 8, 0, pmem::WriteClass::Meta);
    pool.pm().persist(at, 8);
    create(Kind::Redo, pool).expect("an area whose magic is zero is fresh");
}
