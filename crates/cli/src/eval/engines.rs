//! Section "engines": Ferrite's redo, undo and MVCC engines against PMDK's libpmemobj and
//! the ideal redo reference, on Silo's micro-benchmarks, TimeStone's structures and YCSB /
//! TPC-C, every engine measured in the same run by [`bench::engines`].
//!
//! The summary states the project's performance goals ([`super::engine_goals`]) and whether
//! this run's numbers meet them. The section only measures (verdict Info): a goal missed on
//! this machine is a finding, not a failure. It fails only when a benchmark run itself fails
//! (an operation error or a broken invariant after the run).

use super::engine_goals::{self, Goal};
use super::{EvalOptions, empty_section};
use crate::cells;
use crate::cells::threads_text;
use crate::plot::{BarSeries, grouped_bar_chart, grouped_ratio_chart};
use crate::report::{Plot, Section, Table, Verdict};
use bench::Progress;
use bench::choice::{EngineChoice, WorkloadChoice};
use bench::engines::{
    self, EngineResults, EngineRun as Run, FLOORS, Family, IDEAL, MVCC, PEER_ENGINES, PMDK, Plan,
    RAW, SEED, SILO_ENGINES,
};
use bench::runner::Measurement;
use indicatif::ProgressBar;
use serde_json::json;

/// Section id.
pub const ID: &str = "engines";
/// Section heading.
pub const TITLE: &str = "Transaction engines vs PMDK and the ideal reference";

/// Runs the matrix (the quick one with `--quick`) and reports it.
pub fn run(options: &EvalOptions, bar: &ProgressBar) -> anyhow::Result<Section> {
    let plan = if options.quick {
        Plan::QUICK
    } else {
        Plan::FULL
    };
    let cases = plan.cases(&options.pool_dir);
    bar.set_length(cases.len() as u64);
    let results = engines::run(&cases, &|progress| match progress {
        Progress::Started(case) => bar.set_message(format!(
            "{}, {} on {}",
            case.config.label(),
            threads_text(case.config.threads),
            case.spec.engine
        )),
        Progress::Finished(_) => bar.inc(1),
    });
    section_of(&plan, &results, options.quick)
}

fn section_of(plan: &Plan, outcomes: &EngineResults, quick: bool) -> anyhow::Result<Section> {
    let runs = &outcomes.runs;
    let goals = engine_goals::goals(outcomes);
    let mut section = empty_section(ID, TITLE);
    // Quick sizes cannot judge the goals: the numbers are shown, without a verdict (in the
    // headlines, the summary and the JSON alike).
    section.headlines = goals.iter().map(|goal| goal.headline(quick)).collect();
    section.verdict = if outcomes.failures.is_empty() {
        Verdict::Info
    } else {
        Verdict::Fail
    };
    section.summary = summary(plan, outcomes, &goals, quick);
    let (swept, compared): (Vec<Run>, Vec<Run>) = runs
        .iter()
        .cloned()
        .partition(|run| matches!(run.family, Family::PmCost { .. }));
    section.tables = groups(&compared)
        .into_iter()
        .map(|group| group_table(&group))
        .collect();
    if !swept.is_empty() {
        section.tables.push(pm_cost_table(&swept));
    }
    section.plots = plots(plan, &compared)?;
    if let Some(plot) = pm_cost_plot(&swept)? {
        section.plots.push(plot);
    }
    section.json = json!({
        "plan": plan,
        "seed": SEED,
        "elapsed_s": outcomes.seconds,
        "pmdk_skipped": outcomes.pmdk_skipped,
        "errors": failure_lines(outcomes),
        "goals": goals.iter().map(|goal| goal.to_json(quick)).collect::<Vec<_>>(),
        "runs": runs,
    });
    Ok(section)
}

