//! The engines' self-checked words (`docs/tx-format.md` §2.1): their bytes on media, and the
//! typed error when a counter kept in one reaches the 48-bit limit.

use crashsim::{SimConfig, SimPm};
use pmem::checked::{self, MAX_VALUE};
use pmem::{CreateOptions, Persist, Pool, WriteClass};
use tx::layout::EngineLayout;
use tx::{Engine, EngineKind, EngineOptions, Redo, Tx, TxError, TxResult, Undo};

const SIZE: u64 = 1 << 20;
const LAYOUT: &str = "words";

/// A formatted pool on a simulated region; every [`attach`] of it shares the region.
fn fresh_pm() -> SimPm {
    let pm = SimPm::new(SIZE, SimConfig::default());
    Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, SIZE)).expect("format");
    pm
}

fn attach(pm: &SimPm) -> Pool<SimPm> {
    Pool::attach(pm.clone(), LAYOUT).expect("attach")
}

fn engine_layout(pm: &SimPm, kind: EngineKind) -> EngineLayout {
    let pool = attach(pm);
    EngineLayout::read(pool.pm(), pool.arena(), kind).expect("engine layout")
}

fn set<E: Engine>(engine: &E, value: u64) -> TxResult<()> {
    engine.transaction(|tx| tx.write_u64(tx.root::<()>(), 0, value))
}

fn get<E: Engine>(engine: &E) -> TxResult<u64> {
    engine.transaction(|tx| tx.read_u64(tx.root::<()>(), 0))
}

/// Stores `value` as the checked word at `at` and makes it durable, as a long-running pool
/// would have.
fn store_checked(pm: &SimPm, at: u64, value: u64) {
    let word = checked::seal(value, at, "test word").expect("fits");
    pm.write_u64(at, word, WriteClass::Meta);
    pm.persist(at, 8);
}

fn durable_word(pm: &SimPm, at: u64) -> u64 {
    let image = pm.durable_image();
    let at = at as usize;
    u64::from_le_bytes(image[at..at + 8].try_into().expect("8 bytes"))
}

#[test]
fn the_checked_words_keep_their_documented_bytes() {
    // The watermark of the example in docs/tx-format.md §2, and an undo lane's generation
    // and applied words: pools written before the engines used `pmem::checked` hold these
    // bytes, so they still open.
    let pm = fresh_pm();
    drop(Redo::create(attach(&pm), &EngineOptions::small()).expect("redo"));
    assert_eq!(engine_layout(&pm, EngineKind::Redo).watermark(), 0x2040);
    assert_eq!(durable_word(&pm, 0x2040), 0xb024_0000_0000_0000);

    let pm = fresh_pm();
    drop(Undo::create(attach(&pm), &EngineOptions::small()).expect("undo"));
    let lane = engine_layout(&pm, EngineKind::Undo).lane(0);
    assert_eq!(lane, 0x3000);
    // Recovery at open retired generation 1, so both words hold 2. The expected words are
    // the low 16 bits of CRC-32 over (value, offset) computed outside Rust (zlib).
    assert_eq!(durable_word(&pm, lane), 0xcb64_0000_0000_0002);
    assert_eq!(durable_word(&pm, lane + 8), 0xd0d1_0000_0000_0002);
}

#[test]
fn a_redo_sequence_at_the_48_bit_limit_is_a_typed_error_and_loses_nothing() {
    let pm = fresh_pm();
    drop(Redo::create(attach(&pm), &EngineOptions::small()).expect("redo"));
    let at = engine_layout(&pm, EngineKind::Redo).watermark();
    store_checked(&pm, at, MAX_VALUE - 2);

    let engine = Redo::open(attach(&pm), &EngineOptions::small()).expect("open below the limit");
    set(&engine, 1).expect("sequence 2^48 - 2");
    set(&engine, 2).expect("sequence 2^48 - 1");
    let refused = set(&engine, 3);
    assert!(
        matches!(
            refused,
            Err(TxError::CounterExhausted {
                what: "redo sequence"
            })
        ),
        "{refused:?}"
    );
    assert_eq!(
        get(&engine).expect("read"),
        2,
        "the refused transaction changed nothing"
    );
    drop(engine);

    assert_eq!(checked::open(durable_word(&pm, at), at, "w"), Ok(MAX_VALUE));
    let reopened = Redo::open(attach(&pm), &EngineOptions::small()).expect("opens at the limit");
    assert_eq!(get(&reopened).expect("read"), 2);
    let refused = set(&reopened, 4);
    assert!(
        matches!(refused, Err(TxError::CounterExhausted { .. })),
        "{refused:?}"
    );
}

#[test]
fn an_undo_generation_at_the_48_bit_limit_is_a_typed_error_and_loses_nothing() {
    let pm = fresh_pm();
    let engine = Undo::create(attach(&pm), &EngineOptions::small()).expect("undo");
    set(&engine, 7).expect("commit");
    let root = engine.pool().root().offset;
    drop(engine);
    let layout = engine_layout(&pm, EngineKind::Undo);
    for lane in 0..layout.lane_count as usize {
        store_checked(&pm, layout.lane(lane), MAX_VALUE - 1);
        store_checked(&pm, layout.lane(lane) + 8, MAX_VALUE - 1);
    }

    // Recovery retires generation 2^48 - 2, which leaves every lane at the limit.
    let engine = Undo::open(attach(&pm), &EngineOptions::small()).expect("open below the limit");
    let exhausted = TxError::CounterExhausted {
        what: "undo lane generation",
    };
    assert_eq!(
        get(&engine).map_err(|e| e.to_string()),
        Err(exhausted.to_string())
    );
    assert_eq!(
        set(&engine, 8).map_err(|e| e.to_string()),
        Err(exhausted.to_string())
    );
    drop(engine);

    assert_eq!(
        durable_word(&pm, root),
        7,
        "the refused transaction changed nothing"
    );
    let reopened = Undo::open(attach(&pm), &EngineOptions::small());
    assert!(
        matches!(
            reopened,
            Err(TxError::CounterExhausted {
                what: "undo lane generation"
            })
        ),
        "{reopened:?}"
    );
}
