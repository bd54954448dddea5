//! Crash consistency of the undo and redo engines, at every fence, with double crash:
//! a bank (transfers between accounts, sum invariant) plus a list whose nodes are allocated
//! and freed inside the same transactions, so heap actions are crash-tested too.

use crashsim::{Config, Scenario, SimMode, SimPm, check};
use pmem::{CreateOptions, Pool};
use tx::{Engine, EngineOptions, LogMode, PPtr, Redo, Tx, TxError, TxResult, Undo};

const LAYOUT: &str = "bank";
const POOL: u64 = 192 * 1024;
const ACCOUNTS: u64 = 4;
const START: u64 = 100;
const MAX_LIST: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Undo,
    Redo,
}

struct Bank {
    kind: Kind,
    mode: LogMode,
    ops: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct State {
    balances: Vec<u64>,
    list: Vec<u64>,
    blocks: u64,
}

enum Live {
    Undo(Undo<SimPm>),
    Redo(Redo<SimPm>),
}

/// What operation `i` does: transfer (from, to, amount), push a node, pop a node.
fn plan(i: usize) -> (u64, u64, u64, bool, bool) {
    let from = i as u64 % ACCOUNTS;
    let to = (i as u64 * 3 + 1) % ACCOUNTS;
    (from, to, i as u64 + 1, i.is_multiple_of(3), i % 5 == 4)
}

fn setup_tx<T: Tx>(tx: &mut T) -> TxResult<()> {
    let accounts: PPtr = tx.alloc(8 * ACCOUNTS)?;
    for a in 0..ACCOUNTS {
        tx.write_u64(accounts, 8 * a, START)?;
    }
    let root = tx.root::<()>();
    tx.write_ptr(root, 0, accounts)?;
    tx.write_ptr(root, 8, PPtr::<()>::null())
}

fn op_tx<T: Tx>(tx: &mut T, i: usize) -> TxResult<()> {
    let (from, to, amount, push, pop) = plan(i);
    let root = tx.root::<()>();
    let accounts: PPtr = tx.read_ptr(root, 0)?;
    let (a, b) = (
        tx.read_u64(accounts, 8 * from)?,
        tx.read_u64(accounts, 8 * to)?,
    );
    if from != to && a >= amount {
        tx.write_u64(accounts, 8 * from, a - amount)?;
        tx.write_u64(accounts, 8 * to, b + amount)?;
    }
    if push {
        // Zeroed, so recovery must replay the zeroing before the fields written after it.
        let node: PPtr = tx.alloc_zeroed(24)?;
        tx.write_u64(node, 0, i as u64)?;
        let head: PPtr = tx.read_ptr(root, 8)?;
        tx.write_ptr(node, 8, head)?;
        tx.write_ptr(root, 8, node)?;
    }
    if pop {
        let head: PPtr = tx.read_ptr(root, 8)?;
        if !head.is_null() {
            let next: PPtr = tx.read_ptr(head, 8)?;
            tx.write_ptr(root, 8, next)?;
            tx.free(head)?;
        }
    }
    Ok(())
}

fn read_state<E: Engine>(engine: &E, blocks: u64) -> Result<State, String> {
    let (balances, list) = engine
        .transaction(|tx| {
            let root = tx.root::<()>();
            let accounts: PPtr = tx.read_ptr(root, 0)?;
            let balances = (0..ACCOUNTS)
                .map(|a| tx.read_u64(accounts, 8 * a))
                .collect::<TxResult<Vec<_>>>()?;
            let mut list = Vec::new();
            let mut node: PPtr = tx.read_ptr(root, 8)?;
            while !node.is_null() {
                if list.len() > MAX_LIST {
                    return Err(TxError::Corrupted("list cycle".into()));
                }
                list.push(tx.read_u64(node, 0)?);
                if tx.read_u64(node, 16)? != 0 {
                    return Err(TxError::Corrupted(
                        "a zeroed node's spare word is not zero".into(),
                    ));
                }
                node = tx.read_ptr(node, 8)?;
            }
            Ok::<_, TxError>((balances, list))
        })
        .map_err(|e| e.to_string())?;
    if balances.iter().sum::<u64>() != START * ACCOUNTS {
        return Err(format!("money created or destroyed: {balances:?}"));
    }
    Ok(State {
        balances,
        list,
        blocks,
    })
}

impl Scenario for Bank {
    type Model = State;
    type Live = Live;

