//! The MVCC engine killed with SIGKILL while two threads commit logged operations
//! concurrently: bank transfers between accounts, each also advancing its thread's sequence
//! counter. Recovery re-executes the operations of both lanes' logs in timestamp order; it
//! must keep the total, and keep every transfer a thread acknowledged (at most one more per
//! thread, the one in flight).

use mvcc::{Level, Mvcc, MvccOptions};
use pmem::{CreateOptions, NativeOptions, Pool};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use tx::{Engine, Op, OpId, Replay, Tx, TxError, TxResult};

const LAYOUT: &str = "ferrite-kill-bank";
const ENTRY: &str = "bank_child_entry_point";
const ENV_POOL: &str = "FERRITE_BANK_POOL";
const ENV_MODE: &str = "FERRITE_BANK_MODE";
const ACCOUNTS: u64 = 16;
const START: u64 = 1000;
const THREADS: u64 = 2;
/// Root layout: the accounts' balances, one per 64-byte chunk (transfers between different
/// pairs do not conflict), then one sequence counter per thread.
const COUNTERS: u64 = ACCOUNTS * 64;
const TRANSFER: OpId = OpId(7);
/// Offset of the pool's root region (the pool header takes the first 4 KiB).
const ROOT: u64 = 4096;

fn account(a: u64) -> u64 {
    a * 64
}

fn counter(thread: u64) -> u64 {
    COUNTERS + thread * 64
}

/// One transfer by `thread`, its `seq`-th: moves `amount` if the source has it (either way
/// the thread's counter becomes `seq`).
fn transfer<T: Tx>(
    tx: &mut T,
    thread: u64,
    seq: u64,
    from: u64,
    to: u64,
    amount: u64,
) -> TxResult<()> {
    let root = tx.root::<()>();
    let done = tx.read_u64(root, counter(thread))?;
    if done + 1 != seq {
        return Err(TxError::Corrupted(format!(
            "thread {thread} transfer {seq} after {done}"
        )));
    }
    tx.write_u64(root, counter(thread), seq)?;
    let a = tx.read_u64(root, account(from))?;
    if from == to || a < amount {
        return Ok(());
    }
    let b = tx.read_u64(root, account(to))?;
    tx.write_u64(root, account(from), a - amount)?;
    tx.write_u64(root, account(to), b + amount)
}

fn args(thread: u64, seq: u64, from: u64, to: u64, amount: u64) -> [u8; 40] {
    let mut out = [0u8; 40];
    for (i, v) in [thread, seq, from, to, amount].into_iter().enumerate() {
        out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    out
}

#[derive(Clone, Copy, Debug)]
struct Bank;

impl Replay for Bank {
    fn replay<T: Tx>(&self, tx: &mut T, op: Op<'_>) -> TxResult<()> {
        let word = |i: usize| u64::from_le_bytes(op.args[i * 8..i * 8 + 8].try_into().expect("8"));
        if op.id != TRANSFER || op.args.len() != 40 {
            return Err(TxError::Corrupted("not a transfer".into()));
        }
        transfer(tx, word(0), word(1), word(2), word(3), word(4))
    }
}

fn options() -> MvccOptions {
    MvccOptions {
        lanes: 4,
        olog_size: 16 << 10,
        clog_size: 16 << 10,
        chunk_shift: 16,
        tlog_versions: 64,
        ..MvccOptions::small()
    }
    .with_isolation(Level::Snapshot)
}

fn open(path: &Path) -> TxResult<Mvcc<pmem::Native, Bank>> {
    let pool = Pool::open(path, LAYOUT, &NativeOptions::default())?;
    Mvcc::open(pool, &options(), Bank)
}

/// The child: recovers, then two threads transfer until killed, acknowledging each commit
/// as `ACK thread seq`.
#[test]
fn bank_child_entry_point() {
    let Some(path) = std::env::var_os(ENV_POOL) else {
        return;
    };
    let engine = open(Path::new(&path)).expect("recover");
    let stdout = std::sync::Mutex::new(std::io::stdout());
    writeln!(stdout.lock().expect("stdout"), "READY").expect("ready");
    if std::env::var(ENV_MODE).is_ok_and(|m| m == "recover") {
        return;
    }
    std::thread::scope(|s| {
        for thread in 0..THREADS {
            let (engine, stdout) = (&engine, &stdout);
            s.spawn(move || {
                let mut seq = engine
                    .read_only(|tx| tx.read_u64(tx.root::<()>(), counter(thread)))
                    .expect("counter");
                let mut rng = ChaCha8Rng::seed_from_u64(seq * 31 + thread);
                loop {
                    seq += 1;
                    let (from, to, amount) = (
                        rng.random_range(0..ACCOUNTS),
                        rng.random_range(0..ACCOUNTS),
                        rng.random_range(1..100),
                    );
                    let a = args(thread, seq, from, to, amount);
                    engine
                        .transaction_op(
                            Op {
                                id: TRANSFER,
                                args: &a,
                            },
                            |tx| transfer(tx, thread, seq, from, to, amount),
                        )
                        .expect("transfer");
                    let mut out = stdout.lock().expect("stdout");
                    writeln!(out, "ACK {thread} {seq}").expect("ack");
                    out.flush().expect("flush");
                }
            });
        }
    });
}

/// Starts a child, returns the highest sequence each thread acknowledged before the kill
/// `delay` after it was ready. The child checks at every checkpoint that what recovery
/// would rebuild of the root equals the checkpointed content (`MVCC_VERIFY`, debug builds),
/// reporting to `errors`.
fn run_and_kill(
    path: &Path,
    errors: &Path,
    recover_only: bool,
    delay: Duration,
) -> [u64; THREADS as usize] {
    let exe = std::env::current_exe().expect("test binary");
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(errors)
        .expect("child error file");
    let mut child = Command::new(exe)
        .args(["--exact", ENTRY, "--nocapture", "--test-threads=1"])
        .env(ENV_POOL, path)
        .env(ENV_MODE, if recover_only { "recover" } else { "run" })
        .env("MVCC_VERIFY", format!("{ROOT}:{}", COUNTERS + THREADS * 64))
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .expect("child");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut acked = [0u64; THREADS as usize];
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // The test harness may print its "test … " before the first line.
            if line.ends_with("READY") {
                let _ = tx.send(());
            } else if let Some(rest) = line.find("ACK ").map(|at| &line[at + 4..]) {
                let mut parts = rest.split(' ').map(|p| p.parse::<u64>().expect("number"));
                let (thread, seq) = (parts.next().expect("thread"), parts.next().expect("seq"));
                acked[thread as usize] = acked[thread as usize].max(seq);
            }
        }
        acked
    });
    if rx.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the child did not recover within 60 s");
    }
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
    reader.join().expect("reader")
}

