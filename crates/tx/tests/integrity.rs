//! Damage to a log is refused, not replayed: a torn tail (what a crash leaves) is discarded,
//! damage in the middle of a lane is `Corrupted` naming the lane (unless the user salvages),
//! and the deep check reports exactly what an open refuses.

use crashsim::{SimConfig, SimPm};
use pmem::checked;
use pmem::integrity::Severity;
use pmem::{CreateOptions, Persist, Pool};
use tx::check::check_area;
use tx::layout::EngineLayout;
use tx::{Engine, EngineKind, EngineOptions, PPtr, Redo, Tx, TxError, TxResult, Undo, record};

const SIZE: u64 = 1 << 20;
const LAYOUT: &str = "integrity";
const ACCOUNTS: u64 = 4;
const START: u64 = 1000;

fn fresh_pm() -> SimPm {
    let pm = SimPm::new(SIZE, SimConfig::default());
    Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, SIZE)).expect("format");
    pm
}

fn attach(image: &[u8]) -> Pool<SimPm> {
    Pool::attach(
        SimPm::from_image(image.to_vec(), SimConfig::default()),
        LAYOUT,
    )
    .expect("attach")
}

fn account<T: Tx>(tx: &mut T, a: u64) -> TxResult<PPtr<()>> {
    tx.read_ptr(tx.root::<()>(), 8 * a)
}

fn setup<E: Engine>(engine: &E) {
    engine
        .transaction(|tx| {
            for a in 0..ACCOUNTS {
                let block = tx.alloc::<()>(64)?;
                tx.write_u64(block, 0, START)?;
                tx.write_ptr(tx.root::<()>(), 8 * a, block)?;
            }
            Ok::<_, TxError>(())
        })
        .expect("setup");
}

fn transfer<E: Engine>(engine: &E, i: u64) {
    let (from, to) = (i % ACCOUNTS, (i * 3 + 1) % ACCOUNTS);
    engine
        .transaction(|tx| {
            let (a, b) = (account(tx, from)?, account(tx, to)?);
            let (x, y) = (tx.read_u64(a, 0)?, tx.read_u64(b, 0)?);
            if from != to && x > i {
                tx.write_u64(a, 0, x - i)?;
                tx.write_u64(b, 0, y + i)?;
            }
            Ok::<_, TxError>(())
        })
        .expect("transfer");
}

fn total<E: Engine>(engine: &E) -> u64 {
    engine
        .read_only(|tx| {
            (0..ACCOUNTS).try_fold(0, |sum, a| {
                let block = account(tx, a)?;
                Ok::<_, TxError>(sum + tx.read_u64(block, 0)?)
            })
        })
        .expect("total")
}

/// A redo pool after `transfers` transfers, as a process crash leaves it (every store
/// visible, nothing checkpointed since the setup), and its layout.
fn crashed_redo(transfers: u64) -> (Vec<u8>, EngineLayout) {
    let pm = fresh_pm();
    let engine = Redo::create(
        Pool::attach(pm.clone(), LAYOUT).expect("pool"),
        &EngineOptions::small(),
    )
    .expect("redo");
    setup(&engine);
    engine.sync().expect("checkpoint the setup");
    for i in 1..=transfers {
        transfer(&engine, i);
    }
    let image = pm.volatile_image();
    let layout = EngineLayout::read(engine.pool().pm(), engine.pool().arena(), EngineKind::Redo)
        .expect("layout");
    std::mem::forget(engine); // the process dies: no quiesce, no clean close
    (image, layout)
}

