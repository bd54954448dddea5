//! Whether `ferrite bench`'s `--pool-size` can hold what it is asked to run, and what to do
//! when it cannot: the check before any pool is made (exit 2), and the advice after a run
//! that ran out of space anyway (exit 18), fitted to how the workload grows.
//!
//! The numbers come from `bench::space`, a lower bound of what each engine's setup takes:
//! the pool's header and root, the engine's own logs, and the initial content as the
//! engine's allocator places it.

use crate::UsageError;
use crate::size::format_bytes;
use bench::choice::{EngineChoice, WorkloadChoice};
use bench::space::{Growth, Need};
use workloads::Params;

/// What the check needs to know of the command line.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// `--engine`.
    pub engines: &'a [EngineChoice],
    /// `--workload`.
    pub workloads: &'a [WorkloadChoice],
    /// The workload parameters (`threads` of the first `--threads`).
    pub params: &'a Params,
    /// `--pool-size`.
    pub pool_size: u64,
    /// Whether PMDK runs at all (installed, and no emulated PM cost, which skips it).
    pub pmdk_runs: bool,
}

/// One configuration the pool is too small for.
struct Short {
    engine: EngineChoice,
    workload: WorkloadChoice,
    need: Need,
}

/// Refuses a `--pool-size` that cannot hold some configuration's engine area and initial
/// content, naming what takes the room, the size that would do, and the change that helps.
pub fn check(request: &Request<'_>) -> Result<(), UsageError> {
    let mut short = Vec::new();
    for &workload in request.workloads {
        for &engine in request.engines {
            if engine == EngineChoice::Pmdk && !request.pmdk_runs {
                continue;
            }
            // A configuration that is not measured (the raw reference on a workload it
            // lacks) needs nothing.
            if let Ok(need) = bench::space::need(engine, workload, request.params)
                && need.least > request.pool_size
            {
                short.push(Short {
                    engine,
                    workload,
                    need,
                });
            }
        }
    }
    // The largest need first: the size it asks for does for every other.
    short.sort_by_key(|s| std::cmp::Reverse(s.need.least));
    let Some(worst) = short.first() else {
        return Ok(());
    };
    let mut text = format!(
        "--pool-size {} cannot hold {} on {} before its first operation: it needs at least \
         {}: {}",
        format_bytes(request.pool_size),
        worst.workload.name(),
        worst.engine,
        bytes(worst.need.least),
        parts(&worst.need, worst.engine, worst.workload, request.params)
    );
    if let Some(coarse) = &worst.need.coarse {
        text.push_str(&format!("; {coarse}"));
    }
    if short.len() > 1 {
        let others: Vec<String> = short[1..]
            .iter()
            .map(|s| {
                format!(
                    "{} on {} ({})",
                    s.workload.name(),
                    s.engine,
                    bytes(s.need.least)
                )
            })
            .collect();
        text.push_str(&format!("; also too small for {}", others.join(", ")));
    }
    if worst.need.least < u64::MAX {
        text.push_str(&format!(
            "; give --pool-size {} or more",
            suggested_size(worst.need.least)
        ));
    } else {
        text.push_str("; no pool can hold that many");
    }
    if short
        .iter()
        .all(|s| fewer_keys_help(s, request.params, request.pool_size))
    {
        text.push_str(", or fewer --keys");
    }
    Err(UsageError(text))
}

/// What takes the room, largest first.
fn parts(need: &Need, engine: EngineChoice, workload: WorkloadChoice, params: &Params) -> String {
    let mut parts: Vec<(u64, String)> = Vec::new();
    if let Some(area) = &need.area {
        parts.push((
            area.bytes,
            format!("{} for {}", bytes(area.bytes), area.what),
        ));
    }
    if workload == WorkloadChoice::Tpcc {
        parts.push((
            0,
            "tpcc's tables (about 0.8 MB per warehouse, one warehouse per thread) not counted"
                .to_owned(),
        ));
    } else {
        parts.push((
            need.content,
            format!(
                "{} for the initial content{}",
                bytes(need.content),
                content_detail(need, workload, params)
            ),
        ));
    }
    if need.header_and_root > 0 {
        let whose = if engine == EngineChoice::Mem {
            "the volatile engine's header and root"
        } else {
            "the pool's header and root"
        };
        parts.push((
            need.header_and_root,
            format!("{} for {whose}", bytes(need.header_and_root)),
        ));
    }
    parts.sort_by_key(|(size, _)| std::cmp::Reverse(*size));
    let mut text = parts
        .into_iter()
        .map(|(_, part)| part)
        .collect::<Vec<_>>()
        .join(", ");
    if engine == EngineChoice::Pmdk {
        text.push_str(" (PMDK's own metadata is not counted)");
    }
    text
}

