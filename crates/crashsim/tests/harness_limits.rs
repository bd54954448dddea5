//! The harness's limits and guards, as a user writing their own scenario meets them: a
//! recovery that loops forever is reported (not hung), `max_failures: 0` does not pass
//! vacuously, replay refuses a failure found under another persistence domain, and a
//! durability assertion about bytes outside the region is refused.

use crashsim::toy::{Mutation, ToyScenario};
use crashsim::{Config, Problem, Scenario, SimConfig, SimMode, SimPm, check, replay};
use pmem::{Persist, WriteClass};

const NODES: u64 = 8;

/// A persistent stack of nodes `(value, next)` at `64 * k`, head pointer at 0. A free node
/// is marked by pointing at itself. With `flush_node == false` the push persists the head
/// but never flushes the node, so a crash image can have the head naming a node that still
/// points at itself, and the recovery's walk never ends.
struct Stack {
    flush_node: bool,
}

impl Scenario for Stack {
    type Model = Vec<u64>;
    type Live = SimPm;

    fn name(&self) -> String {
        format!("stack(flush_node={})", self.flush_node)
    }
    fn pool_size(&self) -> u64 {
        64 * (NODES + 1)
    }
    fn op_count(&self) -> usize {
        3
    }
    fn initial_model(&self) -> Vec<u64> {
        Vec::new()
    }
    fn apply_to_model(&self, model: &mut Vec<u64>, op: usize) {
        model.insert(0, op as u64 + 100);
    }
    fn setup(&self, pm: SimPm) -> SimPm {
        for k in 1..=NODES {
            pm.write_u64(64 * k + 8, 64 * k, WriteClass::Meta);
        }
        pm.persist(0, pm.len());
        pm
    }
    fn run_op(&self, pm: &mut SimPm, op: usize) {
        let node = 64 * (op as u64 + 1);
        let head = pm.read_u64(0);
        pm.write_u64(node, op as u64 + 100, WriteClass::User);
        pm.write_u64(node + 8, head, WriteClass::Meta);
        if self.flush_node {
            pm.flush(node, 16);
        }
        pm.fence();
        pm.write_u64(0, node, WriteClass::Meta);
        pm.persist(0, 8);
        pm.durability_point();
    }
    fn recover(&self, pm: SimPm) -> Result<Vec<u64>, String> {
        let mut values = Vec::new();
        let mut at = pm.read_u64(0);
        while at != 0 {
            values.push(pm.read_u64(at));
            at = pm.read_u64(at + 8);
        }
        Ok(values)
    }
}

fn small_limit(mode: SimMode) -> Config {
    Config {
        recovery_step_limit: Some(10_000),
        ..Config::thorough(mode, 1)
    }
}

#[test]
fn a_recovery_that_loops_forever_is_reported_and_replayed() {
    let good = Stack { flush_node: true };
    check(&good, &small_limit(SimMode::Adr)).assert_passed();
    let bad = Stack { flush_node: false };
    let config = small_limit(SimMode::Adr);
    let report = check(&bad, &config);
    let failure = report.failures.first().expect("the endless walk is caught");
    let Problem::RecoveryPanicked(message) = &failure.problem else {
        panic!("expected a stopped recovery, got {failure}");
    };
    assert!(message.contains("step limit"), "{failure}");
    let replayed = replay(&bad, &config, failure).expect_err("replay stops it again");
    assert!(replayed.contains("step limit"), "{replayed}");
    // The presets set a limit too.
    assert!(
        Config::thorough(SimMode::Adr, 0)
            .recovery_step_limit
            .is_some()
    );
    assert!(Config::quick(SimMode::Adr).recovery_step_limit.is_some());
}

#[test]
fn the_step_limit_counts_seam_calls_and_can_be_lifted() {
    let pm = SimPm::new(64, SimConfig::default());
    pm.set_step_limit(Some(3));
    pm.write_u64(0, 1, WriteClass::User);
    pm.flush(0, 8);
    pm.fence();
    let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pm.read_u64(0)));
    assert!(stopped.is_err(), "the fourth seam call is over the limit");
    pm.set_step_limit(None);
    assert_eq!(pm.read_u64(0), 1);
}

