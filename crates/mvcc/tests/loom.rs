//! Model tests of the lock / commit / dereference protocol of the version chains
//! (`mvcc::chain`) and of the chunk table's header bits (`mvcc::table`) under every
//! interleaving loom explores.
//!
//! Run with: `RUSTFLAGS="--cfg loom" cargo test -p mvcc --release --test loom`
//! (CI runs them; under a normal build this file is empty).
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::thread;
use mvcc::chain::{Bytes, CHECKPOINTER, Header, Lock, Seen, Versions};
use mvcc::table::{FRESH, NO_HEADER, Table};

/// Explores the interleavings of `f` with at most three preemptions per execution (the
/// usual bound: bugs of these protocols show with two or three) and room for the bounded
/// waits a reader makes on a pending version.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.max_branches = 100_000;
    builder.check(f);
}

/// A chunk whose eight words all hold `value` (a torn read would mix values).
fn chunk(value: u8) -> Bytes {
    [value; 64]
}

/// Reads the whole chunk at `snapshot` and checks it is untorn; returns its value.
fn read_whole(header: &Header, versions: &Versions, snapshot: u64) -> Option<u8> {
    let mut out = [0u8; 64];
    match header.read_at(versions, snapshot, 0, &mut out) {
        Seen::Copied { .. } => {
            assert!(out.iter().all(|&b| b == out[0]), "torn read: {out:?}");
            Some(out[0])
        }
        Seen::TooOld => None,
    }
}

/// One chunk's header and a version slab of `slots`, shared by a model's threads.
#[derive(Clone)]
struct Chain {
    versions: Arc<Versions>,
    header: Arc<Header>,
}

impl Chain {
    /// A header whose base holds `chunk(base)`, with no versions.
    fn new(slots: usize, base: u8) -> Self {
        let chain = Chain {
            versions: Arc::new(Versions::new(slots)),
            header: Arc::new(Header::default()),
        };
        chain.header.reset(&chunk(base));
        chain
    }

    /// Runs `f` on a new model thread with the chain.
    fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Header, &Versions) -> T + Send + 'static,
    ) -> thread::JoinHandle<T> {
        let chain = self.clone();
        thread::spawn(move || f(&chain.header, &chain.versions))
    }
}

/// A committed version on the chain: lock, push, stamp, publish, unlock.
fn commit(header: &Header, versions: &Versions, r: u32, value: u8, ts: u64) {
    assert_eq!(header.lock(1), Lock::Taken);
    header.push(versions, r, &chunk(value));
    versions.stamp(r, ts);
    versions.publish(r, ts);
    header.unlock();
}

/// A reader concurrent with a commit sees the old or the new version, never a torn mix,
/// and the new one only if its snapshot covers the commit timestamp.
#[test]
fn a_reader_sees_an_untorn_committed_version_of_its_snapshot() {
    model(|| {
        let chain = Chain::new(2, 1);
        let (versions, header) = (&chain.versions, &chain.header);
        let writer = chain.spawn(move |header, versions| commit(header, versions, 1, 2, 5));
        let reader = chain.spawn(move |header, versions| {
            for snapshot in [3, 7] {
                let seen = read_whole(header, versions, snapshot).expect("old enough");
                assert!(
                    seen == 1 || (seen == 2 && snapshot >= 5),
                    "{seen} at {snapshot}"
                );
            }
        });
        writer.join().expect("writer");
        reader.join().expect("reader");
        assert_eq!(read_whole(header, versions, 7), Some(2));
        assert_eq!(read_whole(header, versions, 3), Some(1));
    });
}

/// A commit that fails after pushing (an unpush) is never seen, even by a reader that
/// reached the pushed version while it was pending.
#[test]
fn an_aborted_commit_is_never_read() {
    model(|| {
        let chain = Chain::new(2, 1);
        let (versions, header) = (&chain.versions, &chain.header);
        let writer = chain.spawn(move |header, versions| {
            assert_eq!(header.lock(1), Lock::Taken);
            header.push(versions, 1, &chunk(9));
            versions.stamp(1, 5);
            header.unpush(versions, 1);
            header.unlock();
        });
        let reader = chain
            .spawn(move |header, versions| assert_eq!(read_whole(header, versions, 7), Some(1)));
        writer.join().expect("writer");
        reader.join().expect("reader");
        assert_eq!(read_whole(header, versions, 7), Some(1));
    });
}

