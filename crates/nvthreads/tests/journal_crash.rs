//! Crash tests of the persistent log under the simulator, with two lanes standing for two
//! threads committing at once: sections appended in both lanes with sequence numbers that
//! do not follow the lanes' order, a crash between two threads' appends, groups (an open
//! section's merges, a dependent section in the other lane, the close record) with a
//! checkpoint while they are pending, checkpoints forced by full lanes, and restarts that
//! leave an older lap's records where the new lap's scan continues. Every fence of every
//! operation, structured and random images, double crash, ADR and eADR, clwb and clflush;
//! and every mutant of the protocol must be caught.

use crashsim::{Config as HarnessConfig, Scenario, SimConfig, SimMode, SimPm, check};
use nvthreads::journal::Mutation;
use nvthreads::record::Entry;
use nvthreads::{Config, Journal, JournalState, NvtError, Run};
use pmem::FlushInstr;
use std::fmt;

const HEAP: u64 = 8192;
const LOG: u64 = 2048;
const LANES: u32 = 2;

fn config() -> Config {
    Config {
        heap_len: HEAP,
        log_len: LOG,
        lanes: LANES,
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
            "image(digest {:08x}, {nonzero} non-zero bytes)",
            digest(&self.0)
        )
    }
}

fn digest(bytes: &[u8]) -> u32 {
    // A tiny FNV digest is enough to tell images apart in a report.
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// Written by every section that holds "the shared lock" (so sections of both lanes write
/// it, in sequence order): replaying an older record after a newer one shows up here.
const SHARED_AT: u64 = HEAP - 24;
/// Each lane's own counter (program order within a thread).
fn counter_of(lane: usize) -> u64 {
    HEAP - 16 + 8 * lane as u64
}

/// What operation `op` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// One section in one lane, under the shared lock.
    Section,
    /// A section whose sequence number was taken before the previous one's (a thread that
    /// took its number, was preempted, and appended after another thread): its bytes are its
    /// lane's own, disjoint from everything the previous op wrote.
    Overtaken,
    /// An open section in one lane (merged twice), a section depending on it in the other
    /// lane, the open section's end, and the close record: one all-or-nothing op. With
    /// `checkpoint`, a checkpoint runs while the group's records are pending.
    Group { checkpoint: bool },
    /// A program restart laid out so that an older lap's committed record sits where the new
    /// lap's scan continues ([`restart_op`]).
    Restart,
}

fn op_kind(op: usize) -> Op {
    match op % 7 {
        6 => Op::Restart,
        2 => Op::Overtaken,
        4 => Op::Group {
            checkpoint: op % 14 == 4,
        },
        _ => Op::Section,
    }
}

/// The lane of op `op` (the threads alternate; an open section runs in the lane of the op
/// before it, so that lane holds the newest write of the shared word when it is rewritten
/// by a checkpoint).
fn lane_of(op: usize) -> usize {
    match op_kind(op) {
        Op::Group { .. } => (op + 1) % 2,
        _ => op % 2,
    }
}

/// Op `op`'s runs in its lane: one to three runs in the lane's half of the heap, its lane
/// counter, and (unless overtaken) the shared word.
fn runs_of(op: usize, lane: usize, part: usize) -> Vec<(u64, Vec<u8>)> {
    let half = (HEAP - 64) / 2;
    let count = 1 + (op + part) % 3;
    let mut runs: Vec<(u64, Vec<u8>)> = (0..count)
        .map(|j| {
            let len = 1 + (op * 7 + j * 13 + part) % 60;
            let within = ((op * 1237 + j * 611 + part * 97) as u64) % (half - 64);
            let bytes = (0..len)
                .map(|k| (op * 31 + j * 7 + k + part + 1) as u8)
                .collect();
            (lane as u64 * half + within, bytes)
        })
        .collect();
    let stamp = (op as u64 + 1) * 16 + part as u64;
    runs.push((counter_of(lane), stamp.to_le_bytes().to_vec()));
    if op_kind(op) != Op::Overtaken {
        runs.push((SHARED_AT, stamp.to_le_bytes().to_vec()));
    }
    runs
}

