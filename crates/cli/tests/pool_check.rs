//! `ferrite pool check` looks past the header: the engine area, every log lane (torn tail
//! against damage) and the heap; damage exits 14 and is listed (also as JSON); `--repair`
//! recovers a crashed but sound pool, `--salvage` opens a damaged one on request.

use pmem::{CreateOptions, MemPm, NativeOptions, Persist, Pool};
use rand::{RngCore, SeedableRng};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use tx::layout::EngineLayout;
use tx::{Engine, EngineKind, EngineOptions, Redo, Tx, TxError};

mod common;
use common::{ferrite, stderr, stdout};

const CORRUPT: i32 = 14;
const LAYOUT: &str = "check-test";

fn text(path: &Path) -> &str {
    path.to_str().expect("scratch paths are UTF-8")
}

/// A redo pool after 30 committed transactions: closed cleanly at `clean`, and copied while
/// still open (as a killed process leaves it) to `crashed`.
fn redo_pools(dir: &Path) -> (PathBuf, PathBuf) {
    redo_pools_of(dir, 8 << 20)
}

/// [`redo_pools`] of `size` bytes.
fn redo_pools_of(dir: &Path, size: u64) -> (PathBuf, PathBuf) {
    let (clean, crashed) = (dir.join("clean.pool"), dir.join("crashed.pool"));
    let pool = Pool::create(&clean, &CreateOptions::new(LAYOUT, size)).expect("pool");
    let engine = Redo::create(pool, &EngineOptions::small()).expect("redo");
    for i in 0..30u64 {
        engine
            .transaction(|tx| {
                let block = tx.alloc::<()>(64)?;
                tx.write_u64(block, 0, i)?;
                tx.write_ptr(tx.root::<()>(), 8 * (i % 16), block)
            })
            .expect("commit");
    }
    std::fs::copy(&clean, &crashed).expect("copy of the open pool");
    drop(engine);
    (clean, crashed)
}

/// Flips a byte inside a live redo record that newer records of its lane follow.
fn damage_a_middle_record(path: &Path) {
    let mut bytes = std::fs::read(path).expect("read");
    let pm = MemPm::new(bytes.clone());
    let pool = Pool::attach(pm, LAYOUT).expect("attach");
    let layout =
        EngineLayout::read(pool.pm(), pool.arena(), EngineKind::Redo).expect("engine layout");
    let at = layout.watermark();
    let watermark = pmem::checked::open(pool.pm().read_u64(at), at, "w").expect("watermark");
    let records: Vec<u64> = (0..layout.lane_count as usize)
        .map(|lane| (layout.lane(lane), layout.lane(lane) + layout.lane_size))
        .flat_map(|(base, limit)| {
            let pm = pool.pm();
            (base..limit).step_by(64).filter(move |&at| {
                matches!(tx::record::read(pm, at, limit, watermark), Ok(Some(_)))
            })
        })
        .collect();
    assert!(records.len() > 4, "{} records", records.len());
    let at = records[records.len() / 2] + 30;
    bytes[at as usize] ^= 0x10;
    std::fs::write(path, bytes).expect("write");
}

#[test]
fn a_sound_engine_pool_is_ok_and_names_its_engine() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let (clean, _) = redo_pools(dir.path());
    let check = ferrite(&["pool", "check", text(&clean)]);
    assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    assert!(stdout(&check).starts_with("ok: "), "{}", stdout(&check));
    assert!(stdout(&check).contains("redo engine"), "{}", stdout(&check));
}

