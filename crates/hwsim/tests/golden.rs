//! Golden single-core traces with hand-computed cycle counts, PM traffic and log statistics.
//!
//! Default machine (2 GHz): L1 4, L2 12, LLC 28 cycles; on-chip path 32 cycles each way;
//! PCM read 100 cycles (50 ns), burst 10 cycles (5 ns); a cold miss at cycle t therefore
//! costs 4 + 12 + 28 + 2 × 32 + (100 + 10) = 218 cycles.

use hwsim::metrics::LogStats;
use hwsim::{Config, DesignKind, Metrics, simulate};
use trace::{Encoder, Event, Trace, TraceMeta};

fn one_core(events: &[Event]) -> Trace {
    let mut e = Encoder::default();
    events.iter().for_each(|ev| e.push(ev));
    let mut t = Trace::new(TraceMeta::default());
    t.add_stream(0, e);
    t
}

fn st(addr: u64, old: u64, new: u64) -> Event {
    Event::Store {
        addr,
        size: 8,
        old,
        new,
    }
}

fn run(design: DesignKind, cfg: &Config, events: &[Event]) -> Metrics {
    simulate(cfg, design, &one_core(events)).expect("runs")
}

/// One transaction storing two words of one line.
fn two_stores() -> Vec<Event> {
    vec![Event::TxBegin, st(0, 0, 1), st(8, 0, 2), Event::TxEnd]
}

#[test]
fn ideal_two_stores() {
    // Store 1 misses: it drains at 0 + 218 = 218 (clock 1). Store 2 hits the filled line and
    // drains at 219 (clock 2). TxEnd waits for the store buffer: 219, then commits at once.
    let m = run(
        DesignKind::Ideal,
        &Config::default().with_cores(1),
        &two_stores(),
    );
    assert_eq!(m.cycles, 219);
    assert_eq!(m.committed_tx, 1);
    assert_eq!(m.pm.writes.requests, 0);
    assert_eq!(m.stalls.drain, 217);
}

#[test]
fn base_two_stores() {
    // Store 1: log record sent at 0, accepted at 32, ack at 64; the store misses (read at
    // 64 → 174, in L1 at 282); the flush leaves at 282, accepted at 314, ack at 346.
    // Store 2: record accepted at 378, ack 410; L1 hit, performed 411; flush accepted at
    // 443, ack 475. Commit message to the MC: 475 + 32 = 507.
    let m = run(
        DesignKind::Base,
        &Config::default().with_cores(1),
        &two_stores(),
    );
    assert_eq!(m.cycles, 507);
    assert_eq!(m.committed_tx, 1);
    assert_eq!((m.pm.log.requests, m.pm.log.bytes), (2, 64));
    assert_eq!((m.pm.flush.requests, m.pm.flush.bytes), (2, 128));
    assert_eq!((m.pm.writes.requests, m.pm.writes.bytes), (4, 192));
    // The on-PM buffer coalesces both records into one log line and both flushes into one
    // data line; each line writes one whole 64 B media block (no read-modify-write since
    // media writes are per 64 B block; with whole 256 B lines both were read-modify-writes).
    assert_eq!(
        (m.pm.media_writes, m.pm.media_rmw, m.pm.media_blocks),
        (2, 0, 2)
    );
    assert_eq!(m.stalls.persist, 64 + (346 - 65) + 64 + (475 - 411));
    assert_eq!(m.stalls.commit, 32);
}

#[test]
fn silo_two_stores() {
    // Store 1 misses and is in the L1 at 218; its entry reaches the buffer at 250. Store 2
    // hits at 219, entry at 251. TxEnd drains the store buffer (219); ACK = max(219, 251) + 8
    // = 259. Then two 8 B in-place updates of one 64 B block: the second merges into the
    // first in the write queue, and the merged write is issued at 259 (one burst). (Before
    // write merging: two writes, issued at 259 and 269.)
    let m = run(
        DesignKind::Silo,
        &Config::default().with_cores(1),
        &two_stores(),
    );
    assert_eq!(m.cycles, 259);
    assert_eq!(m.drained_cycles, 259);
    assert_eq!((m.pm.in_place.requests, m.pm.in_place.bytes), (2, 16));
    assert_eq!((m.pm.writes.requests, m.pm.merged_writes), (2, 1));
    assert_eq!(m.pm.bus_busy_cycles, 10);
    assert_eq!(
        (m.pm.media_writes, m.pm.media_rmw, m.pm.media_blocks),
        (1, 1, 1),
        "both LUs in one partly written 64 B block"
    );
    assert_eq!(m.stalls.commit, 40);
    assert_eq!(m.stalls.drain, 217);
}