/// Byte runs of a record: `(heap offset, bytes)`.
type Runs = Vec<(u64, Vec<u8>)>;

/// The records of op `op`, in append order: `(lane, group tag, runs)`; a close record
/// follows a group's.
fn records_of(op: usize) -> Vec<(usize, bool, Runs)> {
    let lane = lane_of(op);
    match op_kind(op) {
        Op::Group { .. } => vec![
            (lane, true, runs_of(op, lane, 0)),
            (lane, true, runs_of(op, lane, 1)),
            (1 - lane, true, runs_of(op, 1 - lane, 2)),
            (lane, true, runs_of(op, lane, 3)),
        ],
        _ => vec![(lane, false, runs_of(op, lane, 0))],
    }
}

struct JournalScenario {
    ops: usize,
    mutation: Mutation,
}

struct Live {
    journal: Journal<SimPm>,
    state: JournalState,
    /// The next sequence number (restarts at 1 with every run, as the runtime's).
    seq: u64,
    /// A number taken early by a section that has not appended yet (the overtaken one).
    reserved: Option<u64>,
}

impl Live {
    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Appends, making room with a checkpoint when the lane is full (as the runtime does).
    fn append(&mut self, lane: usize, seq: u64, group: u64, runs: &[(u64, Vec<u8>)]) {
        let entries: Vec<Entry<'_>> = runs
            .iter()
            .map(|(offset, bytes)| {
                Entry::Run(Run {
                    offset: *offset,
                    bytes,
                })
            })
            .collect();
        loop {
            match self
                .journal
                .append_data(&mut self.state, lane, seq, group, &entries)
            {
                Ok(_) => return,
                Err(NvtError::LaneFull { .. }) => {
                    self.journal
                        .checkpoint(&mut self.state)
                        .expect("checkpoint");
                }
                Err(error) => panic!("append: {error}"),
            }
        }
    }

    fn close(&mut self, lane: usize, group: u64) {
        let seq = self.next_seq();
        loop {
            match self
                .journal
                .append_close(&mut self.state, lane, seq, &[group])
            {
                Ok(_) => return,
                Err(NvtError::LaneFull { .. }) => {
                    self.journal
                        .checkpoint(&mut self.state)
                        .expect("checkpoint");
                }
                Err(error) => panic!("close: {error}"),
            }
        }
    }
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
        for (_, _, runs) in records_of(op) {
            for (offset, bytes) in runs {
                let at = offset as usize;
                model.0[at..at + bytes.len()].copy_from_slice(&bytes);
            }
        }
    }

    fn setup(&self, pm: SimPm) -> Live {
        let (mut journal, state) = Journal::create(pm, &config()).expect("create");
        journal.set_mutation(self.mutation);
        Live {
            journal,
            state,
            seq: 0,
            reserved: None,
        }
    }

    fn run_op(&self, live: &mut Live, op: usize) {
        match op_kind(op) {
            Op::Restart => restart_op(live, op),
            Op::Group { checkpoint } => group_op(live, op, checkpoint),
            Op::Section => {
                let seq = live.next_seq();
                if op_kind(op + 1) == Op::Overtaken {
                    // The next op's section takes its number now and appends later.
                    live.reserved = Some(seq);
                    let own = live.next_seq();
                    let (lane, _, runs) = records_of(op).remove(0);
                    return live.append(lane, own, 0, &runs);
                }
                let (lane, _, runs) = records_of(op).remove(0);
                live.append(lane, seq, 0, &runs);
            }
            Op::Overtaken => {
                let seq = live.reserved.take().unwrap_or_else(|| live.next_seq());
                let (lane, _, runs) = records_of(op).remove(0);
                live.append(lane, seq, 0, &runs);
            }
        }
    }

    fn recover(&self, pm: SimPm) -> Result<Image, String> {
        let (journal, state, _) =
            Journal::open_with(pm, self.mutation).map_err(|e| e.to_string())?;
        if state.tails.iter().any(|&tail| tail != 0) {
            return Err(format!("recovery left {state:?}"));
        }
        let mut image = vec![0u8; HEAP as usize];
        journal.read_home(0, &mut image);
        Ok(Image(image))
    }
}