#[test]
fn damage_in_the_middle_of_a_lane_exits_14_and_is_listed() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let (_, crashed) = redo_pools(dir.path());
    damage_a_middle_record(&crashed);
    let check = ferrite(&["pool", "check", text(&crashed)]);
    assert_eq!(check.status.code(), Some(CORRUPT), "{}", stdout(&check));
    // The error names the damaged structure, not the (sound) header.
    let error = String::from_utf8_lossy(&check.stderr).into_owned();
    assert!(error.contains(": damage: redo lane"), "{error}");
    assert!(!error.contains("header"), "{error}");
    assert!(
        stdout(&check).contains("damage: redo lane"),
        "{}",
        stdout(&check)
    );
    let listed = stdout(&check)
        .lines()
        .filter(|line| line.starts_with("damage: "))
        .count();
    let count = match listed {
        1 => "1 problem (".to_owned(),
        n => format!("{n} problems ("),
    };
    assert!(
        stdout(&check)
            .lines()
            .last()
            .unwrap_or_default()
            .contains(&count),
        "the closing line counts the {listed} listed problems: {}",
        stdout(&check)
    );

    let json = ferrite(&["pool", "check", "--json", text(&crashed)]);
    assert_eq!(json.status.code(), Some(CORRUPT));
    let verdict: Value = serde_json::from_str(&stdout(&json)).expect("JSON");
    assert_eq!(verdict["ok"], false);
    let findings = verdict["findings"].as_array().expect("findings");
    assert!(
        findings.iter().any(|f| f["severity"] == "damage"),
        "{verdict}"
    );

    // A repair is refused while there is damage; the engine refuses the pool too.
    let repair = ferrite(&["pool", "check", "--repair", text(&crashed)]);
    assert_eq!(repair.status.code(), Some(CORRUPT));
    let pool = Pool::open(&crashed, LAYOUT, &NativeOptions::default()).expect("pool");
    assert!(matches!(
        Redo::open(pool, &EngineOptions::small()),
        Err(TxError::Corrupted(_))
    ));

    // Salvage is an explicit choice: it opens the pool, replaying what is intact.
    let salvage = ferrite(&["pool", "check", "--salvage", text(&crashed)]);
    assert_eq!(salvage.status.code(), Some(0), "{}", stdout(&salvage));
    assert!(
        stdout(&salvage).contains("recovered: damage"),
        "{}",
        stdout(&salvage)
    );
    let last = stdout(&salvage)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    assert!(
        last.starts_with("salvaged: ") && !last.contains("--salvage"),
        "the closing line after a salvage: {last}"
    );
    let after = ferrite(&["pool", "check", text(&crashed)]);
    assert_eq!(after.status.code(), Some(0), "{}", stdout(&after));
}

#[test]
fn repair_recovers_a_crashed_sound_pool() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let (_, crashed) = redo_pools(dir.path());
    let check = ferrite(&["pool", "check", text(&crashed)]);
    assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    assert!(
        stdout(&check).contains("recovery: redo log"),
        "{}",
        stdout(&check)
    );
    assert!(
        stdout(&check).contains("not closed cleanly"),
        "{}",
        stdout(&check)
    );

    let repair = ferrite(&["pool", "check", "--repair", text(&crashed)]);
    assert_eq!(repair.status.code(), Some(0), "{}", stdout(&repair));
    assert!(
        stdout(&repair).contains("recovered:"),
        "{}",
        stdout(&repair)
    );
    // The recovery closed the pool cleanly; its verdict says so.
    assert!(
        !stdout(&repair).contains("not closed cleanly"),
        "{}",
        stdout(&repair)
    );
    let after = ferrite(&["pool", "check", text(&crashed)]);
    assert!(
        stdout(&after).contains("closed cleanly"),
        "{}",
        stdout(&after)
    );
    assert!(!stdout(&after).contains("recovery:"), "{}", stdout(&after));
    assert_every_commit_survived(&crashed);
}

/// A flipped bit in the pool header whose copy is intact: `pool info` and `pool check` name it
/// as what the next open repairs (exit 0), `--repair` opens the pool (recovery included),
/// which rewrites it, and every commit is still there. With the state word damaged too, the
/// copy cannot be vouched for: exit 14, nothing written.
#[test]
fn a_damaged_header_with_an_intact_copy_is_repaired_not_refused() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let (clean, _) = redo_pools(dir.path());
    let intact = std::fs::read(&clean).expect("read");
    let mut damaged = intact.clone();
    damaged[0x30] ^= 0x04;
    let mut double = damaged.clone();
    double[0x102] ^= 0x01;
    std::fs::write(&clean, &double).expect("write");
    let refused = ferrite(&["pool", "check", text(&clean)]);
    assert_eq!(refused.status.code(), Some(CORRUPT), "{}", stdout(&refused));
    assert_eq!(
        std::fs::read(&clean).expect("read"),
        double,
        "nothing written"
    );
    std::fs::write(&clean, &damaged).expect("write");

    let info = ferrite(&["pool", "info", text(&clean)]);
    assert_eq!(info.status.code(), Some(0), "{}", stderr(&info));
    assert_eq!(
        stdout(&info).matches("repairable:").count(),
        1,
        "{}",
        stdout(&info)
    );
    let check = ferrite(&["pool", "check", text(&clean)]);
    assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    for says in ["recovery: pool header", "its copy at 0x800 is intact"] {
        assert!(stdout(&check).contains(says), "{says}: {}", stdout(&check));
    }
    assert_eq!(
        std::fs::read(&clean).expect("read"),
        damaged,
        "a check writes nothing"
    );

    let repair = ferrite(&["pool", "check", "--repair", text(&clean)]);
    assert_eq!(repair.status.code(), Some(0), "{}", stdout(&repair));
    let after = std::fs::read(&clean).expect("read");
    assert_eq!(
        after[..256],
        intact[..256],
        "the header rewritten from its copy"
    );
    let check = ferrite(&["pool", "check", text(&clean)]);
    assert!(!stdout(&check).contains("recovery:"), "{}", stdout(&check));
    assert_every_commit_survived(&clean);
}

