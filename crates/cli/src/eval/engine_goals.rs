//! The engines section's claims: the project's performance goals for the logging engines and
//! their fast path, and TimeStone's (ASPLOS 2020) claims with the MVCC engine's goals, each
//! checked against [`EngineResults`]. They are the section's headlines and its "Goal:"
//! summary lines.

use crate::cells::place;
use crate::report::{ClaimVerdict, Headline};
use bench::choice::{EngineChoice, WorkloadChoice};
use bench::engines::{
    Config, EngineResults, EngineRun, Family, IDEAL, MVCC, PMDK, RAW, REDO, UNDO,
};
use serde::Serialize;

/// Write amplification the redo engine must stay within.
const WA_GOAL: f64 = 3.0;
/// TimeStone's write amplification on its hash at 80 % updates, one thread, computed from
/// its artifact's published counters (1.04–1.05).
const TIMESTONE_WA: f64 = 1.04;
/// How far from exactly one fence per commit still counts as "one fence".
const FENCE_TOLERANCE: f64 = 0.05;

/// Where a claim comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Source {
    /// A goal set for the transaction engines (against PMDK, the ideal reference, their write
    /// amplification and fences).
    TransactionsGoal,
    /// A goal set for the TimeStone engine (read-mostly speed, lowest write amplification).
    TimeStoneGoal,
    /// A claim of the TimeStone paper (ASPLOS 2020).
    TimeStonePaper,
    /// A goal set for the TimeStone engine's coalescing (hot keys, update-heavy speed).
    TimeStoneThirdPass,
    /// A goal set for the engines' fast path: an engine costs little more than the
    /// persistence it must do.
    FastPathGoal,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::TransactionsGoal => "Engines goal",
            Source::TimeStoneGoal => "TimeStone engine goal",
            Source::TimeStonePaper => "TimeStone (ASPLOS 2020)",
            Source::TimeStoneThirdPass => "TimeStone coalescing goal",
            Source::FastPathGoal => "Engine fast-path goal",
        }
    }
}

/// A claim and whether this run's measurements meet it.
#[derive(Clone, Debug)]
pub struct Goal {
    /// Where the claim comes from.
    pub source: Source,
    /// The claim, with its number.
    pub statement: String,
    /// What was measured, with its number.
    pub measured: String,
    /// `None` when the run did not measure it (PMDK skipped, workload not in the matrix).
    pub holds: Option<bool>,
}

impl Goal {
    /// The summary line.
    pub fn line(&self) -> String {
        let verdict = match self.holds {
            Some(true) => "holds",
            Some(false) => "does NOT hold",
            None => "not measured",
        };
        format!("Goal: {}: {verdict} ({}).", self.statement, self.measured)
    }

    /// The summary line of a quick run: the measurement, without a verdict.
    pub fn indicative_line(&self) -> String {
        match self.holds {
            Some(_) => format!("Goal: {}: measured {}.", self.statement, self.measured),
            None => self.line(),
        }
    }

    /// The verdict the report gives the goal: met or not met, not measured, or indicative
    /// (measured at `--quick` sizes, which cannot judge it).
    pub fn verdict(&self, quick: bool) -> ClaimVerdict {
        match self.holds {
            None => ClaimVerdict::NotMeasured,
            Some(_) if quick => ClaimVerdict::Indicative,
            Some(holds) => ClaimVerdict::from_holds(holds),
        }
    }

    /// The goal as the section's JSON holds it: the verdict of the headline and the summary
    /// (`indicative` in a quick run), never a bare true / false that a quick run cannot give.
    pub fn to_json(&self, quick: bool) -> serde_json::Value {
        serde_json::json!({
            "source": self.source,
            "statement": self.statement,
            "measured": self.measured,
            "verdict": self.verdict(quick),
        })
    }

    /// The report's first-screen row (`quick`: no verdict on a measured goal).
    pub fn headline(&self, quick: bool) -> Headline {
        let verdict = self.verdict(quick);
        // The source names the system, so the statement's own "TimeStone: " would repeat it.
        let statement = self
            .statement
            .strip_prefix("TimeStone: ")
            .unwrap_or(&self.statement);
        Headline::new(
            format!("{}: {statement}", self.source.name()),
            self.measured.clone(),
            verdict,
        )
    }
}

