//! The `silo` section's tables, drawn from a [`Reproduction`]: the comparison with the
//! paper, the design summaries, throughput and PM writes per workload (Figs. 12 and 11), Silo's
//! log entries (Fig. 13), the sweeps, the sensitivity study and the battery (Table IV).

use super::silo::{PlanName, core_extremes, cores_text, num, workload_names};
use crate::report::Table;
use hwsim::DesignKind;
use hwsim::battery::BatteryTable;
use silorepro::{Comparison, Reproduction, RunRow, Sweep};

/// Every table of the section, in display order; the comparison of a plan that does not
/// judge (the quick plan, a reduced custom one) gives no verdict.
pub fn tables(rep: &Reproduction, plan: PlanName) -> Vec<Table> {
    let (small, big) = core_extremes(rep);
    let mut tables = vec![comparison_table(rep, plan), designs_table(rep)];
    for cores in distinct([small, big]) {
        tables.push(throughput_table(rep, cores));
        tables.push(writes_table(rep, cores));
    }
    tables.push(log_table(rep, big));
    tables.extend(rep.sweeps.iter().map(sweep_table));
    tables.push(sensitivity_table(rep));
    tables.push(battery_table(&rep.battery));
    tables
}

/// `values` without repeats, in order (a plan with one core count has one extreme).
fn distinct<const N: usize>(values: [usize; N]) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(N);
    for value in values {
        if !out.contains(&value) {
            out.push(value);
        }
    }
    out
}

/// Each of the paper's numbers beside ours: the ratio and whether it is within ±25 % —
/// pass or MISS for a plan that can judge it, yes or no (indicative) for the quick plan and
/// a custom plan below the full plan's sizes.
pub fn comparison_table(rep: &Reproduction, plan: PlanName) -> Table {
    let quick = !plan.judges();
    let (title, within) = match plan {
        PlanName::Quick => (
            "Paper vs reproduction (quick plan: indicative, no verdict)",
            "within ±25 % (indicative)",
        ),
        _ if quick => (
            "Paper vs reproduction (custom plan below the full plan's sizes: indicative, no \
             verdict)",
            "within ±25 % (indicative)",
        ),
        _ => ("Paper vs reproduction", "within ±25 %"),
    };
    let mut table = Table::new(
        title,
        &["quantity", "paper", "ours", "ours / paper", within],
    );
    for c in &rep.comparison {
        let (paper, ours, ratio) = comparison_cells(c);
        let cell = match (quick, c.within) {
            (false, true) => "pass",
            (false, false) => "MISS",
            (true, true) => "yes",
            (true, false) => "no",
        };
        table.push(vec![
            c.quantity.clone(),
            paper,
            ours,
            ratio,
            cell.to_owned(),
        ]);
    }
    table
}

/// Paper, ours and their ratio; an ordering has no number, only whether it holds.
fn comparison_cells(c: &Comparison) -> (String, String, String) {
    if c.target.is_ordering() {
        let ours = if c.within { "holds" } else { "does not hold" };
        return ("holds".to_owned(), ours.to_owned(), "—".to_owned());
    }
    (num(c.paper), num(c.ours), format!("{:.2}", c.ratio))
}

fn designs_table(rep: &Reproduction) -> Table {
    let mut table = Table::new(
        "Designs at each core count (geometric means over workloads)",
        &[
            "cores",
            "design",
            "× FWB",
            "× Base",
            "× Ideal",
            "programmed × FWB",
            "sent × FWB",
            "requests × FWB",
            "media writes × FWB",
            "sent B/tx",
            "programmed B/tx",
        ],
    );
    for s in &rep.summary {
        table.push(vec![
            s.cores.to_string(),
            s.design.label().to_owned(),
            format!("{:.2}", s.vs_fwb),
            format!("{:.2}", s.vs_base),
            format!("{:.2}", s.vs_ideal),
            format!("{:.2}", s.write_bytes_vs_fwb),
            format!("{:.2}", s.sent_bytes_vs_fwb),
            format!("{:.2}", s.write_requests_vs_fwb),
            format!("{:.2}", s.media_writes_vs_fwb),
            format!("{:.0}", s.bytes_per_tx),
            format!("{:.0}", s.programmed_per_tx),
        ]);
    }
    table
}

/// Every design of the plan, Ideal included, in the plan's order.
fn plan_designs(rep: &Reproduction) -> Vec<DesignKind> {
    rep.spec.designs.clone()
}

