//! A run that can never finish is a typed error, not a panic: which configurations deadlock
//! depends on the trace too (a transaction with more log records than a circular log holds),
//! so `Config::validate` cannot refuse them all before the run.

use hwsim::{Config, DesignKind, SimError, crash_check, simulate};
use trace::{Encoder, Event, Trace, TraceMeta};

/// One core, one transaction of `stores` distinct changed words.
fn one_big_transaction(stores: u64) -> Trace {
    let mut out = Encoder::default();
    out.push(&Event::TxBegin);
    for w in 0..stores {
        out.push(&Event::Store {
            addr: 0x10_0000 + 8 * w,
            size: 8,
            old: 0,
            new: w + 1,
        });
    }
    out.push(&Event::TxEnd);
    let mut trace = Trace::new(TraceMeta::default());
    trace.add_stream(0, out);
    trace
}

#[test]
fn a_log_smaller_than_one_transaction_is_a_deadlock_error() {
    // 64 records of 32 B (2 KiB) cannot fit a 256 B circular log, which only a commit can
    // truncate.
    let trace = one_big_transaction(64);
    let mut cfg = Config::default().with_cores(1);
    cfg.fwb.log_bytes = 256;
    cfg.morlog.log_bytes = 256;
    for design in [DesignKind::Fwb, DesignKind::MorLog] {
        match simulate(&cfg, design, &trace) {
            Err(SimError::Deadlock {
                design: name,
                cores,
                ..
            }) => {
                assert_eq!(name, design.name());
                assert_eq!(cores, vec![0]);
            }
            other => panic!("{design:?}: expected a deadlock error, got {other:?}"),
        }
        let crashed = crash_check(&cfg, design, &trace, u64::MAX - 1);
        assert!(
            matches!(
                crashed,
                Err(hwsim::Violation::Setup(SimError::Deadlock { .. }))
            ),
            "{design:?}: {crashed:?}"
        );
    }
    // With the default 1 MiB logs the same transaction runs to the end.
    let fine = simulate(&Config::default().with_cores(1), DesignKind::Fwb, &trace).expect("runs");
    assert_eq!(fine.committed_tx, 1);
}