/// What the emulated-PM-cost table measures, and why it is there.
fn pm_cost_note(plan: &Plan) -> String {
    let costs: Vec<String> = plan.pm_cost_line_ns.iter().map(u32::to_string).collect();
    format!(
        "Emulated PM cost (last table): this machine's pools are DRAM, where a write-back \
         costs what a store does, so the MVCC engine's argument (TimeStone: coalesce writes \
         in a DRAM version log and write PM less than a logging engine) shows in its bytes \
         only. The sweep spins {} ns per cache line Ferrite's pools write back (flushed or \
         streamed; `ferrite bench --pm-line-ns`, as the seeds' DRAM-based emulators did) on \
         the hot-key upserts and TimeStone's hash at 80 % updates, mvcc, redo and undo \
         measured together at each cost (PMDK writes PM through its own library, which the \
         emulation cannot charge). Goals above are judged at no added cost only.",
        costs.join(", ")
    )
}

/// One row per (workload, cost) of the sweep: each engine's rate, mvcc's ratios and the
/// lines each engine wrote back per operation (what the cost is charged on).
fn pm_cost_table(runs: &[Run]) -> Table {
    const ENGINES: [EngineChoice; 3] = bench::engines::PM_COST_ENGINES;
    let mut table = Table::new(
        "Emulated PM cost: the MVCC engine against redo and undo, 1 thread, \
         extra nanoseconds per cache line written back"
            .to_owned(),
        &[
            "workload",
            "ns/line",
            "mvcc Kops/s",
            "redo Kops/s",
            "undo Kops/s",
            "mvcc ÷ redo",
            "mvcc ÷ undo",
            "lines/op mvcc · redo · undo",
        ],
    );
    for group in groups(runs) {
        let Family::PmCost { line_ns } = group[0].family else {
            continue;
        };
        let of = |engine| group.iter().find(|run| run.engine == engine);
        let rate = |engine| of(engine).map(|run| run.throughput());
        let [mvcc, redo, undo] = ENGINES.map(rate);
        let lines: Vec<String> = ENGINES
            .iter()
            .map(|&engine| {
                of(engine)
                    .map(|run| format!("{:.1}", lines_written_back_per_op(&run.measurement)))
                    .unwrap_or_else(|| "n/a".to_owned())
            })
            .collect();
        let workload = match group[0].workload {
            WorkloadChoice::Hash => format!(
                "hot-key upserts: {} keys, {} B values",
                group[0].params.keys, group[0].params.value_size
            ),
            _ => format!(
                "{} {} %: {} keys",
                group[0].workload.name(),
                group[0].params.update_percent,
                group[0].params.keys
            ),
        };
        table.push(vec![
            workload,
            line_ns.to_string(),
            kops_or_na(mvcc),
            kops_or_na(redo),
            kops_or_na(undo),
            cells::optional(ratio_of(mvcc, redo)),
            cells::optional(ratio_of(mvcc, undo)),
            lines.join(" · "),
        ]);
    }
    table
}

fn kops_or_na(rate: Option<f64>) -> String {
    rate.map_or_else(|| "n/a".to_owned(), cells::kops)
}

fn ratio_of(value: Option<f64>, base: Option<f64>) -> Option<f64> {
    value.and_then(|value| cells::ratio(value, base))
}

/// Cache lines written back per operation, flushed or streamed: what the emulation
/// charges.
fn lines_written_back_per_op(m: &Measurement) -> f64 {
    m.lines_written_back() as f64 / m.ops.max(1) as f64
}