/// An open section's two merges, a dependent section in the other lane, the open section's
/// end, all of one group, then the close record: nothing of it may survive a crash before
/// the close is durable, all of it after.
fn group_op(live: &mut Live, op: usize, checkpoint: bool) {
    let group = 1_000 + op as u64;
    for (index, (lane, _, runs)) in records_of(op).into_iter().enumerate() {
        let seq = live.next_seq();
        live.append(lane, seq, group, &runs);
        if checkpoint && index == 1 {
            // The group's records are kept in the new lap, the committed ones applied.
            live.journal
                .checkpoint(&mut live.state)
                .expect("checkpoint");
        }
    }
    live.close(lane_of(op), group);
}

/// The group a restart's stale record and its successor share.
const RESTART_GROUP: u64 = 5;

/// A program crash and restart in the middle of the run, laid out so that a stale record
/// of the old lap sits exactly where the new lap's scan continues: after a checkpoint,
/// commit the op's runs as record A at the start of a lane, append record X of group
/// [`RESTART_GROUP`] (never closed, so never committed, and never in the model), "crash"
/// and recover (A replayed, X dropped, new lap; group ids start again, as the runtime's),
/// then commit the op's runs again as record B of A's size at the lane's start, in a group
/// of the same id, closed. X now follows B and names a group a close record of the new lap
/// closes: only the lap tells it apart.
fn restart_op(live: &mut Live, op: usize) {
    let (lane, _, runs) = records_of(op).remove(0);
    live.journal
        .checkpoint(&mut live.state)
        .expect("checkpoint");
    let seq = live.next_seq();
    live.append(lane, seq, 0, &runs);
    let bogus = vec![(lane as u64 * 100 + 64, vec![0xeeu8; 24])];
    let seq = live.next_seq();
    live.append(lane, seq, RESTART_GROUP, &bogus);
    let pm = live.journal.pool().pm().clone();
    let mutation = live.journal.mutation();
    let (journal, fresh, _) = Journal::open_with(pm, mutation).expect("restart");
    live.journal = journal;
    live.state = fresh;
    live.seq = 0;
    let seq = live.next_seq();
    live.append(lane, seq, RESTART_GROUP, &runs);
    live.close(lane, RESTART_GROUP);
}

fn harness(mode: SimMode, flush: FlushInstr) -> HarnessConfig {
    let mut config = HarnessConfig::thorough(mode, 11);
    config.sim = SimConfig { mode, flush };
    config
}

#[test]
fn correct_protocol_survives_every_crash_point() {
    let scenario = JournalScenario {
        ops: 15,
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
        let scenario = JournalScenario { ops: 15, mutation };
        let report = check(&scenario, &harness(SimMode::Adr, FlushInstr::Clwb));
        eprintln!("{report}");
        if let Some(first) = report.failures.first() {
            eprintln!("  first failure: {first:?}");
        }
        assert!(!report.passed(), "mutant {mutation:?} was not caught");
    }
}

#[test]
fn small_lanes_force_checkpoints_and_laps() {
    let pm = SimPm::new(config().pool_size(), SimConfig::default());
    let scenario = JournalScenario {
        ops: 60,
        mutation: Mutation::None,
    };
    let mut live = scenario.setup(pm.clone());
    let mut model = scenario.initial_model();
    for op in 0..60 {
        scenario.run_op(&mut live, op);
        scenario.apply_to_model(&mut model, op);
    }
    assert!(
        live.state.lap > 8,
        "expected several laps, got {:?}",
        live.state
    );
    drop(live.journal);
    let recovered = scenario.recover(SimPm::from_image(pm.volatile_image(), SimConfig::default()));
    assert_eq!(recovered.unwrap(), model);
}

