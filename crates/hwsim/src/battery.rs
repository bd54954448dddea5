//! The battery / energy model Silo's Table IV uses (BBB's methodology): the energy to drain a
//! design's battery-backed state on a power failure is the bytes to flush times a per-byte
//! cost, and the storage needed is that energy over an energy density.
//!
//! * **eADR** flushes the whole cache hierarchy (`cores × (L1 + L2) + LLC`), of which a
//!   fraction is assumed dirty (≈45 %, which reproduces the paper's 54,377 µJ).
//! * **BBB** flushes its battery-backed persist buffers (`cores × 32 entries × 64 B`).
//! * **Silo** flushes its log buffers (`cores × 680 B`) plus the log head/tail registers
//!   (`cores × 16 B`).
//!
//! Drain cost 11.228 nJ/B; densities: lithium thin film 36 mJ/mm³ (10⁻² Wh/cm³),
//! super-capacitor 0.36 mJ/mm³ (10⁻⁴ Wh/cm³), the densities that reproduce Silo's Table I
//! and SecPB's (HPCA'23) figures.

use crate::config::Config;
use serde::{Deserialize, Serialize};

/// Parameters of the energy model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatteryParams {
    /// Energy to drain one byte (read it, move it on chip, write it to NVM), nJ.
    pub nj_per_byte: f64,
    /// Fraction of the cache hierarchy assumed dirty at the failure (eADR).
    pub eadr_dirty_fraction: f64,
    /// BBB persist-buffer entries per core.
    pub bbb_entries: u64,
    /// Bytes per BBB entry.
    pub bbb_entry_bytes: u64,
    /// Silo's log head/tail registers per core, bytes.
    pub silo_register_bytes: u64,
    /// Super-capacitor energy density, mJ per mm³.
    pub capacitor_mj_per_mm3: f64,
    /// Lithium thin-film energy density, mJ per mm³.
    pub lithium_mj_per_mm3: f64,
}

impl Default for BatteryParams {
    fn default() -> Self {
        BatteryParams {
            nj_per_byte: 11.228,
            eadr_dirty_fraction: 0.45,
            bbb_entries: 32,
            bbb_entry_bytes: 64,
            silo_register_bytes: 16,
            capacitor_mj_per_mm3: 0.36,
            lithium_mj_per_mm3: 36.0,
        }
    }
}

/// The three ways of surviving a power failure that Silo's Table IV compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BatteryScheme {
    /// Intel's extended ADR: the whole cache hierarchy is flushed.
    Eadr,
    /// Battery-backed persist buffers (HPCA'21).
    Bbb,
    /// Silo's battery-backed log buffers.
    Silo,
}

impl BatteryScheme {
    /// The table's rows, in its order.
    pub const ALL: [BatteryScheme; 3] =
        [BatteryScheme::Eadr, BatteryScheme::Bbb, BatteryScheme::Silo];

    /// Lower-case name (JSON, tables).
    pub fn name(self) -> &'static str {
        match self {
            BatteryScheme::Eadr => "eadr",
            BatteryScheme::Bbb => "bbb",
            BatteryScheme::Silo => "silo",
        }
    }

    /// The paper's spelling.
    pub fn label(self) -> &'static str {
        match self {
            BatteryScheme::Eadr => "eADR",
            BatteryScheme::Bbb => "BBB",
            BatteryScheme::Silo => "Silo",
        }
    }
}

/// One design's row of the battery table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatteryRow {
    /// Which scheme.
    pub design: BatteryScheme,
    /// What must be flushed on a failure (the structure's capacity), bytes.
    pub flush_bytes: u64,
    /// The same in KB (1024 B), as the paper's table gives it.
    pub flush_kb: f64,
    /// Bytes actually drained (eADR: the dirty fraction; Silo: plus its registers).
    pub drained_bytes: f64,
    /// Drain energy, µJ.
    pub energy_uj: f64,
    /// Super-capacitor volume holding that energy, mm³.
    pub capacitor_mm3: f64,
    /// Lithium thin-film volume holding that energy, mm³.
    pub lithium_mm3: f64,
    /// Storage volume relative to Silo's (energy of the flushed structures only, registers
    /// excluded, which is how the paper's 888× and 3.2× come out).
    pub volume_vs_silo: f64,
}

/// The table for a configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatteryTable {
    /// Cores of the configuration.
    pub cores: usize,
    /// The parameters used.
    pub params: BatteryParams,
    /// eADR, BBB, Silo.
    pub rows: Vec<BatteryRow>,
    /// Silo's per-core log-buffer battery (lithium thin film), mm³ (Table I: 2.125×10⁻⁴).
    pub silo_per_core_lithium_mm3: f64,
}

impl BatteryTable {
    /// The row of `design`.
    pub fn row(&self, design: BatteryScheme) -> Option<&BatteryRow> {
        self.rows.iter().find(|r| r.design == design)
    }
}

