//! Speed probe: `speed WORKLOAD TX CORES [DESIGN...]` (caches the trace in /tmp).
use hwsim::{Config, DesignKind, simulate};
use tracegen::{SiloWorkload, TraceSpec, generate};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let w = SiloWorkload::parse(&a[0]).expect("workload");
    let tx: u64 = a[1].parse().expect("tx");
    let cores: usize = a[2].parse().expect("cores");
    let path = std::path::PathBuf::from(format!("/tmp/speed-{}-{tx}.trace", w.name()));
    let trace = match trace::Trace::read(&path) {
        Ok(t) => t,
        Err(_) => {
            let t = generate(&TraceSpec::new(w).with_transactions(tx)).expect("trace");
            t.write(&path).expect("write");
            t
        }
    };
    let designs: Vec<DesignKind> = if a.len() > 3 {
        a[3..]
            .iter()
            .map(|d| DesignKind::from_name(d).expect("design"))
            .collect()
    } else {
        DesignKind::ALL.to_vec()
    };
    for d in designs {
        let m = simulate(&Config::default().with_cores(cores), d, &trace).expect("runs");
        println!(
            "{:<7} tx/s {:>12.0} Mev/s {:>6.2} B/tx {:>7.1}",
            m.design,
            m.throughput_tx_per_s,
            m.events_per_host_second / 1e6,
            m.write_bytes_per_tx()
        );
    }
}
