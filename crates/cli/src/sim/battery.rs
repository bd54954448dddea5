//! `ferrite sim battery`: the battery table (Silo's Table IV) of the simulated machine,
//! rendered as the `silo` evaluation section renders it.

use super::BatteryArgs;
use crate::eval::silo_tables::battery_table;
use hwsim::Config;
use hwsim::battery::BatteryParams;
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
    // The report's table title says "{n} cores" whatever n is; the command names one core
    // in the singular.
    writeln!(
        out,
        "Battery: what must be flushed on a power failure, {} (Silo Table IV)\n{}",
        crate::eval::silo::cores_text(table.cores),
        crate::eval::terminal_table(&rendered)
    )?;
    writeln!(out, "{}", assumptions(&table.params))?;
    Ok(())
}

/// The model's parameters in one sentence, so the table's numbers can be checked by hand.
fn assumptions(params: &BatteryParams) -> String {
    format!(
        "Drain energy {} nJ/B; eADR flushes the whole cache hierarchy, {:.0} % of it dirty; BBB \
         {} persist-buffer entries of {} B per core; Silo its log buffer plus {} B of registers \
         per core in the energy (\"volume × Silo\" compares the flushed structures alone, \
         registers excluded, as the paper's 888× does); super-capacitor {} mJ/mm³, lithium \
         thin film {} mJ/mm³.",
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

    /// A reader that went away: every write fails as a closed pipe does.
    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn one_core_is_one_core_and_the_volume_ratio_says_what_it_compares() {
        let mut out = Vec::new();
        run(
            &BatteryArgs {
                cores: 1,
                json: false,
            },
            &mut out,
        )
        .expect("battery table");
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.contains("power failure, 1 core (Silo"), "{text}");
        assert!(!text.contains("1 cores"), "{text}");
        assert!(text.contains("registers excluded"), "{text}");
    }

    #[test]
    fn a_closed_output_is_an_io_error_returned_not_a_panic() {
        for json in [false, true] {
            let error =
                run(&BatteryArgs { cores: 8, json }, &mut ClosedPipe).expect_err("the write fails");
            let io = error
                .downcast_ref::<std::io::Error>()
                .expect("an I/O error");
            assert_eq!(io.kind(), std::io::ErrorKind::BrokenPipe);
        }
    }
}