/// A pool `ferrite pool create` made holds no engine area: a damaged header with an intact
/// copy is repaired all the same (restored from the copy, as the next open would) and the
/// repair exits 0, since nothing else is left to recover; it once refused with exit 12 ("no
/// transaction engine area to recover") while `pool info` and `pool check` said the next
/// open repairs it.
#[test]
fn repair_restores_the_header_of_a_pool_with_no_engine_area() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let path = dir.path().join("empty.pool");
    let created = ferrite(&["pool", "create", text(&path), "--size", "8M"]);
    assert_eq!(created.status.code(), Some(0), "{}", stderr(&created));
    let intact = std::fs::read(&path).expect("read");
    let mut damaged = intact.clone();
    damaged[32] ^= 0xff;
    damaged[33] ^= 0xff;
    std::fs::write(&path, &damaged).expect("write");

    let check = ferrite(&["pool", "check", text(&path)]);
    assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    assert!(
        stdout(&check).contains("its copy at 0x800 is intact; the next open repairs it"),
        "{}",
        stdout(&check)
    );
    let repair = ferrite(&["pool", "check", "--repair", text(&path)]);
    assert_eq!(
        repair.status.code(),
        Some(0),
        "{}{}",
        stdout(&repair),
        stderr(&repair)
    );
    for says in [
        "recovered: pool header at 0x0: pool header damaged",
        "recovered: no transaction engine area (an empty arena): nothing else to recover",
        "ok: ",
    ] {
        assert!(
            stdout(&repair).contains(says),
            "{says}: {}",
            stdout(&repair)
        );
    }
    let after = std::fs::read(&path).expect("read");
    assert_eq!(after[..4096], intact[..4096], "the header area as created");
    let info = ferrite(&["pool", "info", text(&path)]);
    assert!(!stdout(&info).contains("repairable:"), "{}", stdout(&info));
    assert!(
        stdout(&info).contains("clean shutdown:  yes"),
        "{}",
        stdout(&info)
    );
    // A second repair finds nothing to do, and says ok.
    let again = ferrite(&["pool", "check", "--repair", text(&path)]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
}

/// The recovery's own lines read "recovered: <what happened>", without a severity and a
/// structure that repeat it ("recovered: note: recovery: 0 log records …").
#[test]
fn repair_output_does_not_stutter() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let (_, crashed) = redo_pools(dir.path());
    let repair = ferrite(&["pool", "check", "--repair", text(&crashed)]);
    assert_eq!(repair.status.code(), Some(0), "{}", stderr(&repair));
    let out = stdout(&repair);
    assert!(!out.contains("recovered: note"), "{out}");
    assert!(!out.contains("recovered: recovery"), "{out}");
    assert!(
        out.lines().any(|line| line.starts_with("recovered: ")
            && line.ends_with("log records replayed or rolled back")
            && line["recovered: ".len()..].starts_with(char::is_numeric)),
        "{out}"
    );
}

