//! Crash consistency of the redo log's 16-bit sequence numbers (`docs/tx-format.md` §6.1,
//! §7.3) at every fence, with double crash: a run whose sequence numbers cross a multiple of
//! 2^16 while the checkpoint that keeps them near the watermark (`record::SEQ_AHEAD`) moves
//! the watermark past them.

use crashsim::{Budget, Config, DoubleCrash, Scenario, SimConfig, SimMode, SimPm, check};
use pmem::{CreateOptions, Persist, Pool, WriteClass, checked};
use tx::layout::EngineLayout;
use tx::{Engine, EngineKind, EngineOptions, PPtr, Redo, Tx, TxResult, record};

const LAYOUT: &str = "seqwin";
const ACCOUNTS: u64 = 4;
const START: u64 = 1_000_000;
/// The watermark the run starts from: the checkpoint forced by `SEQ_AHEAD` then moves it
/// to just below 2^16, and the next records' low 16 bits wrap to zero.
const START_WATERMARK: u64 = (1 << 16) - record::SEQ_AHEAD - 6;
/// Commits before the crash-tested operations (none checkpointed: the lane holds them all).
const WARM_UP: u64 = record::SEQ_AHEAD - 8;
/// Crash-tested operations: the seventh forces the checkpoint, the fourteenth wraps.
const OPS: usize = 20;

/// Two lanes: the warm-up fills the first; the operations alternate, so a lane sits idle while
/// the other commits and the watermark jumps.
fn options() -> EngineOptions {
    EngineOptions {
        lanes: 2,
        lane_size: (record::SEQ_AHEAD + 64) * 64,
        ..EngineOptions::small()
    }
}

fn pool_size() -> u64 {
    2 * options().lane_size + (256 << 10)
}

fn transfer<T: Tx>(tx: &mut T, i: u64) -> TxResult<()> {
    let (from, to) = (i % ACCOUNTS, (i * 3 + 1) % ACCOUNTS);
    let accounts: PPtr = tx.read_ptr(tx.root::<()>(), 0)?;
    let (a, b) = (
        tx.read_u64(accounts, 8 * from)?,
        tx.read_u64(accounts, 8 * to)?,
    );
    if from != to {
        tx.write_u64(accounts, 8 * from, a - 1)?;
        tx.write_u64(accounts, 8 * to, b + 1)?;
    }
    Ok(())
}

fn apply(balances: &mut [u64], i: u64) {
    let (from, to) = ((i % ACCOUNTS) as usize, ((i * 3 + 1) % ACCOUNTS) as usize);
    if from != to {
        balances[from] -= 1;
        balances[to] += 1;
    }
}

fn balances<E: Engine>(engine: &E) -> Result<Vec<u64>, String> {
    engine
        .read_only(|tx| {
            let accounts: PPtr = tx.read_ptr(tx.root::<()>(), 0)?;
            (0..ACCOUNTS)
                .map(|a| tx.read_u64(accounts, 8 * a))
                .collect::<TxResult<Vec<_>>>()
        })
        .map_err(|e| e.to_string())
}

/// Sets the persisted watermark of a closed redo pool (the engine then numbers its records
/// from `value + 1`).
fn set_watermark(pm: &SimPm, value: u64) {
    let pool = Pool::attach(pm.clone(), LAYOUT).expect("attach");
    let layout =
        EngineLayout::read(pool.pm(), pool.arena(), EngineKind::Redo).expect("redo layout");
    let at = layout.watermark();
    let word = checked::seal(value, at, "redo watermark").expect("48 bits");
    pool.pm().write_u64(at, word, WriteClass::Meta);
    pool.pm().persist(at, 8);
}

struct Wrap {
    ops: usize,
}

impl Scenario for Wrap {
    type Model = Vec<u64>;
    type Live = Redo<SimPm>;

    fn name(&self) -> String {
        "redo sequence window".into()
    }
    fn pool_size(&self) -> u64 {
        pool_size()
    }
    fn op_count(&self) -> usize {
        self.ops
    }
    fn initial_model(&self) -> Vec<u64> {
        let mut model = vec![START; ACCOUNTS as usize];
        (0..WARM_UP).for_each(|i| apply(&mut model, i));
        model
    }
    fn apply_to_model(&self, model: &mut Vec<u64>, op: usize) {
        apply(model, WARM_UP + op as u64);
    }
    fn setup(&self, pm: SimPm) -> Redo<SimPm> {
        let pool =
            Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, pool_size())).expect("format");
        let engine = Redo::create(pool, &options()).expect("redo");
        engine
            .transaction(|tx| {
                let accounts: PPtr = tx.alloc(8 * ACCOUNTS)?;
                for a in 0..ACCOUNTS {
                    tx.write_u64(accounts, 8 * a, START)?;
                }
                tx.write_ptr(tx.root::<()>(), 0, accounts)
            })
            .expect("accounts");
        drop(engine);
        set_watermark(&pm, START_WATERMARK);
        let pool = Pool::attach(pm, LAYOUT).expect("attach");
        let engine = Redo::open(pool, &options()).expect("reopen");
        for i in 0..WARM_UP {
            engine.transaction(|tx| transfer(tx, i)).expect("warm up");
        }
        engine
    }
    fn run_op(&self, live: &mut Redo<SimPm>, op: usize) {
        let i = WARM_UP + op as u64;
        if op % 3 == 1 {
            // This thread holds its lane through an empty transaction (no record), so the
            // helper's commit goes to the other lane.
            let engine = &*live;
            engine
                .transaction(|_| -> TxResult<()> {
                    std::thread::scope(|scope| {
                        scope.spawn(|| engine.transaction(|tx| transfer(tx, i)).expect("op"));
                    });
                    Ok(())
                })
                .expect("empty transaction");
        } else {
            live.transaction(|tx| transfer(tx, i)).expect("op");
        }
    }
    fn recover(&self, pm: SimPm) -> Result<Vec<u64>, String> {
        let pool = Pool::attach(pm, LAYOUT).map_err(|e| e.to_string())?;
        let engine = Redo::open(pool, &options()).map_err(|e| e.to_string())?;
        let report = engine.recovery_report();
        if report.damage().next().is_some() {
            return Err(format!("damage reported: {report:?}"));
        }
        let found = balances(&engine)?;
        if found.iter().sum::<u64>() != START * ACCOUNTS {
            return Err(format!("money created or destroyed: {found:?}"));
        }
        Ok(found)
    }
}