/// Every claim, in summary order.
pub fn goals(results: &EngineResults) -> Vec<Goal> {
    vec![
        ratio_goal(
            results,
            WorkloadChoice::Array,
            PMDK,
            4.0,
            "Array: redo at least 4× PMDK",
        ),
        ratio_goal(
            results,
            WorkloadChoice::Array,
            IDEAL,
            0.5,
            "Array: redo within 2× of the ideal reference (at least 0.5× its throughput)",
        ),
        ratio_goal(
            results,
            WorkloadChoice::Hash,
            PMDK,
            2.0,
            "Hash: redo at least 2× PMDK",
        ),
        ratio_goal(
            results,
            WorkloadChoice::BTree,
            PMDK,
            2.0,
            "B+tree: redo at least 2× PMDK",
        ),
        amplification_goal(results),
        fence_goal(results),
        read_mostly_goal(results),
        mvcc_amplification_goal(results),
        lowest_amplification_goal(results),
        hot_key_goal(results),
        update_heavy_goal(results),
        Goal {
            source: Source::FastPathGoal,
            ..ratio_goal(
                results,
                WorkloadChoice::Array,
                RAW,
                1.0 / RAW_OVERHEAD,
                "Array: redo within 1.5× of the persistent raw reference (at least 0.67× its \
                 throughput)",
            )
        },
    ]
}

/// How much slower than the raw reference (the same log, one fence and the in-place update
/// written straight on the seam) redo may be on the Array swap.
const RAW_OVERHEAD: f64 = 1.5;

/// Write amplification (ours) mvcc must stay within on the hot-key upserts of 256-byte values.
const HOT_KEY_WA: f64 = 0.5;
/// The hot-key goal's value size.
const HOT_KEY_VALUE: u32 = 256;
/// mvcc's throughput over redo's on the 80 %-update hash at one thread.
const UPDATE_HEAVY_RATIO: f64 = 0.8;

/// TOC logging's point: a hot key rewritten many times between checkpoints reaches PM once,
/// so mvcc's write amplification (ours) on hot-key upserts of 256-byte values is at most 0.5
/// and below redo's and undo's.
fn hot_key_goal(results: &EngineResults) -> Goal {
    let wa = |engine| {
        results
            .hot_key(HOT_KEY_VALUE, engine)
            .and_then(|r| r.write_amplification())
    };
    let (mvcc, redo, undo) = (wa(MVCC), wa(REDO), wa(UNDO));
    Goal {
        source: Source::TimeStoneThirdPass,
        statement: format!(
            "TimeStone: mvcc write amplification (ours) at most {HOT_KEY_WA} on hot-key upserts \
             of {HOT_KEY_VALUE} B values, below redo and undo"
        ),
        measured: match (mvcc, redo, undo) {
            (Some(m), Some(r), Some(u)) => {
                format!("mvcc {m:.2}, redo {r:.2}, undo {u:.2} PM bytes per user byte")
            }
            _ => "no hot-key run of mvcc, redo and undo in this plan".to_owned(),
        },
        holds: match (mvcc, redo, undo) {
            (Some(m), Some(r), Some(u)) => Some(m <= HOT_KEY_WA && m < r && m < u),
            _ => None,
        },
    }
}

/// The configurations the 80 %-update hash at one thread was measured in, in the order the
/// goals take them: TimeStone's own, then the emulated-cost sweep's run at no added cost
/// (the same keys, values and operations; the quick plan has only this one, and a goal
/// called "not measured" beside a table showing it would contradict the report).
fn update_heavy_hash_configs() -> [Config; 2] {
    let config = |family| Config {
        family,
        workload: WorkloadChoice::TsHash,
        update_percent: 80,
        threads: 1,
    };
    [
        config(Family::TimeStone),
        config(Family::PmCost { line_ns: 0 }),
    ]
}

/// The runs of `engines` on the 80 %-update hash at one thread, all from the first
/// configuration of [`update_heavy_hash_configs`] that has every one of them (engines
/// compared are measured together), with that configuration.
fn update_heavy_hash<const N: usize>(
    results: &EngineResults,
    engines: [EngineChoice; N],
) -> Option<(Config, [&EngineRun; N])> {
    update_heavy_hash_configs().into_iter().find_map(|config| {
        let runs = engines.map(|engine| results.get(config, engine));
        runs.iter()
            .all(Option::is_some)
            .then(|| (config, runs.map(|run| run.expect("checked above"))))
    })
}

