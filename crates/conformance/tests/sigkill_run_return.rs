//! Run return (`docs/heap-format.md` §11.1) under `SIGKILL` of real processes, on each engine.
//!
//! A child process (this test binary again, started with `FERRITE_RUN_RETURN_CHILD`) opens a
//! small pool file, recovering it, and runs two threads that churn size classes: phases of
//! small blocks that fill the heap with runs alternate with phases of blocks of one to three
//! chunks, which find no free chunk until empty runs are returned. Every operation commits
//! its thread's operation counter with its change and is acknowledged on stdout. The parent
//! kills the child after a random delay, every third time kills a recovery too, then checks
//! the pool file: the deep check of the image as the kill left it finds no damage; after
//! recovery each thread's counter covers every acknowledged operation (and at most the one in
//! flight), no two blocks the tables name overlap, every block holds its bytes, and the heap's
//! allocated blocks are exactly those blocks and the tables.

use conformance::kill::ChildOutput;
use conformance::{Factory, LAYOUT, RedoFactory, UndoFactory};
use heap::Usage;
use pmem::{CreateOptions, NativeOptions, Pool};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use tx::{Engine, Tx, TxError, TxResult};

mod churn;
use churn::{
    CHUNK, Live, POOL, alloc_into, free_slot, mvcc_factory, read_slot, tx_options, update_slot,
    verify,
};

const ENV_CHILD: &str = "FERRITE_RUN_RETURN_CHILD";
const ENV_POOL: &str = "FERRITE_RUN_RETURN_POOL";
/// Set in a child that only recovers the pool (and is killed while it does).
const ENV_RECOVER_ONLY: &str = "FERRITE_RUN_RETURN_RECOVER_ONLY";
const ENTRY: &str = "child_entry_point";

const THREADS: u64 = 2;
/// One lane a thread.
const LANES: u32 = THREADS as u32;
const SLOTS: u64 = 1024;
/// Operations per phase of a thread: small blocks, then large ones, and so on.
const PHASE: u64 = 400;
/// Kills of a running child per engine.
const KILLS: usize = 40;
/// Longest a child runs before its kill.
const MAX_RUN: Duration = Duration::from_millis(250);

/// Root words: thread `t`'s table at `8 t`, its operation counter at `64 + 8 t`.
fn table_word(thread: u64) -> u64 {
    8 * thread
}

fn counter_word(thread: u64) -> u64 {
    64 + 8 * thread
}

fn read_u64<T: Tx>(tx: &mut T, addr: u64) -> TxResult<u64> {
    let mut word = [0u8; 8];
    tx.read_raw(addr, &mut word)?;
    Ok(u64::from_le_bytes(word))
}

fn bump_counter<T: Tx>(tx: &mut T, thread: u64, op: u64) -> TxResult<()> {
    let at = tx.root_offset() + counter_word(thread);
    if read_u64(tx, at)? != op {
        return Err(TxError::Corrupted(format!(
            "thread {thread}: op {op} out of order"
        )));
    }
    tx.write_raw(at, &(op + 1).to_le_bytes())
}

/// Slots `0..HALF` of a table take small blocks, `HALF..SLOTS` large ones.
const HALF: u64 = SLOTS / 2;

/// Operation `op` of thread `thread`, from its place `k` in its phase. In a small phase, an
/// even `k` puts a block of up to 512 bytes in small slot `k` and frees large slot `k / 2`,
/// an odd `k` rewrites a random small block with a new tag; in a large phase, operation `k`
/// puts a block of half a chunk to 3 chunks in large slot `k` and frees 8 small slots, so the
/// small phase's runs empty within the first 64 operations and the large blocks need their
/// chunks. With no room, it makes only the frees and frees the next occupied slot. Commits
/// the counter with its change.
fn run_op<E: Engine>(engine: &E, thread: u64, table: u64, op: u64) -> TxResult<()> {
    let mut rng = ChaCha8Rng::seed_from_u64((thread << 32) ^ op ^ 0x7275_6e72);
    let k = op % PHASE;
    let small = (op / PHASE).is_multiple_of(2);
    let (slot, size, frees) = if small {
        let frees = if k.is_multiple_of(2) {
            HALF + (k / 2) % HALF..HALF + (k / 2) % HALF + 1
        } else {
            0..0
        };
        (k % HALF, rng.random_range(1..=512), frees)
    } else {
        let first = (8 * k).min(HALF);
        (
            HALF + k % HALF,
            rng.random_range(CHUNK / 2..=3 * CHUNK),
            first..(first + 8).min(HALF),
        )
    };
    let tag = churn::tag((op << 1) | thread, size);
    let free_listed = |tx: &mut E::Tx<'_>| -> TxResult<()> {
        for other in frees.clone() {
            if other != slot && read_slot(tx, table, other)?.1 != 0 {
                free_slot(tx, table, other)?;
            }
        }
        Ok(())
    };
    if small && !k.is_multiple_of(2) {
        // Every other small operation rewrites a small block in place, with a new tag.
        let target = rng.random_range(0..HALF);
        return engine.transaction(|tx| {
            let (_, old) = read_slot(tx, table, target)?;
            if old != 0 {
                update_slot(
                    tx,
                    table,
                    target,
                    churn::tag((op << 1) | thread, churn::size_of(old)),
                )?;
            }
            bump_counter(tx, thread, op)
        });
    }
    let first = engine.transaction(|tx| {
        free_listed(tx)?;
        if read_slot(tx, table, slot)?.1 != 0 {
            free_slot(tx, table, slot)?;
        }
        alloc_into(tx, table, slot, tag)?;
        bump_counter(tx, thread, op)
    });
    match first {
        Err(TxError::OutOfSpace { .. }) => engine.transaction(|tx| {
            free_listed(tx)?;
            for other in (slot..SLOTS).chain(0..slot) {
                if !frees.contains(&other) && read_slot(tx, table, other)?.1 != 0 {
                    free_slot(tx, table, other)?;
                    break;
                }
            }
            bump_counter(tx, thread, op)
        }),
        other => other,
    }
}