#[test]
fn sequence_numbers_crossing_a_16_bit_wrap_survive_a_crash_at_every_fence() {
    let config = Config {
        double_crash: Some(DoubleCrash {
            points: 3,
            budget: Budget {
                exhaustive_max: 4,
                random: 1,
            },
        }),
        ..Config::thorough(SimMode::Adr, 11)
    };
    let report = check(&Wrap { ops: OPS }, &config);
    eprintln!("{report}");
    report.assert_passed();
    assert!(report.second_crash_images > 0);
}

fn watermark(pm: &SimPm) -> u64 {
    let pool = Pool::attach(pm.clone(), LAYOUT).expect("attach");
    let layout =
        EngineLayout::read(pool.pm(), pool.arena(), EngineKind::Redo).expect("redo layout");
    let at = layout.watermark();
    let value = checked::open(pool.pm().read_u64(at), at, "redo watermark").expect("watermark");
    std::mem::forget(pool);
    value
}

#[test]
fn the_scenario_moves_the_watermark_by_the_sequence_rule_and_wraps_the_low_bits() {
    let scenario = Wrap { ops: OPS };
    let pm = SimPm::new(pool_size(), SimConfig::default());
    let mut engine = scenario.setup(pm.clone());
    assert_eq!(
        watermark(&pm),
        START_WATERMARK,
        "nothing checkpointed by the warm-up"
    );
    (0..OPS).for_each(|op| scenario.run_op(&mut engine, op));
    std::mem::forget(engine);
    let moved = watermark(&pm);
    assert!(
        moved > START_WATERMARK + record::SEQ_AHEAD / 2 && moved < 1 << 16,
        "the sequence rule checkpointed: {moved:#x}"
    );
    let pool = Pool::attach(pm.clone(), LAYOUT).expect("attach");
    let layout =
        EngineLayout::read(pool.pm(), pool.arena(), EngineKind::Redo).expect("redo layout");
    // Which lane the warm-up took depends on the thread; the other one holds the helper's
    // records. Both must hold records.
    let per_lane: Vec<usize> = (0..layout.lane_count as usize)
        .map(|lane| {
            let (base, limit) = (layout.lane(lane), layout.lane(lane) + layout.lane_size);
            (base..limit)
                .step_by(64)
                .filter(|&at| matches!(record::read(pool.pm(), at, limit, moved), Ok(Some(_))))
                .count()
        })
        .collect();
    assert!(
        per_lane.iter().all(|&n| n > 0),
        "intact records per lane: {per_lane:?}"
    );
    std::mem::forget(pool);
    let last = START_WATERMARK + WARM_UP + OPS as u64;
    assert!(
        last > 1 << 16,
        "the low 16 bits wrapped: last record {last:#x}"
    );
    let recovered = scenario.recover(pm).expect("recover");
    let mut model = scenario.initial_model();
    (0..OPS).for_each(|op| scenario.apply_to_model(&mut model, op));
    assert_eq!(recovered, model);
}

/// A lane that could hold more than 2^15 records: only the sequence rule (`SEQ_AHEAD`) keeps
/// the live records within the window their 16 bits are rebuilt in. Without it, the records
/// 2^15 or more past the watermark would be rebuilt to the wrong number and lost.
#[test]
fn a_lane_holding_more_than_2_15_records_still_recovers_every_commit() {
    let lane_size = 4 << 20;
    let options = EngineOptions {
        lanes: 1,
        lane_size,
        ..EngineOptions::small()
    };
    let size = lane_size + (256 << 10);
    let pm = SimPm::new(size, SimConfig::default());
    Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, size)).expect("format");
    let engine =
        Redo::create(Pool::attach(pm.clone(), LAYOUT).expect("pool"), &options).expect("redo");
    drop(engine);
    // Far from zero, so the window is (W - 2^15, W + 2^15] on both sides.
    set_watermark(&pm, 0x12_3456);
    let engine =
        Redo::open(Pool::attach(pm.clone(), LAYOUT).expect("pool"), &options).expect("reopen");
    let commits = (1 << 15) + (1 << 12);
    assert!(commits * 64 < lane_size, "the ring never fills");
    for i in 1..=commits {
        engine
            .transaction(|tx| tx.write_u64(tx.root::<()>(), 8 * (i % 16), i))
            .expect("commit");
    }
    let image = pm.volatile_image();
    std::mem::forget(engine);
    let pool =
        Pool::attach(SimPm::from_image(image, SimConfig::default()), LAYOUT).expect("attach");
    let engine = Redo::open(pool, &options).expect("recover");
    assert_eq!(engine.recovery_report().damage().count(), 0);
    for slot in 0..16 {
        let expected = (commits - 15..=commits)
            .find(|i| i % 16 == slot)
            .expect("written");
        let got = engine
            .read_only(|tx| tx.read_u64(tx.root::<()>(), 8 * slot))
            .expect("read");
        assert_eq!(got, expected, "slot {slot}");
    }
}