/// Two writers of one chunk: exactly one holds the lock at a time (first committer wins),
/// and the chain ends with both commits in lock order.
#[test]
fn writers_exclude_each_other() {
    model(|| {
        let chain = Chain::new(2, 0);
        let (versions, header) = (&chain.versions, &chain.header);
        let spawn = |r: u32, value: u8, ts: u64| {
            chain.spawn(move |header, versions| {
                if header.lock(u64::from(r)) != Lock::Taken {
                    return false;
                }
                header.push(versions, r, &chunk(value));
                versions.stamp(r, ts);
                versions.publish(r, ts);
                header.unlock();
                true
            })
        };
        let (a, b) = (spawn(1, 1, 10), spawn(2, 2, 20));
        let (a, b) = (a.join().expect("a"), b.join().expect("b"));
        assert!(a || b, "one writer always gets the lock");
        let newest = read_whole(header, versions, 100).expect("readable");
        match (a, b) {
            (true, true) => assert!(newest == 1 || newest == 2),
            (true, false) => assert_eq!(newest, 1),
            (false, true) => assert_eq!(newest, 2),
            (false, false) => unreachable!(),
        }
    });
}

/// A checkpoint cut at a boundary no larger than the reader's snapshot, concurrent with
/// the read: the reader gets the newest version at or before its snapshot, whether it
/// finds it in the chain or in the rewritten base, and never a version the cut unlinked
/// as older.
#[test]
fn a_cut_never_changes_what_a_snapshot_at_or_after_its_boundary_reads() {
    model(|| {
        let chain = Chain::new(3, 1);
        let (versions, header) = (&chain.versions, &chain.header);
        commit(header, versions, 1, 2, 2);
        commit(header, versions, 2, 3, 4);
        let checkpointer = chain.spawn(move |header, versions| {
            assert_eq!(header.lock(CHECKPOINTER), Lock::Taken);
            let mut retired = Vec::new();
            assert_eq!(header.cut(versions, 4, &mut retired), Some(4));
            header.unlock();
            retired
        });
        let reader = chain
            .spawn(move |header, versions| assert_eq!(read_whole(header, versions, 5), Some(3)));
        let retired = checkpointer.join().expect("checkpointer");
        reader.join().expect("reader");
        assert_eq!(retired, vec![2, 1]);
        assert!(header.is_empty());
        assert_eq!(read_whole(header, versions, 6), Some(3));
    });
}

/// Validation against a concurrent commit: a transaction that read the chunk at snapshot
/// 3 and commits at 8 sees the change stamped at 5 once it is pushed (waiting while it is
/// unstamped), and no change when the other commit's timestamp is above its own.
#[test]
fn validation_catches_a_commit_between_snapshot_and_timestamp() {
    model(|| {
        let chain = Chain::new(2, 1);
        let (versions, header) = (&chain.versions, &chain.header);
        let pushed = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let writer = {
            let pushed = Arc::clone(&pushed);
            chain.spawn(move |header, versions| {
                assert_eq!(header.lock(1), Lock::Taken);
                header.push(versions, 1, &chunk(2));
                pushed.store(true, loom::sync::atomic::Ordering::SeqCst);
                versions.stamp(1, 5);
                versions.publish(1, 5);
                header.unlock();
            })
        };
        let validator = {
            let pushed = Arc::clone(&pushed);
            chain.spawn(move |header, versions| {
                // A push that happened before the check started is always caught.
                let was_pushed = pushed.load(loom::sync::atomic::Ordering::SeqCst);
                let changed = header.changed_after(versions, 3, 8);
                assert!(
                    changed || !was_pushed,
                    "missed a commit pushed before validation"
                );
            })
        };
        writer.join().expect("writer");
        validator.join().expect("validator");
        assert!(header.changed_after(versions, 3, 8));
        assert!(!header.changed_after(versions, 3, 4), "stamped after 4");
    });
}

