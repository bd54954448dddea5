//! What the harness claims to explore, checked from the images recovery actually sees: every
//! fence of every operation (and the end) is a crash point, and at each one every state the
//! model allows is built — a flushed line persisted or not, each prefix of a line that was
//! never flushed, each non-temporal store alone — under ADR; under eADR, exactly the
//! prefixes of the global store order.

use crashsim::{Budget, Config, Scenario, SimMode, SimPm, check};
use parking_lot::Mutex;
use pmem::{Persist, WriteClass};
use std::collections::BTreeSet;

/// Fences per operation.
const FENCES: u64 = 3;
const OPS: usize = 2;

/// At its `k`-th fence (1-based over the run's operations) an operation has stored `k` in
/// word 0 (flushed), in word 64 (never flushed) and, streamed, in word 128. Recovery
/// records the three words it sees.
struct Counter {
    seen: Mutex<BTreeSet<(u64, u64, u64)>>,
}

impl Scenario for Counter {
    type Model = ();
    type Live = SimPm;

    fn name(&self) -> String {
        "counter".into()
    }
    fn pool_size(&self) -> u64 {
        192
    }
    fn op_count(&self) -> usize {
        OPS
    }
    fn initial_model(&self) {}
    fn apply_to_model(&self, _: &mut (), _: usize) {}
    fn setup(&self, pm: SimPm) -> SimPm {
        pm
    }
    fn run_op(&self, pm: &mut SimPm, op: usize) {
        for j in 0..FENCES {
            let k = op as u64 * FENCES + j + 1;
            pm.write_u64(0, k, WriteClass::User);
            pm.write_u64(64, k, WriteClass::User);
            pm.write_nt(128, &k.to_le_bytes(), WriteClass::User);
            pm.flush(0, 8);
            pm.fence();
        }
    }
    fn recover(&self, pm: SimPm) -> Result<(), String> {
        let words = (pm.read_u64(0), pm.read_u64(64), pm.read_u64(128));
        self.seen.lock().insert(words);
        Ok(())
    }
}

fn seen(mode: SimMode) -> BTreeSet<(u64, u64, u64)> {
    let scenario = Counter {
        seen: Mutex::new(BTreeSet::new()),
    };
    let config = Config {
        budget: Budget {
            exhaustive_max: 1 << 12,
            random: 0,
        },
        double_crash: None,
        max_failures: 0,
        ..Config::thorough(mode, 1)
    };
    let report = check(&scenario, &config);
    report.assert_passed();
    let total = OPS as u64 * FENCES;
    // Every fence and the end.
    assert_eq!(report.crash_points, total + 1, "{report}");
    scenario.seen.into_inner()
}

#[test]
fn every_fence_and_every_adr_state_is_recovered() {
    let seen = seen(SimMode::Adr);
    let total = OPS as u64 * FENCES;
    let mut expected = BTreeSet::new();
    for k in 1..=total {
        // Before fence k: word 0 holds k - 1 durably and k flushed but not fenced; word 64
        // has any prefix of its k unflushed stores; word 128's streamed k persisted or not
        // (the earlier ones were made durable by their fences).
        for w0 in [k - 1, k] {
            for w64 in 0..=k {
                for w128 in [k - 1, k] {
                    expected.insert((w0, w64, w128));
                }
            }
        }
    }
    // At the end every fence has completed: only word 64 is still pending.
    for w64 in 0..=total {
        expected.insert((total, w64, total));
    }
    assert_eq!(seen, expected);
}

#[test]
fn every_fence_and_every_eadr_prefix_is_recovered() {
    let seen = seen(SimMode::Eadr);
    let total = OPS as u64 * FENCES;
    let mut expected = BTreeSet::new();
    for k in 1..=total {
        // Every earlier store is durable (each fence completed them); the write-back stores
        // of this epoch persist as a prefix of program order (word 0, then word 64); the
        // streamed one on its own.
        for (w0, w64) in [(k - 1, k - 1), (k, k - 1), (k, k)] {
            for w128 in [k - 1, k] {
                expected.insert((w0, w64, w128));
            }
        }
    }
    expected.insert((total, total, total));
    assert_eq!(seen, expected);
}
