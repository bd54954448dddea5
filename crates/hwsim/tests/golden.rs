//! Golden single-core traces with hand-computed cycle counts, PM traffic and log statistics.
//!
//! Default machine (2 GHz): L1 4, L2 12, LLC 28 cycles; on-chip path 32 cycles each way;
//! PCM read 100 cycles (50 ns), burst 10 cycles (5 ns); a cold miss at cycle t therefore
//! costs 4 + 12 + 28 + 2 × 32 + (100 + 10) = 218 cycles.

use hwsim::config::MediaModel;
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
fn the_lines_left_dirty_at_the_end_are_charged_as_a_final_drain() {
    // Ideal leaves line 0 dirty (two changed words): its write-back is charged to the
    // traffic (64 B sent, 16 B programmed) and the media work, not to the run's time.
    let cfg = Config::default().with_cores(1);
    let m = run(DesignKind::Ideal, &cfg, &two_stores());
    assert_eq!((m.pm.final_drain.requests, m.pm.final_drain.bytes), (1, 64));
    assert_eq!((m.pm.programmed_bytes, m.pm.media_writes), (16, 1));
    assert!(m.pm.final_bank_cycles > 0);
    assert_eq!(m.cycles, 219, "as without the drain");
    let mut off = cfg.clone();
    off.mem.final_drain = false;
    let m = run(DesignKind::Ideal, &off, &two_stores());
    assert_eq!((m.pm.final_drain.requests, m.pm.programmed_bytes), (0, 0));
    // Base flushed its line at commit: nothing is left for the drain.
    let m = run(DesignKind::Base, &cfg, &two_stores());
    assert_eq!(m.pm.final_drain.requests, 0);
}

#[test]
fn baselines_use_the_on_pm_buffer_only_when_configured() {
    // FWB's two records leave in one 64 B log write, and commit leaves the data line dirty
    // for the final drain: without the buffer each is a media write of its own; with it,
    // nothing reaches the media during the run and both lines wait in the buffer.
    let mut cfg = Config::default().with_cores(1);
    let plain = run(DesignKind::Fwb, &cfg, &two_stores());
    assert_eq!((plain.pm.writes.requests, plain.pm.media_writes), (1, 2));
    assert!(plain.pm.bank_write_cycles > 0);
    cfg.mem.baselines_use_onpm_buffer = true;
    let buffered = run(DesignKind::Fwb, &cfg, &two_stores());
    assert_eq!(buffered.pm.bank_write_cycles, 0);
    assert_eq!(buffered.pm.media_writes, 2, "the lines left in the buffer");
}

#[test]
fn base_two_stores() {
    // Store 1: log record sent at 0, accepted at 32, ack at 64; the store misses (read at
    // 64 → 174, in L1 at 282); the flush leaves at 282, accepted at 314, ack at 346.
    // Store 2: record accepted at 378, ack 410; L1 hit, performed 411; flush accepted at
    // 443, ack 475. Commit message to the MC: 475 + 32 = 507. (With the on-PM buffer, which
    // a baseline has only when configured: without it, the record's media write holds the
    // bank the first miss reads from.)
    let mut cfg = Config::default().with_cores(1);
    cfg.mem.baselines_use_onpm_buffer = true;
    let m = run(DesignKind::Base, &cfg, &two_stores());
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
    // By default Base has no buffer: each of the four requests is a media write.
    let m = run(
        DesignKind::Base,
        &Config::default().with_cores(1),
        &two_stores(),
    );
    assert_eq!((m.pm.writes.requests, m.pm.media_writes), (4, 4));
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
    // Both LUs are in one buffered line; at the end the caches still hold line 0 dirty, and
    // its final-drain write-back (unchanged against PM: the LUs wrote both words) completes
    // the block in the buffer: one media write programming the two words.
    assert_eq!(
        (m.pm.media_writes, m.pm.media_rmw, m.pm.media_blocks),
        (1, 0, 1)
    );
    assert_eq!((m.pm.final_drain.requests, m.pm.programmed_bytes), (1, 16));
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
    // Each store changes one byte: an undo+redo entry is 10 B of metadata + 1 B of old and
    // 1 B of new data. The two entries (still in their coalescing window at commit, so no
    // redo-only record follows) share one log write of 24 B that leaves at 219: accepted
    // 251, ack 283.
    let m = run(
        DesignKind::MorLog,
        &Config::default().with_cores(1),
        &two_stores(),
    );
    assert_eq!(m.cycles, 283);
    assert_eq!((m.pm.log.requests, m.pm.log.bytes), (1, 24));
    let log = m.log.expect("morlog logs");
    assert_eq!((log.undo_records, log.redo_records), (2, 0));
}

