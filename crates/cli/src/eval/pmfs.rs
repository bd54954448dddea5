//! Section "pmfs": the PMFS (EuroSys'14) file system (`crates/pmfs`, `crates/fsmount`)
//! against the kernel, rendered from `bench::pmfs`'s typed results: per-operation latency of
//! the library API against the same system calls on tmpfs (one thread, medians of several
//! runs), the journal bytes and PM traffic of each operation, the cost of write protection
//! (mprotect windows; MPK where the CPU has it), and fio jobs on the FUSE mount against tmpfs
//! and ext4 on a loop device.

use super::{EvalOptions, empty_section, ns};
use crate::plot::{BarSeries, grouped_bar_chart};
use crate::report::{ClaimVerdict, Headline, Plot, Section, Table};
use anyhow::Context;
use bench::pmfs::fio::{FioJob, FioKind, FioNumbers};
use bench::pmfs::latency::{Costs, Op};
use bench::pmfs::targets::FioTarget;
use bench::pmfs::{Guarded, PmfsResults, Settings};
use indicatif::ProgressBar;
use serde_json::json;

/// Section id.
pub const ID: &str = "pmfs";
/// Section heading.
pub const TITLE: &str = "PMFS (EuroSys'14): library and FUSE mount vs the kernel";

/// The 4 KiB jobs the headline compares.
const RANDWRITE_4K: FioJob = FioJob {
    kind: FioKind::RandWrite,
    bs: 4096,
};

/// Measures (through `bench::pmfs`) and reports.
pub fn run(options: &EvalOptions, bar: &ProgressBar) -> anyhow::Result<Section> {
    let settings = if options.quick {
        Settings::QUICK
    } else {
        Settings::DEFAULT
    };
    bar.set_length(settings.steps() as u64);
    let progress = |what: &str| {
        bar.set_message(what.to_owned());
        bar.inc(1);
    };
    let results = bench::pmfs::run(&options.pool_dir, &settings, &progress)
        .with_context(|| format!("PMFS measurements in {}", options.pool_dir.display()))?;
    section_of(&results)
}

fn section_of(results: &PmfsResults) -> anyhow::Result<Section> {
    let jobs = results.settings.fio_jobs();
    let mut section = empty_section(ID, TITLE);
    section.headlines = headlines(results);
    section.summary = summary(results);
    section.tables = vec![
        latency_table(results),
        journal_table(&results.library),
        protection_table(&results.library, &results.protection),
    ];
    if !results.fio.is_empty() {
        section.tables.push(fio_table(results, &jobs, true));
        section.tables.push(fio_table(results, &jobs, false));
    }
    section.plots = vec![latency_plot(results)?];
    if !results.fio.is_empty() {
        section.plots.push(fio_plot(results, &jobs)?);
    }
    section.json = json!(results);
    Ok(section)
}

/// Library latency over tmpfs latency for `op`, with both.
fn library_ratio(results: &PmfsResults, op: Op) -> Option<(f64, f64)> {
    let lib = results.library.get(op)?.ns;
    let tmpfs = results.kernel_tmpfs.get(op)?.ns;
    Some((lib, tmpfs))
}

