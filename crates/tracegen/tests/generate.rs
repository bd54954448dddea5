//! Generated traces: well-formed, deterministic, per-core address spaces, round-trips, and
//! the calibration checks against Silo's workload facts.

use std::collections::HashSet;
use trace::{Event, Trace};
use tracegen::calibration::SILO_LOG_ENTRIES;
use tracegen::recorder::core_of;
use tracegen::{
    CalibrationReport, ElementFill, SiloWorkload, TraceSpec, calibrate, generate,
    generate_with_threads,
};

/// A small spec (fast in the dev profile).
fn small(workload: SiloWorkload) -> TraceSpec {
    TraceSpec::new(workload)
        .with_cores(2)
        .with_transactions(300)
        .with_keys(2048)
}

fn check_well_formed(trace: &Trace, spec: &TraceSpec) {
    assert_eq!(trace.cores(), spec.cores as usize);
    for index in 0..trace.cores() {
        let core = trace.stream_core(index);
        assert_eq!(core, index as u32);
        let (mut open, mut committed) = (false, 0u64);
        for event in trace.events(index) {
            match event {
                Event::TxBegin => {
                    assert!(!open, "nested TxBegin");
                    open = true;
                }
                Event::TxEnd => {
                    assert!(open, "TxEnd without TxBegin");
                    (open, committed) = (false, committed + 1);
                }
                Event::Load { addr, size } => {
                    assert!(open && (1..=64).contains(&size));
                    assert_eq!(
                        addr / 64,
                        (addr + u64::from(size) - 1) / 64,
                        "load crosses a line"
                    );
                    assert_eq!(core_of(addr), core, "address outside the core's space");
                }
                Event::Store { addr, .. } => {
                    assert!(open, "store outside a transaction");
                    assert_eq!(core_of(addr), core, "address outside the core's space");
                }
                Event::Compute { .. } => {}
            }
        }
        assert!(!open);
        assert_eq!(committed, spec.transactions, "{}", spec.workload);
    }
}

#[test]
fn every_workload_generates_well_formed_round_tripping_traces() {
    for workload in SiloWorkload::ALL {
        let spec = small(workload);
        let trace = generate(&spec).expect("generate");
        check_well_formed(&trace, &spec);
        assert_eq!(trace.meta.workload, workload.name());
        assert_eq!(trace.meta.params["spec"]["keys"], 2048);
        let loaded = Trace::from_bytes(&trace.to_bytes()).expect("round trip");
        assert_eq!(loaded.meta, trace.meta);
        for core in 0..trace.cores() {
            assert!(loaded.events(core).eq(trace.events(core)));
        }
        assert_eq!(SiloWorkload::parse(workload.name()), Some(workload));
    }
}

#[test]
fn generation_is_deterministic_and_independent_of_host_threads() {
    let spec = small(SiloWorkload::Hash).with_transactions(200);
    let one = generate_with_threads(&spec, 1)
        .expect("1 thread")
        .to_bytes();
    let two = generate_with_threads(&spec, 2)
        .expect("2 threads")
        .to_bytes();
    assert_eq!(one, two);
    assert_eq!(one, generate(&spec).expect("again").to_bytes());
    let other_seed = generate(&spec.clone().with_seed(7))
        .expect("seed 7")
        .to_bytes();
    assert_ne!(one, other_seed);
}

#[test]
fn cores_run_independent_instances() {
    let spec = small(SiloWorkload::Array).with_cores(3);
    let trace = generate(&spec).expect("generate");
    // Same structure, different seeds: the cores' offsets within their spaces differ.
    let offsets = |index| -> Vec<u64> {
        trace
            .events(index)
            .filter_map(|e| e.word())
            .map(|addr| addr & ((1 << 40) - 1))
            .collect()
    };
    assert_ne!(offsets(0), offsets(1));
    let lines: Vec<HashSet<u64>> = (0..3)
        .map(|i| trace.events(i).filter_map(|e| e.line()).collect())
        .collect();
    assert!(lines[0].is_disjoint(&lines[1]) && lines[1].is_disjoint(&lines[2]));
}

#[test]
fn invalid_specs_are_errors() {
    for spec in [
        small(SiloWorkload::Array).with_cores(0),
        small(SiloWorkload::Array).with_transactions(0),
        small(SiloWorkload::Hash).with_keys(1),
        small(SiloWorkload::Tpcc).with_keys(2_000_000),
    ] {
        assert!(generate(&spec).is_err(), "{spec:?}");
    }
}

