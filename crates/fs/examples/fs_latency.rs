//! Per-operation latency of the library API on a native pool in /dev/shm against the same
//! operations as system calls on tmpfs, one thread (medians of several runs), with PM
//! traffic and journal bytes per library operation, in both data modes and with each write
//! protection this machine has.
//!
//! `cargo run --release -p fs --example fs_latency [-- runs [quick]]`

use fs::bench::{self, OpCost, Settings};
use fs::{DataMode, Fs, MkfsOptions, MountOptions};
use pmem::{Pool, Protection};

fn pool_path(tag: &str) -> String {
    format!(
        "/dev/shm/ferrite-fs-latency-{tag}-{}.pool",
        std::process::id()
    )
}

fn library(
    mode: DataMode,
    protection: Protection,
    settings: &Settings,
    runs: usize,
) -> Option<Vec<OpCost>> {
    let path = pool_path(protection.name());
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(
        &path,
        &fs::pool_options(settings.file_bytes * 2 + (64 << 20)),
    )
    .expect("pool");
    if let Err(error) = pool.pm().protect(protection) {
        println!("  {}: unavailable ({error})", protection.name());
        pool.close().expect("close");
        let _ = std::fs::remove_file(&path);
        return None;
    }
    let options = MountOptions {
        data_mode: mode,
        ..MountOptions::default()
    };
    let fs = Fs::mkfs(pool, &MkfsOptions::default(), options).expect("mkfs");
    let results: Vec<Vec<OpCost>> = (0..runs)
        .map(|_| bench::library_run(&fs, settings))
        .collect();
    fs.unmount().expect("unmount");
    std::fs::remove_file(&path).expect("remove");
    Some(bench::medians(&results))
}

fn tmpfs(settings: &Settings, runs: usize) -> Vec<OpCost> {
    let results: Vec<Vec<OpCost>> = (0..runs)
        .map(|_| {
            let dir = tempfile_dir();
            let run = bench::kernel_run(&dir, settings).expect("tmpfs run");
            std::fs::remove_dir_all(&dir).expect("cleanup");
            run
        })
        .collect();
    bench::medians(&results)
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(format!(
        "/dev/shm/ferrite-fs-latency-dir-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).expect("dir");
    dir
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let settings = if args.get(2).is_some_and(|a| a == "quick") {
        Settings::QUICK
    } else {
        Settings::DEFAULT
    };
    println!("{settings:?}, median of {runs} runs, one thread");
    let kernel = tmpfs(&settings, runs);
    let in_place = library(DataMode::InPlace, Protection::None, &settings, runs).expect("library");
    let cow = library(DataMode::CopyOnWrite, Protection::None, &settings, runs).expect("library");
    println!(
        "{:<10} {:>10} {:>12} {:>9} {:>10} {:>9} {:>10} {:>8}",
        "op", "tmpfs ns", "library ns", "ratio", "CoW ns", "journal B", "stored B", "fences"
    );
    for ((k, l), c) in kernel.iter().zip(&in_place).zip(&cow) {
        println!(
            "{:<10} {:>10.0} {:>12.0} {:>9.2} {:>10.0} {:>9.0} {:>10.0} {:>8.1}",
            k.op,
            k.ns,
            l.ns,
            l.ns / k.ns,
            c.ns,
            l.journal_entries * 64.0,
            l.stored_bytes + l.nt_bytes,
            l.fences
        );
    }
    for protection in [Protection::Mprotect, Protection::Mpk] {
        if let Some(guarded) = library(DataMode::InPlace, protection, &settings, runs) {
            println!(
                "write protection {}: ns per op (ratio to unprotected)",
                protection.name()
            );
            for (g, l) in guarded.iter().zip(&in_place) {
                println!("  {:<10} {:>10.0} ({:.2}x)", g.op, g.ns, g.ns / l.ns);
            }
        }
    }
}