/// Columns "workload", then one per design, then `last`.
fn per_design_columns(rep: &Reproduction, last: &str) -> Vec<String> {
    let mut columns = vec!["workload".to_owned()];
    columns.extend(plan_designs(rep).iter().map(|d| d.label().to_owned()));
    columns.push(last.to_owned());
    columns
}

fn table_with(title: String, columns: &[String]) -> Table {
    let names: Vec<&str> = columns.iter().map(String::as_str).collect();
    Table::new(title, &names)
}

/// A row per workload: `cell(run)` per design (empty where the run is missing), then `last`.
fn per_design_rows(
    rep: &Reproduction,
    cores: usize,
    table: &mut Table,
    cell: &dyn Fn(&RunRow) -> String,
    last: &dyn Fn(&str) -> String,
) {
    for workload in workload_names(rep) {
        let mut row = vec![workload.clone()];
        row.extend(
            plan_designs(rep)
                .iter()
                .map(|&d| rep.run(&workload, d, cores).map_or_else(String::new, cell)),
        );
        row.push(last(&workload));
        table.push(row);
    }
}

fn throughput_table(rep: &Reproduction, cores: usize) -> Table {
    let columns = per_design_columns(rep, "FWB M tx/s");
    let mut table = table_with(
        format!(
            "Throughput at {}, × FWB on the same workload (Fig. 12)",
            cores_text(cores)
        ),
        &columns,
    );
    let fwb_absolute = |w: &str| {
        rep.run(w, DesignKind::Fwb, cores)
            .map_or_else(String::new, |r| format!("{:.3}", r.throughput / 1e6))
    };
    per_design_rows(
        rep,
        cores,
        &mut table,
        &|r| format!("{:.2}", r.vs_fwb),
        &fwb_absolute,
    );
    table
}

fn writes_table(rep: &Reproduction, cores: usize) -> Table {
    let columns = per_design_columns(rep, "FWB media writes/tx");
    let mut table = table_with(
        format!(
            "PM bytes per transaction at {}, sent / programmed (Fig. 11: the paper counts what \
             is programmed)",
            cores_text(cores)
        ),
        &columns,
    );
    let fwb_media = |w: &str| {
        rep.run(w, DesignKind::Fwb, cores)
            .map_or_else(String::new, |r| {
                format!(
                    "{:.2}",
                    r.media_writes as f64 / r.committed_tx.max(1) as f64
                )
            })
    };
    per_design_rows(
        rep,
        cores,
        &mut table,
        &|r| format!("{:.0} / {:.0}", r.bytes_per_tx(), r.programmed_per_tx()),
        &fwb_media,
    );
    table
}

/// Silo's log-entry statistics per workload (Fig. 13) and its overflows.
fn log_table(rep: &Reproduction, cores: usize) -> Table {
    let mut table = Table::new(
        format!(
            "Silo's log entries at {} (Fig. 13): transactional word stores, and what became \
             of them",
            cores_text(cores)
        ),
        &[
            "workload",
            "tx stores",
            "silent (ignored)",
            "merged",
            "took a slot",
            "reduction %",
            "max live/tx",
            "overflow tx",
            "overflow tx %",
            "entries overflowed",
        ],
    );
    for workload in workload_names(rep) {
        let Some(run) = rep.run(&workload, DesignKind::Silo, cores) else {
            continue;
        };
        let Some(log) = run.log else { continue };
        table.push(vec![
            workload,
            log.tx_stores.to_string(),
            log.silent_ignored.to_string(),
            log.merged.to_string(),
            log.appended.to_string(),
            format!("{:.1}", 100.0 * log.reduction()),
            log.max_entries_per_tx.to_string(),
            log.overflow_tx.to_string(),
            format!(
                "{:.1}",
                100.0 * log.overflow_tx as f64 / run.committed_tx.max(1) as f64
            ),
            log.overflowed_entries.to_string(),
        ]);
    }
    table
}

/// What a sweep's points mean, for its table title.
pub fn sweep_title(sweep: &Sweep) -> String {
    let what = match sweep.name.as_str() {
        "latency" => "Silo log-buffer latency in cycles (Fig. 15)",
        "entries" => "Silo log-buffer entries",
        "tx_size" => "transaction size, × the log buffer (Fig. 14)",
        "cores" => "core count",
        other => other,
    };
    format!("Sweep of the {what}; relative to: {}", sweep.reference)
}

