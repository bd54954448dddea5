//! Diagnostic probe: the largest-core comparison on the workload traces under a changed
//! machine, with the per-run facts the comparison's explanations are made of — throughput
//! and × Ideal; PM bytes, write requests and media writes per transaction; bank time spent
//! writing, mean write-queue occupancy, share of time the write queue was full and the
//! controller was draining; read waits for banks and core-side waits for queue room per
//! transaction; stalls by cause per transaction; simulation speed — then the geometric-mean
//! ratios the paper reports and the events per host second of each design.
//!
//! ```text
//! cargo run --release -p silorepro --example probe -- [--tx N] [--cores N] [--keys N]
//!     [--designs ideal,fwb,morlog,lad,silo] [--workloads array,hash,...] [--set JSON]...
//!     [--quiet] [--threads N] [--dump FILE]
//! ```
//!
//! `--set` merges a JSON object into the default `hwsim::Config` (e.g.
//! `--set '{"mem":{"banks":16}}'`); several are applied in order. Traces are generated once
//! and cached as `/tmp/probe-<workload>-<tx>-<cores>[-k<keys>].trace`. `--dump` writes every
//! run's metrics without the host timings as JSON: two builds that simulate identically
//! write identical files (how the speed work checked that results did not change).
//!
//! Columns: `B/tx` bytes, `req` write requests, `med` media writes, `bank%` bank time
//! writing, `occ` mean write-queue entries, `full` / `drn` % of time the queue was full /
//! draining, `rdwt` read cycles waiting for a bank, `admwt` cycles core-side writes waited
//! for queue room, then stalls (load, commit, log buffer, write drain, store-buffer drain
//! at commit, store buffer), all per transaction.

use hwsim::{Config, DesignKind, Metrics, simulate};
use silorepro::results::geomean;
use std::sync::Mutex;
use tracegen::{SiloWorkload, TraceSpec, generate};