/// Computes the battery table of `cfg` (cores, cache sizes, Silo's buffer size).
pub fn battery_table(cfg: &Config, params: &BatteryParams) -> BatteryTable {
    let cores = cfg.cores as u64;
    let hierarchy = cores * (cfg.l1.size_bytes + cfg.l2.size_bytes) + cfg.llc.size_bytes;
    let bbb = cores * params.bbb_entries * params.bbb_entry_bytes;
    let silo_buffer = cfg.silo.entries as u64 * cfg.silo.entry_bytes;
    let silo = cores * silo_buffer;
    let registers = cores * params.silo_register_bytes;
    let uj = |bytes: f64| bytes * params.nj_per_byte / 1000.0;
    let silo_volume_energy = uj(silo as f64);
    let row = |design: BatteryScheme, flush: u64, drained: f64, volume_energy: f64| {
        let energy = uj(drained);
        BatteryRow {
            design,
            flush_bytes: flush,
            flush_kb: flush as f64 / 1024.0,
            drained_bytes: drained,
            energy_uj: energy,
            capacitor_mm3: energy / 1000.0 / params.capacitor_mj_per_mm3,
            lithium_mm3: energy / 1000.0 / params.lithium_mj_per_mm3,
            volume_vs_silo: volume_energy / silo_volume_energy,
        }
    };
    let eadr_drained = hierarchy as f64 * params.eadr_dirty_fraction;
    let rows = vec![
        row(
            BatteryScheme::Eadr,
            hierarchy,
            eadr_drained,
            uj(eadr_drained),
        ),
        row(BatteryScheme::Bbb, bbb, bbb as f64, uj(bbb as f64)),
        row(
            BatteryScheme::Silo,
            silo,
            (silo + registers) as f64,
            silo_volume_energy,
        ),
    ];
    BatteryTable {
        cores: cfg.cores,
        params: params.clone(),
        rows,
        silo_per_core_lithium_mm3: uj(silo_buffer as f64) / 1000.0 / params.lithium_mj_per_mm3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: f64, want: f64, rel: f64) -> bool {
        (got / want - 1.0).abs() <= rel
    }

    /// The paper's Table IV for 8 cores: eADR 10,496 KB / 54,377 µJ, BBB 16 KB / 194 µJ,
    /// Silo 5.3125 KB / 62 µJ; volumes 888.2× and 3.2× Silo's.
    #[test]
    fn default_config_reproduces_table_iv() {
        let t = battery_table(&Config::default(), &BatteryParams::default());
        let (eadr, bbb, silo) = (
            t.row(BatteryScheme::Eadr).unwrap(),
            t.row(BatteryScheme::Bbb).unwrap(),
            t.row(BatteryScheme::Silo).unwrap(),
        );
        assert_eq!(eadr.flush_kb, 10_496.0);
        assert!(close(eadr.energy_uj, 54_377.0, 0.002), "{}", eadr.energy_uj);
        assert_eq!(bbb.flush_kb, 16.0);
        // 16 KB × 11.228 nJ/B = 184 µJ; the paper's 194 µJ is 5.2 % more: it evidently comes
        // from BBB's own energy model, not from the per-byte cost used for the other rows.
        assert!(close(bbb.energy_uj, 183.96, 0.001), "{}", bbb.energy_uj);
        assert!(close(bbb.energy_uj, 194.0, 0.06));
        assert_eq!(silo.flush_kb, 5.3125);
        assert!(close(silo.energy_uj, 62.0, 0.01), "{}", silo.energy_uj);
        assert!(
            close(eadr.volume_vs_silo, 888.2, 0.002),
            "{}",
            eadr.volume_vs_silo
        );
        // 3.2× is 194 µJ / 61.1 µJ; with 184 µJ it is 3.0×.
        assert!(
            close(bbb.volume_vs_silo, 3.2, 0.07),
            "{}",
            bbb.volume_vs_silo
        );
        assert!(close(194.0 / uj_silo(&t), 3.2, 0.01));
        assert!(close(t.silo_per_core_lithium_mm3, 2.125e-4, 0.01));
        assert!(close(eadr.capacitor_mm3 / eadr.lithium_mm3, 100.0, 1e-9));
    }

    fn uj_silo(t: &BatteryTable) -> f64 {
        t.row(BatteryScheme::Silo).unwrap().flush_bytes as f64 * t.params.nj_per_byte / 1000.0
    }

    #[test]
    fn the_table_scales_with_the_configuration() {
        let mut cfg = Config::default().with_cores(1);
        cfg.silo.entries = 40;
        let t = battery_table(&cfg, &BatteryParams::default());
        assert_eq!(t.row(BatteryScheme::Silo).unwrap().flush_bytes, 40 * 34);
        assert_eq!(t.row(BatteryScheme::Bbb).unwrap().flush_bytes, 2048);
        assert_eq!(
            t.row(BatteryScheme::Eadr).unwrap().flush_bytes,
            (32 << 10) + (256 << 10) + (8 << 20)
        );
        let json = serde_json::to_string(&t).unwrap();
        let back: BatteryTable = serde_json::from_str(&json).unwrap();
        assert_eq!(back.rows.len(), 3);
        assert_eq!(back.rows[2].flush_bytes, t.rows[2].flush_bytes);
    }
}