fn entries(runs: &[(u64, Vec<u8>)]) -> Vec<Entry<'_>> {
    runs.iter()
        .map(|(offset, bytes)| {
            Entry::Run(Run {
                offset: *offset,
                bytes,
            })
        })
        .collect()
}

#[test]
fn pending_records_are_kept_by_checkpoints_and_commit_with_their_close() {
    let pm = SimPm::new(config().pool_size(), SimConfig::default());
    let (journal, mut state) = Journal::create(pm.clone(), &config()).unwrap();
    let committed = [(0u64, vec![7u8; 300])];
    journal
        .append_data(&mut state, 0, 1, 0, &entries(&committed))
        .unwrap();
    let pending: Vec<(u64, Vec<u8>)> = (0..2u64)
        .map(|i| (1000 + i * 400, vec![9u8; 300]))
        .collect();
    journal
        .append_data(&mut state, 1, 2, 77, &entries(&pending[..1]))
        .unwrap();
    journal
        .append_data(&mut state, 0, 3, 77, &entries(&pending[1..]))
        .unwrap();
    let report = journal.checkpoint(&mut state).unwrap();
    assert_eq!((report.applied, report.kept), (1, 2), "{report:?}");
    assert_eq!(state.lap, nvthreads::journal::FIRST_LAP + 1, "{state:?}");
    let before_close = SimPm::from_image(pm.volatile_image(), SimConfig::default());
    journal.append_close(&mut state, 1, 4, &[77]).unwrap();
    let (recovered, _, recovery) = Journal::open(before_close).unwrap();
    assert_eq!(recovery.uncommitted, 2, "{recovery:?}");
    let mut home = vec![0u8; HEAP as usize];
    recovered.read_home(0, &mut home);
    assert_eq!(
        &home[..300],
        &[7u8; 300][..],
        "the committed record was applied"
    );
    assert!(
        home[1000..2000].iter().all(|&b| b == 0),
        "pending data leaked"
    );
    let (recovered, _, _) =
        Journal::open(SimPm::from_image(pm.volatile_image(), SimConfig::default())).unwrap();
    recovered.read_home(0, &mut home);
    assert!(
        home[1000..1300].iter().all(|&b| b == 9) && home[1400..1700].iter().all(|&b| b == 9),
        "kept records lost"
    );
}

#[test]
fn pending_records_that_fill_a_lane_leave_no_room_after_a_checkpoint() {
    let pm = SimPm::new(config().pool_size(), SimConfig::default());
    let (journal, mut state) = Journal::create(pm, &config()).unwrap();
    let big = [(4000u64, vec![1u8; 400])];
    journal
        .append_data(&mut state, 0, 1, 5, &entries(&big))
        .unwrap();
    journal
        .append_data(&mut state, 0, 2, 5, &entries(&big))
        .unwrap();
    let error = journal
        .append_data(&mut state, 0, 3, 5, &entries(&big))
        .unwrap_err();
    assert!(
        matches!(error, NvtError::LaneFull { lane: 0, .. }),
        "{error}"
    );
    // The checkpoint keeps both (their group is open): the lane is as full as before, and
    // the caller must give up with a clear message rather than checkpoint again.
    let report = journal.checkpoint(&mut state).unwrap();
    assert_eq!(report.kept, 2, "{report:?}");
    let error = journal
        .append_data(&mut state, 0, 4, 5, &entries(&big))
        .unwrap_err();
    assert!(
        matches!(error, NvtError::LaneFull { free: 0, .. }),
        "{error}"
    );
}

#[test]
fn record_larger_than_a_lane_is_refused() {
    let pm = SimPm::new(config().pool_size(), SimConfig::default());
    let (journal, mut state) = Journal::create(pm, &config()).unwrap();
    let big = [(0u64, vec![1u8; (LOG / 2) as usize])];
    let error = journal
        .append_data(&mut state, 1, 1, 0, &entries(&big))
        .unwrap_err();
    assert!(error.to_string().contains("redo log full"), "{error}");
}