fn report(spec: &TraceSpec) -> CalibrationReport {
    calibrate(&generate(spec).expect("generate"))
}

#[test]
fn array_calibration_matches_silo() {
    let sparse = report(&small(SiloWorkload::Array));
    // Silo: 90.4 % of Array's word stores are silent.
    assert!(sparse.silent_fraction >= 0.8, "{sparse:?}");
    assert_eq!(
        sparse.stores_per_tx.max, 16,
        "two 64 B elements, word by word"
    );
    assert_eq!(sparse.live_entries_per_tx.max, 2);
    let random = report(&small(SiloWorkload::Array).with_fill(ElementFill::Random));
    assert!(random.silent_fraction < 0.2, "{random:?}");
}

#[test]
fn calibration_of_every_workload() {
    for workload in SiloWorkload::ALL {
        let report = report(&small(workload));
        // Silo Fig. 4: most transactions write less than 0.5 KB.
        assert!(report.share_below_half_kb > 0.5, "{report:?}");
        assert_eq!(report.transactions, 600);
        assert!(report.live_entries_per_tx.max <= report.stores_per_tx.max);
        assert!(report.live_entries_per_tx.mean > 0.0, "{report:?}");
        let histogram: u64 = report.bytes_histogram.iter().map(|b| b.transactions).sum();
        assert_eq!(histogram, report.transactions);
        let json = serde_json::to_string(&report).expect("serialise");
        let back: CalibrationReport = serde_json::from_str(&json).expect("parse");
        assert_eq!(back.workload, report.workload);
        if workload == SiloWorkload::Hash {
            // Silo: at most ~20 live entries per transaction, Hash the maximum.
            assert!(
                report.live_entries_per_tx.max <= SILO_LOG_ENTRIES,
                "{report:?}"
            );
        }
    }
}

#[test]
fn grouped_transactions_hold_the_same_operations() {
    let spec = small(SiloWorkload::Hash).with_transactions(40);
    let plain = generate(&spec).expect("trace");
    let grouped = tracegen::group_transactions(&plain, 4, 7);
    // Seven transactions of four operations each, per core; the other events unchanged.
    let kept = |t: &Trace, i: usize| -> Vec<Event> {
        t.events(i)
            .filter(|e| !matches!(e, Event::TxBegin | Event::TxEnd))
            .collect()
    };
    for i in 0..plain.cores() {
        let ends = grouped.events(i).filter(|e| *e == Event::TxEnd).count();
        assert_eq!(ends, 7);
        let mut prefix = Vec::new();
        let mut ops = 0;
        for event in plain.events(i) {
            if event == Event::TxEnd {
                ops += 1;
                if ops == 28 {
                    break;
                }
            } else if event != Event::TxBegin {
                prefix.push(event);
            }
        }
        assert_eq!(kept(&grouped, i), prefix);
    }
    assert_eq!(grouped.meta.params["ops_per_transaction"], 4);
    // A spec asking for grouped operations gives the same trace.
    let direct = generate(
        &small(SiloWorkload::Hash)
            .with_transactions(7)
            .with_ops_per_transaction(4),
    )
    .expect("trace");
    for i in 0..plain.cores() {
        assert_eq!(
            direct.events(i).collect::<Vec<_>>(),
            grouped.events(i).collect::<Vec<_>>()
        );
    }
}

#[test]
fn specs_beyond_the_memory_limit_are_refused_before_allocating() {
    let huge_tx = TraceSpec::new(SiloWorkload::Hash)
        .with_cores(1)
        .with_transactions(u64::MAX);
    let huge_keys = TraceSpec::new(SiloWorkload::Array)
        .with_cores(1)
        .with_keys(1 << 28);
    for spec in [huge_tx, huge_keys] {
        let why = spec.validate().expect_err("over the memory limit");
        assert!(why.contains("MiB of memory per core"), "{why}");
        let error = generate(&spec).expect_err("refused before allocating");
        assert!(
            matches!(error, tracegen::GenError::InvalidSpec(_)),
            "{error}"
        );
    }
    for workload in SiloWorkload::ALL {
        let spec = TraceSpec::new(workload);
        assert_eq!(spec.validate(), Ok(()), "{workload}'s default spec");
        assert!(spec.memory_bytes() <= tracegen::spec::MAX_CORE_MEMORY);
    }
}

#[test]
fn memory_the_host_refuses_is_an_error_not_an_abort() {
    let error = tx::MemEngine::try_new(1 << 62).expect_err("4 EiB cannot be reserved");
    assert!(!error.to_string().is_empty());
}