/// " (the emulated-cost sweep's run at +0 ns/line)" when `config` is the sweep's, else
/// nothing: where a number of the 80 %-update hash comes from.
fn sweep_note(config: Config) -> &'static str {
    match config.family {
        Family::PmCost { .. } => " (the emulated-cost sweep's run at +0 ns/line)",
        _ => "",
    }
}

/// mvcc at least 0.8× redo's throughput on the 80 %-update hash at one thread.
fn update_heavy_goal(results: &EngineResults) -> Goal {
    let measured = update_heavy_hash(results, [MVCC, REDO]).and_then(|(config, [m, r])| {
        (r.throughput() > 0.0).then(|| (config, m.throughput() / r.throughput()))
    });
    Goal {
        source: Source::TimeStoneThirdPass,
        statement: format!(
            "TimeStone: mvcc at least {UPDATE_HEAVY_RATIO}× redo on the 80 %-update hash (1 \
             thread)"
        ),
        measured: measured.map_or(
            "no 80 %-update hash run of mvcc and redo".to_owned(),
            |(config, r)| format!("mvcc at {r:.2}× redo{}", sweep_note(config)),
        ),
        holds: measured.map(|(_, r)| r >= UPDATE_HEAVY_RATIO),
    }
}

/// Redo's throughput over `base`'s on Silo's `workload` must be at least `target`.
fn ratio_goal(
    results: &EngineResults,
    workload: WorkloadChoice,
    base: EngineChoice,
    target: f64,
    statement: &str,
) -> Goal {
    let ratio = results.silo_ratio(workload, REDO, base);
    let label = workload.name();
    Goal {
        source: Source::TransactionsGoal,
        statement: statement.to_owned(),
        measured: ratio.map_or(format!("no {label} measurement of redo and {base}"), |r| {
            format!("redo at {r:.2}× {base}")
        }),
        holds: ratio.map(|r| r >= target),
    }
}

/// The worst write amplification of `engine` over every run that counted it, with where,
/// and how many runs stayed within the goal.
fn amplification_of(
    results: &EngineResults,
    engine: EngineChoice,
) -> Option<(f64, String, usize, usize)> {
    let values = results.amplifications(engine);
    let (worst, place) = values
        .iter()
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(wa, run)| (*wa, place(run)))?;
    let within = values.iter().filter(|(wa, _)| *wa <= WA_GOAL).count();
    Some((worst, place, within, values.len()))
}

fn amplification_goal(results: &EngineResults) -> Goal {
    let describe = |engine: EngineChoice| {
        amplification_of(results, engine).map_or(format!("{engine}: not measured"), |a| {
            let (worst, place, within, total) = a;
            format!(
                "{engine}: at most {WA_GOAL} in {within} of {total} runs, worst {worst:.2} on \
                 {place}"
            )
        })
    };
    Goal {
        source: Source::TransactionsGoal,
        statement: format!(
            "write amplification (PM bytes per user byte) of redo at most {WA_GOAL}"
        ),
        measured: format!("{}; {}", describe(REDO), describe(UNDO)),
        holds: amplification_of(results, REDO).map(|(worst, ..)| worst <= WA_GOAL),
    }
}

fn fence_goal(results: &EngineResults) -> Goal {
    let range = results.fence_range(REDO);
    Goal {
        source: Source::TransactionsGoal,
        statement: format!("redo issues one fence per commit (within ±{FENCE_TOLERANCE})"),
        measured: range.map_or("no redo run committed".to_owned(), |(min, max, runs)| {
            format!("{min:.2} to {max:.2} over {runs} runs with commits")
        }),
        holds: range
            .map(|(min, max, _)| (1.0 - min).abs().max((max - 1.0).abs()) <= FENCE_TOLERANCE),
    }
}

/// The read-mostly structures of TimeStone's claim.
const READ_MOSTLY: [WorkloadChoice; 2] = [WorkloadChoice::TsHash, WorkloadChoice::Bst];