#[test]
fn max_failures_zero_checks_everything() {
    let scenario = ToyScenario::mutant(Mutation::CommitBeforeLog, 6);
    let limited = check(&scenario, &Config::thorough(SimMode::Adr, 1));
    assert_eq!(limited.failures.len(), 5);
    let unlimited = check(
        &scenario,
        &Config {
            max_failures: 0,
            ..Config::thorough(SimMode::Adr, 1)
        },
    );
    assert!(!unlimited.passed(), "{unlimited}");
    assert!(unlimited.failures.len() > 5, "{unlimited}");
}

#[test]
fn replay_refuses_a_failure_found_under_another_domain() {
    let scenario = ToyScenario::mutant(Mutation::CommitBeforeLog, 6);
    let eadr = Config::thorough(SimMode::Eadr, 1);
    let report = check(&scenario, &eadr);
    let failure = report.failures.first().expect("caught under eADR");
    let refused = replay(&scenario, &Config::thorough(SimMode::Adr, 1), failure)
        .expect_err("another domain builds other images");
    assert!(refused.contains("eadr"), "{refused}");
}

#[test]
#[should_panic(expected = "PM access out of bounds")]
fn is_pending_refuses_a_range_outside_the_region() {
    let pm = SimPm::new(64, SimConfig::default());
    pm.write_u64(0, 1, WriteClass::User);
    let _ = pm.is_pending(64, 8);
}

#[test]
fn a_snapshot_with_nothing_pending_gives_one_image_under_any_budget() {
    let pm = SimPm::new(64, SimConfig::default());
    let snapshot = pm.crash_now();
    let budget = crashsim::Budget {
        exhaustive_max: 0,
        random: 4,
    };
    assert_eq!(crashsim::image::choices(&snapshot, &budget, 1).len(), 1);
}

#[test]
#[should_panic(expected = "lower exhaustive_max")]
fn an_exhaustive_budget_beyond_what_fits_is_refused() {
    // 21 lines with one pending store each: 2^21 images, over the enumeration limit.
    let pm = SimPm::new(64 * 21, SimConfig::default());
    for line in 0..21 {
        pm.write_u64(line * 64, 1, WriteClass::User);
    }
    let snapshot = pm.crash_now();
    assert!(snapshot.image_count() > u128::from(crashsim::image::MAX_EXHAUSTIVE));
    let budget = crashsim::Budget {
        exhaustive_max: u64::MAX,
        random: 0,
    };
    let _ = crashsim::image::choices(&snapshot, &budget, 1);
}

/// Recovery panics on every image whose word 0 is odd.
struct PanicsOnOdd;

impl Scenario for PanicsOnOdd {
    type Model = u64;
    type Live = SimPm;

    fn name(&self) -> String {
        "panics-on-odd".into()
    }
    fn pool_size(&self) -> u64 {
        64
    }
    fn op_count(&self) -> usize {
        2
    }
    fn initial_model(&self) -> u64 {
        0
    }
    fn apply_to_model(&self, model: &mut u64, op: usize) {
        *model = op as u64 + 1;
    }
    fn setup(&self, pm: SimPm) -> SimPm {
        pm
    }
    fn run_op(&self, pm: &mut SimPm, op: usize) {
        pm.write_u64(0, op as u64 + 1, WriteClass::User);
        pm.persist(0, 8);
        pm.durability_point();
    }
    fn recover(&self, pm: SimPm) -> Result<u64, String> {
        let word = pm.read_u64(0);
        assert!(word.is_multiple_of(2), "odd word {word}");
        Ok(word)
    }
}

#[test]
fn a_replayed_panic_reads_as_the_report_prints_it() {
    let config = Config::thorough(SimMode::Adr, 1);
    let report = check(&PanicsOnOdd, &config);
    let failure = report.failures.first().expect("caught");
    assert!(
        matches!(failure.problem, Problem::RecoveryPanicked(_)),
        "{failure}"
    );
    let replayed = replay(&PanicsOnOdd, &config, failure).expect_err("panics again");
    assert_eq!(replayed, failure.problem.to_string());
    assert!(
        replayed.starts_with("recovery panicked: odd word 1"),
        "{replayed:?}"
    );
}