    fn name(&self) -> String {
        format!("bank/{:?}/{}", self.kind, self.mode.name())
    }
    fn pool_size(&self) -> u64 {
        POOL
    }
    fn op_count(&self) -> usize {
        self.ops
    }
    fn initial_model(&self) -> State {
        State {
            balances: vec![START; ACCOUNTS as usize],
            list: Vec::new(),
            blocks: 1,
        }
    }
    fn apply_to_model(&self, model: &mut State, i: usize) {
        let (from, to, amount, push, pop) = plan(i);
        if from != to && model.balances[from as usize] >= amount {
            model.balances[from as usize] -= amount;
            model.balances[to as usize] += amount;
        }
        if push {
            model.list.insert(0, i as u64);
            model.blocks += 1;
        }
        if pop && !model.list.is_empty() {
            model.list.remove(0);
            model.blocks -= 1;
        }
    }
    fn setup(&self, pm: SimPm) -> Live {
        let pool = Pool::format(pm, &CreateOptions::new(LAYOUT, POOL)).expect("format");
        let options = EngineOptions::small().with_log_mode(self.mode);
        let live = match self.kind {
            Kind::Undo => Live::Undo(Undo::create(pool, &options).expect("undo")),
            Kind::Redo => Live::Redo(Redo::create(pool, &options).expect("redo")),
        };
        match &live {
            Live::Undo(e) => e.transaction(|tx| setup_tx(tx)).expect("setup"),
            Live::Redo(e) => e.transaction(|tx| setup_tx(tx)).expect("setup"),
        }
        live
    }
    fn run_op(&self, live: &mut Live, i: usize) {
        match live {
            Live::Undo(e) => e.transaction(|tx| op_tx(tx, i)).expect("op"),
            Live::Redo(e) => e.transaction(|tx| op_tx(tx, i)).expect("op"),
        }
    }
    fn recover(&self, pm: SimPm) -> Result<State, String> {
        let pool = Pool::attach(pm, LAYOUT).map_err(|e| e.to_string())?;
        let options = EngineOptions::small().with_log_mode(self.mode);
        match self.kind {
            Kind::Undo => {
                let engine = Undo::open(pool, &options).map_err(|e| e.to_string())?;
                let blocks = engine.heap().usage().allocated_blocks;
                read_state(&engine, blocks)
            }
            Kind::Redo => {
                let engine = Redo::open(pool, &options).map_err(|e| e.to_string())?;
                let blocks = engine.heap().usage().allocated_blocks;
                read_state(&engine, blocks)
            }
        }
    }
}

fn run(kind: Kind, mode: LogMode, sim: SimMode) {
    let report = check(
        &Bank {
            kind,
            mode,
            ops: 12,
        },
        &Config::thorough(sim, 7),
    );
    eprintln!("{report}");
    report.assert_passed();
    assert!(report.second_crash_images > 0);
}

#[test]
fn undo_survives_a_crash_at_every_fence() {
    for mode in [LogMode::Cacheable, LogMode::NonTemporal, LogMode::Packed] {
        run(Kind::Undo, mode, SimMode::Adr);
    }
    run(Kind::Undo, LogMode::Auto, SimMode::Eadr);
}

#[test]
fn redo_survives_a_crash_at_every_fence() {
    for mode in [LogMode::Cacheable, LogMode::NonTemporal, LogMode::Packed] {
        run(Kind::Redo, mode, SimMode::Adr);
    }
    run(Kind::Redo, LogMode::Auto, SimMode::Eadr);
}

#[test]
fn redo_survives_crashes_while_its_lanes_wrap() {
    // Enough transactions to wrap the 8 KiB lanes several times, so watermark advances and
    // record reuse happen between crash points.
    let report = check(
        &Bank {
            kind: Kind::Redo,
            mode: LogMode::Auto,
            ops: 160,
        },
        &Config::thorough(SimMode::Adr, 3),
    );
    eprintln!("{report}");
    report.assert_passed();
}

#[test]
fn cheap_durability_check_passes_on_both_engines() {
    for kind in [Kind::Undo, Kind::Redo] {
        check(
            &Bank {
                kind,
                mode: LogMode::Auto,
                ops: 30,
            },
            &Config::quick(SimMode::Adr),
        )
        .assert_passed();
    }
}
