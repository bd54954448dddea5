//! Crash tests of the persistent log under the simulator: every fence of every operation
//! (commits, multi-record epochs standing for open sections, checkpoints forced by a small
//! log), structured and random images, double crash, ADR and eADR, clwb and clflush; and
//! every mutant of the protocol must be caught.

use crashsim::{Config as HarnessConfig, Scenario, SimConfig, SimMode, SimPm, check};
use nvthreads::journal::Mutation;
use nvthreads::{Config, Journal, JournalState, Run};
use pmem::FlushInstr;
use std::fmt;

const HEAP: u64 = 8192;
const LOG: u64 = 2048;

fn config() -> Config {
    Config {
        heap_len: HEAP,
        log_len: LOG,
        base_addr: nvthreads::DEFAULT_BASE_ADDR,
    }
}

/// The home image, printed as a digest (failure reports print models).
#[derive(Clone, PartialEq, Eq)]
struct Image(Vec<u8>);

impl fmt::Debug for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nonzero = self.0.iter().filter(|&&b| b != 0).count();
        write!(
            f,
            "image(crc {:08x}, {nonzero} non-zero bytes)",
            crc32fast_hash(&self.0)
        )
    }
}

fn crc32fast_hash(bytes: &[u8]) -> u32 {
    // A tiny FNV digest is enough to tell images apart in a report.
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Where every op stores its own number (8 bytes): replaying an older record after a newer
/// one (a regression) shows up in the model.
const COUNTER_AT: u64 = HEAP - 8;

/// Op `i`: one to three runs; every third op splits them over two records of one epoch
/// (an open section's merge, then its end), and op 5 is an empty section after an open
/// merge (a record, then a commit with nothing new). Every op also stores its number at
/// [`COUNTER_AT`].
fn runs_of(op: usize) -> Vec<(u64, Vec<u8>)> {
    let count = 1 + op % 3;
    let mut runs: Vec<(u64, Vec<u8>)> = (0..count)
        .map(|j| {
            let offset = ((op * 1237 + j * 611) as u64) % (HEAP - 128);
            let len = 1 + (op * 7 + j * 13) % 60;
            let bytes = (0..len).map(|k| (op * 31 + j * 7 + k + 1) as u8).collect();
            (offset, bytes)
        })
        .collect();
    runs.push((COUNTER_AT, (op as u64 + 1).to_le_bytes().to_vec()));
    runs
}

/// Ops with `op % 7 == 3` stand for a long open section (a `cond_wait` with locks held,
/// merged several times before it ends): four records of about 300 bytes in one epoch, so
/// the log fills while records are pending and the journal must compact.
fn long_section_records(op: usize) -> Vec<(u64, Vec<u8>)> {
    (0..4)
        .map(|j| {
            let offset = ((op * 389 + j * 977) as u64) % (HEAP - 400);
            let bytes = (0..280).map(|k| (op * 13 + j * 5 + k + 3) as u8).collect();
            (offset, bytes)
        })
        .collect()
}

fn is_long_section(op: usize) -> bool {
    op % 7 == 3 && !is_restart(op)
}

/// Ops with `op % 5 == 4` crash and restart the journal ([`restart_op`]).
fn is_restart(op: usize) -> bool {
    op % 5 == 4
}

struct JournalScenario {
    ops: usize,
    mutation: Mutation,
}

struct Live {
    journal: Journal<SimPm>,
    state: JournalState,
}

impl Scenario for JournalScenario {
    type Model = Image;
    type Live = Live;

    fn name(&self) -> String {
        format!("nvthreads-journal/{:?}", self.mutation)
    }

    fn pool_size(&self) -> u64 {
        config().pool_size()
    }

    fn op_count(&self) -> usize {
        self.ops
    }

    fn initial_model(&self) -> Image {
        Image(vec![0; HEAP as usize])
    }

    fn apply_to_model(&self, model: &mut Image, op: usize) {
        let mut all = runs_of(op);
        if is_long_section(op) {
            all.splice(0..0, long_section_records(op));
        }
        for (offset, bytes) in all {
            let at = offset as usize;
            model.0[at..at + bytes.len()].copy_from_slice(&bytes);
        }
    }

    fn setup(&self, pm: SimPm) -> Live {
        let (mut journal, state) = Journal::create(pm, &config()).expect("create");
        journal.set_mutation(self.mutation);
        Live { journal, state }
    }

    fn run_op(&self, live: &mut Live, op: usize) {
        let owned = runs_of(op);
        let runs: Vec<Run<'_>> = owned
            .iter()
            .map(|(offset, bytes)| Run {
                offset: *offset,
                bytes,
            })
            .collect();
        if is_restart(op) {
            return restart_op(live, &runs);
        }
        let (journal, state) = (&live.journal, &mut live.state);
        if is_long_section(op) {
            for (offset, bytes) in long_section_records(op) {
                let run = [Run {
                    offset,
                    bytes: &bytes,
                }];
                journal.append(state, &run).expect("append an open merge");
            }
        }
        if op % 3 == 1 {
            journal
                .append(state, &runs[..1])
                .expect("append open merge");
            journal
                .append(state, &runs[1..])
                .expect("append section end");
        } else {
            journal.append(state, &runs).expect("append");
        }
        // (The CommitPerRecord mutant has committed already: nothing left to flip.)
        journal.commit(state).expect("commit");
        journal.maybe_checkpoint(state).expect("checkpoint");
    }

    fn recover(&self, pm: SimPm) -> Result<Image, String> {
        let (journal, state, _) =
            Journal::open_with(pm, self.mutation).map_err(|e| e.to_string())?;
        if state.tail != 0 || state.pending != 0 {
            return Err(format!("recovery left {state:?}"));
        }
        let mut image = vec![0u8; HEAP as usize];
        journal.read_home(0, &mut image);
        Ok(Image(image))
    }
}

/// A program crash and restart in the middle of the run, laid out so that a stale record
/// of the old lap sits exactly where the new lap's scan continues: commit the op's runs as
/// record A at the start of a lap, append an uncommitted record X (never in the model),
/// "crash" and recover (A replayed, X skipped, new lap), then commit the same runs again as
/// record B of A's size at offset 0. X now follows B with an epoch the commit word covers;
/// only the lap tells it apart.
fn restart_op(live: &mut Live, runs: &[Run<'_>]) {
    let state = &mut live.state;
    live.journal.checkpoint(state).expect("checkpoint");
    live.journal.append(state, runs).expect("append A");
    live.journal.commit(state).expect("commit");
    let bogus = [0xeeu8; 24];
    let stale = [Run {
        offset: 3 * 1024,
        bytes: &bogus,
    }];
    live.journal.append(state, &stale).expect("append X");
    let pm = live.journal.pool().pm().clone();
    let mutation = live.journal.mutation();
    let (journal, fresh, _) = Journal::open_with(pm, mutation).expect("restart");
    live.journal = journal;
    live.state = fresh;
    live.journal
        .append(&mut live.state, runs)
        .expect("append B");
    live.journal.commit(&mut live.state).expect("commit");
}

fn harness(mode: SimMode, flush: FlushInstr) -> HarnessConfig {
    let mut config = HarnessConfig::thorough(mode, 11);
    config.sim = SimConfig { mode, flush };
    config
}

#[test]
fn correct_protocol_survives_every_crash_point() {
    let scenario = JournalScenario {
        ops: 14,
        mutation: Mutation::None,
    };
    for (mode, flush) in [
        (SimMode::Adr, FlushInstr::Clwb),
        (SimMode::Eadr, FlushInstr::Clwb),
        (SimMode::Adr, FlushInstr::Clflush),
    ] {
        let report = check(&scenario, &harness(mode, flush));
        eprintln!("{report}");
        report.assert_passed();
        assert!(report.second_crash_images > 0, "double crash not exercised");
    }
}

#[test]
fn every_mutant_is_caught() {
    for mutation in Mutation::MUTANTS {
        let scenario = JournalScenario { ops: 14, mutation };
        let report = check(&scenario, &harness(SimMode::Adr, FlushInstr::Clwb));
        eprintln!("{report}");
        if let Some(first) = report.failures.first() {
            eprintln!("  first failure: {first:?}");
        }
        assert!(!report.passed(), "mutant {mutation:?} was not caught");
    }
}

#[test]
fn small_log_forces_checkpoints_and_laps() {
    let pm = SimPm::new(config().pool_size(), SimConfig::default());
    let (journal, mut state) = Journal::create(pm.clone(), &config()).unwrap();
    let scenario = JournalScenario {
        ops: 40,
        mutation: Mutation::None,
    };
    let mut model = scenario.initial_model();
    let mut live = Live { journal, state };
    for op in 0..40 {
        scenario.run_op(&mut live, op);
        scenario.apply_to_model(&mut model, op);
    }
    state = live.state;
    assert!(state.lap > 4, "expected several laps, got {state:?}");
    let compactions = (0..40).filter(|&op| is_long_section(op)).count();
    assert!(compactions >= 5, "long sections: {compactions}");
    assert!(state.committed >= 40, "{state:?}");
    drop(live.journal);
    let recovered = scenario.recover(SimPm::from_image(pm.volatile_image(), SimConfig::default()));
    assert_eq!(recovered.unwrap(), model);
}

#[test]
fn pending_records_are_compacted_instead_of_failing() {
    let pm = SimPm::new(config().pool_size(), SimConfig::default());
    let (journal, mut state) = Journal::create(pm.clone(), &config()).unwrap();
    let filler = vec![7u8; 600];
    let committed = [Run {
        offset: 0,
        bytes: &filler,
    }];
    journal.append(&mut state, &committed).unwrap();
    journal.commit(&mut state).expect("commit");
    let pending_bytes = vec![9u8; 500];
    for i in 0..3u64 {
        let run = [Run {
            offset: 1000 + i * 600,
            bytes: &pending_bytes,
        }];
        journal.append(&mut state, &run).unwrap();
    }
    // 704 + 3 × 576 bytes: the third append had to compact with two records pending.
    assert_eq!(state.pending, 3, "{state:?}");
    assert_eq!(state.lap, nvthreads::journal::FIRST_LAP + 1, "{state:?}");
    let before_commit = SimPm::from_image(pm.volatile_image(), SimConfig::default());
    journal.commit(&mut state).expect("commit");
    let (recovered, _, _) = Journal::open(before_commit).unwrap();
    let mut home = vec![0u8; HEAP as usize];
    recovered.read_home(0, &mut home);
    assert_eq!(
        &home[..600],
        &filler[..],
        "the committed record was checkpointed"
    );
    assert!(
        home[1000..3000].iter().all(|&b| b == 0),
        "pending data leaked"
    );
    let (recovered, _, _) =
        Journal::open(SimPm::from_image(pm.volatile_image(), SimConfig::default())).unwrap();
    recovered.read_home(0, &mut home);
    assert!(
        home[1000..1500].iter().all(|&b| b == 9),
        "moved records lost"
    );
    // Pending records that fill the log alone are still refused.
    let big = vec![1u8; 900];
    let run = [Run {
        offset: 4000,
        bytes: &big,
    }];
    journal.append(&mut state, &run).unwrap();
    journal.append(&mut state, &run).unwrap();
    let error = journal.append(&mut state, &run).unwrap_err();
    assert!(error.to_string().contains("redo log full"), "{error}");
}

#[test]
fn record_larger_than_the_log_is_refused() {
    let pm = SimPm::new(config().pool_size(), SimConfig::default());
    let (journal, mut state) = Journal::create(pm, &config()).unwrap();
    let big = vec![1u8; LOG as usize];
    let runs = [Run {
        offset: 0,
        bytes: &big,
    }];
    let error = journal.append(&mut state, &runs).unwrap_err();
    assert!(error.to_string().contains("redo log full"), "{error}");
}