/// The per-key objects behind the content.
fn content_detail(need: &Need, workload: WorkloadChoice, params: &Params) -> String {
    let per_key: Vec<String> = need
        .objects
        .iter()
        .filter(|o| o.count > 1 || o.per_value.is_some())
        .map(|o| format!("{} {} of {} B", o.count, plural(o.what, o.count), o.size))
        .collect();
    match (per_key.is_empty(), workload) {
        (_, WorkloadChoice::Array) => {
            format!(" ({} elements of {} B)", params.keys, params.value_size)
        }
        (true, _) => String::new(),
        (false, _) => format!(" ({})", per_key.join(", ")),
    }
}

/// `what` for `count` of them: "1 hash node", "222 B+tree leaves".
fn plural(what: &str, count: u64) -> String {
    match (count, what.strip_suffix("leaf")) {
        (1, _) => what.to_owned(),
        (_, Some(stem)) => format!("{stem}leaves"),
        _ => format!("{what}s"),
    }
}

/// Whether fewer keys would fit `short`'s configuration in the pool: with the fewest the
/// workload takes, its need drops below the pool size.
fn fewer_keys_help(short: &Short, params: &Params, pool_size: u64) -> bool {
    if short.workload == WorkloadChoice::Tpcc {
        return false;
    }
    let fewest = if short.workload == WorkloadChoice::Array {
        2
    } else {
        1
    };
    let least = Params {
        keys: fewest,
        ..params.clone()
    };
    bench::space::need(short.engine, short.workload, &least)
        .is_ok_and(|need| need.least <= pool_size)
}

/// A `--pool-size` value to type: the need rounded up to whole KiB below 1 MiB, to whole
/// MiB below 10 GiB, to whole GiB below 10 TiB, else to whole TiB.
fn suggested_size(least: u64) -> String {
    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    const TIB: u64 = 1 << 40;
    if least >= 10 * TIB {
        format!("{}T", least.div_ceil(TIB))
    } else if least >= 10 * GIB {
        format!("{}G", least.div_ceil(GIB))
    } else if least >= MIB {
        format!("{}M", least.div_ceil(MIB))
    } else {
        format!("{}K", least.div_ceil(KIB))
    }
}

fn bytes(n: u64) -> String {
    if n == u64::MAX {
        "more than any pool".to_owned()
    } else {
        format_bytes(n)
    }
}

/// How a run that ran out of space could fit: the advice that ends the error of a failed
/// configuration. `loading` tells a setup that ran out from a run that grew out of its pool.
pub fn advice(
    engine: EngineChoice,
    workload: WorkloadChoice,
    params: &Params,
    ops: Ops,
    pool_size: u64,
    loading: bool,
) -> String {
    let need = bench::space::need(engine, workload, params).ok();
    let coarse = need
        .as_ref()
        .and_then(|need| need.coarse.as_ref())
        .map_or(String::new(), |coarse| format!("; besides, {coarse}"));
    let pool = format!("--pool-size {}", format_bytes(pool_size));
    if loading {
        let estimate = need
            .filter(|need| need.least < u64::MAX)
            .map_or(String::new(), |need| {
                format!(" (at least {} by the formats' count)", bytes(need.least))
            });
        return if workload == WorkloadChoice::Tpcc {
            format!(
                "the pool ({pool}) cannot hold tpcc's tables beside the {engine} engine's \
                 area: its tables have fixed sizes, one warehouse per thread; give a larger \
                 --pool-size or fewer --threads"
            )
        } else {
            format!(
                "the pool ({pool}) cannot hold the {} keys of {} B loaded before the first \
                 operation{estimate}; give a larger --pool-size or fewer --keys{coarse}",
                params.keys, params.value_size
            )
        };
    }
    let grew = match bench::space::growth(workload, params) {
        Growth::Inserts { percent } => {
            let ops_run = ops
                .warmup
                .saturating_add(ops.per_run.saturating_mul(ops.runs));
            format!(
                "{} inserts a new record in {percent} % of its operations: over --warmup {} \
                 and --runs {} of --ops {} about {} records join the {} loaded, and the \
                 structure keeps growing for as long as it runs; give a larger --pool-size, \
                 or fewer --ops (or --runs, --warmup)",
                workload.name(),
                ops.warmup,
                ops.runs,
                ops.per_run,
                ops_run.saturating_mul(u64::from(percent)) / 100,
                params.keys
            )
        }
        Growth::TowardTwiceKeys => format!(
            "{}'s updates are upserts of keys drawn from twice the loaded range, so the map \
             grows toward 2 × --keys ({} keys) while it runs and then stops; give a \
             --pool-size with room for twice --keys, fewer --keys, or a lower --update \
             (fewer --ops only delays it)",
            workload.name(),
            params.keys.saturating_mul(2)
        ),
        Growth::Balanced => format!(
            "{}'s inserts and deletes come in equal shares, so it holds about --keys entries \
             while it runs, but drifts above them{}; give a larger --pool-size or fewer \
             --keys",
            workload.name(),
            if engine == EngineChoice::Mvcc {
                " (and the mvcc engine reuses a deleted block only once a checkpoint covers \
                 its free)"
            } else {
                ""
            }
        ),
        Growth::Drifts => "the queue's enqueues and dequeues come in equal shares, so its \
             length drifts while it runs; give a larger --pool-size or fewer --keys"
            .to_owned(),
        Growth::None => "the workload allocates nothing after loading, so the engine's own \
             use of the pool filled it; give a larger --pool-size or fewer --keys"
            .to_owned(),
    };
    format!("the pool ({pool}) filled during the run: {grew}{coarse}")
}

