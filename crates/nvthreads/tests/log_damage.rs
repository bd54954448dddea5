//! Damage in the middle of a log lane against a torn tail (`docs/nvthreads.md` §6): a lane's
//! records are durable one after the other, so a crash can tear only its last; a record that
//! fails its check with an intact record of the lap after it is media damage. Recovery
//! refuses such a pool with a typed error naming the lane and offsets, and changes nothing
//! in it; a torn last record is still discarded silently and the rest replayed.

use crashsim::{SimConfig, SimPm};
use nvthreads::record::{self, Entry};
use nvthreads::{Config, Journal, NvtError, Run};

const HEAP: u64 = 8192;
const LOG: u64 = 4096;
const LANES: u32 = 2;
/// Records appended to lane 0, each writing its own 8 home bytes.
const RECORDS: u64 = 6;

fn config() -> Config {
    Config {
        heap_len: HEAP,
        log_len: LOG,
        lanes: LANES,
        base_addr: nvthreads::DEFAULT_BASE_ADDR,
    }
}

/// A crashed pool: `RECORDS` committed sections in lane 0 and one in lane 1, never
/// checkpointed. Returns the image and the pool offset of each lane-0 record.
fn crashed_image() -> (Vec<u8>, Vec<u64>) {
    let pm = SimPm::new(config().pool_size(), SimConfig::default());
    let (journal, mut state) = Journal::create(pm.clone(), &config()).expect("create");
    let offsets = append_to_lane_0(&journal, &mut state, (0..RECORDS).map(|i| 2 * i + 1));
    let other = [Entry::Run(Run {
        offset: 4096,
        bytes: &[0xee; 8],
    })];
    journal
        .append_data(&mut state, 1, 2, 0, &other)
        .expect("append");
    // The image as a crash leaves it: the pool's state word says "not closed cleanly".
    let image = pm.volatile_image();
    drop(journal);
    (image, offsets)
}

/// Appends one record per sequence number to lane 0, the `i`-th writing 8 bytes of `i + 1`
/// at home offset `64 + 8 i`; returns each record's pool offset.
fn append_to_lane_0(
    journal: &Journal<SimPm>,
    state: &mut nvthreads::JournalState,
    seqs: impl Iterator<Item = u64>,
) -> Vec<u64> {
    let lane0 = journal.geometry().lane_off(0);
    let mut offsets = Vec::new();
    for (i, seq) in seqs.enumerate() {
        let i = i as u64;
        offsets.push(lane0 + state.tails[0]);
        let bytes = [i as u8 + 1; 8];
        let entry = [Entry::Run(Run {
            offset: 64 + 8 * i,
            bytes: &bytes,
        })];
        journal
            .append_data(state, 0, seq, 0, &entry)
            .expect("append");
    }
    offsets
}

fn open(image: &[u8]) -> (SimPm, Result<Vec<u8>, NvtError>) {
    let pm = SimPm::from_image(image.to_vec(), SimConfig::default());
    let result = Journal::open(pm.clone()).map(|(journal, _, _)| {
        let mut home = vec![0u8; HEAP as usize];
        journal.read_home(0, &mut home);
        home
    });
    (pm, result)
}

/// Bytes of the fields a flip is tried in: the magic, the sequence number, a body byte.
const FIELDS: [(&str, u64); 3] = [("magic", 1), ("seq", 16), ("body", record::HEADER_LEN + 20)];

#[test]
fn damage_in_the_middle_of_a_lane_is_refused_and_the_pool_left_unchanged() {
    let (image, offsets) = crashed_image();
    for victim in 0..RECORDS as usize - 1 {
        for (field, at) in FIELDS {
            let mut damaged = image.clone();
            damaged[(offsets[victim] + at) as usize] ^= 0x40;
            let (pm, result) = open(&damaged);
            match result {
                Err(NvtError::DamagedLog {
                    lane,
                    offset,
                    intact,
                }) => {
                    assert_eq!(lane, 0, "{field} of record {victim}");
                    assert_eq!(offset, offsets[victim], "{field} of record {victim}");
                    assert_eq!(intact, offsets[victim + 1], "{field} of record {victim}");
                }
                other => panic!("{field} of record {victim} damaged: {other:?}"),
            }
            assert!(
                pm.volatile_image() == damaged,
                "a refused recovery changed the pool ({field} of record {victim})"
            );
            // Refused again, the same way: nothing was advanced by the first attempt.
            let (_, again) = open(&damaged);
            assert!(matches!(again, Err(NvtError::DamagedLog { .. })));
        }
    }
}

#[test]
fn a_torn_last_record_is_discarded_and_the_rest_replayed() {
    let (image, offsets) = crashed_image();
    let last = offsets[RECORDS as usize - 1];
    for (field, at) in FIELDS {
        let mut torn = image.clone();
        torn[(last + at) as usize] ^= 0x40;
        let (_, result) = open(&torn);
        let home = result.unwrap_or_else(|e| panic!("torn {field} refused: {e}"));
        for i in 0..RECORDS {
            let at = (64 + 8 * i) as usize;
            let expected = if i == RECORDS - 1 { 0 } else { i as u8 + 1 };
            assert_eq!(home[at..at + 8], [expected; 8], "record {i}, torn {field}");
        }
        assert_eq!(home[4096..4104], [0xee; 8], "the other lane's record");
    }
    // A whole last record never written (zeros): the same.
    let mut zeroed = image.clone();
    zeroed[last as usize..last as usize + 128].fill(0);
    let (_, result) = open(&zeroed);
    assert_eq!(result.expect("recovers")[64..72], [1; 8]);
}

#[test]
fn an_undamaged_crashed_pool_replays_every_record_and_recovers_twice_alike() {
    let (image, _) = crashed_image();
    let (pm, first) = open(&image);
    let first = first.expect("recovers");
    for i in 0..RECORDS {
        let at = (64 + 8 * i) as usize;
        assert_eq!(first[at..at + 8], [i as u8 + 1; 8]);
    }
    let (_, second) = open(&pm.volatile_image());
    assert_eq!(second.expect("recovers again"), first);
}

/// A lane whose lap ends where an older lap's intact records continue (the usual lane after
/// a checkpoint): a damaged record among the lap's is still refused, and the undamaged
/// image recovers only the lap's records.
#[test]
fn damage_before_an_older_laps_records_is_refused() {
    let pm = SimPm::new(config().pool_size(), SimConfig::default());
    let (journal, mut state) = Journal::create(pm.clone(), &config()).expect("create");
    let bytes = [0x11u8; 8];
    let entry = [Entry::Run(Run {
        offset: 2048,
        bytes: &bytes,
    })];
    for seq in 1..=10 {
        journal
            .append_data(&mut state, 0, seq, 0, &entry)
            .expect("append");
    }
    journal.checkpoint(&mut state).expect("checkpoint");
    let offsets = append_to_lane_0(&journal, &mut state, 20..24);
    let image = pm.volatile_image();
    drop(journal);
    let mut damaged = image.clone();
    damaged[(offsets[1] + 60) as usize] ^= 1;
    let (pm, result) = open(&damaged);
    assert!(
        matches!(result, Err(NvtError::DamagedLog { offset, .. }) if offset == offsets[1]),
        "{result:?}"
    );
    assert!(pm.volatile_image() == damaged, "the pool changed");
    let home = open(&image).1.expect("recovers");
    assert_eq!(home[64 + 24..64 + 32], [4; 8]);
    assert_eq!(home[2048..2056], [0x11; 8]);
}