/// mvcc beats every other engine on the 2 %-update hash table and BST, at each thread count
/// measured.
fn read_mostly_goal(results: &EngineResults) -> Goal {
    let mut worst: Option<(f64, String)> = None;
    for workload in READ_MOSTLY {
        for threads in [1, 2] {
            let Some(mvcc) = results.timestone(workload, 2, threads, MVCC) else {
                continue;
            };
            for other in [REDO, UNDO, PMDK] {
                let Some(peer) = results.timestone(workload, 2, threads, other) else {
                    continue;
                };
                let ratio = mvcc.throughput() / peer.throughput();
                if worst.as_ref().is_none_or(|(w, _)| ratio < *w) {
                    worst = Some((ratio, format!("{other} on {}", place(mvcc))));
                }
            }
        }
    }
    Goal {
        source: Source::TimeStoneGoal,
        statement: "TimeStone: mvcc faster than undo, redo and PMDK on the 2 %-update hash \
                    table and BST at 1 and 2 threads"
            .to_owned(),
        measured: worst.as_ref().map_or(
            "no 2 %-update runs in this plan".to_owned(),
            |(r, place)| format!("lowest ratio mvcc / peer {r:.2}, against {place}"),
        ),
        holds: worst.map(|(r, _)| r > 1.0),
    }
}

/// TimeStone's write amplification on its 80 %-update hash table at one thread: 1.04–1.05
/// computed from the artifact's own counters (OLog + CLog + write-back bytes per byte copied
/// into the version log, new objects uncounted). Judged like for like, with the variant
/// that counts new objects and ours (PM bytes per distinct user byte) beside it.
fn mvcc_amplification_goal(results: &EngineResults) -> Goal {
    let found = update_heavy_hash(results, [MVCC]);
    let run = found.map(|(_, [run])| run);
    let note = found.map_or("", |(config, _)| sweep_note(config));
    let ours = run.and_then(|r| r.write_amplification());
    let timestone = run.and_then(|r| r.timestone_amplification());
    Goal {
        source: Source::TimeStonePaper,
        statement: format!(
            "TimeStone: mvcc write amplification by TimeStone's definition at most \
             {TIMESTONE_WA} on the 80 %-update hash table (1 thread)"
        ),
        measured: match (ours, timestone) {
            (Some(ours), Some(ts)) => format!(
                "{:.2} as TimeStone's artifact counts (new objects left out), {:.2} counting \
                 new objects; ours {ours:.2} PM bytes per user byte{note}",
                ts.artifact, ts.counting_new_objects
            ),
            _ => "no 80 %-update hash run of mvcc in this plan".to_owned(),
        },
        holds: timestone.map(|ts| ts.artifact <= TIMESTONE_WA),
    }
}

/// mvcc's write amplification is the lowest of the counted engines on every 80 %-update
/// run (PMDK writes PM directly and is not counted).
fn lowest_amplification_goal(results: &EngineResults) -> Goal {
    let mut checked = 0;
    let mut beaten = Vec::new();
    // The emulated-cost sweep's run at no added cost counts where TimeStone's own plan
    // did not measure its configuration (the quick plan), never twice.
    let measured_by_timestone = |run: &EngineRun| {
        let config = Config {
            family: Family::TimeStone,
            ..run.config()
        };
        results.get(config, MVCC).is_some()
    };
    let hot = results.runs.iter().filter(|r| {
        r.engine == MVCC
            && r.config().update_percent == 80
            && match r.family {
                Family::TimeStone => true,
                Family::PmCost { line_ns: 0 } => !measured_by_timestone(r),
                _ => false,
            }
    });
    for run in hot {
        let Some(mine) = run.write_amplification() else {
            continue;
        };
        checked += 1;
        for other in [REDO, UNDO] {
            let peer = results
                .get(run.config(), other)
                .and_then(|p| p.write_amplification());
            if let Some(theirs) = peer.filter(|&theirs| theirs < mine) {
                beaten.push(format!("{other} {theirs:.2} < {mine:.2} on {}", place(run)));
            }
        }
    }
    Goal {
        source: Source::TimeStoneGoal,
        statement: "TimeStone: mvcc has the lowest write amplification of the counted engines \
                    on the 80 %-update structures"
            .to_owned(),
        measured: if checked == 0 {
            "no 80 %-update runs in this plan".to_owned()
        } else if beaten.is_empty() {
            format!("lowest on every run checked ({checked})")
        } else {
            format!(
                "{} of {checked} runs beaten: {}",
                beaten.len(),
                beaten.join("; ")
            )
        },
        holds: (checked > 0).then_some(beaten.is_empty()),
    }
}

