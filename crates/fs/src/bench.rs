//! Per-operation latency of the library API against the same operations as system calls
//! on a kernel file system (tmpfs), one thread, with the PM traffic and journal entries of
//! each library operation. Used by `examples/fs_latency.rs` and the `pmfs` section of
//! `ferrite eval`. Timing only: nothing here asserts a speed.
//!
//! Each run does, on a fresh directory: `n` creates (open with `O_CREAT`, close), `n` stats,
//! `n` renames, `n` unlinks, `n` mkdirs, `n` rmdirs, and `io` random 4 KiB preads and
//! pwrites (overwrites) on a file filled beforehand.

use crate::Fs;
use crate::posix::{O_CREAT, O_RDWR};
use pmem::Persist;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

/// The operations measured, in report order.
pub const OPS: [&str; 8] = [
    "create", "stat", "rename", "unlink", "mkdir", "rmdir", "read 4K", "write 4K",
];

/// How much work one run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Settings {
    /// Namespace operations of each kind per run.
    pub names: usize,
    /// 4 KiB reads and writes per run.
    pub io: usize,
    /// Size of the file the reads and writes hit.
    pub file_bytes: u64,
}

impl Settings {
    /// A run of a few tenths of a second.
    pub const DEFAULT: Settings = Settings {
        names: 5_000,
        io: 50_000,
        file_bytes: 64 << 20,
    };
    /// A run of a few milliseconds.
    pub const QUICK: Settings = Settings {
        names: 500,
        io: 5_000,
        file_bytes: 8 << 20,
    };
}

/// One operation kind in one run.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct OpCost {
    /// Operation (one of [`OPS`]).
    pub op: &'static str,
    /// Mean latency, ns.
    pub ns: f64,
    /// Journal entries per operation (library only; 64 bytes each).
    pub journal_entries: f64,
    /// Bytes stored with cacheable stores per operation (library only).
    pub stored_bytes: f64,
    /// Bytes stored non-temporally per operation (library only).
    pub nt_bytes: f64,
    /// Cache lines flushed per operation (library only).
    pub flushed_lines: f64,
    /// Fences per operation (library only).
    pub fences: f64,
}

/// A cheap deterministic sequence of 4 KiB-aligned offsets below `limit`.
pub fn offsets(n: usize, limit: u64) -> Vec<u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let blocks = (limit / 4096).max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % blocks) * 4096
        })
        .collect()
}

/// One library run on `fs` (which must be empty or at least have no `/bench-*` names).
pub fn library_run<B: Persist>(fs: &Fs<B>, settings: &Settings) -> Vec<OpCost> {
    let px = fs.posix();
    let n = settings.names;
    let names: Vec<String> = (0..n).map(|i| format!("/bench-f{i}")).collect();
    let moved: Vec<String> = (0..n).map(|i| format!("/bench-g{i}")).collect();
    let dirs: Vec<String> = (0..n).map(|i| format!("/bench-d{i}")).collect();
    let mut costs = Vec::new();
    let mut measure = |op: &'static str, count: usize, body: &mut dyn FnMut()| {
        let stats = fs.pool().pm().stats();
        let (before, journal) = (stats.snapshot(), fs.journal_stats().entries);
        let start = Instant::now();
        body();
        let ns = start.elapsed().as_nanos() as f64 / count as f64;
        let c = stats.snapshot().since(&before);
        let per = |v: u64| v as f64 / count as f64;
        costs.push(OpCost {
            op,
            ns,
            journal_entries: per(fs.journal_stats().entries - journal),
            stored_bytes: per(c.stored_bytes.iter().sum()),
            nt_bytes: per(c.nt_bytes.iter().sum()),
            flushed_lines: per(c.flushed_lines),
            fences: per(c.fences),
        });
    };
    measure("create", n, &mut || {
        for name in &names {
            let fd = px.open(name, O_CREAT | O_RDWR, 0o644).expect("create");
            px.close(fd).expect("close");
        }
    });
    measure("stat", n, &mut || {
        for name in &names {
            px.stat(name).expect("stat");
        }
    });
    measure("rename", n, &mut || {
        for (a, b) in names.iter().zip(&moved) {
            px.rename(a, b).expect("rename");
        }
    });
    measure("unlink", n, &mut || {
        for name in &moved {
            px.unlink(name).expect("unlink");
        }
    });
    measure("mkdir", n, &mut || {
        for dir in &dirs {
            px.mkdir(dir, 0o755).expect("mkdir");
        }
    });
    measure("rmdir", n, &mut || {
        for dir in &dirs {
            px.rmdir(dir).expect("rmdir");
        }
    });
    let fd = px
        .open("/bench-data", O_CREAT | O_RDWR, 0o644)
        .expect("data file");
    let chunk = vec![7u8; 1 << 20];
    for off in (0..settings.file_bytes).step_by(chunk.len()) {
        px.pwrite(fd, &chunk, off).expect("fill");
    }
    let offs = offsets(settings.io, settings.file_bytes);
    let mut buf = vec![0u8; 4096];
    measure("read 4K", offs.len(), &mut || {
        for &off in &offs {
            px.pread(fd, &mut buf, off).expect("pread");
        }
    });
    let data = vec![9u8; 4096];
    measure("write 4K", offs.len(), &mut || {
        for &off in &offs {
            px.pwrite(fd, &data, off).expect("pwrite");
        }
    });
    px.close(fd).expect("close");
    px.unlink("/bench-data").expect("unlink data");
    costs
}