/// mvcc ÷ redo and mvcc ÷ undo at each emulated cost, one series per workload.
fn pm_cost_plot(runs: &[Run]) -> anyhow::Result<Option<Plot>> {
    let mut costs: Vec<u32> = Vec::new();
    let mut workloads: Vec<(WorkloadChoice, String)> = Vec::new();
    for run in runs {
        if let Family::PmCost { line_ns } = run.family
            && !costs.contains(&line_ns)
        {
            costs.push(line_ns);
        }
        if !workloads.iter().any(|(w, _)| *w == run.workload) {
            let name = match run.workload {
                WorkloadChoice::Hash => "hot-key upserts".to_owned(),
                w => format!("{} {}%", w.name(), run.params.update_percent),
            };
            workloads.push((run.workload, name));
        }
    }
    if costs.is_empty() {
        return Ok(None);
    }
    let rate = |workload, line_ns, engine| {
        runs.iter()
            .find(|r| {
                r.workload == workload
                    && r.family == Family::PmCost { line_ns }
                    && r.engine == engine
            })
            .map(Run::throughput)
    };
    let mut bars = Vec::new();
    for (workload, name) in &workloads {
        for (base, base_name) in [
            (bench::engines::REDO, "redo"),
            (bench::engines::UNDO, "undo"),
        ] {
            let values = costs
                .iter()
                .map(|&ns| ratio_of(rate(*workload, ns, MVCC), rate(*workload, ns, base)))
                .collect();
            bars.push(BarSeries {
                name: format!("{name}: mvcc ÷ {base_name}"),
                values,
            });
        }
    }
    let labels: Vec<String> = costs.iter().map(|ns| format!("+{ns} ns/line")).collect();
    let title = "MVCC against the logging engines under emulated PM cost";
    Ok(Some(Plot {
        id: "pm-cost".to_owned(),
        title: format!(
            "{title}: mvcc's median throughput over redo's and undo's, by extra nanoseconds \
             per cache line written back (1.0: equal)"
        ),
        svg: grouped_ratio_chart(title, "mvcc ÷ engine", &labels, &bars)?,
    }))
}

/// "hash (1 thread) on redo: operation failed: …" for each failed configuration.
fn failure_lines(outcomes: &EngineResults) -> Vec<String> {
    outcomes
        .failures
        .iter()
        .map(|failure| {
            format!(
                "{} ({}) on {}: {}",
                failure.config.label(),
                threads_text(failure.config.threads),
                failure.engine,
                failure.error
            )
        })
        .collect()
}

fn summary(plan: &Plan, outcomes: &EngineResults, goals: &[Goal], quick: bool) -> Vec<String> {
    let count = |family| outcomes.of_family(family).count();
    let matching =
        |family: fn(&Family) -> bool| outcomes.runs.iter().filter(|r| family(&r.family)).count();
    let hot = matching(|f| matches!(f, Family::HotKey { .. }));
    let swept = matching(|f| matches!(f, Family::PmCost { .. }));
    let mut lines = vec![format!(
        "Measured {} engine runs over {} configurations (runs: {} Silo, {} TimeStone, {} \
         YCSB / TPC-C, {hot} hot-key, {swept} with emulated PM cost) in {:.0} s: \
         {} operations per timed run ({} on the list) after {:.0} % as warm-up, median of {} \
         run(s); the engines of a table were measured together, their timed runs taken in \
         turn (every engine's first run, then every engine's second, …).",
        outcomes.runs.len(),
        groups(&outcomes.runs).len(),
        count(Family::Silo),
        count(Family::TimeStone),
        count(Family::Ycsb),
        outcomes.seconds,
        plan.ops,
        plan.list_ops,
        plan.warmup_share * 100.0,
        plan.runs
    )];
    lines.push(
        "Write amplification, two definitions: \"WA (ours)\", every PM byte stored \
         (logs, data, allocator and engine metadata) per distinct byte the transactions \
         wrote, the same for every engine; \"WA TimeStone\" is TimeStone's (ASPLOS 2020), \
         OLog + CLog + write-back bytes (+ the bytes of newly allocated objects, first \
         number) per byte copied into the version log (its artifact's published counters \
         leave new objects out: second number). Redo and undo keep no version log: their \
         single number is the analogue, log and in-place bytes per byte written (no write \
         is coalesced across transactions); PMDK stores outside the seam (n/a). Formula: \
         docs/mvcc-format.md §11."
            .to_owned(),
    );
    if swept > 0 {
        lines.push(pm_cost_note(plan));
    }
    if quick {
        lines.push(
            "Goals at quick sizes are not judged (tiny structures, one short run): each goal's \
             measurement follows, without a verdict."
                .to_owned(),
        );
        lines.extend(goals.iter().map(Goal::indicative_line));
    } else {
        lines.extend(goals.iter().map(Goal::line));
    }
    lines.extend(engine_goals::scaling_line(outcomes));
    if let Some(error) = &outcomes.pmdk_skipped {
        lines.push(format!(
            "PMDK peer skipped: {error}. Its columns and the goals against it are n/a."
        ));
    }
    lines.extend(
        failure_lines(outcomes)
            .into_iter()
            .map(|error| format!("FAILED: {error}")),
    );
    if quick {
        lines.push(
            "Quick run: tiny structures and one short run per configuration; the numbers are \
             indicative only."
                .to_owned(),
        );
    }
    lines
}

