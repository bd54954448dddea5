//! `ferrite pool check` on an NVthreads pool checks what the runtime checks when its program
//! starts (`nvthreads::check`): the runtime header, the lap word, the lanes' records (damage
//! in the middle of a lane against a torn tail) and the heap metadata as recovery leaves
//! it. Damage exits 14 naming the structure; a sound pool, crashed or not, is "ok".

use nvthreads::record::{Entry, Run};
use nvthreads::{Config, Geometry, Journal, heapmeta};
use pmem::{CreateOptions, Pool};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CORRUPT: i32 = 14;
const RECORDS: u64 = 5;

fn check(path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["pool", "check", path.to_str().expect("UTF-8 scratch path")])
        .output()
        .expect("the ferrite binary runs")
}

fn printed(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn says_ok(output: &Output) -> bool {
    printed(output).lines().any(|line| line.starts_with("ok:"))
}

/// An NVthreads pool as a killed program leaves it: formatted heap metadata checkpointed
/// into the home image, then `RECORDS` committed sections in lane 0 (the first of them
/// rewriting the metadata, so only a replay makes page 0 current) and one in lane 1.
/// Returns the copy's path, the geometry and each lane-0 record's pool offset.
fn crashed_pool(dir: &Path) -> (PathBuf, Geometry, Vec<u64>) {
    let config = Config {
        heap_len: 64 << 10,
        log_len: 16 << 10,
        lanes: 2,
        base_addr: nvthreads::DEFAULT_BASE_ADDR,
    };
    let path = dir.join("nvthreads.pool");
    let options = CreateOptions::new(nvthreads::journal::LAYOUT, config.pool_size());
    let pool = Pool::create(&path, &options).expect("pool");
    let (journal, mut state) = Journal::create_in(pool, &config).expect("journal");
    let mut meta = vec![0u8; heapmeta::META_LEN];
    heapmeta::format(&mut meta);
    journal
        .append_data(&mut state, 0, 1, 0, &write(0, &meta))
        .expect("metadata");
    journal.checkpoint(&mut state).expect("checkpoint");
    let geo = journal.geometry();
    let mut offsets = Vec::new();
    let named =
        heapmeta::allocate(&mut meta, config.heap_len, 64, Some(b"counter")).expect("an object");
    assert!(named > 0);
    for i in 0..RECORDS {
        offsets.push(geo.lane_off(0) + state.tails[0]);
        let counter = [i as u8; 8];
        let entries = if i == 0 {
            write(0, &meta)
        } else {
            write(8192 + 8 * i, &counter)
        };
        journal
            .append_data(&mut state, 0, 2 + i, 0, &entries)
            .expect("append");
    }
    journal
        .append_data(&mut state, 1, 10, 0, &write(16384, &[7; 8]))
        .expect("append");
    let crashed = dir.join("crashed.pool");
    std::fs::copy(&path, &crashed).expect("copy of the open pool");
    (crashed, geo, offsets)
}

fn write(offset: u64, bytes: &[u8]) -> Vec<Entry<'_>> {
    vec![Entry::Run(Run { offset, bytes })]
}

fn with_flipped(path: &Path, at: u64, name: &str) -> PathBuf {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at as usize] ^= 0x10;
    let damaged = path.with_file_name(format!("{name}.pool"));
    std::fs::write(&damaged, bytes).expect("write");
    damaged
}

#[test]
fn a_sound_crashed_nvthreads_pool_is_ok_and_its_records_are_counted() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let (crashed, geo, offsets) = crashed_pool(dir.path());
    let output = check(&crashed);
    assert_eq!(output.status.code(), Some(0), "{}", printed(&output));
    assert!(says_ok(&output), "{}", printed(&output));
    assert!(
        printed(&output).contains("6 committed records"),
        "{}",
        printed(&output)
    );
    // The metadata in the home image is older than the committed record that rewrote it:
    // damaged there, it is still sound once replayed, as the runtime sees it.
    let stale = with_flipped(&crashed, geo.heap_off + 40, "stale-home-metadata");
    let output = check(&stale);
    assert_eq!(output.status.code(), Some(0), "{}", printed(&output));
    // The lane's last record torn: what a crash leaves, still ok.
    let torn = with_flipped(&crashed, offsets[RECORDS as usize - 1] + 50, "torn-tail");
    let output = check(&torn);
    assert_eq!(output.status.code(), Some(0), "{}", printed(&output));
}

#[test]
fn damage_the_runtime_refuses_exits_14_naming_the_structure() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let (crashed, geo, offsets) = crashed_pool(dir.path());
    let root = geo.lap_word - nvthreads::journal::LAP_WORD;
    let cases = [
        ("runtime header", root + 20),
        ("lap word", geo.lap_word + 2),
        ("redo log lane 0", offsets[2] + 1),
        ("redo log lane 0", offsets[2] + 60),
    ];
    for (i, (structure, at)) in cases.into_iter().enumerate() {
        let damaged = with_flipped(&crashed, at, &format!("damaged-{i}"));
        let output = check(&damaged);
        assert_eq!(
            output.status.code(),
            Some(CORRUPT),
            "{structure}: {}",
            printed(&output)
        );
        assert!(
            printed(&output).contains(structure),
            "{structure}: {}",
            printed(&output)
        );
        assert!(!says_ok(&output), "{}", printed(&output));
    }
}

#[test]
fn damaged_heap_metadata_exits_14() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let (crashed, geo, offsets) = crashed_pool(dir.path());
    // Without the record that rewrites it (its lane cut before it, as a torn tail), the
    // home image's metadata is what recovery leaves: damaged there, the runtime refuses it.
    let mut bytes = std::fs::read(&crashed).expect("read");
    let lane_end = (geo.lane_off(0) + geo.lane_len) as usize;
    bytes[offsets[0] as usize..lane_end].fill(0);
    bytes[(geo.heap_off + 40) as usize] ^= 0x10;
    let damaged = dir.path().join("metadata.pool");
    std::fs::write(&damaged, bytes).expect("write");
    let output = check(&damaged);
    assert_eq!(output.status.code(), Some(CORRUPT), "{}", printed(&output));
    assert!(
        printed(&output).contains("heap metadata"),
        "{}",
        printed(&output)
    );
}