#[test]
fn silo_log_statistics_with_silent_and_repeated_stores() {
    let events = vec![
        Event::TxBegin,
        st(0, 0, 1),
        st(0, 1, 1), // silent
        st(0, 1, 2), // merges into word 0's entry
        st(8, 5, 5), // silent
        st(16, 0, 7),
        Event::TxEnd,
        Event::TxBegin,
        st(0, 2, 3), // new transaction: a new entry, no merge across transactions
        st(0, 3, 4), // merges
        Event::TxEnd,
    ];
    let m = run(DesignKind::Silo, &Config::default().with_cores(1), &events);
    let log = m.log.expect("silo logs");
    assert_eq!(
        log,
        LogStats {
            tx_stores: 7,
            silent_ignored: 2,
            generated: 5,
            merged: 2,
            appended: 3,
            max_entries_per_tx: 2,
            in_place_updates: 3,
            ..LogStats::default()
        }
    );
    assert!((log.reduction() - 4.0 / 7.0).abs() < 1e-12);
    assert_eq!(m.pm.in_place.requests, 3);
    assert_eq!(m.committed_tx, 2);
}

#[test]
fn silo_overflow_retires_a_batch_of_undo_records() {
    let mut cfg = Config::default().with_cores(1);
    cfg.silo.entries = 4;
    let mut events = vec![Event::TxBegin];
    events.extend((0..6).map(|w| st(64 * w, 0, w + 1)));
    events.push(Event::TxEnd);
    let m = run(DesignKind::Silo, &cfg, &events);
    let log = m.log.expect("silo logs");
    // The 4th entry fills the buffer with live entries of its own transaction, so all 4
    // retire at once in one batch (4 × 18 B = 72 B undo write) and write their new words in
    // place; entries 5 and 6 are applied after commit.
    assert_eq!(
        (
            log.overflow_tx,
            log.overflow_batches,
            log.overflowed_entries,
            log.undo_records
        ),
        (1, 1, 4, 4)
    );
    assert_eq!((m.pm.log.requests, m.pm.log.bytes), (1, 72));
    assert_eq!((m.pm.in_place.requests, log.in_place_updates), (6, 6));
    // The retirement started when the buffer filled and the idle write queue took its
    // writes at once: the 5th store found free slots (no log-buffer stall).
    assert_eq!(m.stalls.log_buffer, 0);
}

#[test]
fn base_logs_every_store_silo_only_changed_words() {
    let events = vec![
        Event::TxBegin,
        st(0, 9, 9),
        st(0, 9, 9),
        st(8, 1, 2),
        Event::TxEnd,
    ];
    let cfg = Config::default().with_cores(1);
    let base = run(DesignKind::Base, &cfg, &events);
    let silo = run(DesignKind::Silo, &cfg, &events);
    assert_eq!(
        base.pm.log.requests, 3,
        "naive: a record per store, silent or not"
    );
    assert_eq!(base.pm.flush.requests, 3);
    assert_eq!(
        silo.pm.writes.requests, 1,
        "one LU for the one changed word"
    );
    assert!(silo.cycles < base.cycles);
}

#[test]
fn metrics_serialise() {
    let m = run(
        DesignKind::Silo,
        &Config::default().with_cores(1),
        &two_stores(),
    );
    let json = serde_json::to_string(&m).unwrap();
    let back: Metrics = serde_json::from_str(&json).unwrap();
    assert_eq!(back.cycles, m.cycles);
    assert!((m.throughput_tx_per_s - 1.0 / (259.0 / 2e9)).abs() < 1e-3);
}

#[test]
fn a_full_write_queue_stalls_the_core() {
    // Tiny caches so every store's line is soon evicted dirty; a 1-entry write queue in
    // front of media without a buffer (every write-back holds a bank for read + write).
    let tiny = |sets: u64, ways: usize, latency: u64| hwsim::config::CacheConfig {
        size_bytes: sets * ways as u64 * 64,
        ways,
        latency,
    };
    let mut cfg = Config::default().with_cores(1);
    cfg.l1 = tiny(1, 1, 4);
    cfg.l2 = tiny(1, 1, 12);
    cfg.llc = tiny(1, 1, 28);
    cfg.core.writeback_buffer = 1;
    cfg.mem.banks = 1;
    cfg.mem.onpm_lines = 0;
    let events: Vec<Event> = (0..50).map(|i| st(64 * i, 0, 1)).collect();
    let roomy = run(
        DesignKind::Ideal,
        &Config {
            cores: 1,
            ..cfg.clone()
        },
        &events,
    );
    cfg.mem.write_queue = 1;
    cfg.mem.drain_high = 1;
    cfg.mem.drain_low = 0;
    let full = run(DesignKind::Ideal, &cfg, &events);
    assert_eq!(
        full.pm.writeback.requests, 49,
        "every line but the last is written back"
    );
    assert!(full.stalls.writeback > 0, "{:?}", full.stalls);
    assert!(
        full.stalls.writeback > roomy.stalls.writeback,
        "{:?} vs {:?}",
        full.stalls,
        roomy.stalls
    );
    assert_eq!(full.pm.max_write_queue, 1);
}

