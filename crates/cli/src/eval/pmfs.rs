//! Section "pmfs": the PMFS file system (`crates/fs`, `crates/fsmount`) measured against the
//! kernel. Per-operation latency of the library API against the same system calls on tmpfs
//! (one thread, medians of several runs), the journal bytes and PM traffic of each
//! operation, the cost of write protection (mprotect windows; MPK where the CPU has it), and
//! fio jobs on the FUSE mount against tmpfs and ext4 on a loop device. Parts that need
//! fio, FUSE or loop devices are skipped with the reason when unavailable.

use super::{EvalOptions, empty_section, ns};
use crate::plot::{BarSeries, grouped_bar_chart};
use crate::report::{Plot, Section, Table};
use anyhow::Context;
use fs::bench::{self, OPS, OpCost, Settings};
use fs::{Fs, MkfsOptions, MountOptions};
use fsmount::bench::{Ext4Loop, FioResult, FioSettings, FuseTarget, fio_path, jobs, run_fio};
use indicatif::ProgressBar;
use pmem::{Pool, Protection};
use serde_json::json;
use std::path::Path;

/// Section id.
pub const ID: &str = "pmfs";
/// Section heading.
pub const TITLE: &str = "PMFS: library and FUSE mount vs the kernel";

/// The protections measured after the unprotected baseline.
const GUARDS: [Protection; 2] = [Protection::Mprotect, Protection::Mpk];

/// A protection mode's medians per operation (`Ok(None)`: not run), or why it is
/// unavailable here.
type Guarded = Result<Option<Vec<OpCost>>, String>;

/// Targets of the fio jobs, in table order.
const TARGETS: [&str; 3] = ["ferrite-fs (FUSE)", "tmpfs", "ext4 (loop)"];

/// Measures everything and reports it.
pub fn run(options: &EvalOptions, bar: &ProgressBar) -> anyhow::Result<Section> {
    let quick = options.quick;
    let runs = if quick { 3 } else { 5 };
    let settings = if quick {
        Settings::QUICK
    } else {
        Settings::DEFAULT
    };
    let fio_settings = if quick {
        FioSettings::QUICK
    } else {
        FioSettings::DEFAULT
    };
    let fio_jobs = jobs(quick);
    bar.set_length((runs * (2 + GUARDS.len()) + fio_jobs.len() * TARGETS.len()) as u64);
    let step = |what: &str| {
        bar.set_message(what.to_owned());
        bar.inc(1);
    };
    let dir = &options.pool_dir;
    let kernel = kernel_runs(dir, &settings, runs, &step)?;
    let library = library_runs(dir, Protection::None, &settings, runs, &step)
        .map_err(anyhow::Error::msg)?
        .context("the unprotected library run")?;
    let mut guarded = Vec::new();
    for guard in GUARDS {
        guarded.push((guard, library_runs(dir, guard, &settings, runs, &step)));
    }
    let mut notes = Vec::new();
    let fio = fio_matrix(dir, &fio_jobs, &fio_settings, &step, &mut notes);
    let mut section = empty_section(ID, TITLE);
    section.summary = summary(&kernel, &library, &guarded, &fio, &notes, runs, quick);
    section.tables = vec![
        latency_table(&kernel, &library, runs),
        journal_table(&library),
        protection_table(&library, &guarded),
    ];
    if !fio.is_empty() {
        section.tables.push(fio_table(&fio_jobs, &fio, true));
        section.tables.push(fio_table(&fio_jobs, &fio, false));
    }
    section.plots = vec![latency_plot(&kernel, &library)?];
    if !fio.is_empty() {
        section.plots.push(fio_plot(&fio_jobs, &fio)?);
    }
    section.json = json!({
        "settings": settings,
        "runs": runs,
        "kernel_tmpfs": kernel,
        "library": library,
        "protection": guarded.iter().map(|(g, r)| json!({
            "mode": g.name(),
            "result": match r { Ok(Some(c)) => json!(c), Ok(None) => json!(null), Err(e) => json!(e) },
        })).collect::<Vec<_>>(),
        "fio_settings": fio_settings,
        "fio": fio,
        "notes": notes,
    });
    Ok(section)
}