/// The live records of the redo lane that has them (the test thread's), oldest first:
/// (offset, length), and the lane's name.
fn live_records(image: &[u8], layout: &EngineLayout) -> (Vec<(u64, u64)>, String) {
    let pm = SimPm::from_image(image.to_vec(), SimConfig::default());
    let at = layout.watermark();
    let watermark = checked::open(pm.read_u64(at), at, "w").expect("watermark");
    let lane_records = |lane: usize| {
        let (base, limit) = (layout.lane(lane), layout.lane(lane) + layout.lane_size);
        let mut found: Vec<(u64, u64, u64)> = (base..limit)
            .step_by(64)
            .filter_map(|at| {
                let rec = record::read(&pm, at, limit, watermark).expect("read")?;
                (rec.seq > watermark).then_some((rec.seq, at, u64::from(rec.len)))
            })
            .collect();
        found.sort_unstable();
        found
            .into_iter()
            .map(|(_, at, len)| (at, len))
            .collect::<Vec<_>>()
    };
    (0..layout.lane_count as usize)
        .map(|lane| (lane_records(lane), format!("redo lane {lane}")))
        .max_by_key(|(records, _)| records.len())
        .expect("lanes")
}

fn check_damage(image: &[u8], kind: EngineKind) -> usize {
    let pool = attach(image);
    check_area(pool.pm(), pool.arena(), kind)
        .iter()
        .filter(|f| f.is_damage())
        .count()
}

#[test]
fn a_damaged_record_in_the_middle_of_a_redo_lane_is_refused_not_replayed() {
    let (image, layout) = crashed_redo(12);
    let (live, lane) = live_records(&image, &layout);
    assert!(live.len() >= 10, "{} live records", live.len());
    let (at, len) = live[live.len() / 2];
    let mut damaged = image.clone();
    damaged[(at + len - 3) as usize] ^= 0x40;

    let error = Redo::open(attach(&damaged), &EngineOptions::small()).expect_err("damaged");
    let text = error.to_string();
    assert!(matches!(error, TxError::Corrupted(_)), "{text}");
    assert!(text.contains(&lane), "{text}");
    assert!(
        check_damage(&damaged, EngineKind::Redo) > 0,
        "the check agrees"
    );

    // Salvage is an explicit choice: it opens, replays what is intact and says what it skipped.
    let salvaged = Redo::salvage(attach(&damaged), &EngineOptions::small()).expect("salvage");
    assert!(salvaged.recovery_report().damage().count() > 0);

    // The undamaged image recovers every transfer.
    let engine = Redo::open(attach(&image), &EngineOptions::small()).expect("intact");
    assert_eq!(total(&engine), ACCOUNTS * START);
    assert_eq!(check_damage(&image, EngineKind::Redo), 0);
}

#[test]
fn a_torn_newest_record_is_discarded_and_reported() {
    let (image, layout) = crashed_redo(6);
    let (live, lane) = live_records(&image, &layout);
    let &(at, len) = live.last().expect("records");
    // Tear the newest record: its last line never reached the media.
    let mut torn = image.clone();
    let line = ((at + len - 1) / 64 * 64) as usize;
    torn[line.max(at as usize + 24)..(at + len) as usize].fill(0);
    let engine = Redo::open(attach(&torn), &EngineOptions::small()).expect("torn tail");
    let report = engine.recovery_report();
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.severity == Severity::Recovery && f.structure == lane),
        "{report:?}"
    );
    assert_eq!(check_damage(&torn, EngineKind::Redo), 0);
}

