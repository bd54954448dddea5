//! The quick reproduction fills every table, and its numbers hang together.

use silorepro::{ReproSpec, report, reproduce};

#[test]
fn quick_reproduction_fills_every_table() {
    let spec = ReproSpec::quick();
    let rep = reproduce(&spec).expect("runs");
    let designs = spec.designs.len();
    assert_eq!(
        rep.runs.len(),
        spec.workloads.len() * spec.cores.len() * designs
    );
    // Every run committed its whole trace.
    for r in &rep.runs {
        assert_eq!(r.committed_tx, spec.transactions * r.cores as u64, "{r:?}");
    }
    // Normalisation: FWB is 1 against itself, Ideal is (about) the fastest on every run.
    for r in rep.runs.iter().filter(|r| r.design == "fwb") {
        assert!((r.vs_fwb - 1.0).abs() < 1e-12);
    }
    // (Within a few per cent: a design whose write-backs take another path can finish a
    // short run marginally before Ideal.)
    for r in &rep.runs {
        assert!(
            r.vs_ideal <= 1.05,
            "{} {} {}c: {} × Ideal",
            r.design,
            r.workload,
            r.cores,
            r.vs_ideal
        );
    }
    // Base writes the most; Silo's log statistics are present.
    let big = *spec.cores.iter().max().unwrap();
    let base = rep.summary_of("base", big).unwrap();
    assert!(
        rep.summary
            .iter()
            .all(|s| s.cores != big || s.write_bytes_vs_fwb <= base.write_bytes_vs_fwb)
    );
    assert!(
        rep.run("array", "silo", big)
            .unwrap()
            .log
            .unwrap()
            .silent_fraction()
            > 0.8
    );
    // Sweeps: the reference point is 1 by construction; more latency never helps.
    let lat = rep.sweep("latency").unwrap();
    assert!((lat.points[0].relative_throughput - 1.0).abs() < 1e-12);
    assert!(lat.points.last().unwrap().relative_throughput <= 1.0 + 1e-9);
    let size = rep.sweep("tx_size").unwrap();
    assert_eq!(size.points.len(), spec.size_multiples.len());
    assert!(size.points.iter().all(|p| p.relative_throughput > 0.0));
    // Comparison rows exist for the headline targets and carry explanations when missed.
    for q in ["silo / fwb", "silo / lad", "Silo vs morlog", "battery eadr"] {
        assert!(rep.comparison.iter().any(|c| c.quantity.contains(q)), "{q}");
    }
    for c in rep.comparison.iter().filter(|c| !c.within) {
        assert!(
            !c.explanation.is_empty(),
            "{} has no explanation",
            c.quantity
        );
    }
    assert!(rep.timing.events > 0 && rep.timing.events_per_host_second > 0.0);
    // Serialises, and the report renders every section.
    let json = serde_json::to_string(&rep).unwrap();
    let back: silorepro::Reproduction = serde_json::from_str(&json).unwrap();
    assert_eq!(back.runs.len(), rep.runs.len());
    let md = report::markdown(&rep);
    for section in [
        "Designs",
        "Sweep `latency`",
        "Battery",
        "Paper vs reproduction",
        "Timing",
    ] {
        assert!(md.contains(section), "{section}");
    }
}

#[test]
fn invalid_specs_are_rejected() {
    let spec = ReproSpec {
        cores: vec![0],
        ..ReproSpec::quick()
    };
    assert!(reproduce(&spec).is_err());
}