fn kernel_runs(
    dir: &Path,
    settings: &Settings,
    runs: usize,
    step: &dyn Fn(&str),
) -> anyhow::Result<Vec<OpCost>> {
    let mut results = Vec::new();
    for _ in 0..runs {
        step("tmpfs system calls");
        let scratch = tempfile_dir(dir)?;
        results.push(bench::kernel_run(scratch.path(), settings).context("tmpfs run")?);
    }
    Ok(bench::medians(&results))
}

fn tempfile_dir(dir: &Path) -> anyhow::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("ferrite-eval-pmfs-")
        .tempdir_in(dir)
        .with_context(|| format!("a scratch directory in {}", dir.display()))
}

/// Medians of `runs` library runs on a fresh pool with `guard`; `Ok(None)` with the reason
/// logged when the protection is unavailable here.
fn library_runs(
    dir: &Path,
    guard: Protection,
    settings: &Settings,
    runs: usize,
    step: &dyn Fn(&str),
) -> Guarded {
    let path = dir.join(format!(
        "ferrite-eval-pmfs-{}-{}.pool",
        guard.name(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let size = settings.file_bytes * 2 + (64 << 20);
    let pool = Pool::create(&path, &fs::pool_options(size)).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&path);
    if let Err(error) = pool.pm().protect(guard) {
        for _ in 0..runs {
            step("library (protection unavailable)");
        }
        return Err(error.to_string());
    }
    let fs = Fs::mkfs(pool, &MkfsOptions::default(), MountOptions::default())
        .map_err(|e| e.to_string())?;
    let mut results = Vec::new();
    for _ in 0..runs {
        step(&format!("library, protection {}", guard.name()));
        results.push(bench::library_run(&fs, settings));
    }
    fs.unmount().map_err(|e| e.to_string())?;
    Ok(Some(bench::medians(&results)))
}

/// Runs every job on every target that can be set up; a target that cannot is noted.
fn fio_matrix(
    dir: &Path,
    fio_jobs: &[fsmount::bench::FioJob],
    settings: &FioSettings,
    step: &dyn Fn(&str),
    notes: &mut Vec<String>,
) -> Vec<FioResult> {
    let skip_all = |notes: &mut Vec<String>, why: String| {
        for _ in 0..fio_jobs.len() * TARGETS.len() {
            step("fio skipped");
        }
        notes.push(why);
    };
    let Some(fio) = fio_path() else {
        skip_all(
            notes,
            "fio skipped: fio is not installed (Debian package fio)".into(),
        );
        return Vec::new();
    };
    let size = settings.file_bytes * 4 + (128 << 20);
    let mut results = Vec::new();
    for target in TARGETS {
        let set_up: Result<(Box<dyn std::any::Any>, std::path::PathBuf), String> = match target {
            "tmpfs" => tempfile_dir(dir)
                .map(|t| {
                    let path = t.path().to_owned();
                    (Box::new(t) as Box<dyn std::any::Any>, path)
                })
                .map_err(|e| e.to_string()),
            "ext4 (loop)" => Ext4Loop::new(dir, size).map(|t| {
                let path = t.dir.clone();
                (Box::new(t) as Box<dyn std::any::Any>, path)
            }),
            _ => FuseTarget::new(dir, size, Protection::None).map(|t| {
                let path = t.dir.clone();
                (Box::new(t) as Box<dyn std::any::Any>, path)
            }),
        };
        let (guard, path) = match set_up {
            Ok(found) => found,
            Err(why) => {
                for _ in fio_jobs {
                    step("fio target skipped");
                }
                notes.push(format!("fio on {target} skipped: {why}"));
                continue;
            }
        };
        for &job in fio_jobs {
            step(&format!("fio {} {} on {target}", job.kind, job.bs));
            match run_fio(&fio, &path, target, job, settings) {
                Ok(result) => results.push(result),
                Err(why) => notes.push(why),
            }
        }
        drop(guard);
    }
    results
}

fn find<'a>(costs: &'a [OpCost], op: &str) -> Option<&'a OpCost> {
    costs.iter().find(|c| c.op == op)
}