fn sweep_table(sweep: &Sweep) -> Table {
    let mut table = Table::new(
        sweep_title(sweep),
        &[
            "value",
            "throughput",
            "write bytes/tx",
            "throughput per workload",
        ],
    );
    for point in &sweep.points {
        let per: Vec<String> = point
            .per_workload
            .iter()
            .map(|(w, t, _)| format!("{w} {t:.3}"))
            .collect();
        table.push(vec![
            point.value.to_string(),
            format!("{:.3}", point.relative_throughput),
            format!("{:.3}", point.relative_write_bytes),
            per.join(", "),
        ]);
    }
    if sweep.points.is_empty() {
        // Every point was left out (a point whose runs completed no transaction of its
        // size is not measured): say so rather than print an empty table.
        table.push(vec![
            "—".to_owned(),
            "not measured".to_owned(),
            "—".to_owned(),
            "no point of this sweep completed a whole transaction (traces too short)".to_owned(),
        ]);
    }
    table
}

fn sensitivity_table(rep: &Reproduction) -> Table {
    let mut table = Table::new(
        "Sensitivity of the largest-core comparison (geometric means over workloads): every \
         cost-model cell (media model / store discipline / on-PM buffer), then variants of the \
         paper-faithful cell; write columns are Silo's bytes over the other design's",
        &[
            "variant",
            "Silo/LAD",
            "Silo/MorLog",
            "Silo/FWB",
            "MorLog/FWB",
            "programmed ÷ MorLog",
            "programmed ÷ FWB",
            "sent ÷ MorLog",
            "what changed",
        ],
    );
    for s in &rep.sensitivity {
        table.push(vec![
            s.variant.clone(),
            format!("{:.2}", s.silo_vs_lad),
            format!("{:.2}", s.silo_vs_morlog),
            format!("{:.2}", s.silo_vs_fwb),
            format!("{:.2}", s.morlog_vs_fwb),
            format!("{:.2}", s.silo_programmed_vs_morlog),
            format!("{:.2}", s.silo_programmed_vs_fwb),
            format!("{:.2}", s.silo_sent_vs_morlog),
            s.description.clone(),
        ]);
    }
    table
}

