//! Per-operation latency of the PMFS library API against the same operations as system
//! calls on a kernel file system (tmpfs), one thread, with the PM traffic and journal entries
//! of each library operation. Timing only: nothing here asserts a speed.
//!
//! Each run does, on a fresh directory: `n` creates (open with `O_CREAT`, close), `n` stats,
//! `n` renames, `n` unlinks, `n` mkdirs, `n` rmdirs, and `io` random 4 KiB preads and
//! pwrites (overwrites) on a file filled beforehand. Each kind is timed as one batch
//! ([`measure::ns_per_iteration`]); the reported value per kind is the median over runs.

use crate::measure::{self, Summary};
use pmem::Persist;
use pmfs::posix::{O_CREAT, O_RDWR};
use pmfs::{Errno, Posix};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// An operation measured, in report order ([`Op::ALL`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Op {
    /// Open with `O_CREAT` of a new name, then close.
    #[serde(rename = "create")]
    Create,
    /// `stat` of an existing name.
    #[serde(rename = "stat")]
    Stat,
    /// `rename` to a new name in the same directory.
    #[serde(rename = "rename")]
    Rename,
    /// `unlink` of a closed file.
    #[serde(rename = "unlink")]
    Unlink,
    /// `mkdir`.
    #[serde(rename = "mkdir")]
    Mkdir,
    /// `rmdir` of an empty directory.
    #[serde(rename = "rmdir")]
    Rmdir,
    /// A 4 KiB `pread` at a random aligned offset.
    #[serde(rename = "read 4K")]
    Read4K,
    /// A 4 KiB `pwrite` overwriting a random aligned offset.
    #[serde(rename = "write 4K")]
    Write4K,
}

impl Op {
    /// Every operation, in report order.
    pub const ALL: [Op; 8] = [
        Op::Create,
        Op::Stat,
        Op::Rename,
        Op::Unlink,
        Op::Mkdir,
        Op::Rmdir,
        Op::Read4K,
        Op::Write4K,
    ];

    /// The operation's name in tables and plots.
    pub fn label(self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Stat => "stat",
            Op::Rename => "rename",
            Op::Unlink => "unlink",
            Op::Mkdir => "mkdir",
            Op::Rmdir => "rmdir",
            Op::Read4K => "read 4K",
            Op::Write4K => "write 4K",
        }
    }
}

/// How much work one run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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

    /// Pool bytes a library run needs (the data file twice over, plus metadata room).
    pub fn pool_bytes(&self) -> u64 {
        self.file_bytes * 2 + (64 << 20)
    }
}

/// One operation kind in one run, or the median over runs.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct OpCost {
    /// The operation.
    pub op: Op,
    /// Latency per operation, ns (one run: that run's mean; over runs: their median).
    pub ns: f64,
    /// The latency over the runs summarised (one run: that run alone).
    pub ns_runs: Summary,
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

impl OpCost {
    fn timed(op: Op, ns: f64) -> OpCost {
        OpCost {
            op,
            ns,
            ns_runs: Summary::of(&[ns]).expect("one sample"),
            journal_entries: 0.0,
            stored_bytes: 0.0,
            nt_bytes: 0.0,
            flushed_lines: 0.0,
            fences: 0.0,
        }
    }
}

/// The costs of one run (or the medians over runs), one per operation.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Costs(pub Vec<OpCost>);

impl Costs {
    /// The cost of `op`, if it was measured.
    pub fn get(&self, op: Op) -> Option<&OpCost> {
        self.0.iter().find(|c| c.op == op)
    }

    /// Per operation, the summary over `runs` of the latency and the median of each count.
    pub fn medians(runs: &[Costs]) -> Costs {
        let per_op = Op::ALL.iter().filter_map(|&op| {
            let of = |f: fn(&OpCost) -> f64| {
                let values: Vec<f64> = runs.iter().filter_map(|r| r.get(op).map(f)).collect();
                Summary::of(&values)
            };
            let ns_runs = of(|c| c.ns)?;
            Some(OpCost {
                op,
                ns: ns_runs.median,
                ns_runs,
                journal_entries: of(|c| c.journal_entries)?.median,
                stored_bytes: of(|c| c.stored_bytes)?.median,
                nt_bytes: of(|c| c.nt_bytes)?.median,
                flushed_lines: of(|c| c.flushed_lines)?.median,
                fences: of(|c| c.fences)?.median,
            })
        });
        Costs(per_op.collect())
    }
}

/// A deterministic sequence of `n` 4 KiB-aligned offsets below `limit`.
pub fn offsets(n: usize, limit: u64) -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(0x9E37_79B9_7F4A_7C15);
    let blocks = (limit / 4096).max(1);
    (0..n).map(|_| rng.random_range(0..blocks) * 4096).collect()
}