#[test]
fn morlog_drops_silent_stores_and_merges_redo() {
    let events = vec![
        Event::TxBegin,
        st(0, 0, 1),
        st(0, 1, 1),      // silent: nothing
        st(0, 1, 0x0201), // in the window: the entry's redo takes it, byte 1 joins both parts
        Event::TxEnd,
    ];
    let m = run(
        DesignKind::MorLog,
        &Config::default().with_cores(1),
        &events,
    );
    let log = m.log.expect("morlog logs");
    assert_eq!((log.silent_ignored, log.merged, log.appended), (1, 1, 1));
    // One undo+redo entry of 10 + 2 + 2 B: a 16 B write.
    assert_eq!((log.undo_records, log.redo_records), (1, 0));
    assert_eq!(m.pm.log.bytes, 16);
}

#[test]
fn morlog_morphs_a_word_stored_again_to_redo_only() {
    // Word 0 is stored once, word 8 twice, word 16 three times, each store 500 cycles after
    // the previous one (longer than the 76-cycle coalescing window), every byte changing and
    // no value compressible (DLDC keeps all 8 bytes; FPC would take 9).
    const V: [u64; 4] = [
        0xFEDC_BA98_7654_3210,
        0x0123_4567_89AB_CDEF,
        0x1032_5476_98BA_DCFE,
        0x2301_6745_89EF_CDAB,
    ];
    let gap = Event::Compute { instructions: 500 };
    let mut events = vec![Event::TxBegin];
    for (word, stores) in [(0u64, 1usize), (8, 2), (16, 3)] {
        for k in 0..stores {
            events.push(st(word, V[k], V[k + 1]));
            events.push(gap);
        }
    }
    events.push(Event::TxEnd);
    let m = run(
        DesignKind::MorLog,
        &Config::default().with_cores(1),
        &events,
    );
    let log = m.log.expect("morlog logs");
    // One undo+redo entry per word (10 + 8 + 8 = 26 B, each leaving alone when its window
    // closes: a 32 B write); words 8 and 16 morph to redo-only when stored again, and only
    // their newest redo is written, at commit (two 18 B records in one 40 B write).
    assert_eq!((log.undo_records, log.redo_records), (3, 2));
    assert_eq!((log.generated, log.merged, log.appended), (6, 3, 3));
    assert_eq!((m.pm.log.requests, m.pm.log.bytes), (4, 3 * 32 + 40));
    // The same word written three times costs 26 + 18 B of records, once 26 B: without
    // morphing (an undo and a redo record per word) both would cost 36 B.
}

