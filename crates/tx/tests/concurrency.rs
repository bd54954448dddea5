//! Concurrent transactions under the crash simulator: threads commit while a third thread
//! takes crash snapshots at arbitrary moments. Every image of every snapshot must recover to
//! a state that keeps every transaction acknowledged before the snapshot, and is atomic.
//!
//! This exercises what the sequential harness cannot: redo checkpoints running while other
//! lanes commit and apply (the watermark must never pass a record whose in-place writes are
//! not yet written back), and lanes changing hands between threads.

use crashsim::{Budget, SimConfig, SimPm, image};
use parking_lot::Mutex;
use pmem::{CreateOptions, Pool};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tx::{Engine, EngineOptions, PPtr, Redo, Tx, TxError, Undo};

const SIZE: u64 = 256 * 1024;
const THREADS: usize = 2;
const TXS: u64 = 20_000;
const LAYOUT: &str = "concurrency";
/// Crash snapshots the committers wait for, spread over their run, so a crasher starved of
/// CPU on a loaded machine still samples the whole run.
const MIN_CRASHES: u64 = 64;

/// Root layout: word 0 = shared total (under a lock), words 1..=THREADS = per-thread counts,
/// word 8 = pointer to a block whose words mirror the per-thread counts. Threads update only
/// their own words outside the lock, so their transactions (and a checkpoint started by one)
/// really overlap; the shared total is updated every 16th transaction under the lock.
fn setup<E: Engine>(engine: &E) {
    engine
        .transaction(|tx| {
            let mirror: PPtr = tx.alloc_zeroed(64)?;
            tx.write_ptr(tx.root::<()>(), 64, mirror)
        })
        .expect("setup");
}

fn one_tx<E: Engine>(engine: &E, lock: &Mutex<()>, thread: usize, k: u64) {
    let shared = k.is_multiple_of(16);
    let _held = shared.then(|| lock.lock());
    engine
        .transaction(|tx| {
            let root = tx.root::<()>();
            if shared {
                let total = tx.read_u64(root, 0)?;
                tx.write_u64(root, 0, total + 16)?;
            }
            tx.write_u64(root, 8 * (1 + thread as u64), k)?;
            let mirror: PPtr = tx.read_ptr(root, 64)?;
            tx.write_u64(mirror, 8 * thread as u64, k)?;
            // A little allocation churn, so heap actions and system records interleave.
            let scratch: PPtr = tx.alloc(48)?;
            tx.free(scratch)
        })
        .expect("transaction");
}

/// Reads (total, per-thread counts) after recovery, checking the mirror agrees.
fn recovered<E: Engine>(engine: &E) -> Result<(u64, Vec<u64>), String> {
    engine
        .transaction(|tx| {
            let root = tx.root::<()>();
            let total = tx.read_u64(root, 0)?;
            let mirror: PPtr = tx.read_ptr(root, 64)?;
            let mut counts = Vec::new();
            for thread in 0..THREADS as u64 {
                let count = tx.read_u64(root, 8 * (1 + thread))?;
                if tx.read_u64(mirror, 8 * thread)? != count {
                    return Err(TxError::Corrupted(format!(
                        "thread {thread}: torn transaction"
                    )));
                }
                counts.push(count);
            }
            Ok::<_, TxError>((total, counts))
        })
        .map_err(|e| e.to_string())
}

fn campaign<E: Engine>(
    create: impl Fn(Pool<SimPm>) -> E,
    open: impl Fn(Pool<SimPm>) -> Result<(u64, Vec<u64>), String>,
) {
    let pm = SimPm::new(SIZE, SimConfig::default());
    let engine =
        create(Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, SIZE)).expect("format"));
    setup(&engine);
    let lock = Mutex::new(());
    let acked: Vec<AtomicU64> = (0..THREADS).map(|_| AtomicU64::new(0)).collect();
    let done = AtomicBool::new(false);
    let taken = AtomicU64::new(0);
    let crashes = std::thread::scope(|scope| {
        let committers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (engine, lock, acked, taken) = (&engine, &lock, &acked, &taken);
                scope.spawn(move || {
                    for k in 1..=TXS {
                        while taken.load(Ordering::SeqCst) < k * MIN_CRASHES / TXS {
                            std::thread::yield_now();
                        }
                        one_tx(engine, lock, thread, k);
                        acked[thread].store(k, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        let (pm, acked, done, taken) = (&pm, &acked, &done, &taken);
        let crasher = scope.spawn(move || {
            let mut crashes = Vec::new();
            while !done.load(Ordering::SeqCst) && crashes.len() < 300 {
                let before: Vec<u64> = acked.iter().map(|a| a.load(Ordering::SeqCst)).collect();
                crashes.push((before, pm.crash_now()));
                taken.fetch_add(1, Ordering::SeqCst);
                std::thread::yield_now();
            }
            crashes
        });
        committers
            .into_iter()
            .for_each(|c| c.join().expect("committer"));
        done.store(true, Ordering::SeqCst);
        crasher.join().expect("crasher")
    });
    drop(engine);
    let mut images = 0;
    for (before, snapshot) in crashes {
        for choice in image::choices(
            &snapshot,
            &Budget {
                exhaustive_max: 4,
                random: 3,
            },
            5,
        ) {
            let pm = SimPm::from_image(snapshot.image(&choice), SimConfig::default());
            let (total, counts) =
                open(Pool::attach(pm, LAYOUT).expect("attach")).unwrap_or_else(|e| panic!("{e}"));
            images += 1;
            for (thread, (&count, &ack)) in counts.iter().zip(&before).enumerate() {
                assert!(
                    count >= ack,
                    "thread {thread}: acknowledged {ack} transactions, recovered {count}"
                );
            }
            let expected: u64 = counts.iter().map(|c| c / 16 * 16).sum();
            assert_eq!(
                total, expected,
                "shared total disagrees with the per-thread counts"
            );
        }
    }
    assert!(images > 50, "only {images} images checked");
}

#[test]
fn redo_checkpoints_stay_correct_under_concurrency() {
    let options = EngineOptions {
        lanes: 2,
        lane_size: 4096,
        chunk_shift: 12,
        log_mode: tx::LogMode::Auto,
    };
    campaign(
        |pool| Redo::create(pool, &options).expect("redo"),
        |pool| recovered(&Redo::open(pool, &options).map_err(|e| e.to_string())?),
    );
}

#[test]
fn undo_stays_correct_under_concurrency() {
    let options = EngineOptions {
        lanes: 2,
        lane_size: 4096,
        chunk_shift: 12,
        log_mode: tx::LogMode::Auto,
    };
    campaign(
        |pool| Undo::create(pool, &options).expect("undo"),
        |pool| recovered(&Undo::open(pool, &options).map_err(|e| e.to_string())?),
    );
}