/// How mvcc's throughput and PM traffic change from 1 to 2 threads (the machine has two
/// cores, so scaling beyond cannot be measured). Informational: not a goal.
pub fn scaling_line(results: &EngineResults) -> Option<String> {
    let mut parts = Vec::new();
    for workload in READ_MOSTLY {
        for update in [2, 80] {
            let (Some(one), Some(two)) = (
                results.timestone(workload, update, 1, MVCC),
                results.timestone(workload, update, 2, MVCC),
            ) else {
                continue;
            };
            let speedup = two.throughput() / one.throughput();
            let bytes = |r: &bench::engines::EngineRun| {
                crate::cells::bytes_per_op(r.measurement.traffic.pm_bytes_per_op)
            };
            parts.push(format!(
                "{}: {speedup:.2}× throughput, {} → {} PM B/op",
                one.label,
                bytes(one),
                bytes(two)
            ));
        }
    }
    (!parts.is_empty()).then(|| {
        format!(
            "TimeStone, mvcc from 1 to 2 threads (scaling past 2 cores cannot be measured on \
             this 2-core machine): {}.",
            parts.join("; ")
        )
    })
}

/// Measured runs for the tests of the goals and of the engines section.
#[cfg(test)]
pub(super) mod fake {
    use bench::Summary;
    use bench::choice::{EngineChoice, WorkloadChoice};
    use bench::engines::{EngineRun, Family, REDO};
    use bench::runner::{Measurement, Traffic};
    use workloads::Params;

    /// A Silo run of `engine` on `workload` at `kops` thousand operations per second.
    pub(crate) fn silo(
        workload: WorkloadChoice,
        engine: EngineChoice,
        kops: f64,
        wa: Option<f64>,
    ) -> EngineRun {
        let fences = (engine == REDO).then_some(1.0);
        EngineRun {
            family: Family::Silo,
            label: workload.name(),
            workload,
            params: Params {
                update_percent: 100,
                ..Params::default()
            },
            engine,
            measurement: Measurement {
                engine: engine.to_string(),
                workload: workload.name(),
                threads: 1,
                ops: 1000,
                throughput: Summary {
                    median: kops * 1e3,
                    min: kops * 1e3,
                    max: kops * 1e3,
                    runs: 1,
                },
                latency_ns: [1000, 2000, 3000],
                traffic: Traffic {
                    fences_per_commit: fences,
                    write_amplification: wa,
                    ..Traffic::default()
                },
                counters: pmem::Counters::default(),
                mix: Default::default(),
                events: Default::default(),
                checked: true,
            },
        }
    }

