//! Counters add up on random runs of every design: each accepted PM write is counted once and
//! in exactly one traffic class, nothing is programmed that was not sent, and Silo's log
//! entries are each accounted for once (a slot or a merge; at the end an in-place update or
//! a skipped one).

use hwsim::config::CacheConfig;
use hwsim::{Config, DesignKind, simulate};
use proptest::prelude::*;
use trace::{Encoder, Event, Trace, TraceMeta};

fn cache(sets: u64, ways: usize) -> CacheConfig {
    CacheConfig {
        size_bytes: sets * ways as u64 * 64,
        ways,
        latency: 2,
    }
}

/// Small caches, a short write queue and a 4-entry Silo buffer: evictions, drains and
/// overflow all happen.
fn small(cores: usize, coalesce: bool) -> Config {
    let mut c = Config::default().with_cores(cores);
    c.l1 = cache(2, 2);
    c.l2 = cache(4, 2);
    c.llc = cache(4, 2);
    c.mem.write_queue = 8;
    c.mem.drain_high = 6;
    c.mem.drain_low = 2;
    c.mem.onpm_lines = 4;
    c.silo.entries = 4;
    c.silo.undo_record_bytes = 64;
    c.silo.coalesce_lus = coalesce;
    c.lad.spec_limit = 3;
    c
}

/// Per core: closed transactions of stores (word, value; value 0 repeats the word's
/// content, a silent store) over 48 words.
fn trace_of(programs: &[Vec<Vec<(u8, u64)>>]) -> Trace {
    let mut trace = Trace::new(TraceMeta::default());
    for (core, txs) in programs.iter().enumerate() {
        let base = 0x10_0000 * (core as u64 + 1);
        let mut mem = [0u64; 48];
        let mut out = Encoder::default();
        for tx in txs {
            out.push(&Event::TxBegin);
            for &(word, value) in tx {
                let w = usize::from(word);
                let new = if value == 0 { mem[w] } else { value };
                out.push(&Event::Store {
                    addr: base + 8 * w as u64,
                    size: 8,
                    old: mem[w],
                    new,
                });
                mem[w] = new;
            }
            out.push(&Event::TxEnd);
        }
        trace.add_stream(core as u32, out);
    }
    trace
}

fn program() -> impl Strategy<Value = Vec<Vec<(u8, u64)>>> {
    let store = (0u8..48, prop_oneof![1 => Just(0u64), 4 => 1u64..1_000_000]);
    prop::collection::vec(prop::collection::vec(store, 1..12), 1..6)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn every_write_and_entry_is_counted_once(
        programs in prop::collection::vec(program(), 2..=2),
        coalesce in any::<bool>(),
    ) {
        let trace = trace_of(&programs);
        let cfg = small(2, coalesce);
        for design in DesignKind::ALL {
            let m = simulate(&cfg, design, &trace).expect("runs");
            let pm = &m.pm;
            let classes = [pm.writeback, pm.flush, pm.in_place, pm.log];
            prop_assert_eq!(pm.writes.requests, classes.iter().map(|t| t.requests).sum::<u64>());
            prop_assert_eq!(pm.writes.bytes, classes.iter().map(|t| t.bytes).sum::<u64>());
            prop_assert!(
                pm.programmed_bytes <= pm.writes.bytes + pm.final_drain.bytes,
                "{design:?}: programmed {} of {} sent",
                pm.programmed_bytes,
                pm.writes.bytes + pm.final_drain.bytes
            );
            prop_assert!(pm.media_blocks <= 4 * pm.media_writes);
            let Some(log) = m.log else {
                prop_assert_eq!(design, DesignKind::Ideal);
                continue;
            };
            match design {
                // A record per store, silent or not, each accepted by the end.
                DesignKind::Base | DesignKind::Fwb => {
                    let engine: u64 = m.per_core.iter().map(|c| c.tx_stores).sum();
                    prop_assert_eq!(log.tx_stores, engine);
                    prop_assert_eq!(log.undo_records, log.tx_stores);
                }
                // An undo record per line that found no speculative entry.
                DesignKind::Lad => prop_assert_eq!(log.undo_records, log.overflowed_entries),
                // Every store is seen once: silent ones ignored, the others generate an
                // entry that merges or takes a slot.
                DesignKind::MorLog | DesignKind::Silo => {
                    let engine: u64 = m.per_core.iter().map(|c| c.tx_stores).sum();
                    prop_assert_eq!(log.tx_stores, engine);
                    prop_assert_eq!(log.tx_stores, log.silent_ignored + log.generated);
                    prop_assert_eq!(log.generated, log.merged + log.appended, "{:?}", log);
                }
                _ => {}
            }
            if design != DesignKind::Silo {
                continue;
            }
            // Every entry that took a slot ends (all transactions committed, the run
            // drained) with its in-place update written or skipped by a flush-bit.
            prop_assert_eq!(
                log.appended,
                log.in_place_updates + log.updates_skipped,
                "{:?}", log
            );
            prop_assert_eq!(log.undo_records, log.overflowed_entries);
        }
    }
}