/// A damaged heap descriptor is named once as heap damage: the refusal of the engine's
/// open read "corrupt heap: corrupt heap: descriptor of chunk 0 …".
#[test]
fn heap_damage_is_named_once() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let (clean, _) = redo_pools(dir.path());
    let mut bytes = std::fs::read(&clean).expect("read");
    let pool = Pool::attach(MemPm::new(bytes.clone()), LAYOUT).expect("attach");
    let layout =
        EngineLayout::read(pool.pm(), pool.arena(), EngineKind::Redo).expect("engine layout");
    // The first descriptor, after the heap's 64-byte header (docs/heap-format.md §4).
    bytes[(layout.heap.offset + 64) as usize] ^= 0x10;
    std::fs::write(&clean, bytes).expect("write");
    for args in [&["pool", "check"][..], &["pool", "check", "--salvage"][..]] {
        let mut args = args.to_vec();
        args.push(text(&clean));
        let output = ferrite(&args);
        assert_eq!(output.status.code(), Some(CORRUPT), "{}", stderr(&output));
        let both = format!("{}{}", stdout(&output), stderr(&output));
        assert!(
            both.contains("descriptor of chunk 0 fails its check"),
            "{both}"
        );
        assert!(!both.contains("corrupt heap: corrupt heap"), "{both}");
    }
}

/// Opens a pool made by `redo_pools` and checks that its last transaction (the 30th, which
/// wrote 29 into the block that root slot 29 % 16 points at) is there.
fn assert_every_commit_survived(path: &Path) {
    let pool = Pool::open(path, LAYOUT, &NativeOptions::default()).expect("pool");
    let engine = Redo::open(pool, &EngineOptions::small()).expect("recovered");
    let last = engine
        .read_only(|tx| {
            let block: tx::PPtr<()> = tx.read_ptr(tx.root::<()>(), 8 * (29 % 16))?;
            tx.read_u64(block, 0)
        })
        .expect("read");
    assert_eq!(last, 29, "every committed transaction survived");
}

/// Deterministic noise, so the test is repeatable.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0; len];
    rand_chacha::ChaCha8Rng::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

/// Redo records have no magic (format 3): bytes that do not verify are no record, wherever
/// they lie. Noise over every lane of a cleanly closed pool is neither a record nor damage,
/// and noise after a crashed pool's newest records (where the next commits would go) is
/// read as a torn tail at most: the committed records still replay.
#[test]
fn noise_in_redo_lanes_is_not_a_record_and_not_damage() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let (clean, crashed) = redo_pools(dir.path());
    for (path, seed) in [(&clean, 1u64), (&crashed, 2)] {
        let mut bytes = std::fs::read(path).expect("read");
        let pool = Pool::attach(MemPm::new(bytes.clone()), LAYOUT).expect("attach");
        let layout = EngineLayout::read(pool.pm(), pool.arena(), EngineKind::Redo).expect("layout");
        let at = layout.watermark();
        let watermark = pmem::checked::open(pool.pm().read_u64(at), at, "w").expect("mark");
        for lane in 0..layout.lane_count as usize {
            let (base, limit) = (layout.lane(lane), layout.lane(lane) + layout.lane_size);
            // The end of the lane's last live record (the lane start if it has none).
            let from = (base..limit)
                .step_by(64)
                .filter_map(|at| {
                    let rec = tx::record::read(pool.pm(), at, limit, watermark).expect("read")?;
                    (rec.seq > watermark).then(|| (at + u64::from(rec.len)).next_multiple_of(64))
                })
                .max()
                .unwrap_or(base);
            let fill = noise(seed + lane as u64, (limit - from) as usize);
            bytes[from as usize..limit as usize].copy_from_slice(&fill);
        }
        std::fs::write(path, bytes).expect("write");
        let check = ferrite(&["pool", "check", text(path)]);
        assert_eq!(check.status.code(), Some(0), "{}", stdout(&check));
    }
    let repair = ferrite(&["pool", "check", "--repair", text(&crashed)]);
    assert_eq!(repair.status.code(), Some(0), "{}", stdout(&repair));
    for path in [&clean, &crashed] {
        assert_every_commit_survived(path);
    }
}

/// A pool of `layout` copied while open: not cleanly closed, as a killed owner leaves it.
fn crashed_copy_of(dir: &Path, pool: &Pool<pmem::Native>) -> PathBuf {
    let crashed = dir.join("crashed-copy.pool");
    std::fs::copy(pool.path().expect("a file pool"), &crashed).expect("copy of the open pool");
    crashed
}