/// A lane whose only live record is torn has no intact live record to place its next
/// commit after: its torn record lies at the lane start or after the lane's newest (dead)
/// record. Recovery used to look for a torn tail only after a live record, so it discarded
/// this commit without a word (and `pool check` called the pool clean).
#[test]
fn a_torn_record_in_a_lane_with_no_other_live_record_is_reported() {
    let (image, layout) = crashed_redo(1);
    let (live, lane) = live_records(&image, &layout);
    assert_eq!(live.len(), 1, "one live record");
    let (at, len) = live[0];
    for byte in [at + 1, at + len / 2, at + len - 1] {
        let mut torn = image.clone();
        torn[byte as usize] ^= 0x80;
        let engine = Redo::open(attach(&torn), &EngineOptions::small()).expect("torn tail");
        let report = engine.recovery_report();
        assert_eq!(report.replayed, 0);
        assert!(
            report
                .findings
                .iter()
                .any(|f| f.severity == Severity::Recovery && f.structure == lane),
            "byte {byte:#x}: {report:?}"
        );
        assert_eq!(check_damage(&torn, EngineKind::Redo), 0);
    }
    // The same lanes after a clean close report nothing.
    let engine = Redo::open(attach(&image), &EngineOptions::small()).expect("intact");
    assert_eq!(engine.recovery_report().replayed, 1);
    drop(engine);
    let pm = SimPm::from_image(image.clone(), SimConfig::default());
    let pool = Pool::attach(pm.clone(), LAYOUT).expect("pool");
    drop(Redo::open(pool, &EngineOptions::small()).expect("open"));
    let closed = pm.volatile_image();
    let engine = Redo::open(attach(&closed), &EngineOptions::small()).expect("closed");
    assert!(
        engine.recovery_report().findings.is_empty(),
        "{:?}",
        engine.recovery_report()
    );
}

/// An undo pool crashed in the middle of a transaction that wrote the accounts one
/// `write_raw` (one snapshot batch) at a time, and the offsets of its live entries.
fn crashed_undo() -> (Vec<u8>, Vec<u64>) {
    let pm = fresh_pm();
    let engine = Undo::create(
        Pool::attach(pm.clone(), LAYOUT).expect("pool"),
        &EngineOptions::small(),
    )
    .expect("undo");
    setup(&engine);
    let mut image = Vec::new();
    let _: Result<(), TxError> = engine.transaction(|tx| {
        for a in 0..ACCOUNTS {
            let block = account(tx, a)?;
            tx.write_u64(block, 0, 7)?;
        }
        image = pm.volatile_image();
        Err(TxError::abort("the crash came here"))
    });
    let layout = EngineLayout::read(engine.pool().pm(), engine.pool().arena(), EngineKind::Undo)
        .expect("layout");
    let lane = busy_undo_lane(&image, &layout);
    let entries_start = lane + 64 + 2048;
    // Each entry logs one 8-byte balance: 24 header bytes and 8 old bytes.
    let entries = (0..ACCOUNTS).map(|i| entries_start + 32 * i).collect();
    (image, entries)
}

fn word(image: &[u8], at: u64) -> u64 {
    u64::from_le_bytes(image[at as usize..at as usize + 8].try_into().expect("8"))
}

/// The undo lane the test thread used: the one whose action record or first entry carries
/// a recent generation.
fn busy_undo_lane(image: &[u8], layout: &EngineLayout) -> u64 {
    (0..layout.lane_count as usize)
        .map(|lane| layout.lane(lane))
        .max_by_key(|&lane| {
            let generation = checked::open(word(image, lane), lane, "g").expect("generation");
            let (record, entry) = (word(image, lane + 64), word(image, lane + 64 + 2048));
            (entry == generation, record == generation - 1)
        })
        .expect("lanes")
}

#[test]
fn a_damaged_undo_entry_before_entries_written_in_place_is_refused() {
    let (image, entries) = crashed_undo();
    let engine = Undo::open(attach(&image), &EngineOptions::small()).expect("rolls back");
    assert_eq!(
        total(&engine),
        ACCOUNTS * START,
        "the intact log rolls everything back"
    );
    drop(engine);

    let mut damaged = image.clone();
    damaged[(entries[1] + 24) as usize] ^= 0x01; // the second entry's old bytes
    let error = Undo::open(attach(&damaged), &EngineOptions::small()).expect_err("damaged");
    assert!(matches!(error, TxError::Corrupted(_)), "{error}");
    assert!(error.to_string().contains("undo lane"), "{error}");
    assert!(check_damage(&damaged, EngineKind::Undo) > 0);
    let salvaged = Undo::salvage(attach(&damaged), &EngineOptions::small()).expect("salvage");
    assert!(salvaged.recovery_report().damage().count() > 0);

    // Damage to the last entry looks like a torn last batch: it opens (rolling back the
    // three others).
    let mut last = image.clone();
    last[(entries[3] + 24) as usize] ^= 0x01;
    assert!(Undo::open(attach(&last), &EngineOptions::small()).is_ok());
    assert_eq!(check_damage(&last, EngineKind::Undo), 0);
}