/// A retired header stays locked: a writer holding its stale reference fails to lock it
/// and looks the chunk up again instead of pushing onto a header the table no longer has.
#[test]
fn a_writer_never_pushes_onto_a_retired_header() {
    model(|| {
        let chain = Chain::new(1, 1);
        let header = &chain.header;
        let writer = chain.spawn(move |header, versions| match header.lock(1) {
            Lock::Taken => {
                header.push(versions, 1, &chunk(2));
                versions.stamp(1, 5);
                versions.publish(1, 5);
                header.unlock();
                true
            }
            Lock::Busy | Lock::Retired => false,
        });
        let remover = chain.spawn(|header, _| header.try_retire());
        let wrote = writer.join().expect("writer");
        let retired = remover.join().expect("remover");
        assert!(!(retired && wrote), "a retired header got a version");
        if retired {
            assert_eq!(header.lock(1), Lock::Retired);
        }
    });
}

/// A table of two pages of header bits (128 chunks) with room for `headers` headers.
fn small_table(headers: u32) -> Arc<Table> {
    Arc::new(Table::new(128 * 64, headers))
}

/// A chunk's header bit is set before a header reference reaches the slot: a reader that
/// could see the reference through the slot never skips it because the bit is clear.
#[test]
fn a_reader_never_skips_a_header_the_slot_already_shows() {
    model(|| {
        let table = small_table(4);
        let reader = {
            let table = table.clone();
            thread::spawn(move || (table.slot(70), table.reader_slot(70)))
        };
        let r = table.get_or_create(70, || chunk(1)).expect("header");
        let (raw, seen) = reader.join().expect("reader");
        if raw != NO_HEADER && raw != FRESH {
            assert_eq!(seen, r, "the header bit hid a header the slot showed");
        }
    });
}

/// A header taken out after its content was written back to the master: a reader that saw
/// the header and then finds its bit clear reads the written-back master (the bit's clear
/// publishes the write-back).
#[test]
fn a_reader_past_a_removal_sees_the_written_back_master() {
    model(|| {
        let table = small_table(4);
        let master = Arc::new(AtomicU64::new(1));
        let r = table.get_or_create(70, || chunk(1)).expect("header");
        let remover = {
            let (table, master) = (table.clone(), master.clone());
            thread::spawn(move || {
                master.store(2, Ordering::Relaxed); // the write-back
                table.remove(70, r);
            })
        };
        let before = table.reader_slot(70);
        let after = table.reader_slot(70);
        if before == r && after == NO_HEADER {
            assert_eq!(
                master.load(Ordering::Relaxed),
                2,
                "stale master after removal"
            );
        }
        remover.join().expect("remover");
    });
}

/// A header made for a chunk while its retired header is being taken out stays visible to
/// readers: the old bit is cleared before the slot is emptied, so the new header's bit,
/// set only once the slot is empty, is never cleared by the removal.
#[test]
fn a_removal_never_hides_the_next_header_of_its_chunk() {
    model(|| {
        let table = small_table(4);
        let old = table.get_or_create(70, || chunk(1)).expect("header");
        assert!(table.header(old).try_retire());
        let remover = {
            let table = table.clone();
            thread::spawn(move || table.remove(70, old))
        };
        let new = loop {
            let r = table.get_or_create(70, || chunk(1)).expect("header");
            if r != old {
                break r;
            }
            thread::yield_now();
        };
        remover.join().expect("remover");
        assert_eq!(table.reader_slot(70), new, "the removal hid the new header");
    });
}

/// The reclaimer's hand-off: a lane's request is never slept through. The lane waits for
/// the reclaimer to acknowledge the work before anything stops it, so a lost wake-up leaves
/// both asleep (loom reports the deadlock). The strongest request is served, and a stopped
/// reclaimer no longer counts as serving.
#[test]
fn a_reclaimer_never_sleeps_through_a_request() {
    use loom::sync::{Condvar, Mutex};
    use mvcc::handoff::{Requests, Wake, Work};
    model(|| {
        let requests = Arc::new(Requests::default());
        let served = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        requests.start();
        let reclaimer = {
            let (requests, served) = (Arc::clone(&requests), Arc::clone(&served));
            thread::spawn(move || {
                loop {
                    match requests.next(None) {
                        Wake::Work(work) => {
                            served.0.lock().expect("lock").push(work);
                            served.1.notify_one();
                        }
                        Wake::Stop => return,
                        Wake::Idle => unreachable!("no timeout"),
                    }
                }
            })
        };
        requests.request(Work::Trim);
        requests.request(Work::Checkpoint);
        let mut seen = served.0.lock().expect("lock");
        while !seen.contains(&Work::Checkpoint) {
            seen = served.1.wait(seen).expect("wait");
        }
        drop(seen);
        requests.stop();
        reclaimer.join().expect("reclaimer");
        assert!(!requests.serving());
    });
}

