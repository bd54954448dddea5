//! The redo engine with format-3 records (`docs/tx-format.md` §6.1, §7.8): records end
//! mid-line and the rest of their last line is not theirs; a record torn across its lines
//! is the lane's torn tail; a zero-length write makes no record.

use crashsim::{SimConfig, SimPm};
use pmem::integrity::Severity;
use pmem::{CreateOptions, Persist, Pool, checked};
use tx::layout::EngineLayout;
use tx::{Engine, EngineKind, EngineOptions, PPtr, Redo, Tx, TxError, TxResult, record};

const SIZE: u64 = 1 << 20;
const LAYOUT: &str = "format3";
/// Bytes each transaction writes: one long entry, so a record takes two lines.
const BLOB: usize = 100;

fn attach(image: &[u8]) -> Pool<SimPm> {
    Pool::attach(
        SimPm::from_image(image.to_vec(), SimConfig::default()),
        LAYOUT,
    )
    .expect("attach")
}

/// A fresh pool of `size` bytes on the simulator with a redo engine created on it.
fn new_redo(size: u64, options: &EngineOptions) -> (SimPm, Redo<SimPm>) {
    let pm = SimPm::new(size, SimConfig::default());
    Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, size)).expect("format");
    let engine =
        Redo::create(Pool::attach(pm.clone(), LAYOUT).expect("pool"), options).expect("redo");
    (pm, engine)
}

fn blob(i: u64) -> Vec<u8> {
    (0..BLOB as u64).map(|b| (i * 7 + b) as u8).collect()
}

fn write_blob(engine: &Redo<SimPm>, i: u64) {
    engine
        .transaction(|tx| {
            let block: PPtr = tx.read_ptr(tx.root::<()>(), 0)?;
            tx.write(block, 0, &blob(i))?;
            tx.write_u64(tx.root::<()>(), 8, i)
        })
        .expect("commit");
}

fn read_state(engine: &Redo<SimPm>) -> (u64, Vec<u8>) {
    engine
        .read_only(|tx| {
            let block: PPtr = tx.read_ptr(tx.root::<()>(), 0)?;
            let mut bytes = vec![0; BLOB];
            tx.read_raw(block.offset(), &mut bytes)?;
            Ok::<_, TxError>((tx.read_u64(tx.root::<()>(), 8)?, bytes))
        })
        .expect("read")
}

/// Images of a crashed process (every store visible, nothing written back since the last
/// checkpoint) before and after its last commit, `commits` commits in all: the lanes have
/// wrapped, so the bytes under and after each record are older records.
fn images(commits: u64) -> (Vec<u8>, Vec<u8>, EngineLayout) {
    let (pm, engine) = new_redo(SIZE, &EngineOptions::small());
    engine
        .transaction(|tx| {
            let block: PPtr = tx.alloc(BLOB as u64)?;
            tx.write_ptr(tx.root::<()>(), 0, block)
        })
        .expect("setup");
    (1..commits).for_each(|i| write_blob(&engine, i));
    let before = pm.volatile_image();
    write_blob(&engine, commits);
    let after = pm.volatile_image();
    let layout = EngineLayout::read(engine.pool().pm(), engine.pool().arena(), EngineKind::Redo)
        .expect("layout");
    std::mem::forget(engine);
    (before, after, layout)
}

/// The live records (absolute offset, length, sequence number) of every lane, oldest first.
fn live_records(image: &[u8], layout: &EngineLayout) -> Vec<(u64, u64, u64)> {
    let pm = SimPm::from_image(image.to_vec(), SimConfig::default());
    let at = layout.watermark();
    let watermark = checked::open(pm.read_u64(at), at, "w").expect("watermark");
    let mut found = Vec::new();
    for lane in 0..layout.lane_count as usize {
        let (base, limit) = (layout.lane(lane), layout.lane(lane) + layout.lane_size);
        for at in (base..limit).step_by(64) {
            if let Some(rec) = record::read(&pm, at, limit, watermark).expect("read")
                && rec.seq > watermark
            {
                found.push((rec.seq, at, u64::from(rec.len)));
            }
        }
    }
    found.sort_unstable();
    found
        .into_iter()
        .map(|(seq, at, len)| (at, len, seq))
        .collect()
}

fn open_state(image: &[u8]) -> TxResult<((u64, Vec<u8>), usize, bool)> {
    let engine = Redo::open(attach(image), &EngineOptions::small())?;
    let report = engine.recovery_report();
    let torn = report
        .findings
        .iter()
        .any(|f| f.severity == Severity::Recovery && f.structure.starts_with("redo lane"));
    Ok((read_state(&engine), report.damage().count(), torn))
}