#[test]
fn fwb_two_stores() {
    // Stores in the L1 at 218 and 219 (as for Silo). The two 32 B records make one 64 B log
    // write, which leaves when the second exists (219), is accepted at 251; the ack is back
    // at 283, the commit point. Data stay in the cache ("no force").
    let m = run(
        DesignKind::Fwb,
        &Config::default().with_cores(1),
        &two_stores(),
    );
    assert_eq!(m.cycles, 283);
    assert_eq!((m.pm.log.requests, m.pm.log.bytes), (1, 64));
    assert_eq!(m.pm.writes.requests, 1, "no data write");
    assert_eq!(m.stalls.commit, 283 - 219);
    let log = m.log.expect("fwb logs");
    assert_eq!((log.tx_stores, log.appended, log.undo_records), (2, 2, 2));
}

#[test]
fn morlog_two_stores() {
    // Each store changes one byte: DLDC records are 10 B metadata + 1 B. Two undo records
    // (waiting in their coalescing window) and, at commit, two redo records share one log
    // write of 44 B (48 B on the bus) that leaves at 219: accepted 251, ack 283.
    let m = run(
        DesignKind::MorLog,
        &Config::default().with_cores(1),
        &two_stores(),
    );
    assert_eq!(m.cycles, 283);
    assert_eq!((m.pm.log.requests, m.pm.log.bytes), (1, 48));
    let log = m.log.expect("morlog logs");
    assert_eq!((log.undo_records, log.redo_records), (2, 2));
}

#[test]
fn morlog_drops_silent_stores_and_merges_redo() {
    let events = vec![
        Event::TxBegin,
        st(0, 0, 1),
        st(0, 1, 1),      // silent: nothing
        st(0, 1, 0x0201), // byte 1 is new: one more undo byte (coalesced), redo updated
        Event::TxEnd,
    ];
    let m = run(
        DesignKind::MorLog,
        &Config::default().with_cores(1),
        &events,
    );
    let log = m.log.expect("morlog logs");
    assert_eq!((log.silent_ignored, log.merged, log.appended), (1, 1, 1));
    // One undo (10 + 2 B after coalescing) and one redo (10 + 2 B): 24 B.
    assert_eq!((log.undo_records, log.redo_records), (1, 1));
    assert_eq!(m.pm.log.bytes, 24);
}

#[test]
fn lad_two_stores() {
    // TxEnd at 219 walks the L1: the dirty line leaves at 219 and reaches the MC after
    // L1 + L2 + LLC + path = 76 cycles (295), where it is staged speculatively. The ack
    // (32) and the commit round trip (64) end at 391, when the line becomes a 64 B write.
    let m = run(
        DesignKind::Lad,
        &Config::default().with_cores(1),
        &two_stores(),
    );
    assert_eq!(m.cycles, 391);
    assert_eq!((m.pm.flush.requests, m.pm.flush.bytes), (1, 64));
    assert_eq!(m.pm.writes.requests, 1);
    assert_eq!(m.pm.max_reserved, 1);
    assert_eq!(m.log.expect("lad stats").speculative_lines, 1);
}

#[test]
fn lad_overflow_undo_logs_lines_beyond_the_speculative_limit() {
    let mut cfg = Config::default().with_cores(1);
    cfg.lad.spec_limit = 2;
    let mut events = vec![Event::TxBegin];
    events.extend((0..5).map(|l| st(64 * l, 0, l + 1)));
    events.push(Event::TxEnd);
    let m = run(DesignKind::Lad, &cfg, &events);
    let log = m.log.expect("lad stats");
    // Two lines staged; three undo-logged: old line read, 72 B undo, 64 B in place.
    assert_eq!((log.speculative_lines, log.overflowed_entries), (2, 3));
    assert_eq!((m.pm.log.requests, m.pm.log.bytes), (3, 216));
    assert_eq!((m.pm.in_place.requests, m.pm.flush.requests), (3, 2));
    assert_eq!(log.overflow_tx, 1);
}

#[test]
fn silo_coalescing_option_merges_a_lines_updates() {
    // As `silo_two_stores`, but both LUs (words 0 and 1 of line 0) leave as one 16 B write.
    let mut cfg = Config::default().with_cores(1);
    cfg.silo.coalesce_lus = true;
    let m = run(DesignKind::Silo, &cfg, &two_stores());
    assert_eq!(m.cycles, 259);
    assert_eq!((m.pm.in_place.requests, m.pm.in_place.bytes), (1, 16));
    assert_eq!(m.log.expect("silo logs").in_place_updates, 2);
}