/// The operations a run does, for the advice about workloads that grow with them.
#[derive(Clone, Copy, Debug)]
pub struct Ops {
    /// `--warmup`.
    pub warmup: u64,
    /// `--ops`.
    pub per_run: u64,
    /// `--runs`.
    pub runs: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use tx::LogMode;

    fn params(keys: u64, value_size: u32) -> Params {
        Params {
            keys,
            value_size,
            ..Params::default()
        }
    }

    #[test]
    fn a_pool_smaller_than_the_engines_logs_is_refused_naming_them() {
        let engines = [EngineChoice::Redo(LogMode::Auto), EngineChoice::Mvcc];
        let p = params(2, 64);
        let request = Request {
            engines: &engines,
            workloads: &[WorkloadChoice::Hash],
            params: &p,
            pool_size: 40 << 10,
            pmdk_runs: false,
        };
        let error = check(&request).expect_err("refused").0;
        assert!(error.contains("hash on mvcc"), "{error}");
        assert!(error.contains("the mvcc engine's logs"), "{error}");
        assert!(error.contains("also too small for hash on redo"), "{error}");
        assert!(error.contains("give --pool-size 25M or more"), "{error}");
        // Two keys are no problem: fewer would not help.
        assert!(!error.contains("fewer --keys"), "{error}");
    }

    #[test]
    fn coarse_leaves_are_named_with_the_value_size_that_avoids_them() {
        let engines = [EngineChoice::Redo(LogMode::Auto)];
        let p = params(2000, 1024);
        let request = Request {
            engines: &engines,
            workloads: &[WorkloadChoice::BTree],
            params: &p,
            pool_size: 64 << 20,
            pmdk_runs: false,
        };
        let error = check(&request).expect_err("refused").0;
        assert!(error.contains("222 B+tree leaves of 16528 B"), "{error}");
        assert!(error.contains("takes a whole 256 KiB chunk"), "{error}");
        assert!(error.contains("--value-size of 1015 or less"), "{error}");
        assert!(error.ends_with("or fewer --keys"), "{error}");
    }

    #[test]
    fn the_advice_after_a_run_fits_how_the_workload_grows() {
        let ops = Ops {
            warmup: 20_000,
            per_run: 200_000,
            runs: 5,
        };
        let redo = EngineChoice::Redo(LogMode::Auto);
        let ycsb_d = advice(
            redo,
            WorkloadChoice::Ycsb(workloads::ycsb::YcsbMix::D),
            &params(100_000, 64),
            ops,
            40 << 20,
            false,
        );
        assert!(ycsb_d.contains("about 51000 records join"), "{ycsb_d}");
        assert!(ycsb_d.contains("fewer --ops"), "{ycsb_d}");
        let hash = advice(
            redo,
            WorkloadChoice::Hash,
            &params(1000, 64),
            ops,
            40 << 20,
            false,
        );
        assert!(hash.contains("toward 2 × --keys (2000 keys)"), "{hash}");
        let tpcc = advice(
            redo,
            WorkloadChoice::Tpcc,
            &params(1, 64),
            ops,
            20 << 20,
            true,
        );
        assert!(tpcc.contains("fewer --threads"), "{tpcc}");
        assert!(!tpcc.contains("--keys"), "{tpcc}");
    }
}
