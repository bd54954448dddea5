//! Sanity experiment: Base vs Silo (and Ideal) on synthetic Array-swap and Hash-update traces,
//! 1 and 8 cores; prints throughput, PM writes, log statistics and simulation speed.
//!
//! `cargo run --release -p hwsim --example sanity [tx_per_core] [elements_per_core]`

use hwsim::synth::{SynthKind, SynthSpec, synth_trace};
use hwsim::{Config, DesignKind, simulate};

fn main() {
    let mut args = std::env::args().skip(1);
    let tx: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let elements: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1 << 18);
    println!(
        "{:<12} {:>5} {:<6} {:>12} {:>9} {:>10} {:>10} {:>10} {:>8} {:>8} {:>10}",
        "workload",
        "cores",
        "design",
        "tx/s",
        "vs base",
        "wr req/tx",
        "wr B/tx",
        "media/tx",
        "reduct",
        "silent",
        "Mev/s"
    );
    for kind in [SynthKind::ArraySwap, SynthKind::HashUpdate] {
        for cores in [1usize, 8] {
            let spec = SynthSpec {
                kind,
                cores,
                tx_per_core: tx,
                elements,
                compute: 200,
                seed: 42,
            };
            let trace = synth_trace(&spec);
            let cfg = Config::default().with_cores(cores);
            let mut base_tps = 0.0;
            for design in [DesignKind::Base, DesignKind::Silo, DesignKind::Ideal] {
                let m = simulate(&cfg, design, &trace).expect("runs");
                if design == DesignKind::Base {
                    base_tps = m.throughput_tx_per_s;
                }
                let per_tx = |x: u64| x as f64 / m.committed_tx.max(1) as f64;
                let log = m.log.unwrap_or_default();
                println!(
                    "{:<12} {:>5} {:<6} {:>12.0} {:>9.2} {:>10.2} {:>10.1} {:>10.2} {:>8.3} {:>8.3} {:>10.2}",
                    format!("{kind:?}"),
                    cores,
                    m.design,
                    m.throughput_tx_per_s,
                    m.throughput_tx_per_s / base_tps,
                    per_tx(m.pm.writes.requests),
                    per_tx(m.pm.writes.bytes),
                    per_tx(m.pm.media_writes),
                    log.reduction(),
                    log.silent_fraction(),
                    m.events_per_host_second / 1e6
                );
                if std::env::var_os("SANITY_JSON").is_some() {
                    println!("{}", serde_json::to_string(&m).expect("serialises"));
                }
            }
        }
    }
}
