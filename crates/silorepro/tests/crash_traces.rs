//! Crash injection on recorded workload traces: every crash-consistent design (Base, FWB,
//! MorLog, LAD, Silo) recovers an all-or-nothing image at crash points spread over runs of
//! the seven workloads' real traces (the shared workload code run on the recorder), on the
//! paper's machine and on a tiny one where evictions, write-queue congestion, Silo's
//! overflow, FWB/MorLog's log wrap-around scans and LAD's undo-logging fallback all happen.
//!
//! `SILO_CRASH_POINTS` (default 16) sets the crash points per design, workload and machine
//! (nightly runs can raise it).

use hwsim::config::CacheConfig;
use hwsim::{Config, DesignKind, crash_check, simulate};
use tracegen::{SiloWorkload, TraceSpec, generate};

const CONSISTENT: [DesignKind; 5] = [
    DesignKind::Base,
    DesignKind::Fwb,
    DesignKind::MorLog,
    DesignKind::Lad,
    DesignKind::Silo,
];

fn cache(sets: u64, ways: usize, latency: u64) -> CacheConfig {
    CacheConfig {
        size_bytes: sets * ways as u64 * 64,
        ways,
        latency,
    }
}

/// Small caches, a short write queue, small logs and buffers.
fn tiny() -> Config {
    let mut c = Config::default().with_cores(2);
    c.l1 = cache(4, 2, 2);
    c.l2 = cache(8, 2, 4);
    c.llc = cache(16, 4, 8);
    c.path_cycles = 6;
    c.core.writeback_buffer = 2;
    c.core.store_buffer = 4;
    c.mem.write_queue = 8;
    c.mem.drain_high = 6;
    c.mem.drain_low = 2;
    c.mem.onpm_lines = 4;
    c.silo.entries = 6;
    c.fwb.log_buffer = 4;
    c.fwb.log_bytes = 8192;
    c.morlog.log_buffer = 4;
    c.morlog.redo_buffer = 3;
    c.morlog.log_bytes = 8192;
    c.lad.spec_limit = 4;
    c
}

/// Crash points per run: `SILO_CRASH_POINTS`, else 16. A value that is not a count of at
/// least 1 stops the test with a message naming it (it was ignored, or, at 0, divided by).
fn points() -> u64 {
    let Some(raw) = std::env::var_os("SILO_CRASH_POINTS") else {
        return 16;
    };
    let text = raw.to_string_lossy();
    text.parse()
        .ok()
        .filter(|&points| points >= 1)
        .unwrap_or_else(|| panic!("SILO_CRASH_POINTS={text:?} is not a count of at least 1"))
}

#[test]
fn every_design_recovers_recorded_workload_traces_all_or_nothing() {
    let points = points();
    let machines = [("paper", Config::default().with_cores(2)), ("tiny", tiny())];
    let mut exercised = [false; 4]; // Silo overflow, FWB scan, MorLog scan, LAD undo
    let (mut checks, mut mid_transaction, mut words) = (0u64, 0u64, 0usize);
    for workload in SiloWorkload::ALL {
        let spec = TraceSpec::new(workload)
            .with_cores(2)
            .with_transactions(40)
            .with_keys(256);
        let trace = generate(&spec).expect("trace");
        for (machine, cfg) in &machines {
            for design in CONSISTENT {
                let run = simulate(cfg, design, &trace).expect("runs");
                let log = run.log.unwrap_or_default();
                exercised[0] |= design == DesignKind::Silo && log.overflow_batches > 0;
                exercised[1] |= design == DesignKind::Fwb && log.scans > 0;
                exercised[2] |= design == DesignKind::MorLog && log.scans > 0;
                exercised[3] |= design == DesignKind::Lad && log.undo_records > 0;
                let end = run.drained_cycles;
                for i in 0..=points {
                    let cycle = end * i / points;
                    let report = crash_check(cfg, design, &trace, cycle).unwrap_or_else(|v| {
                        panic!(
                            "{design:?} on {workload} ({machine} machine), crash at {cycle}: {v}"
                        )
                    });
                    assert_eq!(report.words_unchecked, 0, "cores never share words");
                    checks += 1;
                    mid_transaction += u64::from(report.open_tx > 0);
                    words += report.words_checked;
                    if i == points {
                        assert!(report.ran_to_completion && report.open_tx == 0);
                        assert_eq!(report.committed_tx, 80);
                    }
                }
            }
        }
    }
    // Most crashes hit open transactions (the point of the exercise), and words are checked.
    assert!(
        mid_transaction * 2 > checks,
        "{mid_transaction} of {checks}"
    );
    assert!(words > 0);
    assert_eq!(
        exercised, [true; 4],
        "Silo overflow, FWB and MorLog scans, LAD undo logging must all occur"
    );
}
