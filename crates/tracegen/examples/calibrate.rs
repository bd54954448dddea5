//! Generates the default Silo traces, prints their calibration table (markdown), the
//! generation time and the decoding speed.
//!
//! ```text
//! cargo run --release -p tracegen --example calibrate [-- --transactions N] [--cores N]
//!     [--json report.json] [--workload NAME] [--discipline pmdk|write-minimal]
//! ```

use std::time::Instant;
use tracegen::{CalibrationReport, SiloWorkload, StoreDiscipline, TraceSpec, calibrate, generate};

struct Options {
    transactions: Option<u64>,
    cores: Option<u32>,
    json: Option<String>,
    workloads: Vec<SiloWorkload>,
    discipline: StoreDiscipline,
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        transactions: None,
        cores: None,
        json: None,
        workloads: Vec::new(),
        discipline: StoreDiscipline::default(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--transactions" => options.transactions = Some(number()?),
            "--cores" => options.cores = Some(number()? as u32),
            "--json" => options.json = Some(value),
            "--discipline" => {
                options.discipline =
                    StoreDiscipline::parse(&value).ok_or(format!("unknown discipline {value}"))?
            }
            "--workload" => options
                .workloads
                .push(SiloWorkload::parse(&value).ok_or(format!("unknown workload {value}"))?),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if options.workloads.is_empty() {
        options.workloads = SiloWorkload::ALL.to_vec();
    }
    Ok(options)
}

fn spec(options: &Options, workload: SiloWorkload) -> TraceSpec {
    let mut spec = TraceSpec::new(workload).with_discipline(options.discipline);
    if let Some(n) = options.transactions {
        spec = spec.with_transactions(n);
    }
    if let Some(n) = options.cores {
        spec = spec.with_cores(n);
    }
    spec
}

/// Events decoded per second over every stream of `trace` (best of three passes).
fn decode_rate(trace: &trace::Trace) -> f64 {
    (0..3).map(|_| decode_pass(trace)).fold(0.0, f64::max)
}

/// Events decoded per second in one pass over every stream.
fn decode_pass(trace: &trace::Trace) -> f64 {
    let start = Instant::now();
    let mut events = 0u64;
    let mut checksum = 0u64;
    for index in 0..trace.cores() {
        for event in trace.events(index) {
            events += 1;
            if let trace::Event::Store { addr, .. } | trace::Event::Load { addr, .. } = event {
                checksum = checksum.wrapping_add(addr);
            }
        }
    }
    std::hint::black_box(checksum);
    events as f64 / start.elapsed().as_secs_f64()
}

fn row(r: &CalibrationReport, seconds: f64, mb: f64, decode: f64) -> String {
    format!(
        "| {} | {:.0} | {} | {:.1} | {} | {:.0} | {} | {:.1} % | {:.1} % | {:.1} | {} | {:.1} % | {:.1} | {:.1} | {:.2} | {:.1} | {:.0} |",
        r.workload,
        r.data_bytes_per_core.unwrap_or(0) as f64 / (1u64 << 20) as f64,
        r.transactions,
        r.stores_per_tx.mean,
        r.stores_per_tx.max,
        r.bytes_per_tx.mean,
        r.bytes_per_tx.max,
        100.0 * r.share_below_half_kb,
        100.0 * r.silent_fraction,
        r.live_entries_per_tx.mean,
        r.live_entries_per_tx.max,
        100.0 * r.entry_reduction,
        r.loads_per_tx.mean,
        r.events as f64 / r.transactions.max(1) as f64,
        seconds,
        mb,
        decode / 1e6,
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = parse_args()?;
    println!(
        "| workload | data MiB/core | tx | stores/tx | max | bytes/tx | max | tx < 0.5 KB | silent | live/tx | live max | entry reduction | loads/tx | events/tx | gen s | MB | decode M ev/s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let (mut reports, mut total) = (Vec::new(), 0.0);
    for &workload in &options.workloads {
        let spec = spec(&options, workload);
        let start = Instant::now();
        let trace = generate(&spec)?;
        let seconds = start.elapsed().as_secs_f64();
        total += seconds;
        let bytes = trace.to_bytes();
        let loaded = trace::Trace::from_bytes(&bytes)?;
        let rate = decode_rate(&loaded);
        let report = calibrate(&loaded);
        println!("{}", row(&report, seconds, bytes.len() as f64 / 1e6, rate));
        reports.push(report);
    }
    println!("\ngeneration total: {total:.2} s");
    if let Some(path) = options.json {
        std::fs::write(&path, serde_json::to_string_pretty(&reports)?)?;
        println!("report written to {path}");
    }
    Ok(())
}