/// The paper's claim against the mount, and the library's goal against tmpfs.
fn headlines(results: &PmfsResults) -> Vec<Headline> {
    let jobs = results.settings.fio_jobs();
    let best = jobs
        .iter()
        .filter_map(|&job| {
            let fuse = results.fio(FioTarget::Fuse, job)?;
            let ext4 = results.fio(FioTarget::Ext4Loop, job)?;
            Some((job, fuse.iops / ext4.iops))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let paper = match best {
        Some((job, ratio)) => Headline::new(
            "Up to an order of magnitude faster than ext4 on a PM block device (PMFS, \
             EuroSys'14)",
            format!(
                "FUSE mount vs ext4 on a loop device in /dev/shm: best fio job {} {} at \
                 {ratio:.2}x the IOPS",
                job.kind.label(),
                job.bs
            ),
            ClaimVerdict::from_holds(ratio >= 10.0),
        ),
        None => Headline::new(
            "Up to an order of magnitude faster than ext4 on a PM block device (PMFS, \
             EuroSys'14)",
            "fio on the mount or on ext4 (loop) did not run here",
            ClaimVerdict::NotMeasured,
        ),
    };
    let io: Vec<(Op, f64, f64)> = [Op::Read4K, Op::Write4K]
        .into_iter()
        .filter_map(|op| library_ratio(results, op).map(|(l, t)| (op, l, t)))
        .collect();
    let library = Headline::new(
        "Goal: the library API at least as fast as tmpfs system calls for 4 KiB reads and \
         writes, one thread",
        io.iter()
            .map(|(op, l, t)| format!("{} {:.2}x tmpfs's time", op.label(), l / t))
            .collect::<Vec<_>>()
            .join(", "),
        if io.len() == 2 {
            ClaimVerdict::from_holds(io.iter().all(|(_, l, t)| l <= t))
        } else {
            ClaimVerdict::NotMeasured
        },
    );
    vec![paper, library]
}

fn summary(results: &PmfsResults) -> Vec<String> {
    let (runs, quick) = (results.settings.runs, results.settings.quick);
    let library = &results.library;
    let mut lines = Vec::new();
    let goal: Vec<String> = [Op::Read4K, Op::Write4K]
        .iter()
        .filter_map(|&op| {
            let (lib, tmpfs) = library_ratio(results, op)?;
            Some(format!(
                "{} {} ns vs {} ns ({:.2}x, goal {})",
                op.label(),
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
    let meta: Vec<String> = [Op::Create, Op::Mkdir, Op::Rename, Op::Unlink]
        .iter()
        .filter_map(|&op| {
            let (lib, tmpfs) = library_ratio(results, op)?;
            Some(format!("{} {:.2}x", op.label(), lib / tmpfs))
        })
        .collect();
    lines.push(format!(
        "Namespace operations, library latency / tmpfs latency: {}.",
        meta.join(", ")
    ));
    if let Some(create) = library.get(Op::Create) {
        lines.push(format!(
            "A create logs {:.1} journal entries ({:.0} bytes) and costs {:.1} fences; every \
             metadata operation is one undo transaction of 3 fences.",
            create.journal_entries,
            create.journal_entries * 64.0,
            create.fences
        ));
    }
    for guarded in &results.protection {
        lines.push(protection_line(library, guarded));
    }
    let fuse = results.fio(FioTarget::Fuse, RANDWRITE_4K);
    let tmpfs = results.fio(FioTarget::Tmpfs, RANDWRITE_4K);
    if let (Some(fuse), Some(tmpfs)) = (fuse, tmpfs) {
        lines.push(format!(
            "fio 4 KiB random writes: {:.0} IOPS on the FUSE mount vs {:.0} on tmpfs ({:.2}x): \
             every write through FUSE is a kernel round trip to the server.",
            fuse.iops,
            tmpfs.iops,
            fuse.iops / tmpfs.iops
        ));
    }
    lines.extend(results.notes.iter().cloned());
    lines.push(format!(
        "Latencies are medians of {runs} runs on a shared, loaded machine: indicative; rerun \
         with `ferrite eval --only pmfs` on a quiet machine."
    ));
    if quick {
        lines.push("Quick run (small sizes): numbers are indicative only.".to_owned());
    }
    lines
}

fn protection_line(library: &Costs, guarded: &Guarded) -> String {
    let name = guarded.mode.name();
    match &guarded.result {
        Ok(costs) => {
            let slow: Vec<String> = [Op::Create, Op::Write4K, Op::Read4K]
                .iter()
                .filter_map(|&op| {
                    let ratio = costs.get(op)?.ns / library.get(op)?.ns;
                    Some(format!("{} {ratio:.1}x", op.label()))
                })
                .collect();
            format!(
                "Write protection by {name}: {} the unprotected latency.",
                slow.join(", ")
            )
        }
        Err(why) => format!("Write protection by {name}: unavailable ({why})."),
    }
}

fn latency_table(results: &PmfsResults) -> Table {
    let mut table = Table::new(
        format!(
            "Latency per operation, one thread, median of {} runs (ns): library API on a \
             /dev/shm pool vs system calls on tmpfs",
            results.settings.runs
        ),
        &["operation", "tmpfs", "library", "library / tmpfs"],
    );
    for op in Op::ALL {
        if let Some((lib, tmpfs)) = library_ratio(results, op) {
            table.push(vec![
                op.label().to_owned(),
                ns(tmpfs),
                ns(lib),
                format!("{:.2}", lib / tmpfs),
            ]);
        }
    }
    table
}

fn journal_table(library: &Costs) -> Table {
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
    for c in &library.0 {
        table.push(vec![
            c.op.label().to_owned(),
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

fn protection_table(library: &Costs, guarded: &[Guarded]) -> Table {
    let mut columns = vec!["operation".to_owned(), "none (ns)".to_owned()];
    for g in guarded {
        columns.push(format!("{} (ns)", g.mode.name()));
        columns.push(format!("{} / none", g.mode.name()));
    }
    let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut table = Table::new(
        "Cost of write protection: library latency per operation",
        &refs,
    );
    for c in &library.0 {
        let mut row = vec![c.op.label().to_owned(), ns(c.ns)];
        for g in guarded {
            match g.result.as_ref().map(|costs| costs.get(c.op)) {
                Ok(Some(cost)) => {
                    row.push(ns(cost.ns));
                    row.push(format!("{:.2}", cost.ns / c.ns));
                }
                Ok(None) => row.extend(["-".to_owned(), "-".to_owned()]),
                Err(_) => row.extend(["unavailable".to_owned(), "-".to_owned()]),
            }
        }
        table.push(row);
    }
    table
}

fn fio_table(results: &PmfsResults, jobs: &[FioJob], iops: bool) -> Table {
    let title = if iops {
        "fio IOPS (psync, one job, buffered): FUSE mount vs tmpfs vs ext4 on a loop device"
    } else {
        "fio mean completion latency (µs)"
    };
    let value = |n: &FioNumbers| if iops { n.iops } else { n.mean_ns / 1000.0 };
    let mut columns = vec!["job".to_owned(), "block".to_owned()];
    columns.extend(FioTarget::ALL.iter().map(|t| t.label().to_owned()));
    columns.push("FUSE / tmpfs".to_owned());
    let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut table = Table::new(title, &refs);
    for &job in jobs {
        let of = |target| results.fio(target, job).map(value);
        let mut row = vec![job.kind.label().to_owned(), job.bs.to_string()];
        for target in FioTarget::ALL {
            row.push(of(target).map_or("skipped".to_owned(), |v| format!("{v:.1}")));
        }
        row.push(match (of(FioTarget::Fuse), of(FioTarget::Tmpfs)) {
            (Some(a), Some(b)) => format!("{:.2}", a / b),
            _ => "-".to_owned(),
        });
        table.push(row);
    }
    table
}

fn latency_plot(results: &PmfsResults) -> anyhow::Result<Plot> {
    let categories: Vec<String> = Op::ALL.iter().map(|op| op.label().to_owned()).collect();
    let series = |name: &str, costs: &Costs| BarSeries {
        name: name.to_owned(),
        values: Op::ALL
            .iter()
            .map(|&op| costs.get(op).map(|c| c.ns))
            .collect(),
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
                series("tmpfs", &results.kernel_tmpfs),
                series("ferrite-fs library", &results.library),
            ],
        )?,
    })
}

fn fio_plot(results: &PmfsResults, jobs: &[FioJob]) -> anyhow::Result<Plot> {
    let categories: Vec<String> = jobs
        .iter()
        .map(|j| format!("{} {}", j.kind.label(), j.bs))
        .collect();
    let series: Vec<BarSeries> = FioTarget::ALL
        .iter()
        .map(|&target| BarSeries {
            name: target.label().to_owned(),
            values: jobs
                .iter()
                .map(|&job| results.fio(target, job).map(|n| n.iops / 1000.0))
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