/// The runs grouped by (family, workload, threads), groups in the order they ran.
fn groups(runs: &[Run]) -> Vec<Vec<&Run>> {
    let mut groups: Vec<Vec<&Run>> = Vec::new();
    for run in runs {
        match groups.iter_mut().find(|g| g[0].config() == run.config()) {
            Some(group) => group.push(run),
            None => groups.push(vec![run]),
        }
    }
    groups
}

const COLUMNS: [&str; 13] = [
    "engine",
    "Kops/s median (min–max of the runs)",
    "× pmdk",
    "× ideal",
    "× raw",
    "p50 µs",
    "p99 µs",
    "fences/commit",
    "flushes/commit",
    "PM B/op",
    "WA (ours)",
    "WA (media)",
    "WA TimeStone (new objs / artifact)",
];

fn group_table(group: &[&Run]) -> Table {
    let base = |engine: EngineChoice| {
        group
            .iter()
            .find(|run| run.engine == engine)
            .map(|run| run.throughput())
    };
    let bases = [base(PMDK), base(IDEAL), base(RAW)];
    // The ideal and raw references run on Silo's array and hash only: elsewhere their ratio
    // columns would be n/a from top to bottom, with nothing to say why, so they are left
    // out. PMDK's stays even when it was skipped: the summary says why it is n/a.
    let kept: Vec<usize> = (0..COLUMNS.len())
        .filter(|&column| match COLUMNS[column] {
            "× ideal" => bases[1].is_some(),
            "× raw" => bases[2].is_some(),
            _ => true,
        })
        .collect();
    let columns: Vec<&str> = kept.iter().map(|&column| COLUMNS[column]).collect();
    let mut table = Table::new(group_title(group[0]), &columns);
    for run in group {
        let cells = row(&run.measurement, bases);
        table.push(kept.iter().map(|&column| cells[column].clone()).collect());
    }
    table
}

fn group_title(run: &Run) -> String {
    let p = &run.params;
    let threads = threads_text(run.threads());
    let family = run.family.name();
    match run.workload {
        WorkloadChoice::Array => format!(
            "{family} array: {} elements of {} B, swaps, {threads}",
            p.keys, p.value_size
        ),
        WorkloadChoice::Queue => format!(
            "{family} queue: {} initial items of {} B, enqueue/dequeue, {threads}",
            p.keys, p.value_size
        ),
        _ if matches!(run.family, Family::HotKey { .. }) => format!(
            "{family}: upserts of {} B values over {} keys of the hash map (all updates), \
             uniform, {threads}",
            p.value_size, p.keys
        ),
        WorkloadChoice::Tpcc => format!("TPC-C New-Order: one warehouse per thread, {threads}"),
        WorkloadChoice::Ycsb(mix) => format!(
            "{family} {}: {} records of {} B over the B+tree, {} keys, {threads}",
            run.label,
            p.keys,
            p.value_size,
            mix.distribution()
        ),
        _ => format!(
            "{family} {}: {} keys, {} B values, {} % updates, {threads}",
            run.label, p.keys, p.value_size, p.update_percent
        ),
    }
}