/// The heap's usage on an engine over a pool file.
type UsageOf<F> = fn(&<F as Factory>::Engine<pmem::Native>) -> Usage;

fn factory_run<F: Factory>(factory: &F, pool: &Path, usage: UsageOf<F>) -> Result<(), String> {
    let pool = Pool::open(pool, LAYOUT, &NativeOptions::default()).map_err(|e| e.to_string())?;
    let engine = factory.open(pool).map_err(|e| e.to_string())?;
    let (tables, counters) = engine
        .transaction(|tx| {
            let root = tx.root_offset();
            let mut tables = Vec::new();
            let mut counters = Vec::new();
            for t in 0..THREADS {
                tables.push(read_u64(tx, root + table_word(t))?);
                counters.push(read_u64(tx, root + counter_word(t))?);
            }
            Ok::<_, TxError>((tables, counters))
        })
        .map_err(|e| e.to_string())?;
    println!("READY");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    if std::env::var_os(ENV_RECOVER_ONLY).is_some() {
        return Ok(());
    }
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (engine, table, start) = (&engine, tables[t as usize], counters[t as usize]);
            scope.spawn(move || {
                for op in start.. {
                    let runs = usage(engine).runs;
                    run_op(engine, t, table, op).unwrap_or_else(|e| panic!("op {op}: {e}"));
                    // Runs only ever go away by being returned (by this or the other thread).
                    let returned = u8::from(usage(engine).runs < runs);
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ACK {t} {op} {returned}").expect("stdout");
                    out.flush().expect("stdout");
                }
            });
        }
    });
    Ok(())
}

/// The child's side; does nothing in a normal test run.
#[test]
fn child_entry_point() {
    let Ok(engine) = std::env::var(ENV_CHILD) else {
        return;
    };
    let pool = std::env::var(ENV_POOL).expect("the pool's path");
    let pool = Path::new(&pool);
    let result = match engine.as_str() {
        "redo" => factory_run(&RedoFactory(tx_options(LANES)), pool, |e| e.heap().usage()),
        "undo" => factory_run(&UndoFactory(tx_options(LANES)), pool, |e| e.heap().usage()),
        "mvcc" => factory_run(&mvcc_factory(LANES), pool, |e| e.heap().usage()),
        other => Err(format!("unknown engine {other}")),
    };
    if let Err(error) = result {
        eprintln!("child: {error}");
        std::process::exit(2);
    }
}

/// Starts a child that only recovers `pool` and kills it `delay` after its start: during its
/// recovery, or after it.
fn kill_recovery(engine: &str, pool: &Path, delay: Duration) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(["--exact", ENTRY, "--nocapture", "--test-threads=1"])
        .env(ENV_CHILD, engine)
        .env(ENV_POOL, pool)
        .env(ENV_RECOVER_ONLY, "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawning the child: {e}"))?;
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
    Ok(())
}

/// What a killed child acknowledged: each thread's last operation, and how many operations saw
/// runs returned.
struct Acked {
    last: Vec<Option<u64>>,
    returns: u64,
}

/// Starts a child on `pool` (recovering it), kills it `delay` after it is ready, and returns
/// what it acknowledged.
fn run_and_kill(engine: &str, pool: &Path, delay: Duration) -> Result<Acked, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .args(["--exact", ENTRY, "--nocapture", "--test-threads=1"])
        .env(ENV_CHILD, engine)
        .env(ENV_POOL, pool)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning the child: {e}"))?;
    let output = ChildOutput::take(&mut child)?;
    let ready = output.became_ready();
    if ready {
        std::thread::sleep(delay);
    }
    let _ = child.kill();
    let _ = child.wait();
    let (lines, errors) = output.finish();
    let mut acked = Acked {
        last: vec![None; THREADS as usize],
        returns: 0,
    };
    for line in lines {
        let mut words = line.split_whitespace();
        if words.next() == Some("ACK") {
            let mut number = || -> Result<u64, String> {
                words
                    .next()
                    .and_then(|w| w.parse().ok())
                    .ok_or_else(|| format!("bad line {line:?}"))
            };
            let (t, op, returned) = (number()?, number()?, number()?);
            acked.last[t as usize] = Some(op);
            acked.returns += returned;
        }
    }
    if !ready || errors.contains("panicked") || errors.contains("child:") {
        return Err(format!(
            "the child failed; its stderr:\n{}",
            errors.trim_end()
        ));
    }
    Ok(acked)
}

