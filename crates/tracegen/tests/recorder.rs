//! The recording engine: what a transaction emits, and what it must not.

use trace::{Event, Trace, TraceMeta, store_pieces};
use tracegen::recorder::core_of;
use tracegen::{ComputeModel, Recorder, core_base};
use tx::{Engine, MemEngine, PPtr, Tx, TxError, TxResult};

const CORE: u32 = 3;
const COMPUTE: ComputeModel = ComputeModel {
    per_access: 5,
    per_transaction: 7,
};

fn recorder() -> Recorder {
    Recorder::new(MemEngine::new(1 << 20), CORE, COMPUTE)
}

fn events_of(recorder: Recorder) -> Vec<Event> {
    let mut trace = Trace::new(TraceMeta::default());
    trace.add_stream(CORE, recorder.into_encoder());
    trace.events(0).collect()
}

/// Allocates a 256-byte object with known contents, untraced; returns its offset.
fn untraced_object(recorder: &Recorder) -> PPtr {
    recorder.set_recording(false);
    let obj = recorder
        .transaction(|tx| {
            let obj: PPtr = tx.alloc(256)?;
            let bytes: Vec<u8> = (0..=255).collect();
            tx.write(obj, 0, &bytes)?;
            Ok::<_, TxError>(obj)
        })
        .expect("setup");
    recorder.set_recording(true);
    obj
}

#[test]
fn a_transaction_emits_begin_loads_store_pieces_and_end() {
    let recorder = recorder();
    let obj = untraced_object(&recorder);
    assert_eq!(recorder.events(), 0, "setup is not recorded");
    let new: Vec<u8> = (100..112).collect();
    recorder
        .transaction(|tx| {
            let mut buf = [0u8; 100];
            tx.read(obj, 30, &mut buf)?; // crosses two line boundaries when obj is aligned
            tx.write(obj, 4, &new)
        })
        .expect("commit");
    assert_eq!(recorder.transactions(), 1);
    let base = core_base(CORE) + obj.offset();
    let old: Vec<u8> = (4..16).collect();
    let mut expected = vec![
        Event::Compute { instructions: 7 },
        Event::TxBegin,
        Event::Compute { instructions: 5 },
    ];
    let mut at = base + 30;
    while at < base + 130 {
        let size = ((at | 63) + 1).min(base + 130) - at;
        expected.push(Event::Load {
            addr: at,
            size: size as u8,
        });
        at += size;
    }
    expected.push(Event::Compute { instructions: 5 });
    expected.extend(store_pieces(base + 4, &old, &new));
    expected.push(Event::TxEnd);
    let events = events_of(recorder);
    assert_eq!(events, expected);
    // The write pieces carry the right values: bytes 4..8 then 8..16.
    assert_eq!(
        events[events.len() - 3],
        Event::Store {
            addr: base + 4,
            size: 4,
            old: u64::from_le_bytes([4, 5, 6, 7, 0, 0, 0, 0]),
            new: u64::from_le_bytes([100, 101, 102, 103, 0, 0, 0, 0]),
        }
    );
}

#[test]
fn writes_reach_the_inner_engine() {
    let recorder = recorder();
    let obj = untraced_object(&recorder);
    recorder
        .transaction(|tx| tx.write_u64(obj, 8, 0xDEAD_BEEF))
        .expect("commit");
    let value = recorder.inner().transaction(|tx| tx.read_u64(obj, 8));
    assert_eq!(value.expect("read"), 0xDEAD_BEEF);
}

#[test]
fn aborted_and_panicking_transactions_emit_nothing() {
    let recorder = recorder();
    let obj = untraced_object(&recorder);
    let aborted: TxResult<()> = recorder.transaction(|tx| {
        tx.write_u64(obj, 0, 1)?;
        Err(TxError::abort("no"))
    });
    assert!(aborted.is_err());
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _: TxResult<()> = recorder.transaction(|tx| {
            tx.write_u64(obj, 0, 2)?;
            panic!("boom");
        });
    }));
    assert!(caught.is_err());
    assert_eq!((recorder.transactions(), recorder.events()), (0, 0));
    // The engine still records afterwards, and the aborted writes were rolled back.
    let value = recorder
        .transaction(|tx| tx.read_u64(obj, 0))
        .expect("read");
    assert_eq!(value, u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]));
    let events = events_of(recorder);
    assert_eq!(events.len(), 5);
    assert!(!events.iter().any(|e| matches!(e, Event::Store { .. })));
}

#[test]
fn allocation_and_free_are_not_traced() {
    let recorder = recorder();
    recorder
        .transaction(|tx| {
            let obj: PPtr = tx.alloc(64)?;
            tx.free(obj)
        })
        .expect("commit");
    assert_eq!(
        events_of(recorder),
        vec![
            Event::Compute { instructions: 7 },
            Event::TxBegin,
            Event::TxEnd
        ]
    );
}

#[test]
fn without_compute_model_only_memory_events_appear() {
    let recorder = Recorder::new(MemEngine::new(1 << 20), 0, ComputeModel::NONE);
    let obj = untraced_object(&recorder);
    recorder
        .transaction(|tx| tx.write_u64(obj, 64, 9))
        .expect("commit");
    let events = events_of(recorder);
    assert_eq!(events.len(), 3);
    assert!(matches!(events[1], Event::Store { addr, size: 8, .. } if addr == obj.offset() + 64));
    assert_eq!(core_of(obj.offset()), 0);
}
