//! Where a 4 KiB write through the PMFS FUSE mount spends its time: fio randwrite 4k on
//! tmpfs, on the FUSE floor (a no-op FUSE file system: the kernel round trip and fuser's
//! dispatch only), on the durable PMFS mount, and through the library in this process,
//! each `RUNS` times interleaved (so load drifts hit every target alike); prints medians
//! and the ratios to tmpfs.
//!
//! `cargo run --release -p bench --example fuse_floor -- [RUNS] [POOL_DIR]`

use bench::measure::Summary;
use bench::pmfs::fio::{self, FioJob, FioKind, FioSettings};
use bench::pmfs::targets::FioTarget;
use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let runs: usize = args
        .next()
        .map_or(5, |r| r.parse().expect("RUNS is a number"));
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "/dev/shm".into()));
    let fio = fio::fio_path().expect("fio is installed");
    let job = FioJob {
        kind: FioKind::RandWrite,
        bs: 4096,
    };
    let settings = FioSettings::DEFAULT;
    let targets = [FioTarget::Tmpfs, FioTarget::FuseFloor, FioTarget::Fuse];
    let mut iops: Vec<Vec<f64>> = vec![Vec::new(); targets.len()];
    for run in 0..runs {
        for (i, &target) in targets.iter().enumerate() {
            let set_up = target
                .set_up(&dir, settings.target_bytes())
                .unwrap_or_else(|e| panic!("{}: {e}", target.label()));
            let numbers = fio::run_fio(&fio, set_up.dir(), &set_up.env(), job, &settings)
                .unwrap_or_else(|e| panic!("{}: {e}", target.label()));
            eprintln!("run {run}: {} {:.0} IOPS", target.label(), numbers.iops);
            iops[i].push(numbers.iops);
        }
    }
    let tmpfs = Summary::of(&iops[0]).expect("runs").median;
    println!("fio randwrite 4k, {runs} runs each, medians:");
    for (target, samples) in targets.iter().zip(&iops) {
        let s = Summary::of(samples).expect("runs");
        println!(
            "  {:<22} {:>10.0} IOPS ({:.0}..{:.0})  {:.3}x tmpfs  {:.1} us/write",
            target.label(),
            s.median,
            s.min,
            s.max,
            s.median / tmpfs,
            1e6 / s.median
        );
    }
}
