//! Per-transaction and per-read costs of the MVCC engine beside redo, on one thread:
//! `cargo run --release -p mvcc --example overhead`.

use mvcc::{ClockMode, Mvcc, MvccOptions};
use pmem::{CreateOptions, Pool};
use std::time::Instant;
use tx::{Engine, EngineOptions, NoReplay, Redo, Tx, TxError};

fn ops() -> u64 {
    std::env::var("OVERHEAD_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000)
}
const WORDS: u64 = 4096;

fn pool(name: &str) -> Pool<pmem::Native> {
    let path = std::path::Path::new(pmem::DEFAULT_POOL_DIR).join(format!("overhead-{name}.pool"));
    let _ = std::fs::remove_file(&path);
    let mut options = CreateOptions::new("overhead", 256 << 20);
    options.root_size = WORDS * 8;
    let pool = Pool::create(&path, &options).expect("pool");
    let _ = std::fs::remove_file(&path);
    pool
}

fn measure<E: Engine>(name: &str, engine: &E) {
    engine
        .transaction(|tx| {
            let root = tx.root::<()>();
            (0..WORDS).try_for_each(|w| tx.write_u64(root, w * 8, w))
        })
        .expect("fill");
    // One checkpoint empties the chains and cools (takes out) the cold headers.
    engine.sync().expect("sync");
    let n = ops();
    let t = Instant::now();
    for _ in 0..n {
        engine.read_only(|_tx| Ok::<_, TxError>(())).expect("empty");
    }
    let empty = t.elapsed().as_nanos() as f64 / n as f64;
    let t = Instant::now();
    let mut sum = 0u64;
    for i in 0..n {
        sum = sum.wrapping_add(
            engine
                .read_only(|tx| {
                    let root = tx.root::<()>();
                    let mut s = 0u64;
                    for k in 0..8u64 {
                        s += tx.read_u64(root, ((i * 8 + k * 97) % WORDS) * 8)?;
                    }
                    Ok::<_, TxError>(s)
                })
                .expect("read"),
        );
    }
    let reads = (t.elapsed().as_nanos() as f64 / n as f64 - empty) / 8.0;
    println!("{name:>14}: empty read-only transaction {empty:6.1} ns, read {reads:5.1} ns ({sum})");
}

fn main() {
    // OVERHEAD_ENGINE=redo|counter|tsc runs one engine (for instruction counts).
    let only = std::env::var("OVERHEAD_ENGINE").unwrap_or_default();
    if only.is_empty() || only == "redo" {
        let redo = Redo::create(pool("redo"), &EngineOptions::default()).expect("redo");
        measure("redo", &redo);
    }
    for (name, clock) in [
        ("mvcc/counter", ClockMode::Counter),
        ("mvcc/tsc", ClockMode::Tsc),
    ] {
        if !only.is_empty() && !name.ends_with(only.as_str()) {
            continue;
        }
        let options = MvccOptions::default().with_clock(clock);
        let engine = Mvcc::create(pool(&name.replace('/', "-")), &options, NoReplay).expect("mvcc");
        measure(&format!("{name} hdr"), &engine);
        engine.quiesce().expect("quiesce");
        measure(&format!("{name} clean"), &engine);
    }
}
