//! Forty processes in a row on one pool: each recovers what the previous one left (every
//! store visible, nothing quiesced, as a kill between operations leaves it), checks that
//! both threads' logged transfers are all there, and runs more on two threads.
use mvcc::{Mvcc, MvccOptions};
use pmem::{CreateOptions, NativeOptions, Pool};
use tx::{Engine, Op, OpId, Replay, Tx, TxError, TxResult};

const LAYOUT: &str = "quick-bank";
const TRANSFER: OpId = OpId(7);

fn transfer<T: Tx>(tx: &mut T, thread: u64, seq: u64) -> TxResult<()> {
    let root = tx.root::<()>();
    let at = 1024 + thread * 64;
    let done = tx.read_u64(root, at)?;
    if done + 1 != seq {
        return Err(TxError::Corrupted(format!(
            "thread {thread} transfer {seq} after {done}"
        )));
    }
    tx.write_u64(root, at, seq)?;
    let a = (seq * 7 + thread) % 16 * 64;
    let v = tx.read_u64(root, a)?;
    tx.write_u64(root, a, v + 1)
}

#[derive(Clone, Copy, Debug)]
struct Bank;
impl Replay for Bank {
    fn replay<T: Tx>(&self, tx: &mut T, op: Op<'_>) -> TxResult<()> {
        let w = |i: usize| u64::from_le_bytes(op.args[i * 8..i * 8 + 8].try_into().expect("8"));
        transfer(tx, w(0), w(1))
    }
}

#[test]
fn two_threads_across_forty_restarts() {
    let options = MvccOptions {
        lanes: 4,
        olog_size: 16 << 10,
        clog_size: 16 << 10,
        chunk_shift: 16,
        tlog_versions: 64,
        ..MvccOptions::small()
    }
    // Without the background reclaimer: each "death" below is a copy of the pool file taken
    // while the engine lives, which is a crash image only while nothing writes. A running
    // reclaimer let the copy read one checkpoint record before it was written and the next
    // after (7 of 150 runs refused "the record expected at … is missing", an image no crash
    // can produce). The reclaimer's crashes are tested at every fence (`mvcc`'s
    // `crash_threads`) and by real SIGKILLs (`sigkill_mvcc_threads`).
    .with_background(false);
    let dir = tempfile::tempdir_in(pmem::DEFAULT_POOL_DIR).expect("tmp");
    let mut path = dir.path().join("p0.pool");
    drop(
        Mvcc::create(
            Pool::create(&path, &CreateOptions::new(LAYOUT, 32 << 20)).expect("pool"),
            &options,
            Bank,
        )
        .expect("create"),
    );
    let mut done = [0u64; 2];
    for round in 0..40u64 {
        // A process that recovers, runs both threads, and dies (nothing quiesced).
        let engine = Mvcc::open(
            Pool::open(&path, LAYOUT, &NativeOptions::default()).expect("open"),
            &options,
            Bank,
        )
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let counters = engine
            .read_only(|tx| {
                let root = tx.root::<()>();
                Ok::<_, TxError>([tx.read_u64(root, 1024)?, tx.read_u64(root, 1088)?])
            })
            .expect("read");
        assert_eq!(counters, done, "round {round}");
        let n = 500 + round * 37;
        std::thread::scope(|s| {
            for thread in 0..2u64 {
                let (engine, from) = (&engine, done[thread as usize]);
                s.spawn(move || {
                    for seq in from + 1..=from + n {
                        let mut a = [0u8; 16];
                        a[..8].copy_from_slice(&thread.to_le_bytes());
                        a[8..].copy_from_slice(&seq.to_le_bytes());
                        engine
                            .transaction_op(
                                Op {
                                    id: TRANSFER,
                                    args: &a,
                                },
                                |tx| transfer(tx, thread, seq),
                            )
                            .expect("transfer");
                    }
                });
            }
        });
        done = [done[0] + n, done[1] + n];
        // The process dies: its pool file keeps every store, nothing more happens (the
        // next process opens a copy; the dead one's file lock stays with this one).
        let next = dir.path().join(format!("p{}.pool", round + 1));
        std::fs::copy(&path, &next).expect("copy pool");
        std::mem::forget(engine);
        path = next;
    }
}
