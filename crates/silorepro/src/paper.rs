//! The numbers Silo (Zhang & Hua, "Silo: Speculative Hardware Logging for Atomic Durability
//! in Persistent Memory", HPCA 2023) reports, typed and keyed by [`DesignKind`]: the one place
//! the reproduction (`compare`), its report and its plots take the paper's targets from.
//!
//! Sources: the paper's figures and tables as quoted by a detailed reading of the paper and by
//! its talk slides (Table II, the 1-core/8-core speed-up table, Table IV). Values the paper
//! only implies (throughput and write bytes normalised to FWB) are derived from the ones it
//! states, never typed in twice.

use hwsim::DesignKind;
use hwsim::battery::BatteryScheme;
use serde::{Deserialize, Serialize};

/// The core count of the paper's headline numbers.
pub const CORES: usize = 8;

/// A throughput ratio the paper reports: `design` over `over` at `cores` (geometric mean
/// over its workloads).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Speedup {
    /// The faster design.
    pub design: DesignKind,
    /// The design it is compared with.
    pub over: DesignKind,
    /// Simulated cores.
    pub cores: usize,
    /// The paper's ratio (×).
    pub paper: f64,
}

/// Fig. 12 (8 cores: Silo 1.5× LAD, 4.3× MorLog, 6.4× FWB; MorLog ≈ 1.5× FWB) and the
/// slides' 1-core column (1.4× hardware logging, i.e. MorLog; 1.1× LAD).
pub const SPEEDUPS: [Speedup; 6] = [
    speedup(DesignKind::Silo, DesignKind::Lad, CORES, 1.5),
    speedup(DesignKind::Silo, DesignKind::MorLog, CORES, 4.3),
    speedup(DesignKind::Silo, DesignKind::Fwb, CORES, 6.4),
    speedup(DesignKind::MorLog, DesignKind::Fwb, CORES, 1.5),
    speedup(DesignKind::Silo, DesignKind::MorLog, 1, 1.4),
    speedup(DesignKind::Silo, DesignKind::Lad, 1, 1.1),
];

const fn speedup(design: DesignKind, over: DesignKind, cores: usize, paper: f64) -> Speedup {
    Speedup {
        design,
        over,
        cores,
        paper,
    }
}

/// The paper's speed-up of `design` over `over` at `cores`, if it gives one.
pub fn speedup_of(design: DesignKind, over: DesignKind, cores: usize) -> Option<f64> {
    SPEEDUPS
        .iter()
        .find(|s| s.design == design && s.over == over && s.cores == cores)
        .map(|s| s.paper)
}

/// Silo's cut of PM write traffic against `over` at [`CORES`] cores (Fig. 11).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WriteCut {
    /// The design Silo is compared with.
    pub over: DesignKind,
    /// The fraction of `over`'s bytes Silo does not write.
    pub cut: f64,
}

impl WriteCut {
    /// What is left: Silo's bytes over `over`'s.
    pub fn share(&self) -> f64 {
        1.0 - self.cut
    }
}

/// Fig. 11 and the abstract: −76.5 % against MorLog, −82 % against FWB.
pub const WRITE_CUTS: [WriteCut; 2] = [
    WriteCut {
        over: DesignKind::MorLog,
        cut: 0.765,
    },
    WriteCut {
        over: DesignKind::Fwb,
        cut: 0.82,
    },
];

/// The 8-core throughput ordering of Fig. 12, slowest first.
pub const THROUGHPUT_ORDER: [DesignKind; 5] = [
    DesignKind::Base,
    DesignKind::Fwb,
    DesignKind::MorLog,
    DesignKind::Lad,
    DesignKind::Silo,
];

/// Fig. 11's ordering of PM writes: Base writes the most, Silo the least.
pub const MOST_WRITES: DesignKind = DesignKind::Base;
/// See [`MOST_WRITES`].
pub const FEWEST_WRITES: DesignKind = DesignKind::Silo;

/// The paper's 8-core geometric-mean throughput of `design` normalised to FWB, derived from
/// [`SPEEDUPS`] (Silo 6.4; LAD 6.4 / 1.5; MorLog 6.4 / 4.3).
pub fn throughput_vs_fwb(design: DesignKind) -> Option<f64> {
    let silo = speedup_of(DesignKind::Silo, DesignKind::Fwb, CORES)?;
    match design {
        DesignKind::Fwb => Some(1.0),
        DesignKind::Silo => Some(silo),
        other => Some(silo / speedup_of(DesignKind::Silo, other, CORES)?),
    }
}

/// The paper's 8-core PM write bytes of `design` normalised to FWB, derived from
/// [`WRITE_CUTS`] (Silo 1 − 0.82; MorLog Silo's over 1 − 0.765).
pub fn write_bytes_vs_fwb(design: DesignKind) -> Option<f64> {
    let share = |over| {
        WRITE_CUTS
            .iter()
            .find(|c| c.over == over)
            .map(WriteCut::share)
    };
    let silo = share(DesignKind::Fwb)?;
    match design {
        DesignKind::Fwb => Some(1.0),
        DesignKind::Silo => Some(silo),
        other => Some(silo / share(other)?),
    }
}

/// Fig. 13: ignoring silent stores and merging remove 64.3 % of the log entries on average.
pub const LOG_REDUCTION: f64 = 0.643;
/// Fig. 13: 90.4 % of Array's word stores are silent.
pub const ARRAY_SILENT: f64 = 0.904;
/// Fig. 13: the most live entries one transaction leaves after ignore + merge (Hash), which
/// sizes the 20-entry (680 B) buffer.
pub const MAX_LIVE_ENTRIES: u64 = 20;