/// The deep check of the pool file as it is now (a kill left it), on a private copy.
fn deep_check(path: &Path) -> Result<(), String> {
    let damage = churn::file_damage(path)?;
    if damage.is_empty() {
        Ok(())
    } else {
        Err(format!("deep check: {damage:?}"))
    }
}

/// Recovers the pool and checks it; returns each thread's operation counter.
fn recover_and_check<F: Factory>(factory: &F, path: &Path) -> Result<Vec<u64>, String> {
    let pool = Pool::open(path, LAYOUT, &NativeOptions::default()).map_err(|e| e.to_string())?;
    let engine = factory.open(pool).map_err(|e| format!("recovery: {e}"))?;
    let live = Live::default();
    let (counters, blocks) = engine
        .transaction(|tx| {
            let root = tx.root_offset();
            let mut counters = Vec::new();
            let mut blocks = 0u64;
            for t in 0..THREADS {
                let table = read_u64(tx, root + table_word(t))?;
                counters.push(read_u64(tx, root + counter_word(t))?);
                for slot in 0..SLOTS {
                    let (addr, tag) = read_slot(tx, table, slot)?;
                    if tag == 0 {
                        continue;
                    }
                    verify(tx, addr, tag)?;
                    live.insert(addr, churn::size_of(tag), tag)
                        .map_err(TxError::Corrupted)?;
                    blocks += 1;
                }
            }
            Ok::<_, TxError>((counters, blocks))
        })
        .map_err(|e| format!("after recovery: {e}"))?;
    engine.sync().map_err(|e| e.to_string())?;
    let allocated = factory.blocks(&engine);
    if allocated != blocks + THREADS {
        return Err(format!(
            "after recovery: {allocated} allocated blocks, the tables name {blocks} (and {THREADS} \
             tables)"
        ));
    }
    Ok(counters)
}

fn campaign<F: Factory>(factory: &F, engine: &str, seed: u64) {
    let dir = tempfile::tempdir_in(churn::pool_dir()).expect("tempdir");
    let path = dir.path().join("pool");
    {
        let pool = Pool::create(&path, &CreateOptions::new(LAYOUT, POOL)).expect("create");
        let engine = factory.create(pool).expect("create the engine");
        for t in 0..THREADS {
            engine
                .transaction(|tx| {
                    let table = tx.alloc_zeroed_raw(SLOTS * churn::SLOT)?;
                    let root = tx.root_offset();
                    tx.write_raw(root + table_word(t), &table.to_le_bytes())
                })
                .expect("a table");
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut done = vec![0u64; THREADS as usize];
    let mut in_flight_durable = 0;
    let mut returns = 0;
    for kill in 0..KILLS {
        let delay = Duration::from_micros(rng.random_range(0..=MAX_RUN.as_micros() as u64));
        let acked = run_and_kill(engine, &path, delay)
            .unwrap_or_else(|e| panic!("{engine}, kill {kill}: {e}"));
        returns += acked.returns;
        if kill % 3 == 0 {
            // A recovery killed too, at a random time from its start.
            let delay = Duration::from_micros(rng.random_range(0..=5_000));
            kill_recovery(engine, &path, delay)
                .unwrap_or_else(|e| panic!("{engine}, kill {kill}: {e}"));
        }
        deep_check(&path).unwrap_or_else(|e| panic!("{engine}, kill {kill}: {e}"));
        let counters = recover_and_check(factory, &path)
            .unwrap_or_else(|e| panic!("{engine}, kill {kill}: {e}"));
        for t in 0..THREADS as usize {
            let at_least = acked.last[t].map_or(done[t], |op| op + 1);
            assert!(
                (at_least..=at_least + 1).contains(&counters[t]),
                "{engine}, kill {kill}, thread {t}: {} operations durable, {} acknowledged",
                counters[t],
                at_least
            );
            in_flight_durable += usize::from(counters[t] > at_least);
            done[t] = counters[t];
        }
    }
    eprintln!(
        "{engine}: {KILLS} kills, operations per thread {done:?}, in flight and durable \
         {in_flight_durable}, acknowledged operations that saw runs returned {returns}"
    );
    assert!(returns > 0, "{engine}: no run was ever returned");
    assert!(
        done.iter().all(|&n| n > 2 * PHASE),
        "{engine}: the children ran too few operations ({done:?}) to reach a large phase"
    );
}

#[test]
fn redo_survives_sigkill_while_runs_are_returned() {
    campaign(&RedoFactory(tx_options(LANES)), "redo", 1);
}

#[test]
fn undo_survives_sigkill_while_runs_are_returned() {
    campaign(&UndoFactory(tx_options(LANES)), "undo", 2);
}

#[test]
fn mvcc_survives_sigkill_while_runs_are_returned() {
    campaign(&mvcc_factory(LANES), "mvcc", 3);
}
