//! Per-operation latency of the library API on a native pool in /dev/shm against the same
//! operations as system calls on tmpfs, one thread, plus PM traffic and journal entries per
//! metadata operation.
//!
//! `cargo run --release -p fs --example fs_latency [-- iterations]`

use fs::posix::{O_CREAT, O_RDWR};
use fs::{DataMode, Fs, MkfsOptions, MountOptions};
use pmem::{Counters, Persist, Pool};
use std::os::unix::fs::FileExt;
use std::time::Instant;

const FILE: u64 = 64 << 20;
const IO: usize = 4096;

/// A cheap deterministic sequence of 4 KiB-aligned offsets.
fn offsets(n: usize) -> Vec<u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % (FILE / IO as u64)) * IO as u64
        })
        .collect()
}

fn ns_per(start: Instant, n: usize) -> f64 {
    start.elapsed().as_nanos() as f64 / n as f64
}

fn per_op(c: &Counters, n: usize) -> String {
    format!(
        "{:.0} B stored, {:.0} B NT, {:.1} lines flushed, {:.1} fences",
        c.stored_bytes.iter().sum::<u64>() as f64 / n as f64,
        c.nt_bytes.iter().sum::<u64>() as f64 / n as f64,
        c.flushed_lines as f64 / n as f64,
        c.fences as f64 / n as f64
    )
}

fn library(mode: DataMode, iterations: usize) -> (f64, f64, f64) {
    let path = format!("/dev/shm/ferrite-fs-bench-{}.pool", std::process::id());
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(&path, &fs::pool_options(FILE * 2)).expect("pool");
    let options = MountOptions {
        data_mode: mode,
        ..MountOptions::default()
    };
    let fs = Fs::mkfs(pool, &MkfsOptions::default(), options).expect("mkfs");
    let px = fs.posix();
    let fd = px.open("/data", O_CREAT | O_RDWR, 0o644).expect("open");
    let block = vec![7u8; 1 << 20];
    for off in (0..FILE).step_by(block.len()) {
        px.pwrite(fd, &block, off).expect("fill");
    }
    let offs = offsets(iterations);
    let mut buf = vec![0u8; IO];
    let start = Instant::now();
    for &off in &offs {
        px.pread(fd, &mut buf, off).expect("pread");
    }
    let read = ns_per(start, iterations);
    let stats = fs.pool().pm().stats();
    let before = stats.snapshot();
    let start = Instant::now();
    for &off in &offs {
        px.pwrite(fd, &buf, off).expect("pwrite");
    }
    let write = ns_per(start, iterations);
    let traffic = stats.snapshot().since(&before);
    println!(
        "  {mode:?} pwrite 4 KiB traffic per op: {}",
        per_op(&traffic, iterations)
    );
    let meta_n = iterations.min(20_000);
    let before = stats.snapshot();
    let journal_before = fs.journal_stats();
    let start = Instant::now();
    for i in 0..meta_n {
        let name = format!("/f{i}");
        px.close(px.open(&name, O_CREAT | O_RDWR, 0o644).expect("create"))
            .expect("close");
        px.unlink(&name).expect("unlink");
    }
    let meta = ns_per(start, meta_n * 2);
    let traffic = stats.snapshot().since(&before);
    let journal = fs.journal_stats();
    let entries = (journal.entries - journal_before.entries) as f64 / (meta_n * 2) as f64;
    println!(
        "  {mode:?} create/unlink traffic per op: {}; {entries:.1} journal entries ({:.0} B)",
        per_op(&traffic, meta_n * 2),
        entries * 64.0
    );
    px.close(fd).expect("close");
    fs.unmount().expect("unmount");
    std::fs::remove_file(&path).expect("remove");
    (read, write, meta)
}

fn tmpfs(iterations: usize) -> (f64, f64, f64) {
    let dir = format!("/dev/shm/ferrite-fs-bench-dir-{}", std::process::id());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).expect("dir");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(format!("{dir}/data"))
        .expect("open");
    let block = vec![7u8; 1 << 20];
    for off in (0..FILE).step_by(block.len()) {
        file.write_all_at(&block, off).expect("fill");
    }
    let offs = offsets(iterations);
    let mut buf = vec![0u8; IO];
    let start = Instant::now();
    for &off in &offs {
        file.read_exact_at(&mut buf, off).expect("pread");
    }
    let read = ns_per(start, iterations);
    let start = Instant::now();
    for &off in &offs {
        file.write_all_at(&buf, off).expect("pwrite");
    }
    let write = ns_per(start, iterations);
    let meta_n = iterations.min(20_000);
    let start = Instant::now();
    for i in 0..meta_n {
        let name = format!("{dir}/f{i}");
        drop(std::fs::File::create(&name).expect("create"));
        std::fs::remove_file(&name).expect("unlink");
    }
    let meta = ns_per(start, meta_n * 2);
    std::fs::remove_dir_all(&dir).expect("cleanup");
    (read, write, meta)
}

fn main() {
    let iterations: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    println!("{iterations} random 4 KiB operations on a 64 MiB file, one thread");
    let t = tmpfs(iterations);
    let lib = library(DataMode::InPlace, iterations);
    let cow = library(DataMode::CopyOnWrite, iterations);
    println!(
        "{:<34} {:>10} {:>10} {:>16}",
        "", "pread ns", "pwrite ns", "create|unlink ns"
    );
    for (name, (r, w, m)) in [
        ("tmpfs system calls", t),
        ("ferrite-fs library, in place", lib),
        ("ferrite-fs library, copy-on-write", cow),
    ] {
        println!("{name:<34} {r:>10.0} {w:>10.0} {m:>16.0}");
    }
}
