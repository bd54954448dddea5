//! `ferrite sim battery`: the battery table (Silo's Table IV) of the simulated machine, and
//! the report table the `silo` evaluation section shows.

use super::BatteryArgs;
use crate::report::Table;
use hwsim::Config;
use hwsim::battery::{BatteryParams, BatteryTable};
use std::io::Write;

/// Runs `sim battery`: the table of the default machine with `--cores` cores.
pub fn run(args: &BatteryArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    // clap keeps --cores in 1..=64.
    let config = Config::default().with_cores(args.cores as usize);
    let table = hwsim::battery::battery_table(&config, &BatteryParams::default());
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&table)?)?;
        return Ok(());
    }
    let rendered = battery_table(&table);
    writeln!(
        out,
        "{}\n{}",
        rendered.title,
        crate::eval::terminal_table(&rendered)
    )?;
    writeln!(out, "{}", assumptions(&table.params))?;
    Ok(())
}

/// The battery table as a report table: one row per design (eADR, BBB, Silo).
pub fn battery_table(table: &BatteryTable) -> Table {
    let mut rendered = Table::new(
        format!(
            "Battery: what must be flushed on a power failure, {} cores (Silo Table IV)",
            table.cores
        ),
        &[
            "design",
            "flush size KB",
            "energy µJ",
            "super-capacitor mm³",
            "Li thin film mm³",
            "volume × Silo",
        ],
    );
    for row in &table.rows {
        rendered.push(vec![
            row.design.clone(),
            format!("{:.4}", row.flush_kb),
            format!("{:.1}", row.energy_uj),
            format!("{:.3}", row.capacitor_mm3),
            format!("{:.5}", row.lithium_mm3),
            format!("{:.1}", row.volume_vs_silo),
        ]);
    }
    rendered
}

/// The model's parameters in one sentence, so the table's numbers can be checked by hand.
fn assumptions(params: &BatteryParams) -> String {
    format!(
        "Drain energy {} nJ/B; eADR flushes the whole cache hierarchy, {:.0} % of it dirty; BBB \
         {} persist-buffer entries of {} B per core; Silo its log buffer plus {} B of registers \
         per core; super-capacitor {} mJ/mm³, lithium thin film {} mJ/mm³.",
        params.nj_per_byte,
        100.0 * params.eadr_dirty_fraction,
        params.bbb_entries,
        params.bbb_entry_bytes,
        params.silo_register_bytes,
        params.capacitor_mj_per_mm3,
        params.lithium_mj_per_mm3
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_machine_table_has_the_three_designs() {
        let table = hwsim::battery::battery_table(&Config::default(), &BatteryParams::default());
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
    }
}
