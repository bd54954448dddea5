//! Write amplification by two definitions, computed from the counters a run collected.
//!
//! - **Ours** ([`Measurement::write_amplification`]): every PM byte the engine stored (all
//!   write classes: logs, data in place, allocator and engine metadata) per distinct byte
//!   the transactions asked to write. The same quotient for every engine that stores
//!   through the persistence seam.
//! - **TimeStone's** (ASPLOS 2020; the artifact's counters `n_oplog_written_bytes`,
//!   `n_tvlog_ckpt_bytes`, `n_ckptlog_writeback_bytes`, `n_flush_new_act_bytes` over
//!   `n_tvlog_cpobj_written_bytes`): operation-log + checkpoint-log + write-back bytes,
//!   plus the bytes of newly allocated objects, per byte of whole objects copied into the
//!   version log. Allocator metadata is not counted. The artifact's published runs leave
//!   the new-object counter at zero, so both variants are given: counting new objects,
//!   and as the artifact counts (new objects left out).
//!
//! The MVCC engine reports each term as an event counter. A logging engine keeps no version
//! log: the bytes its transactions copy into the log are the bytes they write (no write
//! is coalesced across transactions), so its analogue is its log and in-place bytes (its
//! metadata left out, as TimeStone leaves the allocator out) per user byte, the same in
//! both variants. PMDK stores outside the seam: nothing is counted.
//!
//! `docs/mvcc-format.md` §11 documents the formula.

use crate::runner::Measurement;
use mvcc::{
    CLOG_BYTES_EVENT, NEW_OBJECT_BYTES_EVENT, OLOG_BYTES_EVENT, TLOG_BYTES_EVENT,
    WRITEBACK_BYTES_EVENT,
};
use pmem::WriteClass;
use serde::Serialize;

/// TimeStone's write amplification in its two variants.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct TimeStoneAmplification {
    /// (OLog + CLog + write-back + new-object bytes) / version-log bytes.
    pub counting_new_objects: f64,
    /// (OLog + CLog + write-back bytes) / version-log bytes, as the artifact's published
    /// counters (new objects uncounted).
    pub artifact: f64,
    /// Whether the engine keeps a version log (`false`: a logging engine's analogue).
    pub version_log: bool,
}

impl Measurement {
    /// Ours: PM bytes per distinct user byte (`None` when nothing was counted).
    pub fn write_amplification(&self) -> Option<f64> {
        self.traffic.write_amplification
    }

    /// TimeStone's definition (or a logging engine's analogue; `None` when nothing was
    /// counted).
    pub fn timestone_amplification(&self) -> Option<TimeStoneAmplification> {
        match self.events.get(TLOG_BYTES_EVENT) {
            Some(&copied) => self.version_log_quotients(copied),
            None => self.logging_analogue(),
        }
    }

    fn version_log_quotients(&self, copied: u64) -> Option<TimeStoneAmplification> {
        if copied == 0 {
            return None;
        }
        let event = |name: &str| self.events.get(name).copied().unwrap_or(0);
        let logs = event(OLOG_BYTES_EVENT) + event(CLOG_BYTES_EVENT) + event(WRITEBACK_BYTES_EVENT);
        let new_objects = event(NEW_OBJECT_BYTES_EVENT);
        Some(TimeStoneAmplification {
            counting_new_objects: (logs + new_objects) as f64 / copied as f64,
            artifact: logs as f64 / copied as f64,
            version_log: true,
        })
    }

    fn logging_analogue(&self) -> Option<TimeStoneAmplification> {
        let c = &self.counters;
        let written = c.class_bytes(WriteClass::Log) + c.class_bytes(WriteClass::User);
        if c.user_bytes == 0 || written == 0 {
            return None;
        }
        let value = written as f64 / c.user_bytes as f64;
        Some(TimeStoneAmplification {
            counting_new_objects: value,
            artifact: value,
            version_log: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Summary;
    use crate::runner::Traffic;

    fn measurement(events: &[(&str, u64)], counters: pmem::Counters) -> Measurement {
        Measurement {
            engine: "e".into(),
            workload: "w".into(),
            threads: 1,
            ops: 1,
            throughput: Summary {
                median: 1.0,
                min: 1.0,
                max: 1.0,
                runs: 1,
            },
            latency_ns: [0; 3],
            traffic: Traffic::default(),
            counters,
            mix: Default::default(),
            events: events.iter().map(|&(n, v)| (n.to_owned(), v)).collect(),
            checked: true,
        }
    }

    #[test]
    fn timestone_counts_logs_and_write_back_per_version_log_byte() {
        let m = measurement(
            &[
                (TLOG_BYTES_EVENT, 1000),
                (OLOG_BYTES_EVENT, 400),
                (CLOG_BYTES_EVENT, 300),
                (WRITEBACK_BYTES_EVENT, 100),
                (NEW_OBJECT_BYTES_EVENT, 250),
                ("headers", 7),
            ],
            pmem::Counters::default(),
        );
        let ts = m.timestone_amplification().expect("counted");
        assert_eq!(ts.artifact, 0.8);
        assert_eq!(ts.counting_new_objects, 1.05);
        assert!(ts.version_log);
        let empty = measurement(&[(TLOG_BYTES_EVENT, 0)], pmem::Counters::default());
        assert_eq!(empty.timestone_amplification(), None);
    }

    #[test]
    fn a_logging_engine_leaves_its_metadata_out() {
        let mut counters = pmem::Counters {
            user_bytes: 100,
            ..Default::default()
        };
        counters.stored_bytes = [100, 150, 1000];
        counters.nt_bytes = [0, 50, 0];
        let ts = measurement(&[], counters)
            .timestone_amplification()
            .expect("counted");
        assert_eq!((ts.artifact, ts.counting_new_objects), (3.0, 3.0));
        assert!(!ts.version_log);
        let pmdk = measurement(&[], pmem::Counters::default());
        assert_eq!(pmdk.timestone_amplification(), None);
    }
}