/// KiB with as many decimals as the value needs, at most four (10496, 5.3125).
fn kib(value: f64) -> String {
    let text = format!("{value:.4}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The battery table as a report table: one row per scheme (eADR, BBB, Silo). The title
/// says how the energy follows from the flush size and what the volume ratio divides by:
/// without it the columns contradict each other to a reader who checks them (eADR's
/// 10496 KiB at the drain cost is twice its energy, since only a share is dirty; its volume
/// ratio is not its volume over Silo's, since Table IV's unit is Silo's log buffers without
/// their registers).
pub fn battery_table(table: &BatteryTable) -> Table {
    let params = &table.params;
    let mut rendered = Table::new(
        format!(
            "Battery: what must be flushed on a power failure, {} (Silo Table IV). Energy: the \
             bytes drained at {} nJ/B (eADR: {:.0} % of its flush size dirty; Silo: its log \
             buffers and {} B of log registers per core); volume × Silo's buffers: the \
             battery for that energy over the one for Silo's log buffers alone, Table IV's \
             unit",
            cores_text(table.cores),
            params.nj_per_byte,
            params.eadr_dirty_fraction * 100.0,
            params.silo_register_bytes,
        ),
        &[
            "design",
            "flush size KiB",
            "energy µJ",
            "super-capacitor mm³",
            "Li thin film mm³",
            "volume × Silo's buffers",
        ],
    );
    for row in &table.rows {
        rendered.push(vec![
            row.design.name().to_owned(),
            kib(row.flush_kb),
            format!("{:.1}", row.energy_uj),
            format!("{:.3}", row.capacitor_mm3),
            format!("{:.5}", row.lithium_mm3),
            format!("{:.1}", row.volume_vs_silo),
        ]);
    }
    rendered
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::silo::tests::tiny;

    #[test]
    fn kib_drops_the_decimals_a_value_does_not_need() {
        assert_eq!(kib(10496.0), "10496");
        assert_eq!(kib(5.3125), "5.3125");
        assert_eq!(kib(16.5), "16.5");
        let table = hwsim::battery::battery_table(
            &hwsim::Config::default(),
            &hwsim::battery::BatteryParams::default(),
        );
        let rendered = crate::eval::terminal_table(&battery_table(&table)).to_string();
        assert!(
            rendered.contains("KiB") && !rendered.contains("0000"),
            "{rendered}"
        );
    }

    #[test]
    fn comparison_table_has_a_row_per_target_with_its_verdict() {
        let rep = tiny();
        let table = comparison_table(rep, PlanName::Full);
        assert_eq!(table.rows.len(), rep.comparison.len());
        for (row, c) in table.rows.iter().zip(&rep.comparison) {
            assert_eq!(row[0], c.quantity);
            assert_eq!(row[4], if c.within { "pass" } else { "MISS" });
            if c.target.is_ordering() {
                assert_eq!(row[1], "holds");
                assert_eq!(row[3], "—");
            }
        }
    }

    #[test]
    fn tables_cover_both_core_counts_and_the_battery() {
        let rep = tiny();
        let titles: Vec<String> = tables(rep, PlanName::Full)
            .into_iter()
            .map(|t| t.title)
            .collect();
        for wanted in [
            "Throughput at 1 core,",
            "Throughput at 2 cores",
            "Battery",
            "Sweep",
        ] {
            assert!(
                titles.iter().any(|t| t.starts_with(wanted)),
                "{wanted}: {titles:?}"
            );
        }
        let log = log_table(rep, 2);
        assert_eq!(log.rows.len(), 2, "array and hash");
        // Array swaps of sparse elements are mostly silent stores.
        let silent: u64 = log.rows[0][2].parse().expect("a count");
        assert!(silent > 0, "{:?}", log.rows[0]);
    }

    #[test]
    fn a_sweep_without_points_says_it_was_not_measured() {
        let sweep = Sweep {
            name: "tx_size".to_owned(),
            reference: "1×".to_owned(),
            points: Vec::new(),
        };
        let table = sweep_table(&sweep);
        assert_eq!(table.rows.len(), 1);
        assert_eq!(table.rows[0][1], "not measured");
    }

    #[test]
    fn a_one_core_battery_table_says_1_core() {
        let config = hwsim::Config {
            cores: 1,
            ..hwsim::Config::default()
        };
        let table = hwsim::battery::battery_table(&config, &Default::default());
        let title = battery_table(&table).title;
        assert!(title.contains(", 1 core ("), "{title}");
    }

    /// Every column can be checked against the others with what the title says: the
    /// energy is the flush size at the drain cost (eADR's dirty share of it, Silo's plus
    /// its registers), and the volume ratio is the energy over that of Silo's buffers alone.
    #[test]
    fn the_battery_columns_follow_from_what_the_title_says() {
        let table = hwsim::battery::battery_table(&hwsim::Config::default(), &Default::default());
        let rendered = battery_table(&table);
        let params = &table.params;
        for said in [
            format!("{} nJ/B", params.nj_per_byte),
            format!(
                "{:.0} % of its flush size dirty",
                params.eadr_dirty_fraction * 100.0
            ),
            format!("{} B of log registers per core", params.silo_register_bytes),
            "over the one for Silo's log buffers alone".to_owned(),
        ] {
            assert!(rendered.title.contains(&said), "{said}: {}", rendered.title);
        }
        assert_eq!(rendered.columns[5], "volume × Silo's buffers");
        let number = |row: usize, column: usize| -> f64 {
            rendered.rows[row][column].parse().expect("a number")
        };
        let cores = f64::from(u32::try_from(table.cores).expect("a few cores"));
        let silo_buffers_uj = number(2, 1) * 1024.0 * params.nj_per_byte / 1000.0;
        let silo_uj = (number(2, 1) * 1024.0 + cores * params.silo_register_bytes as f64)
            * params.nj_per_byte
            / 1000.0;
        let eadr_uj =
            number(0, 1) * 1024.0 * params.eadr_dirty_fraction * params.nj_per_byte / 1000.0;
        let close = |a: f64, b: f64| (a - b).abs() <= 0.001 * b.abs().max(1.0);
        assert!(
            close(number(0, 2), eadr_uj),
            "{} vs {eadr_uj}",
            number(0, 2)
        );
        assert!(
            close(number(2, 2), silo_uj),
            "{} vs {silo_uj}",
            number(2, 2)
        );
        assert!(
            (number(0, 5) - eadr_uj / silo_buffers_uj).abs() < 0.1,
            "{} vs {}",
            number(0, 5),
            eadr_uj / silo_buffers_uj
        );
    }

    #[test]
    fn default_machine_battery_table_has_the_three_designs() {
        let config = hwsim::Config::default();
        let table = hwsim::battery::battery_table(&config, &Default::default());
        let rendered = battery_table(&table);
        let designs: Vec<&str> = rendered.rows.iter().map(|r| r[0].as_str()).collect();
        assert_eq!(designs, ["eadr", "bbb", "silo"]);
        assert!(
            rendered
                .rows
                .iter()
                .all(|r| r.len() == rendered.columns.len())
        );
        // Silo is the unit of the volume column.
        assert_eq!(rendered.rows[2][5], "1.0");
        assert_eq!(distinct([8, 8]), [8]);
    }
}