#[test]
fn morlog_encodes_compressible_values_smaller() {
    // −256 → 1 changes all eight bytes (DLDC: 8 B per part), but FPC encodes −256 in 4 B (a
    // sign-extended halfword and a sign-extended nibble: 19 + 7 bits) and 1 in 2 B (7 + 6).
    let events = vec![Event::TxBegin, st(0, (-256i64) as u64, 1), Event::TxEnd];
    let m = run(
        DesignKind::MorLog,
        &Config::default().with_cores(1),
        &events,
    );
    assert_eq!(m.pm.log.bytes, 10 + 4 + 2, "selective encoding picks FPC");
    let mut dldc = Config::default().with_cores(1);
    dldc.morlog.encoding = hwsim::config::LogEncoding::Dldc;
    let m = run(DesignKind::MorLog, &dldc, &events);
    assert_eq!(m.pm.log.bytes, (10u64 + 8 + 8).next_multiple_of(8));
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
fn an_eviction_after_silos_in_place_update_programs_nothing() {
    // A tiny LLC (4 sets × 2 ways) and no on-PM buffer, so every write reaches the media by
    // itself. One transaction changes word 0 of line 0; loads of lines 4, 8 and 12 (the same
    // LLC set) then evict line 0, dirty.
    let mut cfg = Config::default().with_cores(1);
    for (c, sets) in [(&mut cfg.l1, 2), (&mut cfg.l2, 4), (&mut cfg.llc, 4)] {
        c.size_bytes = sets * 2 * 64;
        c.ways = 2;
    }
    cfg.mem.onpm_lines = 0;
    cfg.mem.media = MediaModel::BlockDcw;
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
    // Silo sends 8 B of in-place update and the 64 B eviction (CE), but programs only the
    // word the LU wrote: the CE repeats PM's data everywhere ("CE will not write twice").
    assert_eq!((silo.pm.writes.bytes, silo.pm.programmed_bytes), (72, 8));
    assert_eq!((ideal.pm.writes.bytes, ideal.pm.programmed_bytes), (64, 8));
    assert_eq!(silo.pm.final_drain.requests, 0, "nothing left dirty");
    // Per 64 B block with data comparison: the LU is a read and a pulse, the CE the
    // comparison read only.
    assert_eq!(
        (silo.pm.media_blocks, silo.pm.media_redundant_blocks),
        (1, 1)
    );
    assert_eq!(silo.pm.bank_write_cycles, (100 + 300) + 100);
    // Ideal: the write-back carries the changed word: one block written after the read.
    assert_eq!(
        (ideal.pm.media_blocks, ideal.pm.media_redundant_blocks),
        (1, 0)
    );
    assert_eq!(ideal.pm.bank_write_cycles, 100 + 300);
    // NVMain's row timing charges a pulse per media write whatever its data: Silo's CE
    // costs its bank as much as the LU, though it programs nothing.
    cfg.mem.media = MediaModel::NvmainRow;
    let row = run(DesignKind::Silo, &cfg, &events);
    assert_eq!(
        (row.pm.bank_write_cycles, row.pm.programmed_bytes),
        (600, 8)
    );
    // In proportion to the bytes written: an eighth of a pulse for the LU, one for the CE.
    cfg.mem.media = MediaModel::Proportional;
    let bytes = run(DesignKind::Silo, &cfg, &events);
    assert_eq!(bytes.pm.bank_write_cycles, 38 + 300);
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
    // commit still costs the commit request's trip to the log controller at the MC (32
    // cycles, as Base's commit message and FWB's acknowledgement do; it was free). With
    // TxEnd right after the store it waits for the entry's arrival (32-cycle path) plus the
    // buffer's access latency.
    let late = vec![
        Event::TxBegin,
        st(0, 0, 1),
        Event::Compute { instructions: 1000 },
        Event::TxEnd,
    ];
    let mut cfg = Config::default().with_cores(1);
    cfg.silo.buffer_latency = 128;
    let m = run(DesignKind::Silo, &cfg, &late);
    assert_eq!(m.stalls.commit, 32);
    // Store at 0 misses: in the L1 at 218, its entry at the buffer at 250, written at 378.
    let m = run(DesignKind::Silo, &cfg, &two_stores());
    assert_eq!(m.stalls.drain, 217);
    assert_eq!(m.stalls.commit, (251 + 128) - 219);
}

#[test]
fn coalesced_in_place_updates_of_a_whole_line_program_every_word() {
    // One transaction changes all eight words of line 0. Without coalescing they are eight
    // 8 B LUs; with it, one 64 B write. Either way PM receives eight new words (64 B
    // programmed) and the line's final-drain write-back finds nothing left to program. A
    // 64 B coalesced LU used to be taken for a line leaving the caches: its changed words
    // were looked up among the caches' in-flight write-backs, found none, and it programmed
    // nothing.
    let mut events = vec![Event::TxBegin];
    events.extend((0..8).map(|w| st(8 * w, 0, w + 1)));
    events.push(Event::TxEnd);
    let mut cfg = Config::default().with_cores(1);
    let apart = run(DesignKind::Silo, &cfg, &events);
    cfg.silo.coalesce_lus = true;
    let together = run(DesignKind::Silo, &cfg, &events);
    assert_eq!(
        (apart.pm.in_place.requests, apart.pm.in_place.bytes),
        (8, 64)
    );
    assert_eq!(
        (together.pm.in_place.requests, together.pm.in_place.bytes),
        (1, 64)
    );
    assert_eq!(apart.pm.programmed_bytes, 64);
    assert_eq!(together.pm.programmed_bytes, 64);
}

#[test]
fn a_silo_transaction_that_fits_the_buffer_exactly_does_not_overflow() {
    // Twenty distinct changed words fill the 20-entry buffer with live entries, and no
    // further entry comes: nothing overflows (§III-F retires entries when a new one finds
    // no slot). Retirement used to start as soon as an append took the last slot, writing
    // 14 undo records and in-place updates before commit for a transaction that fits.
    let cfg = Config::default().with_cores(1);
    let tx = |words: u64| {
        let mut events = vec![Event::TxBegin];
        events.extend((0..words).map(|w| st(64 * w, 0, w + 1)));
        events.push(Event::TxEnd);
        events
    };
    let fits = run(DesignKind::Silo, &cfg, &tx(20));
    let log = fits.log.expect("silo logs");
    assert_eq!(log.max_entries_per_tx, 20);
    assert_eq!(
        (log.overflow_tx, log.overflowed_entries, log.undo_records),
        (0, 0, 0)
    );
    assert_eq!(fits.pm.log.requests, 0);
    // One word more overflows: the 21st entry finds every slot live, and the oldest 14
    // retire (one batch of 14 × 18 B, written as 256 B at most).
    let over = run(DesignKind::Silo, &cfg, &tx(21));
    let log = over.log.expect("silo logs");
    assert_eq!(
        (
            log.overflow_tx,
            log.overflow_batches,
            log.overflowed_entries
        ),
        (1, 1, 14)
    );
    assert_eq!((over.pm.log.requests, over.pm.log.bytes), (1, 256));
}