/// `--repair` on `crashed` is refused with exit 12 naming `owner`, and no byte changes.
fn assert_repair_refused_untouched(crashed: &Path, owner: &str) {
    let before = std::fs::read(crashed).expect("read");
    for (flag, refused) in [
        ("--repair", "not repaired: "),
        ("--salvage", "not salvaged: "),
    ] {
        let repair = ferrite(&["pool", "check", flag, text(crashed)]);
        assert_eq!(repair.status.code(), Some(12), "{}", stderr(&repair));
        assert!(stderr(&repair).contains(owner), "{}", stderr(&repair));
        assert!(stderr(&repair).contains(refused), "{}", stderr(&repair));
        assert!(
            !stderr(&repair).contains("corrupt pool header"),
            "{}",
            stderr(&repair)
        );
        assert!(!stdout(&repair).contains("ok: "), "{}", stdout(&repair));
        assert!(
            before == std::fs::read(crashed).expect("read"),
            "{flag} changed the pool"
        );
    }
    let info = ferrite(&["pool", "info", text(crashed)]);
    assert!(
        stdout(&info).contains("clean shutdown:  no"),
        "{}",
        stdout(&info)
    );
}

#[test]
fn repair_of_an_nvthreads_or_pmfs_pool_is_left_to_its_owner() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    for (layout, owner) in [
        (nvthreads::journal::LAYOUT, "NVthreads runtime"),
        (pmfs::LAYOUT, "ferrite fs fsck --repair"),
    ] {
        let path = dir.path().join(format!("{layout}.pool"));
        let pool = Pool::create(&path, &CreateOptions::new(layout, 8 << 20)).expect("pool");
        let crashed = crashed_copy_of(dir.path(), &pool);
        assert_repair_refused_untouched(&crashed, owner);
        drop(pool);
    }
}

#[test]
fn repair_of_a_crashed_mvcc_pool_is_refused_before_writing() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let path = dir.path().join("mvcc.pool");
    let pool = Pool::create(&path, &CreateOptions::new(LAYOUT, 16 << 20)).expect("pool");
    let engine = mvcc::Mvcc::create(pool, &mvcc::MvccOptions::small(), tx::NoReplay).expect("mvcc");
    for i in 0..20u64 {
        engine
            .transaction(|tx| tx.write_u64(tx.root::<()>(), 8 * (i % 16), i))
            .expect("commit");
    }
    let crashed = crashed_copy_of(dir.path(), engine.pool());
    assert_repair_refused_untouched(&crashed, "operation handlers");
}

#[test]
fn repair_of_a_pool_in_use_exits_15_with_one_message() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let (_, crashed) = redo_pools(dir.path());
    let holder = Pool::open(&crashed, LAYOUT, &NativeOptions::default()).expect("open");
    let repair = ferrite(&["pool", "check", "--repair", text(&crashed)]);
    assert_eq!(repair.status.code(), Some(15), "{}", stderr(&repair));
    assert_eq!(stderr(&repair).lines().count(), 1, "{}", stderr(&repair));
    assert!(
        stderr(&repair).contains("already open"),
        "{}",
        stderr(&repair)
    );
    assert!(stdout(&repair).is_empty(), "{}", stdout(&repair));
    drop(holder);
}

/// A pool another process holds is read while it changes: what looks like damage may be a
/// record half written, so the check exits 15 (already open), never 14 with a salvage hint.
#[test]
fn damage_in_a_pool_in_use_is_no_verdict_and_exits_15() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let (_, crashed) = redo_pools(dir.path());
    damage_a_middle_record(&crashed);
    let holder = Pool::open(&crashed, LAYOUT, &NativeOptions::default()).expect("open");
    let check = ferrite(&["pool", "check", text(&crashed)]);
    assert_eq!(check.status.code(), Some(15), "{}", stderr(&check));
    assert!(stdout(&check).contains("unreliable:"), "{}", stdout(&check));
    assert!(!stdout(&check).contains("--salvage"), "{}", stdout(&check));
    assert!(
        stderr(&check).contains("already open"),
        "{}",
        stderr(&check)
    );
    let json = ferrite(&["pool", "check", "--json", text(&crashed)]);
    assert_eq!(json.status.code(), Some(15), "{}", stderr(&json));
    let verdict: Value = serde_json::from_str(&stdout(&json)).expect("JSON");
    assert_eq!(verdict["reliable"], Value::Bool(false), "{verdict}");
    drop(holder);
}