fn summary(
    kernel: &[OpCost],
    library: &[OpCost],
    guarded: &[(Protection, Guarded)],
    fio: &[FioResult],
    notes: &[String],
    runs: usize,
    quick: bool,
) -> Vec<String> {
    let mut lines = Vec::new();
    let ratio =
        |op: &str| -> Option<(f64, f64)> { Some((find(library, op)?.ns, find(kernel, op)?.ns)) };
    let goal: Vec<String> = ["read 4K", "write 4K"]
        .iter()
        .filter_map(|&op| {
            let (lib, tmpfs) = ratio(op)?;
            Some(format!(
                "{op} {} ns vs {} ns ({:.2}x, goal {})",
                ns(lib),
                ns(tmpfs),
                lib / tmpfs,
                if lib <= tmpfs { "met" } else { "NOT met" }
            ))
        })
        .collect();
    lines.push(format!(
        "Goal \"library API at least as fast as tmpfs system calls for 4 KiB reads and writes, \
         one thread\": {}.",
        goal.join("; ")
    ));
    let meta: Vec<String> = ["create", "mkdir", "rename", "unlink"]
        .iter()
        .filter_map(|&op| {
            let (lib, tmpfs) = ratio(op)?;
            Some(format!("{op} {:.2}x", lib / tmpfs))
        })
        .collect();
    lines.push(format!(
        "Namespace operations, library latency / tmpfs latency: {}.",
        meta.join(", ")
    ));
    if let Some(create) = find(library, "create") {
        lines.push(format!(
            "A create logs {:.1} journal entries ({:.0} bytes) and costs {:.1} fences; every \
             metadata operation is one undo transaction of 3 fences.",
            create.journal_entries,
            create.journal_entries * 64.0,
            create.fences
        ));
    }
    for (guard, result) in guarded {
        lines.push(match result {
            Ok(Some(costs)) => {
                let slow: Vec<String> = ["create", "write 4K", "read 4K"]
                    .iter()
                    .filter_map(|&op| {
                        Some(format!(
                            "{op} {:.1}x",
                            find(costs, op)?.ns / find(library, op)?.ns
                        ))
                    })
                    .collect();
                format!(
                    "Write protection by {}: {} the unprotected latency.",
                    guard.name(),
                    slow.join(", ")
                )
            }
            Ok(None) => format!("Write protection by {}: not run.", guard.name()),
            Err(why) => format!("Write protection by {}: unavailable ({why}).", guard.name()),
        });
    }
    if let (Some(fuse), Some(tmpfs)) = (
        fio.iter()
            .find(|r| r.target == TARGETS[0] && r.job.kind == "randwrite" && r.job.bs == 4096),
        fio.iter()
            .find(|r| r.target == "tmpfs" && r.job.kind == "randwrite" && r.job.bs == 4096),
    ) {
        lines.push(format!(
            "fio 4 KiB random writes: {:.0} IOPS on the FUSE mount vs {:.0} on tmpfs ({:.2}x): \
             every write through FUSE is a kernel round trip to the server.",
            fuse.iops,
            tmpfs.iops,
            fuse.iops / tmpfs.iops
        ));
    }
    lines.extend(notes.iter().cloned());
    lines.push(format!(
        "Latencies are medians of {runs} runs on a shared, loaded machine: indicative; rerun \
         with `ferrite eval --only pmfs` (or `cargo run --release -p fs --example fs_latency`) \
         on a quiet machine."
    ));
    if quick {
        lines.push("Quick run (small sizes): numbers are indicative only.".to_owned());
    }
    lines
}

fn latency_table(kernel: &[OpCost], library: &[OpCost], runs: usize) -> Table {
    let mut table = Table::new(
        format!(
            "Latency per operation, one thread, median of {runs} runs (ns): library API on a \
             /dev/shm pool vs system calls on tmpfs"
        ),
        &["operation", "tmpfs", "library", "library / tmpfs"],
    );
    for op in OPS {
        if let (Some(k), Some(l)) = (find(kernel, op), find(library, op)) {
            table.push(vec![
                op.to_owned(),
                ns(k.ns),
                ns(l.ns),
                format!("{:.2}", l.ns / k.ns),
            ]);
        }
    }
    table
}

fn journal_table(library: &[OpCost]) -> Table {
    let mut table = Table::new(
        "Journal and PM traffic per library operation (medians)",
        &[
            "operation",
            "journal entries",
            "journal bytes",
            "bytes stored",
            "bytes NT",
            "lines flushed",
            "fences",
        ],
    );
    for c in library {
        table.push(vec![
            c.op.to_owned(),
            format!("{:.2}", c.journal_entries),
            format!("{:.0}", c.journal_entries * 64.0),
            format!("{:.0}", c.stored_bytes),
            format!("{:.0}", c.nt_bytes),
            format!("{:.1}", c.flushed_lines),
            format!("{:.2}", c.fences),
        ]);
    }
    table
}