/// The same run as [`library_run`] through system calls in `dir` (a fresh directory).
pub fn kernel_run(dir: &Path, settings: &Settings) -> std::io::Result<Vec<OpCost>> {
    let n = settings.names;
    let path = |prefix: &str, i: usize| dir.join(format!("bench-{prefix}{i}"));
    let mut costs = Vec::new();
    let mut measure = |op: &'static str,
                       count: usize,
                       body: &mut dyn FnMut() -> std::io::Result<()>|
     -> std::io::Result<()> {
        let start = Instant::now();
        body()?;
        costs.push(OpCost {
            op,
            ns: start.elapsed().as_nanos() as f64 / count as f64,
            journal_entries: 0.0,
            stored_bytes: 0.0,
            nt_bytes: 0.0,
            flushed_lines: 0.0,
            fences: 0.0,
        });
        Ok(())
    };
    measure("create", n, &mut || {
        (0..n).try_for_each(|i| std::fs::File::create(path("f", i)).map(drop))
    })?;
    measure("stat", n, &mut || {
        (0..n).try_for_each(|i| std::fs::metadata(path("f", i)).map(drop))
    })?;
    measure("rename", n, &mut || {
        (0..n).try_for_each(|i| std::fs::rename(path("f", i), path("g", i)))
    })?;
    measure("unlink", n, &mut || {
        (0..n).try_for_each(|i| std::fs::remove_file(path("g", i)))
    })?;
    measure("mkdir", n, &mut || {
        (0..n).try_for_each(|i| std::fs::create_dir(path("d", i)))
    })?;
    measure("rmdir", n, &mut || {
        (0..n).try_for_each(|i| std::fs::remove_dir(path("d", i)))
    })?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join("bench-data"))?;
    let chunk = vec![7u8; 1 << 20];
    for off in (0..settings.file_bytes).step_by(chunk.len()) {
        file.write_all_at(&chunk, off)?;
    }
    let offs = offsets(settings.io, settings.file_bytes);
    let mut buf = vec![0u8; 4096];
    measure("read 4K", offs.len(), &mut || {
        offs.iter()
            .try_for_each(|&off| file.read_exact_at(&mut buf, off))
    })?;
    let data = vec![9u8; 4096];
    measure("write 4K", offs.len(), &mut || {
        offs.iter()
            .try_for_each(|&off| file.write_all_at(&data, off))
    })?;
    drop(file);
    std::fs::remove_file(dir.join("bench-data"))?;
    Ok(costs)
}

/// The median of `values` (NaN when empty).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Per operation (in [`OPS`] order), the median over `runs` of each field.
pub fn medians(runs: &[Vec<OpCost>]) -> Vec<OpCost> {
    OPS.iter()
        .filter_map(|&op| {
            let of = |f: fn(&OpCost) -> f64| {
                let values: Vec<f64> = runs
                    .iter()
                    .filter_map(|run| run.iter().find(|c| c.op == op).map(f))
                    .collect();
                (!values.is_empty()).then(|| median(&values))
            };
            Some(OpCost {
                op,
                ns: of(|c| c.ns)?,
                journal_entries: of(|c| c.journal_entries)?,
                stored_bytes: of(|c| c.stored_bytes)?,
                nt_bytes: of(|c| c.nt_bytes)?,
                flushed_lines: of(|c| c.flushed_lines)?,
                fences: of(|c| c.fences)?,
            })
        })
        .collect()
}