#[test]
fn a_damaged_pending_action_record_is_refused() {
    let pm = fresh_pm();
    let engine = Undo::create(
        Pool::attach(pm.clone(), LAYOUT).expect("pool"),
        &EngineOptions::small(),
    )
    .expect("undo");
    setup(&engine);
    let layout = EngineLayout::read(engine.pool().pm(), engine.pool().arena(), EngineKind::Undo)
        .expect("layout");
    drop(engine);
    // As if the crash came after the commit point, before the actions were applied: the
    // applied word one behind the generation, the record tagged with the committed one.
    let mut image = pm.volatile_image();
    let lane = busy_undo_lane(&image, &layout);
    let generation = checked::open(word(&image, lane), lane, "g").expect("generation");
    let tag = word(&image, lane + 64);
    assert_eq!(
        tag,
        generation - 1,
        "the setup's action record is the last one"
    );
    let applied = checked::seal(generation - 1, lane + 8, "a").expect("fits");
    image[(lane + 8) as usize..(lane + 16) as usize].copy_from_slice(&applied.to_le_bytes());
    assert!(Undo::open(attach(&image), &EngineOptions::small()).is_ok());

    let mut damaged = image.clone();
    damaged[(lane + 64 + 16 + 9) as usize] ^= 0x01; // an action's operand
    let error = Undo::open(attach(&damaged), &EngineOptions::small()).expect_err("damaged");
    assert!(matches!(error, TxError::Corrupted(_)), "{error}");
    assert!(check_damage(&damaged, EngineKind::Undo) > 0);

    // A damaged tag alone is recognised: the record verifies with the tag it must carry.
    let mut tag_only = image.clone();
    tag_only[(lane + 64) as usize] ^= 0x08;
    assert!(Undo::open(attach(&tag_only), &EngineOptions::small()).is_ok());
}

#[test]
fn a_retire_claimed_over_entries_never_rolled_back_is_refused() {
    let (mut image, entries) = crashed_undo();
    // The lane of the in-flight transaction: its entries start 64 + 2048 bytes in.
    let lane = entries[0] - 64 - 2048;
    let generation = checked::open(word(&image, lane), lane, "g").expect("generation");
    // `applied = G + 1` says a retire was under way, which comes only after a rollback; but
    // these entries' ranges still hold the transaction's writes.
    let applied = checked::seal(generation + 1, lane + 8, "a").expect("fits");
    image[(lane + 8) as usize..(lane + 16) as usize].copy_from_slice(&applied.to_le_bytes());
    let error = Undo::open(attach(&image), &EngineOptions::small()).expect_err("inconsistent");
    assert!(error.to_string().contains("never rolled back"), "{error}");
    assert!(check_damage(&image, EngineKind::Undo) > 0);
}