/// Why a library run stopped.
#[derive(Debug, thiserror::Error)]
#[error("library {op}: {errno}")]
pub struct LibraryError {
    /// What was being done.
    pub op: &'static str,
    /// The error.
    pub errno: Errno,
}

fn lib<T>(op: &'static str, result: Result<T, Errno>) -> Result<T, LibraryError> {
    result.map_err(|errno| LibraryError { op, errno })
}

/// Times `count` iterations of `body` through the library, with the seam's counters and the
/// journal's entries per iteration. The first error stops the batch and is returned.
fn library_batch<B: Persist>(
    px: &Posix<B>,
    op: Op,
    count: usize,
    mut body: impl FnMut(usize) -> Result<(), LibraryError>,
) -> Result<OpCost, LibraryError> {
    let fs = px.fs();
    let stats = fs.pool().pm().stats();
    let (before, journal) = (stats.snapshot(), fs.journal_stats().entries);
    let mut failed = None;
    let ns = measure::ns_per_iteration(count as u64, |i| {
        if failed.is_none()
            && let Err(e) = body(i as usize)
        {
            failed = Some(e);
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    let c = stats.snapshot().since(&before);
    let per = |v: u64| v as f64 / count.max(1) as f64;
    Ok(OpCost {
        journal_entries: per(fs.journal_stats().entries - journal),
        stored_bytes: per(c.stored_bytes.iter().sum()),
        nt_bytes: per(c.nt_bytes.iter().sum()),
        flushed_lines: per(c.flushed_lines),
        fences: per(c.fences),
        ..OpCost::timed(op, ns)
    })
}

/// Names used by a run.
struct Names {
    files: Vec<String>,
    moved: Vec<String>,
    dirs: Vec<String>,
}

impl Names {
    fn new(n: usize, root: &str) -> Names {
        let name = |prefix: &str, i| format!("{root}/bench-{prefix}{i}");
        Names {
            files: (0..n).map(|i| name("f", i)).collect(),
            moved: (0..n).map(|i| name("g", i)).collect(),
            dirs: (0..n).map(|i| name("d", i)).collect(),
        }
    }
}

/// One library run on `px` (whose root must have no `/bench-*` names).
pub fn library_run<B: Persist>(px: &Posix<B>, settings: &Settings) -> Result<Costs, LibraryError> {
    let n = settings.names;
    let names = Names::new(n, "");
    let mut costs = vec![
        library_batch(px, Op::Create, n, |i| {
            let fd = lib("create", px.open(&names.files[i], O_CREAT | O_RDWR, 0o644))?;
            lib("close", px.close(fd))
        })?,
        library_batch(px, Op::Stat, n, |i| {
            lib("stat", px.stat(&names.files[i]).map(drop))
        })?,
        library_batch(px, Op::Rename, n, |i| {
            lib("rename", px.rename(&names.files[i], &names.moved[i]))
        })?,
        library_batch(px, Op::Unlink, n, |i| {
            lib("unlink", px.unlink(&names.moved[i]))
        })?,
        library_batch(px, Op::Mkdir, n, |i| {
            lib("mkdir", px.mkdir(&names.dirs[i], 0o755))
        })?,
        library_batch(px, Op::Rmdir, n, |i| lib("rmdir", px.rmdir(&names.dirs[i])))?,
    ];
    let fd = lib("open", px.open("/bench-data", O_CREAT | O_RDWR, 0o644))?;
    let chunk = vec![7u8; 1 << 20];
    for off in (0..settings.file_bytes).step_by(chunk.len()) {
        lib("fill", px.pwrite(fd, &chunk, off))?;
    }
    let offs = offsets(settings.io, settings.file_bytes);
    let mut buf = vec![0u8; 4096];
    costs.push(library_batch(px, Op::Read4K, offs.len(), |i| {
        lib("pread", px.pread(fd, &mut buf, offs[i]).map(drop))
    })?);
    let data = vec![9u8; 4096];
    costs.push(library_batch(px, Op::Write4K, offs.len(), |i| {
        lib("pwrite", px.pwrite(fd, &data, offs[i]).map(drop))
    })?);
    lib("close", px.close(fd))?;
    lib("unlink", px.unlink("/bench-data"))?;
    Ok(Costs(costs))
}

/// Times `count` iterations of a system-call `body`; the first error stops the batch.
fn kernel_batch(
    op: Op,
    count: usize,
    mut body: impl FnMut(usize) -> std::io::Result<()>,
) -> std::io::Result<OpCost> {
    let mut failed = None;
    let ns = measure::ns_per_iteration(count as u64, |i| {
        if failed.is_none()
            && let Err(e) = body(i as usize)
        {
            failed = Some(e);
        }
    });
    match failed {
        Some(e) => Err(e),
        None => Ok(OpCost::timed(op, ns)),
    }
}

/// The same run as [`library_run`] through system calls in `dir` (a fresh directory).
pub fn kernel_run(dir: &Path, settings: &Settings) -> std::io::Result<Costs> {
    let n = settings.names;
    let names = Names::new(n, &dir.display().to_string());
    let mut costs = vec![
        kernel_batch(Op::Create, n, |i| {
            std::fs::File::create(&names.files[i]).map(drop)
        })?,
        kernel_batch(Op::Stat, n, |i| {
            std::fs::metadata(&names.files[i]).map(drop)
        })?,
        kernel_batch(Op::Rename, n, |i| {
            std::fs::rename(&names.files[i], &names.moved[i])
        })?,
        kernel_batch(Op::Unlink, n, |i| std::fs::remove_file(&names.moved[i]))?,
        kernel_batch(Op::Mkdir, n, |i| std::fs::create_dir(&names.dirs[i]))?,
        kernel_batch(Op::Rmdir, n, |i| std::fs::remove_dir(&names.dirs[i]))?,
    ];
    let path = dir.join("bench-data");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    let chunk = vec![7u8; 1 << 20];
    for off in (0..settings.file_bytes).step_by(chunk.len()) {
        file.write_all_at(&chunk, off)?;
    }
    let offs = offsets(settings.io, settings.file_bytes);
    let mut buf = vec![0u8; 4096];
    costs.push(kernel_batch(Op::Read4K, offs.len(), |i| {
        file.read_exact_at(&mut buf, offs[i])
    })?);
    let data = vec![9u8; 4096];
    costs.push(kernel_batch(Op::Write4K, offs.len(), |i| {
        file.write_all_at(&data, offs[i])
    })?);
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(Costs(costs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crashsim::{SimConfig, SimPm};
    use pmfs::{Fs, MkfsOptions, MountOptions};

    const TINY: Settings = Settings {
        names: 20,
        io: 50,
        file_bytes: 1 << 20,
    };

    #[test]
    fn offsets_are_aligned_in_range_and_repeatable() {
        let offs = offsets(1000, 1 << 20);
        assert!(offs.iter().all(|&o| o % 4096 == 0 && o < 1 << 20));
        assert_eq!(offs, offsets(1000, 1 << 20));
        assert!(offs.iter().any(|&o| o != offs[0]), "not constant");
    }

    #[test]
    fn library_run_counts_the_journal_and_the_traffic() {
        let size = TINY.pool_bytes();
        let pool = pmem::Pool::format(
            SimPm::new(size, SimConfig::default()),
            &pmfs::pool_options(size),
        )
        .expect("pool");
        let px = Posix::new(
            Fs::mkfs(pool, &MkfsOptions::default(), MountOptions::default()).expect("mkfs"),
        );
        let costs = library_run(&px, &TINY).expect("run");
        assert_eq!(costs.0.len(), Op::ALL.len());
        let create = costs.get(Op::Create).expect("create");
        assert!(
            create.journal_entries >= 1.0 && create.fences >= 3.0,
            "{create:?}"
        );
        let write = costs.get(Op::Write4K).expect("write");
        assert!(write.nt_bytes >= 4096.0, "{write:?}");
        assert_eq!(costs.get(Op::Stat).expect("stat").journal_entries, 0.0);
        assert_eq!(px.readdir("/").expect("readdir").len(), 2, "cleaned up");
    }

    #[test]
    fn kernel_run_measures_every_operation() {
        let dir = tempfile::tempdir().expect("dir");
        let costs = kernel_run(dir.path(), &TINY).expect("run");
        assert_eq!(
            costs.0.iter().map(|c| c.op).collect::<Vec<_>>(),
            Op::ALL.to_vec()
        );
        assert!(costs.0.iter().all(|c| c.ns > 0.0));
    }

    #[test]
    fn medians_take_the_middle_run_per_operation() {
        let run = |ns: f64, fences: f64| {
            Costs(vec![OpCost {
                fences,
                ..OpCost::timed(Op::Stat, ns)
            }])
        };
        let medians = Costs::medians(&[run(5.0, 1.0), run(1.0, 3.0), run(9.0, 2.0)]);
        let stat = medians.get(Op::Stat).expect("stat");
        assert_eq!(stat.ns, 5.0);
        assert_eq!(
            (stat.ns_runs.min, stat.ns_runs.max, stat.ns_runs.runs),
            (1.0, 9.0, 3)
        );
        assert_eq!(stat.fences, 2.0);
        assert!(medians.get(Op::Create).is_none());
    }
}