/// A table row, with throughput ratios over PMDK, ideal and the persistent raw reference;
/// the cells are formatted as `ferrite bench` formats them.
fn row(m: &Measurement, [pmdk, ideal, raw]: [Option<f64>; 3]) -> Vec<String> {
    let t = &m.throughput;
    vec![
        m.engine.clone(),
        cells::kops_spread(t),
        cells::optional(cells::ratio(t.median, pmdk)),
        cells::optional(cells::ratio(t.median, ideal)),
        cells::optional(cells::ratio(t.median, raw)),
        cells::micros(m.latency_ns[0]),
        cells::micros(m.latency_ns[1]),
        cells::optional(m.traffic.fences_per_commit),
        cells::optional(m.traffic.flushes_per_commit),
        cells::pm_bytes_per_op(m),
        cells::optional(m.traffic.write_amplification),
        cells::optional(m.traffic.media_write_amplification),
        cells::timestone_amplification(m),
    ]
}

fn plots(plan: &Plan, runs: &[Run]) -> anyhow::Result<Vec<Plot>> {
    let mut plots = Vec::new();
    let silo: Vec<&Run> = runs.iter().filter(|r| r.family == Family::Silo).collect();
    if !silo.is_empty() {
        plots.push(silo_plot(&silo)?);
    }
    let single: Vec<&Run> = runs.iter().filter(|r| r.threads() == 1).collect();
    if single
        .iter()
        .any(|r| r.measurement.traffic.write_amplification.is_some())
    {
        plots.push(amplification_plot(&single)?);
    }
    let timestone: Vec<&Run> = runs
        .iter()
        .filter(|r| r.family == Family::TimeStone)
        .collect();
    if !timestone.is_empty() {
        plots.push(timestone_plot(plan, &timestone)?);
    }
    Ok(plots)
}

/// A plot category: one workload configuration, whatever the engine and threads.
type Category = (Family, WorkloadChoice, u32);

fn category(run: &Run) -> Category {
    let config = run.config();
    (config.family, config.workload, config.update_percent)
}

/// The distinct categories of `runs` in order, with their labels.
fn categories(runs: &[&Run]) -> (Vec<Category>, Vec<String>) {
    let mut categories: Vec<Category> = Vec::new();
    let mut labels = Vec::new();
    for run in runs {
        if !categories.contains(&category(run)) {
            categories.push(category(run));
            labels.push(run.label.clone());
        }
    }
    (categories, labels)
}

/// One bar series: `value` of the run of `engine` (and `threads`) in each category.
fn series(
    name: String,
    runs: &[&Run],
    categories: &[Category],
    engine: EngineChoice,
    threads: usize,
    value: fn(&Measurement) -> Option<f64>,
) -> BarSeries {
    let values = categories
        .iter()
        .map(|&wanted| {
            runs.iter()
                .find(|r| category(r) == wanted && r.threads() == threads && r.engine == engine)
                .and_then(|r| value(&r.measurement))
        })
        .collect();
    BarSeries { name, values }
}

fn kops(m: &Measurement) -> Option<f64> {
    Some(m.throughput.median / 1e3)
}

fn amplification(m: &Measurement) -> Option<f64> {
    m.traffic.write_amplification
}

fn silo_plot(runs: &[&Run]) -> anyhow::Result<Plot> {
    let (categories, labels) = categories(runs);
    let bars: Vec<BarSeries> = SILO_ENGINES
        .iter()
        .chain(&FLOORS)
        .filter(|&&engine| runs.iter().any(|r| r.engine == engine))
        .map(|&engine| series(engine.to_string(), runs, &categories, engine, 1, kops))
        .collect();
    let title = "Silo micro-benchmarks, 1 thread";
    Ok(Plot {
        id: "silo-throughput".to_owned(),
        title: format!("{title}: median throughput (Kops/s) by workload and engine"),
        svg: grouped_bar_chart(title, "Kops/s (median)", &labels, &bars)?,
    })
}