#[test]
fn a_redo_area_of_format_version_2_is_refused_with_a_typed_error_and_left_as_it_was() {
    let pm = fresh_pm();
    let engine = Redo::create(
        Pool::attach(pm.clone(), LAYOUT).expect("pool"),
        &EngineOptions::small(),
    )
    .expect("redo");
    setup(&engine);
    let base = engine.pool().arena().offset as usize;
    drop(engine);
    let mut image = pm.durable_image();
    image[base + 8..base + 12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32fast::hash(&image[base..base + 60]);
    image[base + 60..base + 64].copy_from_slice(&crc.to_le_bytes());
    let pool = attach(&image);
    let result = Redo::open(pool, &EngineOptions::small());
    match result {
        Err(TxError::Corrupted(message)) => assert!(
            message.contains("unsupported redo area version 2 (this build reads version 3)"),
            "{message}"
        ),
        other => panic!("a version-2 area opened: {:?}", other.err()),
    }
    let pool = attach(&image);
    assert!(Undo::open(pool, &EngineOptions::small()).is_err());
}

/// Options with one lane long enough to hold more than 2^14 records: only the engine's
/// rule (checkpoint before a sequence number runs `record::SEQ_AHEAD` past the watermark)
/// keeps the records' 16-bit sequence numbers unambiguous.
fn one_long_lane() -> EngineOptions {
    EngineOptions {
        lanes: 1,
        lane_size: 2 << 20,
        ..EngineOptions::small()
    }
}

#[test]
fn records_far_past_the_low_16_bits_of_the_sequence_replay_after_a_crash() {
    const BIG: u64 = 4 << 20;
    let pm = SimPm::new(BIG, SimConfig::default());
    Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, BIG)).expect("format");
    let engine = Redo::create(
        Pool::attach(pm.clone(), LAYOUT).expect("pool"),
        &one_long_lane(),
    )
    .expect("redo");
    let commits = 3 * record::SEQ_AHEAD + 777;
    for i in 1..=commits {
        engine
            .transaction(|tx| tx.write_u64(tx.root::<()>(), 8 * (i % 16), i))
            .expect("commit");
    }
    let image = pm.volatile_image();
    std::mem::forget(engine);
    let pool = Pool::attach(
        SimPm::from_image(image.clone(), SimConfig::default()),
        LAYOUT,
    )
    .expect("attach");
    let engine = Redo::open(pool, &one_long_lane()).expect("recover");
    let report = engine.recovery_report();
    assert!(report.replayed > 0 && (report.replayed as u64) < record::SEQ_AHEAD);
    assert_eq!(report.damage().count(), 0, "{report:?}");
    for slot in 0..16 {
        let expected = (1..=commits)
            .filter(|i| i % 16 == slot)
            .max()
            .expect("written");
        let got = engine
            .transaction(|tx| tx.read_u64(tx.root::<()>(), 8 * slot))
            .expect("read");
        assert_eq!(got, expected, "slot {slot}");
    }
    let pool =
        Pool::attach(SimPm::from_image(image, SimConfig::default()), LAYOUT).expect("attach");
    let damage = check_area(pool.pm(), pool.arena(), EngineKind::Redo)
        .into_iter()
        .filter(|f| f.is_damage())
        .count();
    assert_eq!(damage, 0);
}

#[test]
fn a_lane_idle_for_many_commits_then_written_again_recovers_without_damage() {
    let pm = fresh_pm();
    let engine = Redo::create(
        Pool::attach(pm.clone(), LAYOUT).expect("pool"),
        &EngineOptions::small(),
    )
    .expect("redo");
    setup(&engine);
    // The main thread holds its lane through an empty transaction while another thread
    // commits, so that thread's records go to the other lane.
    let other_lane = |first: u64| {
        engine
            .transaction(|_| -> TxResult<()> {
                std::thread::scope(|scope| {
                    scope.spawn(|| (first..first + 3).for_each(|i| transfer(&engine, i)));
                });
                Ok(())
            })
            .expect("empty transaction");
    };
    other_lane(1);
    for i in 0..3 * record::SEQ_AHEAD {
        transfer(&engine, i);
    }
    other_lane(7);
    transfer(&engine, 11);
    let image = pm.volatile_image();
    std::mem::forget(engine);
    assert_eq!(check_damage(&image, EngineKind::Redo), 0);
    let engine = Redo::open(attach(&image), &EngineOptions::small()).expect("recover");
    assert_eq!(engine.recovery_report().damage().count(), 0);
    assert_eq!(total(&engine), ACCOUNTS * START);
}