#[test]
fn two_threads_of_logged_transfers_survive_sigkill() {
    let kills: usize = std::env::var("FERRITE_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let dir = tempfile::tempdir_in(pmem::DEFAULT_POOL_DIR).expect("tmp");
    let path = dir.path().join("bank.pool");
    let errors = dir.path().join("children.err");
    {
        let pool = Pool::create(&path, &CreateOptions::new(LAYOUT, 32 << 20)).expect("pool");
        let engine = Mvcc::create(pool, &options(), Bank).expect("create");
        engine
            .transaction(|tx| {
                let root = tx.root::<()>();
                (0..ACCOUNTS).try_for_each(|a| tx.write_u64(root, account(a), START))
            })
            .expect("accounts");
    }
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut durable = [0u64; THREADS as usize];
    let (mut acknowledged, mut in_flight) = (0u64, 0usize);
    for kill in 0..kills {
        let delay = Duration::from_micros(rng.random_range(0..40_000));
        let acked = run_and_kill(&path, &errors, false, delay);
        if kill % 4 == 3 {
            let delay = Duration::from_micros(rng.random_range(0..2_000));
            run_and_kill(&path, &errors, true, delay);
        }
        let reports = std::fs::read_to_string(&errors).unwrap_or_default();
        assert!(
            !reports.contains("mvcc verify"),
            "kill {kill}: a child found its recovery view wrong:\n{reports}"
        );
        let engine = open(&path).unwrap_or_else(|e| panic!("kill {kill}: recovery: {e}"));
        let (total, counters) = engine
            .read_only(|tx| {
                let root = tx.root::<()>();
                let total = (0..ACCOUNTS).try_fold(0, |s, a| {
                    Ok::<_, TxError>(s + tx.read_u64(root, account(a))?)
                })?;
                let counters = [
                    tx.read_u64(root, counter(0))?,
                    tx.read_u64(root, counter(1))?,
                ];
                Ok::<_, TxError>((total, counters))
            })
            .expect("read");
        assert_eq!(total, ACCOUNTS * START, "kill {kill}: the total changed");
        for t in 0..THREADS as usize {
            let seen = acked[t].max(durable[t]);
            assert!(
                counters[t] >= seen && counters[t] <= seen + 1,
                "kill {kill}: thread {t} acknowledged {seen} transfers, the pool holds {}",
                counters[t]
            );
            acknowledged += counters[t] - durable[t];
            in_flight += usize::from(counters[t] > acked[t].max(durable[t]));
            durable[t] = counters[t];
        }
        let stats = engine.stats();
        drop(engine);
        if kill == 0 {
            eprintln!("first recovery re-executed {} operations", stats.replayed);
        }
    }
    eprintln!("{kills} kills: {acknowledged} transfers durable, {in_flight} in-flight ones landed");
    assert!(
        acknowledged > kills as u64,
        "the children made too little progress"
    );
}