fn merge(into: &mut serde_json::Value, patch: &serde_json::Value) {
    match (into, patch) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
        (slot, v) => *slot = v.clone(),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut tx = 3000u64;
    let mut cores = 8usize;
    let mut keys: Option<u64> = None;
    let mut quiet = false;
    let mut dump: Option<String> = None;
    let mut threads = 2usize;
    let mut designs = vec![
        DesignKind::Ideal,
        DesignKind::Fwb,
        DesignKind::MorLog,
        DesignKind::Lad,
        DesignKind::Silo,
    ];
    let mut workloads = SiloWorkload::ALL.to_vec();
    let mut cfg = serde_json::to_value(Config::default())?;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or("missing value");
        match flag.as_str() {
            "--tx" => tx = value()?.parse()?,
            "--cores" => cores = value()?.parse()?,
            "--keys" => keys = Some(value()?.parse()?),
            "--quiet" => quiet = true,
            "--dump" => dump = Some(value()?),
            "--threads" => threads = value()?.parse()?,
            "--designs" => {
                designs = value()?
                    .split(',')
                    .map(|d| DesignKind::from_name(d).ok_or("design"))
                    .collect::<Result<_, _>>()?
            }
            "--workloads" => {
                workloads = value()?
                    .split(',')
                    .map(|w| SiloWorkload::parse(w).ok_or("workload"))
                    .collect::<Result<_, _>>()?
            }
            "--set" => merge(&mut cfg, &serde_json::from_str(&value()?)?),
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    let cfg: Config = serde_json::from_value(cfg)?;
    let cfg = cfg.with_cores(cores);
    let traces: Vec<(SiloWorkload, trace::Trace)> = workloads
        .iter()
        .map(|&w| {
            let k = keys.map_or(String::new(), |k| format!("-k{k}"));
            let path = format!("/tmp/probe-{}-{tx}-{cores}{k}.trace", w.name());
            let t = match trace::Trace::read(std::path::Path::new(&path)) {
                Ok(t) => t,
                Err(_) => {
                    let mut s = TraceSpec::new(w)
                        .with_cores(cores as u32)
                        .with_transactions(tx);
                    if let Some(k) = keys {
                        s = s.with_keys(k);
                    }
                    let t = generate(&s).expect("trace");
                    t.write(std::path::Path::new(&path)).expect("write trace");
                    t
                }
            };
            (w, t)
        })
        .collect();
    let jobs: Vec<(usize, DesignKind)> = (0..traces.len())
        .flat_map(|t| designs.iter().map(move |&d| (t, d)))
        .collect();
    let results: Mutex<Vec<Option<Metrics>>> = Mutex::new(vec![None; jobs.len()]);
    let cpu: Mutex<Vec<f64>> = Mutex::new(vec![0.0; jobs.len()]);
    let thread_cpu = || {
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
            .map_or(0.0, |t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&(t, d)) = jobs.get(i) else { break };
                    let start = thread_cpu();
                    let m = simulate(&cfg, d, &traces[t].1).expect("simulation");
                    cpu.lock().unwrap()[i] = thread_cpu() - start;
                    results.lock().unwrap()[i] = Some(m);
                }
            });
        }
    });
    let results: Vec<Metrics> = results.into_inner()?.into_iter().flatten().collect();
    let cpu = cpu.into_inner()?;
    if let Some(path) = &dump {
        let timeless: Vec<Metrics> = results
            .iter()
            .map(|m| Metrics {
                host_seconds: 0.0,
                events_per_host_second: 0.0,
                ..m.clone()
            })
            .collect();
        std::fs::write(path, serde_json::to_string_pretty(&timeless)?)?;
    }
    let get = |w: usize, d: DesignKind| {
        jobs.iter()
            .position(|&(t, dd)| t == w && dd == d)
            .map(|i| &results[i])
    };
    if !quiet {
        println!(
            "{:<7} {:<7} {:>6} {:>5} {:>5} {:>5} {:>5} {:>5} {:>4} {:>4} {:>4} {:>5} {:>6} {:>6} {:>6} {:>5} {:>5} {:>5} {:>5} {:>5}",
            "wl",
            "design",
            "Mtx/s",
            "xIdl",
            "B/tx",
            "req",
            "med",
            "bank%",
            "occ",
            "full",
            "drn",
            "rdwt",
            "admwt",
            "load",
            "commit",
            "logb",
            "mdrn",
            "drain",
            "sb",
            "Mev/s"
        );
    }
    for (wi, (w, _)) in traces.iter().enumerate() {
        let ideal = get(wi, DesignKind::Ideal).map(|m| m.throughput_tx_per_s);
        for &d in &designs {
            let m = get(wi, d).expect("ran");
            let n = m.committed_tx.max(1) as f64;
            let st = |c: u64| c as f64 / n;
            if quiet {
                continue;
            }
            let span = m.drained_cycles.max(1) as f64;
            println!(
                "{:<7} {:<7} {:>6.2} {:>5.2} {:>5.0} {:>5.1} {:>5.2} {:>5.0} {:>4.0} {:>4.0} {:>4.0} {:>5.0} {:>6.0} {:>6.0} {:>6.0} {:>5.0} {:>5.0} {:>5.0} {:>5.0} {:>5.2}",
                w.name(),
                d.name(),
                m.throughput_tx_per_s / 1e6,
                ideal.map_or(0.0, |i| m.throughput_tx_per_s / i),
                m.pm.writes.bytes as f64 / n,
                m.pm.writes.requests as f64 / n,
                m.pm.media_writes as f64 / n,
                100.0 * m.pm.bank_write_cycles as f64 / (span * cfg.mem.banks as f64),
                m.pm.queue_occupancy_integral as f64 / span,
                100.0 * m.pm.queue_full_cycles as f64 / span,
                100.0 * m.pm.drain_cycles as f64 / span,
                st(m.pm.read_wait_cycles),
                st(m.pm.admit_wait_cycles),
                st(m.stalls.load),
                st(m.stalls.commit),
                st(m.stalls.log_buffer),
                st(m.stalls.mem_drain),
                st(m.stalls.drain),
                st(m.stalls.store_buffer),
                m.events_per_host_second / 1e6,
            );
        }
    }
    let ratio =
        |a: DesignKind, b: DesignKind| {
            geomean((0..traces.len()).filter_map(|w| {
                Some(get(w, a)?.throughput_tx_per_s / get(w, b)?.throughput_tx_per_s)
            }))
        };
    let cut = |a: DesignKind, b: DesignKind, bytes: fn(&Metrics) -> u64| {
        let per = |m: &Metrics| bytes(m) as f64 / m.committed_tx.max(1) as f64;
        1.0 - geomean((0..traces.len()).filter_map(|w| Some(per(get(w, a)?) / per(get(w, b)?))))
    };
    let sent = |m: &Metrics| m.pm.writes.bytes + m.pm.final_drain.bytes;
    let programmed = |m: &Metrics| m.pm.programmed_bytes;
    use DesignKind::*;
    let has = |d| designs.contains(&d);
    let mut line = String::new();
    for (a, b, name) in [
        (Silo, Lad, "silo/lad"),
        (Silo, MorLog, "silo/morlog"),
        (Silo, Fwb, "silo/fwb"),
        (MorLog, Fwb, "morlog/fwb"),
        (Fwb, Ideal, "fwb/ideal"),
        (Lad, Ideal, "lad/ideal"),
        (Silo, Ideal, "silo/ideal"),
    ] {
        if has(a) && has(b) {
            line += &format!("{name} {:.2}  ", ratio(a, b));
        }
    }
    for (a, b, name) in [(Silo, MorLog, "vs-morlog"), (Silo, Fwb, "vs-fwb")] {
        if has(a) && has(b) {
            line += &format!(
                "{name} sent -{:.0}% programmed -{:.0}%  ",
                100.0 * cut(a, b, sent),
                100.0 * cut(a, b, programmed)
            );
        }
    }
    println!("{line}");
    let speed: Vec<String> = designs
        .iter()
        .map(|&d| {
            let (ev, wall, cpu_s) = jobs
                .iter()
                .enumerate()
                .filter(|(_, (_, dd))| *dd == d)
                .fold((0u64, 0.0, 0.0), |(e, w, c), (i, _)| {
                    (
                        e + results[i].events,
                        w + results[i].host_seconds,
                        c + cpu[i],
                    )
                });
            format!(
                "{} {:.2} ({:.2} cpu)",
                d.name(),
                ev as f64 / wall.max(1e-9) / 1e6,
                ev as f64 / cpu_s.max(1e-9) / 1e6
            )
        })
        .collect();
    println!("Mev/s wall (per CPU second): {}", speed.join("  "));
    Ok(())
}