    /// A TimeStone run of `engine` on `workload` at `update` % and `threads`.
    pub(crate) fn timestone(
        workload: WorkloadChoice,
        update: u32,
        threads: usize,
        engine: EngineChoice,
        kops: f64,
        wa: Option<f64>,
    ) -> EngineRun {
        let mut run = silo(workload, engine, kops, wa);
        run.family = Family::TimeStone;
        run.params.update_percent = update;
        run.label = format!("{} {update}%", workload.name());
        run.measurement.threads = threads;
        run
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(runs: Vec<bench::engines::EngineRun>) -> EngineResults {
        EngineResults {
            runs,
            ..EngineResults::default()
        }
    }

    #[test]
    fn goals_are_computed_from_the_measurements() {
        use WorkloadChoice::{Array, Hash};
        let runs = results(vec![
            fake::silo(Array, REDO, 800.0, Some(2.5)),
            fake::silo(Array, PMDK, 100.0, None),
            fake::silo(Array, IDEAL, 2000.0, Some(2.4)),
            fake::silo(Array, RAW, 1000.0, Some(2.0)),
            fake::silo(Hash, REDO, 300.0, Some(3.5)),
            fake::silo(Hash, UNDO, 300.0, Some(2.0)),
            fake::silo(Hash, PMDK, 200.0, None),
        ]);
        let goals = goals(&runs);
        let holds: Vec<Option<bool>> = goals.iter().map(|g| g.holds).collect();
        // Array 8× PMDK but 0.4× ideal and 0.8× raw; hash 1.5× PMDK; no B+tree; WA 3.5 > 3; one fence.
        assert_eq!(
            holds,
            [
                Some(true),
                Some(false),
                Some(false),
                None,
                Some(false),
                Some(true),
                None,
                None,
                None,
                None,
                None,
                Some(true)
            ]
        );
        assert!(goals[0].measured.contains("8.00× pmdk"), "{:?}", goals[0]);
        assert!(goals[11].measured.contains("0.80× raw"), "{:?}", goals[11]);
        assert!(
            goals[4].measured.contains("worst 3.50 on hash"),
            "{:?}",
            goals[4]
        );
        assert!(goals[4].measured.contains("undo: at most 3 in 1 of 1"));
        assert!(goals[3].line().contains("not measured"));
        assert_eq!(goals[3].headline(false).verdict, ClaimVerdict::NotMeasured);
    }

    /// The emulated-cost sweep's charged runs are not judged ("goals are judged at no added
    /// cost only"); its run at 0 ns is an ordinary measurement and is.
    #[test]
    fn amplification_and_fence_goals_leave_out_the_charged_sweep() {
        use WorkloadChoice::{Hash, TsHash};
        use bench::engines::Family;
        let swept = |engine, line_ns, wa, fences| {
            let mut run = fake::timestone(TsHash, 80, 1, engine, 100.0, Some(wa));
            run.family = Family::PmCost { line_ns };
            run.measurement.traffic.fences_per_commit = Some(fences);
            run
        };
        let runs = results(vec![
            fake::silo(Hash, REDO, 300.0, Some(2.5)),
            fake::silo(Hash, UNDO, 300.0, Some(2.0)),
            swept(REDO, 0, 2.6, 1.0),
            swept(REDO, 300, 3.5, 1.5),
            swept(UNDO, 300, 4.9, 4.0),
        ]);
        let goals = goals(&runs);
        let [amplification, fences] = [&goals[4], &goals[5]];
        assert_eq!(amplification.holds, Some(true), "{amplification:?}");
        assert!(
            amplification
                .measured
                .contains("redo: at most 3 in 2 of 2 runs, worst 2.60")
                && amplification
                    .measured
                    .contains("undo: at most 3 in 1 of 1 runs"),
            "{amplification:?}"
        );
        assert_eq!(fences.holds, Some(true), "{fences:?}");
        assert!(fences.measured.contains("over 2 runs"), "{fences:?}");
    }

    #[test]
    fn hot_key_and_update_heavy_goals_compare_mvcc_with_redo_and_undo() {
        use WorkloadChoice::{Hash, TsHash};
        use bench::engines::Family;
        let hot = |engine, wa| {
            let mut run = fake::silo(Hash, engine, 100.0, Some(wa));
            run.family = Family::HotKey { value_size: 256 };
            run.params.value_size = 256;
            run
        };
        let mut runs = vec![hot(MVCC, 0.45), hot(REDO, 2.1), hot(UNDO, 0.4)];
        runs.push(fake::timestone(TsHash, 80, 1, MVCC, 450.0, None));
        runs.push(fake::timestone(TsHash, 80, 1, REDO, 500.0, None));
        let goals = goals(&results(runs));
        let [hot_key, update_heavy] = [&goals[9], &goals[10]];
        assert_eq!(
            hot_key.holds,
            Some(false),
            "undo's 0.40 is lower: {hot_key:?}"
        );
        assert!(hot_key.measured.contains("mvcc 0.45, redo 2.10, undo 0.40"));
        assert_eq!(update_heavy.holds, Some(true), "{update_heavy:?}");
        assert!(update_heavy.measured.contains("0.90× redo"));
        let only_mvcc = results(vec![hot(MVCC, 0.3)]);
        assert_eq!(super::goals(&only_mvcc)[9].holds, None);
    }

    /// The quick plan measures the 80 %-update hash only in the emulated-cost sweep: its run
    /// at +0 ns/line (the same configuration) judges the goals on that hash instead of their
    /// reading "not measured" beside the sweep's table; a charged run never does, and a
    /// TimeStone run of the configuration is preferred and not counted twice.
    #[test]
    fn the_update_heavy_hash_goals_take_the_sweeps_uncharged_run_when_timestone_has_none() {
        use WorkloadChoice::TsHash;
        let swept = |line_ns, engine, kops, wa| {
            let mut run = fake::timestone(TsHash, 80, 1, engine, kops, Some(wa));
            run.family = Family::PmCost { line_ns };
            run.label = format!("ts-hash 80%, PM +{line_ns} ns/line");
            run
        };
        let mut mvcc = swept(0, MVCC, 850.0, 1.8);
        for (event, bytes) in [
            (mvcc::TLOG_BYTES_EVENT, 1000),
            (mvcc::OLOG_BYTES_EVENT, 500),
            (mvcc::CLOG_BYTES_EVENT, 400),
            (mvcc::WRITEBACK_BYTES_EVENT, 100),
        ] {
            mvcc.measurement.events.insert(event.into(), bytes);
        }
        let mut runs = vec![
            mvcc,
            swept(0, REDO, 1000.0, 2.8),
            swept(0, UNDO, 900.0, 4.9),
            // Charged: mvcc far ahead, which must not decide the goal.
            swept(300, MVCC, 800.0, 1.8),
            swept(300, REDO, 100.0, 2.8),
        ];
        let goals = goals(&results(runs.clone()));
        let [wa, lowest, update_heavy] = [&goals[7], &goals[8], &goals[10]];
        assert_eq!(update_heavy.holds, Some(true), "{update_heavy:?}");
        assert!(
            update_heavy.measured.contains("0.85× redo")
                && update_heavy.measured.contains("sweep's run at +0 ns/line"),
            "{update_heavy:?}"
        );
        assert_eq!(wa.holds, Some(true), "{wa:?}");
        assert!(wa.measured.contains("sweep's run"), "{wa:?}");
        assert_eq!(lowest.holds, Some(true), "{lowest:?}");
        assert_eq!(
            lowest.measured, "lowest on every run checked (1)",
            "{lowest:?}"
        );
        // With TimeStone's own run of the configuration, it is the one judged, once.
        runs.push(fake::timestone(TsHash, 80, 1, MVCC, 500.0, Some(1.8)));
        runs.push(fake::timestone(TsHash, 80, 1, REDO, 1000.0, Some(2.8)));
        let goals = super::goals(&results(runs));
        let [lowest, update_heavy] = [&goals[8], &goals[10]];
        assert_eq!(update_heavy.holds, Some(false), "{update_heavy:?}");
        assert_eq!(
            update_heavy.measured, "mvcc at 0.50× redo",
            "{update_heavy:?}"
        );
        assert_eq!(
            lowest.measured, "lowest on every run checked (1)",
            "{lowest:?}"
        );
    }

    #[test]
    fn timestone_goals_compare_mvcc_with_every_peer() {
        use WorkloadChoice::{Bst, TsHash};
        let mut runs = Vec::new();
        for threads in [1, 2] {
            for (workload, mvcc) in [(TsHash, 500.0), (Bst, 300.0)] {
                runs.push(fake::timestone(workload, 2, threads, MVCC, mvcc, None));
                runs.push(fake::timestone(workload, 2, threads, REDO, 400.0, None));
                runs.push(fake::timestone(workload, 2, threads, PMDK, 200.0, None));
            }
        }
        let mut hot = fake::timestone(TsHash, 80, 1, MVCC, 100.0, Some(0.9));
        for (event, bytes) in [
            (mvcc::TLOG_BYTES_EVENT, 1000),
            (mvcc::OLOG_BYTES_EVENT, 500),
            (mvcc::CLOG_BYTES_EVENT, 400),
            (mvcc::WRITEBACK_BYTES_EVENT, 100),
            (mvcc::NEW_OBJECT_BYTES_EVENT, 300),
        ] {
            hot.measurement.events.insert(event.into(), bytes);
        }
        runs.push(hot);
        runs.push(fake::timestone(TsHash, 80, 1, REDO, 100.0, Some(0.8)));
        let goals = goals(&results(runs));
        let [read_mostly, wa, lowest] = [&goals[6], &goals[7], &goals[8]];
        // bst 2%: mvcc 300 < redo 400 at both thread counts.
        assert_eq!(read_mostly.holds, Some(false), "{read_mostly:?}");
        assert!(read_mostly.measured.contains("0.75"), "{read_mostly:?}");
        assert!(
            read_mostly.measured.contains("redo on bst 2%"),
            "{read_mostly:?}"
        );
        assert_eq!(wa.holds, Some(true), "{wa:?}");
        assert!(wa.measured.starts_with("1.00 as TimeStone's"), "{wa:?}");
        assert!(wa.measured.contains("1.30 counting new objects"), "{wa:?}");
        assert_eq!(wa.source, Source::TimeStonePaper);
        assert_eq!(
            lowest.holds,
            Some(false),
            "redo's 0.8 beats 0.9: {lowest:?}"
        );
        assert!(
            lowest.measured.starts_with("1 of 1 runs beaten"),
            "{lowest:?}"
        );
    }
}