#[test]
fn the_rest_of_a_records_last_line_is_not_part_of_it() {
    let (_, after, layout) = images(300);
    let live = live_records(&after, &layout);
    assert!(live.len() >= 4, "{} live records", live.len());
    let mut scribbled = after.clone();
    for &(at, len, _) in &live {
        let end = at + len;
        assert!(end % 64 != 0, "the records end mid-line");
        scribbled[end as usize..end.next_multiple_of(64) as usize].fill(0xA5);
    }
    let (state, damage, _) = open_state(&scribbled).expect("open");
    assert_eq!((state, damage), ((300, blob(300)), 0));
}

#[test]
fn a_record_whose_later_line_kept_older_bytes_is_the_torn_tail() {
    let commits = 300;
    let (before, after, layout) = images(commits);
    let &(at, len, _) = live_records(&after, &layout).last().expect("records");
    assert!(len > 64, "the newest record spans two lines");
    let (at, end) = (at as usize, (at + len) as usize);
    assert_ne!(
        before[at + 64..end],
        after[at + 64..end],
        "older bytes differ"
    );
    // Only the header line reached the media before the crash (nothing was applied in
    // place: that follows the commit's fence).
    let mut torn = before.clone();
    torn[at..at + 64].copy_from_slice(&after[at..at + 64]);
    let (state, damage, reported) = open_state(&torn).expect("a torn tail is no damage");
    assert_eq!(state, (commits - 1, blob(commits - 1)));
    assert_eq!(damage, 0);
    assert!(reported, "the torn tail is reported");
    // Only the later line reached the media: the header line keeps its older bytes.
    let mut torn = before.clone();
    torn[at + 64..end].copy_from_slice(&after[at + 64..end]);
    let (state, damage, _) = open_state(&torn).expect("a torn tail is no damage");
    assert_eq!((state, damage), ((commits - 1, blob(commits - 1)), 0));
}

#[test]
fn a_middle_record_whose_later_line_holds_older_bytes_is_damage() {
    let (before, after, layout) = images(300);
    let live = live_records(&after, &layout);
    let (at, len, _) = live[live.len() / 2];
    assert!(len > 64);
    let (at, end) = (at as usize, (at + len) as usize);
    let older = images(200).1;
    let mut damaged = after.clone();
    damaged[at + 64..end].copy_from_slice(&older[at + 64..end]);
    assert_ne!(damaged[at + 64..end], after[at + 64..end]);
    let error = open_state(&damaged).expect_err("damage in the middle");
    assert!(matches!(error, TxError::Corrupted(_)), "{error}");
    drop(before);
}

#[test]
fn a_zero_length_write_alone_makes_no_record_and_no_fence() {
    let (pm, engine) = new_redo(SIZE, &EngineOptions::small());
    engine
        .transaction(|tx| tx.write_u64(tx.root::<()>(), 0, 1))
        .expect("a word");
    let fences = pm.fences();
    engine
        .transaction(|tx| tx.write(tx.root::<()>(), 8, &[]))
        .expect("zero bytes");
    assert_eq!(pm.fences(), fences, "no record, no fence");
    engine
        .transaction(|tx| {
            tx.write(tx.root::<()>(), 8, &[])?;
            tx.write_u64(tx.root::<()>(), 16, 2)
        })
        .expect("zero bytes and a word");
    assert_eq!(pm.fences(), fences + 1, "one record");
}

/// Lines that each claim a long-form record running to the lane's end (a little-endian
/// `u64` below 2^32, then a plausible length: common in user data, which lands in the lanes
/// as record data) made recovery check a CRC over the rest of the lane at every line. With
/// the checksums of the lane's prefixes each line costs a logarithmic step, so a 4 MiB lane
/// of them recovers as fast as any other (11 s in a debug build before).
#[test]
fn a_large_lane_of_lines_claiming_records_to_its_end_recovers_the_committed_state() {
    const BIG: u64 = 16 << 20;
    let options = EngineOptions {
        lanes: 2,
        lane_size: 4 << 20,
        ..EngineOptions::small()
    };
    let (pm, engine) = new_redo(BIG, &options);
    engine
        .transaction(|tx| tx.write_u64(tx.root::<()>(), 0, 41))
        .expect("commit");
    let layout = EngineLayout::read(engine.pool().pm(), engine.pool().arena(), EngineKind::Redo)
        .expect("layout");
    std::mem::forget(engine);
    let mut image = pm.volatile_image();
    let mut line = [0u8; 64];
    line[8..12].copy_from_slice(&(options.lane_size as u32 / 2).to_le_bytes());
    for lane in 0..layout.lane_count as usize {
        let base = layout.lane(lane) as usize;
        // Past the lane's first lines, where the commit's record lies.
        for at in (base + 1024..base + options.lane_size as usize).step_by(64) {
            image[at..at + 64].copy_from_slice(&line);
        }
    }
    let engine = Redo::open(attach(&image), &options).expect("open");
    let value = engine
        .read_only(|tx| tx.read_u64(tx.root::<()>(), 0))
        .expect("read");
    assert_eq!(value, 41);
    assert_eq!(engine.recovery_report().damage().count(), 0);
}