/// A throughput loss the paper reports at one point of a sweep.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SweepLoss {
    /// The swept value (cycles, or a multiple of the log buffer).
    pub value: u64,
    /// The fraction of throughput lost against the sweep's reference.
    pub loss: f64,
}

/// Fig. 15: a 128-cycle log buffer loses 3.3 % against an 8-cycle one.
pub const LATENCY_LOSS: SweepLoss = SweepLoss {
    value: 128,
    loss: 0.033,
};
/// Fig. 14: write sets of 16× the log buffer lose 7.4 %.
pub const TX_SIZE_LOSS: SweepLoss = SweepLoss {
    value: 16,
    loss: 0.074,
};
/// Fig. 14: those transactions grow PM write traffic by at most ~1.9× (a bound).
pub const TX_SIZE_WRITE_GROWTH_MAX: f64 = 1.9;

/// One row of Table IV (8 cores).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatteryTarget {
    /// The scheme.
    pub scheme: BatteryScheme,
    /// What it must flush on a failure, KB.
    pub flush_kb: f64,
    /// The flush energy, µJ.
    pub energy_uj: f64,
    /// Its storage volume over Silo's (Silo's own row has none).
    pub volume_vs_silo: Option<f64>,
}

/// Table IV: eADR 10,496 KB and 54,377 µJ (888.2× Silo's volume), BBB 16 KB and 194 µJ
/// (3.2×), Silo 5.3125 KB and 62 µJ.
pub const BATTERY: [BatteryTarget; 3] = [
    BatteryTarget {
        scheme: BatteryScheme::Eadr,
        flush_kb: 10_496.0,
        energy_uj: 54_377.0,
        volume_vs_silo: Some(888.2),
    },
    BatteryTarget {
        scheme: BatteryScheme::Bbb,
        flush_kb: 16.0,
        energy_uj: 194.0,
        volume_vs_silo: Some(3.2),
    },
    BatteryTarget {
        scheme: BatteryScheme::Silo,
        flush_kb: 5.3125,
        energy_uj: 62.0,
        volume_vs_silo: None,
    },
];

/// The paper's Table IV row of `scheme`.
pub fn battery_of(scheme: BatteryScheme) -> Option<&'static BatteryTarget> {
    BATTERY.iter().find(|t| t.scheme == scheme)
}

/// Which of the paper's numbers a [`crate::Comparison`] is about: the typed key the report
/// picks comparisons by.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// Throughput of `design` over `over` at `cores`.
    Speedup {
        /// The faster design.
        design: DesignKind,
        /// The other.
        over: DesignKind,
        /// Simulated cores.
        cores: usize,
    },
    /// Silo's PM write bytes over `over`'s at `cores` (1 − the paper's cut).
    WriteShare {
        /// The other design.
        over: DesignKind,
        /// Simulated cores.
        cores: usize,
    },
    /// The throughput ordering [`THROUGHPUT_ORDER`] at `cores`.
    ThroughputOrder {
        /// Simulated cores.
        cores: usize,
    },
    /// [`MOST_WRITES`] writes the most, [`FEWEST_WRITES`] the least, at `cores`.
    WriteOrder {
        /// Simulated cores.
        cores: usize,
    },
    /// [`LOG_REDUCTION`].
    LogReduction,
    /// [`ARRAY_SILENT`].
    ArraySilent,
    /// [`MAX_LIVE_ENTRIES`].
    MaxLiveEntries,
    /// [`LATENCY_LOSS`].
    LatencyLoss,
    /// [`TX_SIZE_LOSS`].
    TxSizeLoss,
    /// [`TX_SIZE_WRITE_GROWTH_MAX`].
    TxSizeWriteGrowth,
    /// One number of a Table IV row.
    Battery {
        /// The row.
        scheme: BatteryScheme,
        /// The column.
        quantity: BatteryQuantity,
    },
}

impl Target {
    /// An ordering the paper states (1 = holds, 0 = does not): no number to set beside
    /// the paper's, so a miss reads "does not hold", not a ratio.
    pub fn is_ordering(self) -> bool {
        matches!(
            self,
            Target::ThroughputOrder { .. } | Target::WriteOrder { .. }
        )
    }
}

/// A column of Table IV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatteryQuantity {
    /// Flush size, KB.
    FlushKb,
    /// Flush energy, µJ.
    EnergyUj,
    /// Storage volume relative to Silo's.
    VolumeVsSilo,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalised_targets_follow_from_the_stated_ones() {
        let close = |a: f64, b: f64| (a - b).abs() < 0.005;
        assert!(close(throughput_vs_fwb(DesignKind::Silo).unwrap(), 6.4));
        assert!(close(throughput_vs_fwb(DesignKind::Lad).unwrap(), 4.27));
        assert!(close(throughput_vs_fwb(DesignKind::MorLog).unwrap(), 1.49));
        assert_eq!(throughput_vs_fwb(DesignKind::Base), None);
        assert!(close(write_bytes_vs_fwb(DesignKind::Silo).unwrap(), 0.18));
        assert!(close(
            write_bytes_vs_fwb(DesignKind::MorLog).unwrap(),
            0.766
        ));
        assert_eq!(write_bytes_vs_fwb(DesignKind::Lad), None);
        assert_eq!(speedup_of(DesignKind::Silo, DesignKind::Lad, 1), Some(1.1));
        assert_eq!(battery_of(BatteryScheme::Bbb).unwrap().energy_uj, 194.0);
    }
}