fn protection_table(library: &[OpCost], guarded: &[(Protection, Guarded)]) -> Table {
    let mut columns = vec!["operation".to_owned(), "none (ns)".to_owned()];
    for (guard, _) in guarded {
        columns.push(format!("{} (ns)", guard.name()));
        columns.push(format!("{} / none", guard.name()));
    }
    let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut table = Table::new(
        "Cost of write protection: library latency per operation",
        &refs,
    );
    for c in library {
        let mut row = vec![c.op.to_owned(), ns(c.ns)];
        for (_, result) in guarded {
            match result {
                Ok(Some(costs)) => match find(costs, c.op) {
                    Some(g) => {
                        row.push(ns(g.ns));
                        row.push(format!("{:.2}", g.ns / c.ns));
                    }
                    None => row.extend(["-".to_owned(), "-".to_owned()]),
                },
                _ => row.extend(["unavailable".to_owned(), "-".to_owned()]),
            }
        }
        table.push(row);
    }
    table
}

fn fio_table(fio_jobs: &[fsmount::bench::FioJob], fio: &[FioResult], iops: bool) -> Table {
    let title = if iops {
        "fio IOPS (psync, one job, buffered): FUSE mount vs tmpfs vs ext4 on a loop device"
    } else {
        "fio mean completion latency (µs)"
    };
    let mut columns = vec!["job".to_owned(), "block".to_owned()];
    columns.extend(TARGETS.iter().map(|t| (*t).to_owned()));
    columns.push("FUSE / tmpfs".to_owned());
    let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut table = Table::new(title, &refs);
    for job in fio_jobs {
        let value = |target: &str| {
            fio.iter()
                .find(|r| r.target == target && r.job == *job)
                .map(|r| if iops { r.iops } else { r.mean_ns / 1000.0 })
        };
        let mut row = vec![job.kind.to_owned(), job.bs.to_string()];
        for target in TARGETS {
            row.push(value(target).map_or("skipped".to_owned(), |v| format!("{v:.1}")));
        }
        row.push(match (value(TARGETS[0]), value("tmpfs")) {
            (Some(a), Some(b)) => format!("{:.2}", a / b),
            _ => "-".to_owned(),
        });
        table.push(row);
    }
    table
}

fn latency_plot(kernel: &[OpCost], library: &[OpCost]) -> anyhow::Result<Plot> {
    let categories: Vec<String> = OPS.iter().map(|op| (*op).to_owned()).collect();
    let series = |name: &str, costs: &[OpCost]| BarSeries {
        name: name.to_owned(),
        values: OPS.iter().map(|op| find(costs, op).map(|c| c.ns)).collect(),
    };
    let title = "Latency per operation: library vs tmpfs system calls";
    Ok(Plot {
        id: "latency".to_owned(),
        title: format!("{title} (median ns, one thread)"),
        svg: grouped_bar_chart(
            title,
            "ns per operation (median)",
            &categories,
            &[
                series("tmpfs", kernel),
                series("ferrite-fs library", library),
            ],
        )?,
    })
}

fn fio_plot(fio_jobs: &[fsmount::bench::FioJob], fio: &[FioResult]) -> anyhow::Result<Plot> {
    let categories: Vec<String> = fio_jobs
        .iter()
        .map(|j| format!("{} {}", j.kind, j.bs))
        .collect();
    let series: Vec<BarSeries> = TARGETS
        .iter()
        .map(|&target| BarSeries {
            name: target.to_owned(),
            values: fio_jobs
                .iter()
                .map(|job| {
                    fio.iter()
                        .find(|r| r.target == target && r.job == *job)
                        .map(|r| r.iops / 1000.0)
                })
                .collect(),
        })
        .collect();
    let title = "fio: thousands of operations per second";
    Ok(Plot {
        id: "fio".to_owned(),
        title: format!("{title}, by job and block size"),
        svg: grouped_bar_chart(title, "kIOPS", &categories, &series)?,
    })
}