fn amplification_plot(runs: &[&Run]) -> anyhow::Result<Plot> {
    let measured: Vec<&Run> = runs
        .iter()
        .copied()
        .filter(|r| r.measurement.traffic.write_amplification.is_some())
        .collect();
    let (categories, labels) = categories(&measured);
    // Every engine whose stores the seam counts: the logging engines and the ideal
    // reference on Silo's workloads, mvcc beside them on the others.
    let engines = SILO_ENGINES.iter().chain(&[MVCC]);
    let bars: Vec<BarSeries> = engines
        .filter(|&&engine| measured.iter().any(|r| r.engine == engine))
        .map(|&engine| {
            series(
                engine.to_string(),
                &measured,
                &categories,
                engine,
                1,
                amplification,
            )
        })
        .collect();
    let title = "Write amplification, 1 thread";
    Ok(Plot {
        id: "write-amplification".to_owned(),
        title: format!(
            "{title}: PM bytes stored per user byte, by workload and engine (PMDK's stores \
             are not counted; read-only workloads have none)"
        ),
        svg: grouped_bar_chart(title, "PM bytes per user byte", &labels, &bars)?,
    })
}

fn timestone_plot(plan: &Plan, runs: &[&Run]) -> anyhow::Result<Plot> {
    let (categories, labels) = categories(runs);
    let mut bars = Vec::new();
    for engine in PEER_ENGINES
        .iter()
        .filter(|&&e| runs.iter().any(|r| r.engine == e))
    {
        for &threads in plan.thread_counts {
            // "redo, 2 threads": "×2" read as a ratio, as every "×" of the section does.
            let name = format!("{engine}, {}", threads_text(threads));
            bars.push(series(name, runs, &categories, *engine, threads, kops));
        }
    }
    let title = "TimeStone structures by update share and threads";
    Ok(Plot {
        id: "timestone-threads".to_owned(),
        title: format!(
            "{title}: median throughput (Kops/s) at {} threads",
            plan.thread_counts
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(" and ")
        ),
        svg: grouped_bar_chart(title, "Kops/s (median)", &labels, &bars)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::engine_goals::fake;
    use bench::engines::{REDO, UNDO};

    #[test]
    fn tables_group_by_workload_and_show_ratios() {
        let runs = vec![
            fake::silo(WorkloadChoice::Array, REDO, 800.0, Some(2.5)),
            fake::silo(WorkloadChoice::Array, PMDK, 200.0, None),
            fake::silo(WorkloadChoice::Hash, REDO, 300.0, Some(3.5)),
        ];
        let tables: Vec<Table> = groups(&runs).iter().map(|g| group_table(g)).collect();
        assert_eq!(tables.len(), 2);
        assert_eq!(tables[0].rows[0][2], "4.00", "redo over pmdk");
        assert_eq!(
            tables[0].columns[3], "p50 µs",
            "no ideal or raw column without them"
        );
        assert_eq!(tables[0].columns[8], "WA (ours)");
        assert_eq!(tables[0].rows[1][8], "n/a", "PMDK's WA is not measured");
        // One run: the median alone, no range that repeats it.
        assert_eq!(tables[1].rows[0][1], "300.0");
        assert_eq!(
            tables[1].columns[2], "× pmdk",
            "kept without PMDK: the summary says why"
        );
    }

    /// A group with the ideal reference (Silo's array) keeps its ratio column, and only its
    /// own: raw is not in it.
    #[test]
    fn a_reference_column_is_shown_only_where_the_reference_ran() {
        let runs = vec![
            fake::silo(WorkloadChoice::Array, REDO, 800.0, Some(2.5)),
            fake::silo(WorkloadChoice::Array, IDEAL, 1600.0, Some(2.4)),
        ];
        let table = group_table(&groups(&runs)[0]);
        let ideal = table.columns.iter().position(|c| c == "× ideal");
        assert_eq!(ideal, Some(3), "{:?}", table.columns);
        assert!(
            !table.columns.iter().any(|c| c == "× raw"),
            "{:?}",
            table.columns
        );
        assert_eq!(table.rows[0][3], "0.50");
        assert!(
            table
                .rows
                .iter()
                .all(|row| row.len() == table.columns.len())
        );
    }

    #[test]
    fn the_section_puts_the_goals_on_the_first_screen() {
        let results = EngineResults {
            runs: vec![
                fake::silo(WorkloadChoice::Array, REDO, 800.0, Some(2.5)),
                fake::silo(WorkloadChoice::Array, UNDO, 500.0, Some(2.0)),
                fake::silo(WorkloadChoice::Array, PMDK, 100.0, None),
            ],
            ..EngineResults::default()
        };
        let section = section_of(&Plan::FULL, &results, false).expect("section");
        assert_eq!(section.headlines.len(), engine_goals::goals(&results).len());
        assert!(
            section.headlines[0]
                .claim
                .starts_with("Engines goal: Array")
        );
        assert_eq!(
            section.headlines[0].verdict,
            crate::report::ClaimVerdict::Met
        );
        assert_eq!(section.verdict, Verdict::Info);
        assert!(
            section.summary.iter().any(|l| l.contains(": holds (")),
            "{:?}",
            section.summary
        );
        // A quick run shows the same measurement with no verdict, in the headlines and the
        // summary alike.
        let quick = section_of(&Plan::QUICK, &results, true).expect("section");
        assert_eq!(
            quick.headlines[0].verdict,
            crate::report::ClaimVerdict::Indicative
        );
        assert_eq!(quick.headlines[0].ours, section.headlines[0].ours);
        assert_eq!(
            quick.headlines[3].verdict,
            crate::report::ClaimVerdict::NotMeasured,
            "no B+tree run"
        );
        for line in &quick.summary {
            assert!(
                !line.contains("holds (") && !line.contains("does NOT hold"),
                "{line}"
            );
        }
        // The JSON gives each goal the headline's verdict: none at quick sizes.
        let verdicts = |section: &Section| -> Vec<String> {
            let goals = section.json["goals"].as_array().expect("goals").clone();
            assert_eq!(goals.len(), section.headlines.len());
            for goal in &goals {
                assert!(goal.get("holds").is_none(), "{goal}");
            }
            goals
                .iter()
                .map(|goal| goal["verdict"].as_str().expect("a verdict").to_owned())
                .collect()
        };
        let labels = |section: &Section| -> Vec<String> {
            section
                .headlines
                .iter()
                .map(|h| h.verdict.label().replace(' ', "-"))
                .collect()
        };
        assert_eq!(verdicts(&section), labels(&section));
        assert_eq!(verdicts(&quick), labels(&quick));
        assert_eq!(verdicts(&quick)[0], "indicative");
        assert_eq!(verdicts(&quick)[3], "not-measured");
        assert_eq!(verdicts(&section)[0], "met");
        assert!(
            quick.summary[0]
                .starts_with("Measured 3 engine runs over 1 configurations (runs: 3 Silo"),
            "{}",
            quick.summary[0]
        );
    }

    /// The TimeStone plot's legend names thread counts as such, not as "×2", which the
    /// section uses for ratios only.
    #[test]
    fn the_timestone_legend_names_threads() {
        let runs: Vec<Run> = [1, 2]
            .into_iter()
            .map(|threads| fake::timestone(WorkloadChoice::Bst, 20, threads, MVCC, 100.0, None))
            .collect();
        let refs: Vec<&Run> = runs.iter().collect();
        let plan = Plan {
            thread_counts: &[1, 2],
            ..Plan::QUICK
        };
        let svg = timestone_plot(&plan, &refs).expect("plot").svg;
        assert!(
            svg.contains("mvcc, 1 thread") && svg.contains("mvcc, 2 threads"),
            "{svg}"
        );
        assert!(!svg.contains("mvcc ×"), "{svg}");
    }

    /// The write-amplification plot has a bar for every engine the seam counts, mvcc
    /// included.
    #[test]
    fn the_write_amplification_plot_shows_mvcc() {
        use bench::engines::Family;
        let mut hot = fake::silo(WorkloadChoice::Hash, MVCC, 100.0, Some(0.26));
        hot.family = Family::HotKey { value_size: 256 };
        let mut redo = fake::silo(WorkloadChoice::Hash, REDO, 100.0, Some(2.08));
        redo.family = hot.family;
        let runs = [hot, redo];
        let refs: Vec<&Run> = runs.iter().collect();
        let plot = amplification_plot(&refs).expect("plot");
        assert!(plot.svg.contains("\nmvcc\n"), "no mvcc series");
        assert!(plot.svg.contains("\nredo\n"));
    }

    /// A run of the sweep at `line_ns` of `engine` on `workload`: mvcc writes back 2 cache
    /// lines per operation, the others 5.
    fn swept(workload: WorkloadChoice, line_ns: u32, engine: EngineChoice, kops: f64) -> Run {
        let mut run = fake::silo(workload, engine, kops, Some(1.0));
        run.family = Family::PmCost { line_ns };
        run.label = run.config().label();
        let lines_per_op = if engine == MVCC { 2 } else { 5 };
        run.measurement.counters.flushed_lines = lines_per_op * run.measurement.ops;
        run
    }

    #[test]
    fn the_pm_cost_sweep_gets_one_table_of_ratios_and_stays_out_of_the_others() {
        let runs = vec![
            fake::silo(WorkloadChoice::Array, REDO, 800.0, Some(2.5)),
            swept(WorkloadChoice::Hash, 0, MVCC, 500.0),
            swept(WorkloadChoice::Hash, 0, REDO, 1000.0),
            swept(WorkloadChoice::Hash, 0, UNDO, 800.0),
            swept(WorkloadChoice::Hash, 300, MVCC, 300.0),
            swept(WorkloadChoice::Hash, 300, REDO, 200.0),
        ];
        let results = EngineResults {
            runs,
            ..EngineResults::default()
        };
        let section = section_of(&Plan::QUICK, &results, true).expect("section");
        assert_eq!(section.tables.len(), 2, "the Silo group and the sweep");
        let table = &section.tables[1];
        assert!(
            table.title.starts_with("Emulated PM cost"),
            "{}",
            table.title
        );
        assert_eq!(table.rows.len(), 2, "one row per cost");
        assert_eq!(table.rows[0][1], "0");
        assert_eq!(table.rows[0][5], "0.50", "mvcc ÷ redo at no cost");
        assert_eq!(table.rows[0][6], "0.62", "mvcc ÷ undo at no cost");
        assert_eq!(table.rows[0][7], "2.0 · 5.0 · 5.0");
        assert_eq!(table.rows[1][5], "1.50", "mvcc ÷ redo at 300 ns");
        assert_eq!(table.rows[1][4], "n/a", "no undo run at 300 ns");
        assert!(section.plots.iter().any(|p| p.id == "pm-cost"));
        let amplification = section
            .plots
            .iter()
            .find(|p| p.id == "write-amplification")
            .expect("the WA plot");
        assert!(
            !amplification.svg.contains("ns/line"),
            "the sweep's runs stay out of the write-amplification plot"
        );
        assert!(
            section
                .summary
                .iter()
                .any(|l| l.starts_with("Emulated PM cost"))
        );
    }
}