#[test]
fn an_eviction_after_silos_in_place_update_is_a_redundant_media_write() {
    // A tiny LLC (4 sets × 2 ways) and no on-PM buffer, so every write reaches the media by
    // itself. One transaction changes word 0 of line 0; loads of lines 4, 8 and 12 (the same
    // LLC set) then evict line 0, dirty.
    let mut cfg = Config::default().with_cores(1);
    for (c, sets) in [(&mut cfg.l1, 2), (&mut cfg.l2, 4), (&mut cfg.llc, 4)] {
        c.size_bytes = sets * 2 * 64;
        c.ways = 2;
    }
    cfg.mem.onpm_lines = 0;
    let mut events = two_stores();
    events.truncate(2);
    events.push(Event::TxEnd);
    events.push(Event::Compute { instructions: 500 });
    for line in [4u64, 8, 12] {
        events.push(Event::Load {
            addr: line * 64,
            size: 8,
        });
    }
    let silo = run(DesignKind::Silo, &cfg, &events);
    let ideal = run(DesignKind::Ideal, &cfg, &events);
    assert_eq!(silo.pm.writeback.requests, 1);
    assert_eq!(ideal.pm.writeback.requests, 1);
    // Silo: the 8 B in-place update is a partly written block (read + write); the later
    // write-back repeats PM's data everywhere (the LU wrote word 0): only the comparison read.
    assert_eq!(
        (silo.pm.media_blocks, silo.pm.media_redundant_blocks),
        (1, 1)
    );
    assert_eq!(silo.pm.bank_write_cycles, (100 + 300) + 100);
    // Ideal: the write-back carries the changed word: one whole block written, after the
    // comparison read every data-comparison write makes.
    assert_eq!(
        (ideal.pm.media_blocks, ideal.pm.media_redundant_blocks),
        (1, 0)
    );
    assert_eq!(ideal.pm.bank_write_cycles, 100 + 300);
    // Without data-comparison writes, Silo's write-back is written again.
    cfg.mem.dcw = false;
    let plain = run(DesignKind::Silo, &cfg, &events);
    assert_eq!(
        (plain.pm.media_blocks, plain.pm.media_redundant_blocks),
        (2, 0)
    );
}

#[test]
fn a_miss_during_a_write_drain_waits_for_the_drain() {
    // A 4-entry write queue that drains from 2 down to 1: Base's log record and line flush
    // of the first store fill it to the high watermark, so the load miss that follows (to
    // another bank) finds the controller draining writes.
    let mut cfg = Config::default().with_cores(1);
    cfg.mem.write_queue = 4;
    cfg.mem.drain_high = 2;
    cfg.mem.drain_low = 1;
    cfg.mem.onpm_lines = 0;
    let events = vec![
        Event::TxBegin,
        st(0, 0, 1),
        st(8, 0, 2),
        Event::Load {
            addr: 1 << 20,
            size: 8,
        },
        Event::TxEnd,
    ];
    let held = run(DesignKind::Base, &cfg, &events);
    cfg.mem.reads_wait_for_drain = false;
    let free = run(DesignKind::Base, &cfg, &events);
    assert!(held.pm.drain_cycles > 0 && held.pm.drain_episodes > 0);
    assert!(held.stalls.mem_drain > 0, "{:?}", held.stalls);
    assert_eq!(free.stalls.mem_drain, 0);
    assert!(held.cycles > free.cycles);
    assert_eq!(held.pm.writes, free.pm.writes, "the same writes either way");
}

#[test]
fn silo_acknowledges_a_commit_once_its_last_entry_is_in_the_buffer() {
    // The entries arrive long before TxEnd (a long computation after the store): the
    // commit costs nothing. With TxEnd right after the store it waits for the entry's
    // arrival (32-cycle path) plus the buffer's access latency.
    let late = vec![
        Event::TxBegin,
        st(0, 0, 1),
        Event::Compute { instructions: 1000 },
        Event::TxEnd,
    ];
    let mut cfg = Config::default().with_cores(1);
    cfg.silo.buffer_latency = 128;
    let m = run(DesignKind::Silo, &cfg, &late);
    assert_eq!(m.stalls.commit, 0);
    // Store at 0 misses: in the L1 at 218, its entry at the buffer at 250, written at 378.
    let m = run(DesignKind::Silo, &cfg, &two_stores());
    assert_eq!(m.stalls.drain, 217);
    assert_eq!(m.stalls.commit, (251 + 128) - 219);
}