/// Two lanes asking at once while the reclaimer sleeps: whichever raises the pending work
/// wakes it, the other's request coalesces, and the work is served before the stop.
#[test]
fn concurrent_requests_coalesce_and_are_served() {
    use mvcc::handoff::{Requests, Wake, Work};
    model(|| {
        let requests = Arc::new(Requests::default());
        requests.start();
        let lanes: Vec<_> = [Work::Trim, Work::Trim]
            .into_iter()
            .map(|work| {
                let requests = Arc::clone(&requests);
                thread::spawn(move || requests.request(work))
            })
            .collect();
        let served = {
            let requests = Arc::clone(&requests);
            thread::spawn(move || {
                let mut served = 0;
                while let Wake::Work(_) = requests.next(None) {
                    served += 1;
                }
                served
            })
        };
        for lane in lanes {
            lane.join().expect("lane");
        }
        requests.stop();
        let served = served.join().expect("reclaimer");
        assert!((1..=2).contains(&served), "served {served}");
    });
}

/// The snapshot announcement's asymmetric fence (`mvcc::fence`): a transaction stores its
/// announcement, runs the light side and reads the clock; a reclaimer reads the clock, runs
/// the heavy side and reads the announcement, while a committer advances the clock. A
/// reclaimer that misses the announcement read a clock no newer than the transaction's
/// snapshot, so its boundary never passes what the transaction reads.
#[test]
fn a_reclaimer_that_misses_an_announcement_read_an_older_clock() {
    use mvcc::fence::{heavy, light};
    const NONE: u64 = u64::MAX;
    model(|| {
        let clock = Arc::new(AtomicU64::new(5));
        let active = Arc::new(AtomicU64::new(NONE));
        let committer = {
            let clock = Arc::clone(&clock);
            thread::spawn(move || {
                clock.fetch_add(1, Ordering::SeqCst);
            })
        };
        let transaction = {
            let (clock, active) = (Arc::clone(&clock), Arc::clone(&active));
            thread::spawn(move || {
                active.store(4, Ordering::Relaxed);
                light();
                clock.load(Ordering::SeqCst)
            })
        };
        let now = clock.load(Ordering::SeqCst);
        assert!(heavy());
        let seen = active.load(Ordering::SeqCst);
        let snapshot = transaction.join().expect("transaction");
        committer.join().expect("committer");
        if seen == NONE {
            assert!(
                now <= snapshot,
                "missed an announcement at {snapshot}, clock {now}"
            );
        }
    });
}

/// A commit stores its in-flight bound (`Relaxed`), pushes, then takes its stamp with a
/// `SeqCst` read-modify-write of the counter clock; a checkpoint reads the clock, then the
/// bounds, and covers at most `min(clock, bound - 1)`. Whenever that boundary reaches the
/// commit's stamp, the checkpoint sees the pushed version (which it then waits on or
/// reads): the stamp publishes the bound and the push with it. (A commit that stored its
/// bound and pushed only after its stamp fails this model.)
#[test]
fn a_checkpoint_that_reads_a_stamp_sees_its_inflight_bound() {
    use loom::sync::atomic::AtomicBool;
    const NONE: u64 = u64::MAX;
    model(|| {
        let clock = Arc::new(AtomicU64::new(5));
        let inflight = Arc::new(AtomicU64::new(NONE));
        let pushed = Arc::new(AtomicBool::new(false));
        let committer = {
            let (clock, inflight, pushed) = (
                Arc::clone(&clock),
                Arc::clone(&inflight),
                Arc::clone(&pushed),
            );
            thread::spawn(move || {
                inflight.store(clock.load(Ordering::SeqCst), Ordering::Relaxed);
                pushed.store(true, Ordering::Relaxed);
                clock.fetch_add(1, Ordering::SeqCst) + 1
            })
        };
        let now = clock.load(Ordering::SeqCst);
        let bound = inflight.load(Ordering::SeqCst);
        let boundary = if bound == NONE {
            now
        } else {
            now.min(bound - 1)
        };
        let seen = pushed.load(Ordering::Acquire);
        let ts = committer.join().expect("committer");
        if boundary >= ts {
            assert!(
                seen,
                "checkpoint at {boundary} missed the push of a commit at {ts}"
            );
        }
    });
}