/// Flips one bit of the byte at `at` of the file.
fn flip(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at as usize] ^= 0x04;
    std::fs::write(path, bytes).expect("write");
}

/// The peak resident memory of `ferrite ARGS`, in bytes, and its exit status.
fn peak_memory(args: &[&str]) -> (u64, Option<i32>) {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    command
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // The child's peak starts at this process's (its memory before `exec`): reset it to the
    // child's current size, so what is measured is the binary's own.
    // SAFETY: the hook runs between fork and exec and only makes system calls
    // (async-signal-safe) on a NUL-terminated path and a 1-byte buffer.
    unsafe {
        command.pre_exec(|| {
            let fd = libc::open(c"/proc/self/clear_refs".as_ptr(), libc::O_WRONLY);
            if fd >= 0 {
                libc::write(fd, b"5".as_ptr().cast(), 1);
                libc::close(fd);
            }
            Ok(())
        })
    };
    // Reaped by `wait4` below, which also gives its resource usage (`Child::wait` does not).
    let pid = command.spawn().expect("the ferrite binary runs").id() as i32;
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid; wait4 fills it for our own child, which nothing
    // else waits for (its `Child` handle was dropped without `wait`).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `status` and `usage` are valid for writes.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4");
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (usage.ru_maxrss as u64 * 1024, code)
}

/// A damaged pool is read into memory once at a time: the check's image is dropped before
/// the remedy's trial salvage reads its own copy (two at once doubled the peak, so checking
/// a pool half the machine's memory could exhaust it).
#[test]
fn checking_a_damaged_pool_holds_one_image_at_a_time() {
    const SIZE: u64 = 128 << 20;
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    let (_, crashed) = redo_pools_of(dir.path(), SIZE);
    damage_a_middle_record(&crashed);
    let (peak, code) = peak_memory(&["pool", "check", text(&crashed)]);
    assert_eq!(code, Some(CORRUPT));
    assert!(
        peak < SIZE * 3 / 2,
        "peak resident memory {} MiB for a {} MiB pool",
        peak >> 20,
        SIZE >> 20
    );
}

/// The check suggests `--salvage` only for damage the salvage gets past (a record in the
/// middle of a lane); for a damaged watermark, engine header or magic it says the salvage
/// cannot open the pool, and the salvage itself exits 14 (damaged), never 12.
#[test]
fn salvage_is_suggested_only_where_it_opens_the_pool() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("scratch");
    // The crashed copy still has live records above its watermark to damage.
    let (_, crashed) = redo_pools(dir.path());
    let image = MemPm::new(std::fs::read(&crashed).expect("read"));
    let pool = Pool::attach(image, LAYOUT).expect("attach");
    let arena = pool.arena().offset;
    let layout = EngineLayout::read(pool.pm(), pool.arena(), EngineKind::Redo).expect("layout");
    let watermark = layout.watermark();
    drop(pool);
    let middle = dir.path().join("middle.pool");
    std::fs::copy(&crashed, &middle).expect("copy");
    damage_a_middle_record(&middle);
    let check = ferrite(&["pool", "check", text(&middle)]);
    assert_eq!(check.status.code(), Some(CORRUPT), "{}", stdout(&check));
    assert!(
        stdout(&check).contains("--salvage opens it anyway"),
        "{}",
        stdout(&check)
    );
    for (name, at) in [
        ("watermark", watermark),
        ("header", arena + 8),
        ("magic", arena),
    ] {
        let damaged = dir.path().join(format!("{name}.pool"));
        std::fs::copy(&crashed, &damaged).expect("copy");
        flip(&damaged, at);
        let check = ferrite(&["pool", "check", text(&damaged)]);
        assert_eq!(
            check.status.code(),
            Some(CORRUPT),
            "{name}: {}",
            stdout(&check)
        );
        assert!(
            !stdout(&check).contains("--salvage opens it")
                && stdout(&check).contains("no tool here repairs it"),
            "{name}: {}",
            stdout(&check)
        );
        let salvage = ferrite(&["pool", "check", "--salvage", text(&damaged)]);
        assert_eq!(
            salvage.status.code(),
            Some(CORRUPT),
            "{name}: {}",
            stderr(&salvage)
        );
    }
}
