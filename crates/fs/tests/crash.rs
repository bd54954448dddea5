//! Crash consistency at every fence (ACE style, `/work/shared/reference/pmfs.md` §4 L3):
//! every single operation over a small pre-populated namespace, exhaustively, and a sample of
//! pairs, in both data modes, on the simulator with double crash.
//!
//! Oracle per crash image: the mount (recovery) succeeds; fsck passes; the logical state
//! (every path's type, mode, owner, link count, size and bytes) equals the state before or
//! after the operation in flight (after, once the operation declared itself durable), where
//! the states come from the same operations run without a crash; for an in-place overwrite,
//! each 8-byte word of the written range may be old or new; the file system is usable (a
//! file created, written, read and removed in every directory) and, once everything is
//! removed, no block or inode is left in use.
//!
//! The mutants (in-place rename, missing flushes, recovery order, missing data fence) must
//! each be caught.

use crashsim::{
    Budget, Config, DoubleCrash, Points, Report, Scenario, SimConfig, SimMode, SimPm, check,
};
use fs::{Clock, DataMode, Fd, FileType, Fs, MkfsOptions, MountOptions, Mutant, TimeSet};
use pmem::{Persist, Pool};
use std::collections::BTreeMap;

const POOL: u64 = 512 << 10;

/// One durable API call.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Creat(&'static str),
    Mkdir(&'static str),
    Symlink(&'static str, &'static str),
    Link(&'static str, &'static str),
    Unlink(&'static str),
    Rmdir(&'static str),
    Rename(&'static str, &'static str),
    /// pwrite through handle `h` (0: /foo, 1: /bar, 2: the unlinked open file).
    Pwrite(usize, u64, usize, u8),
    Truncate(&'static str, u64),
    Chmod(&'static str, u32),
    Chown(&'static str, u32, u32),
    Utimens(&'static str, u64),
    /// Closes handle `h` (the last close of the unlinked file frees it).
    Close(usize),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    kind: FileType,
    perm: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    mtime: u64,
    content: Vec<u8>,
}

type State = BTreeMap<String, Node>;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed ^ (i as u8).wrapping_mul(31) ^ (i >> 8) as u8)
        .collect()
}

fn options(mode: DataMode, mutant: Mutant) -> MountOptions {
    MountOptions {
        data_mode: mode,
        clock: Clock::Fixed(1_000_000),
        mutant,
        ..MountOptions::default()
    }
}

/// The pre-populated namespace: /A (dir) with foo (2.5 blocks), sub (empty dir) and a hard
/// link foo2; /B (empty dir); /C (empty dir); /foo (100 bytes); /bar (3 blocks); /l →
/// foo; /q (1.5 blocks, not open); an unlinked file still open. Handles: 0 = /foo, 1 = /bar, 2 = the unlinked file.
fn populate(fs: &Fs<SimPm>) -> Vec<Fd> {
    use fs::posix::{O_CREAT, O_RDWR};
    let px = fs.posix();
    for d in ["/A", "/B", "/C", "/A/sub"] {
        px.mkdir(d, 0o755).expect("mkdir");
    }
    let write_file = |path: &str, len: usize, seed: u8| {
        let fd = px.open(path, O_CREAT | O_RDWR, 0o644).expect("create");
        px.pwrite(fd, &pattern(len, seed), 0).expect("write");
        fd
    };
    let a_foo = write_file("/A/foo", 10_000, 1);
    px.close(a_foo).expect("close");
    px.link("/A/foo", "/A/foo2").expect("link");
    let small = write_file("/foo", 100, 2);
    let bar = write_file("/bar", 12_288, 3);
    px.symlink("foo", "/l").expect("symlink");
    let q = write_file("/q", 6000, 5);
    px.close(q).expect("close");
    let orphan = write_file("/O", 9_000, 4);
    px.unlink("/O").expect("unlink");
    vec![small, bar, orphan]
}

fn dump(fs: &Fs<SimPm>) -> Result<State, String> {
    let px = fs.posix();
    let mut state = State::new();
    let mut dirs = vec!["/".to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in px
            .readdir(&dir)
            .map_err(|e| format!("readdir {dir}: {e}"))?
        {
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            let name = String::from_utf8(entry.name).map_err(|_| "non-UTF-8 name")?;
            let path = if dir == "/" {
                format!("/{name}")
            } else {
                format!("{dir}/{name}")
            };
            let st = px.lstat(&path).map_err(|e| format!("lstat {path}: {e}"))?;
            let content = match st.kind {
                FileType::Directory => {
                    dirs.push(path.clone());
                    Vec::new()
                }
                FileType::Symlink => px.readlink(&path).map_err(|e| format!("readlink: {e}"))?,
                FileType::Regular => {
                    let mut buf = vec![0u8; st.size as usize];
                    fs.read(st.ino, 0, &mut buf)
                        .map_err(|e| format!("read {path}: {e}"))?;
                    buf
                }
            };
            state.insert(
                path,
                Node {
                    kind: st.kind,
                    perm: st.perm,
                    uid: st.uid,
                    gid: st.gid,
                    nlink: st.nlink,
                    mtime: st.mtime,
                    content,
                },
            );
        }
    }
    Ok(state)
}

fn run_op(fs: &Fs<SimPm>, fds: &mut [Option<Fd>], op: &Op) {
    try_op(fs, fds, op).unwrap_or_else(|e| panic!("{op:?}: {e}"));
}

fn try_op(fs: &Fs<SimPm>, fds: &mut [Option<Fd>], op: &Op) -> Result<(), fs::Errno> {
    let px = fs.posix();
    match *op {
        Op::Creat(p) => px.creat(p, 0o640).and_then(|fd| {
            // Closing a fresh file writes nothing (it has links).
            px.close(fd)
        }),
        Op::Mkdir(p) => px.mkdir(p, 0o700),
        Op::Symlink(t, p) => px.symlink(t, p),
        Op::Link(a, b) => px.link(a, b),
        Op::Unlink(p) => px.unlink(p),
        Op::Rmdir(p) => px.rmdir(p),
        Op::Rename(a, b) => px.rename(a, b),
        Op::Pwrite(h, off, len, seed) => px
            .pwrite(fds[h].ok_or(fs::Errno::EBADF)?, &pattern(len, seed), off)
            .map(|_| ()),
        Op::Truncate(p, len) => px.truncate(p, len),
        Op::Chmod(p, m) => px.chmod(p, m),
        Op::Chown(p, u, g) => px.chown(p, Some(u), Some(g)),
        Op::Utimens(p, t) => px.utimens(p, Some(TimeSet::At(t)), Some(TimeSet::At(t + 1))),
        Op::Close(h) => px.close(fds[h].take().ok_or(fs::Errno::EBADF)?),
    }
}

/// Which bytes of which file an operation overwrites in place (for the word-mix rule).
fn overwrite_of(op: &Op) -> Option<(&'static str, u64, usize)> {
    match *op {
        Op::Pwrite(0, off, len, _) => Some(("/foo", off, len)),
        Op::Pwrite(1, off, len, _) => Some(("/bar", off, len)),
        _ => None,
    }
}

struct FsScenario {
    name: String,
    mode: DataMode,
    mutant: Mutant,
    ops: Vec<Op>,
    /// State after setup and after each operation, from a run without crashes.
    models: Vec<State>,
    /// Run the usability and leak check (on every third recovery: it doubles the cost).
    check_usability: bool,
    recoveries: std::cell::Cell<u64>,
}

struct Live {
    fs: Fs<SimPm>,
    fds: Vec<Option<Fd>>,
}

impl FsScenario {
    fn new(mode: DataMode, mutant: Mutant, ops: Vec<Op>) -> Self {
        let name = format!("fs/{mode:?}/{mutant:?}/{ops:?}");
        let mut scenario = FsScenario {
            name,
            mode,
            mutant,
            ops,
            models: Vec::new(),
            check_usability: true,
            recoveries: std::cell::Cell::new(0),
        };
        let mut live = scenario.setup(SimPm::new(POOL, SimConfig::default()));
        let mut models = vec![dump(&live.fs).expect("dump")];
        for op in &scenario.ops {
            run_op(&live.fs, &mut live.fds, op);
            models.push(dump(&live.fs).expect("dump"));
        }
        scenario.models = models;
        scenario
    }

    /// For an in-place overwrite in flight: a file whose written words are each old or new
    /// (and whose other bytes are those of the state before or after) is mapped to that
    /// state's content.
    fn normalize(&self, state: &mut State) {
        if self.mode != DataMode::InPlace || self.ops.len() != 1 {
            return;
        }
        let Some((path, off, len)) = overwrite_of(&self.ops[0]) else {
            return;
        };
        let (Some(pre), Some(post), Some(got)) = (
            self.models[0].get(path),
            self.models[1].get(path),
            state.get_mut(path),
        ) else {
            return;
        };
        if got.content == pre.content || got.content == post.content {
            return;
        }
        let candidate = if got.content.len() == pre.content.len() {
            &pre.content
        } else if got.content.len() == post.content.len() {
            &post.content
        } else {
            return;
        };
        let (start, end) = (off as usize, off as usize + len);
        let mixed_ok = (0..got.content.len()).step_by(8).all(|w| {
            let r = w..(w + 8).min(got.content.len());
            let in_range = r.start < end && r.end > start;
            let g = &got.content[r.clone()];
            let same_as = |c: &Vec<u8>| c.get(r.clone()) == Some(g);
            same_as(candidate) || (in_range && (same_as(&pre.content) || same_as(&post.content)))
        });
        if mixed_ok {
            got.content = candidate.clone();
        }
    }

    /// A file created, written, read back and removed in every directory; then everything
    /// removed: no inode but the root and no block but the root directory's may stay in use.
    fn usability(&self, image: Vec<u8>) -> Result<(), String> {
        let pool = Pool::attach(SimPm::from_image(image, SimConfig::default()), fs::LAYOUT)
            .map_err(|e| e.to_string())?;
        let fs = Fs::mount(pool, options(self.mode, Mutant::None)).map_err(|e| e.to_string())?;
        let state = dump(&fs)?;
        let px = fs.posix();
        let dirs: Vec<String> = std::iter::once("/".to_owned())
            .chain(
                state
                    .iter()
                    .filter(|(_, n)| n.kind == FileType::Directory)
                    .map(|(p, _)| p.clone()),
            )
            .collect();
        let probe_data = pattern(5000, 9);
        for dir in &dirs {
            let probe = format!("{}/zz-probe", dir.trim_end_matches('/'));
            let flags = fs::posix::O_CREAT | fs::posix::O_RDWR;
            let fd = px
                .open(&probe, flags, 0o600)
                .map_err(|e| format!("probe {probe}: {e}"))?;
            px.write(fd, &probe_data)
                .map_err(|e| format!("probe write: {e}"))?;
            let mut back = vec![0u8; 5000];
            px.pread(fd, &mut back, 0)
                .map_err(|e| format!("probe read: {e}"))?;
            px.close(fd).map_err(|e| e.to_string())?;
            if back != probe_data {
                return Err(format!("probe {probe} read back wrong data"));
            }
            px.unlink(&probe)
                .map_err(|e| format!("probe unlink: {e}"))?;
        }
        let mut paths: Vec<(&String, &Node)> = state.iter().collect();
        paths.sort_by_key(|(p, _)| std::cmp::Reverse(p.matches('/').count()));
        for (path, node) in paths {
            let r = if node.kind == FileType::Directory {
                px.rmdir(path)
            } else {
                px.unlink(path)
            };
            r.map_err(|e| format!("remove {path}: {e}"))?;
        }
        let report = fs
            .fsck()
            .map_err(|e| format!("fsck after removing everything: {}", e.0))?;
        let root_blocks = px.stat("/").map_err(|e| e.to_string())?.blocks / 8;
        if report.inodes != 1 || report.used_blocks != root_blocks {
            return Err(format!(
                "leak: {report:?}, root directory has {root_blocks} blocks"
            ));
        }
        Ok(())
    }
}

impl Scenario for FsScenario {
    type Model = State;
    type Live = Live;

    fn name(&self) -> String {
        self.name.clone()
    }
    fn pool_size(&self) -> u64 {
        POOL
    }
    fn op_count(&self) -> usize {
        self.ops.len()
    }
    fn initial_model(&self) -> State {
        self.models[0].clone()
    }
    fn apply_to_model(&self, model: &mut State, op: usize) {
        *model = self.models[op + 1].clone();
    }
    fn setup(&self, pm: SimPm) -> Live {
        let pool = Pool::format(pm, &fs::pool_options(POOL)).expect("pool");
        let mkfs = MkfsOptions {
            inodes: Some(64),
            journal_entries: 128,
        };
        let fs = Fs::mkfs(pool, &mkfs, options(self.mode, self.mutant)).expect("mkfs");
        let fds = populate(&fs).into_iter().map(Some).collect();
        Live { fs, fds }
    }
    fn run_op(&self, live: &mut Live, op: usize) {
        run_op(&live.fs, &mut live.fds, &self.ops[op]);
    }
    fn recover(&self, pm: SimPm) -> Result<State, String> {
        let pool = Pool::attach(pm, fs::LAYOUT).map_err(|e| e.to_string())?;
        let fs = Fs::mount(pool, options(self.mode, self.mutant)).map_err(|e| e.to_string())?;
        fs.fsck().map_err(|e| format!("fsck: {}", e.0))?;
        let mut state = dump(&fs)?;
        self.normalize(&mut state);
        self.recoveries.set(self.recoveries.get() + 1);
        if self.check_usability && self.recoveries.get() % 3 == 1 {
            self.usability(fs.pool().pm().volatile_image())?;
        }
        Ok(state)
    }
}

fn config(seed: u64) -> Config {
    Config {
        budget: Budget {
            exhaustive_max: 48,
            random: 6,
        },
        double_crash: Some(DoubleCrash {
            points: 3,
            budget: Budget {
                exhaustive_max: 4,
                random: 0,
            },
        }),
        ..Config::thorough(SimMode::Adr, seed)
    }
}

/// Every single operation, by argument class.
fn single_ops() -> Vec<Op> {
    vec![
        Op::Creat("/A/new"),
        Op::Creat("/B/new"),
        Op::Mkdir("/B/d"),
        Op::Symlink("foo", "/A/s"),
        Op::Link("/foo", "/B/foo-link"),
        Op::Unlink("/foo"),
        Op::Unlink("/A/foo"),
        Op::Unlink("/l"),
        Op::Unlink("/q"),
        Op::Rename("/foo", "/q"),
        Op::Rmdir("/A/sub"),
        Op::Rename("/foo", "/fop"),
        Op::Rename("/foo", "/B/foo"),
        Op::Rename("/foo", "/bar"),
        Op::Rename("/A/sub", "/B/sub"),
        Op::Rename("/A/sub", "/C"),
        Op::Rename("/A", "/B/A"),
        Op::Pwrite(0, 100, 50, 7),
        Op::Pwrite(0, 3000, 3000, 8),
        Op::Pwrite(1, 5000, 200, 9),
        Op::Pwrite(1, 20_000, 4096, 10),
        Op::Pwrite(0, 3 << 20, 100, 11),
        Op::Pwrite(2, 0, 100, 12),
        Op::Truncate("/bar", 0),
        Op::Truncate("/bar", 5000),
        Op::Truncate("/bar", 20_000),
        Op::Truncate("/A/foo", 4096),
        Op::Chmod("/foo", 0o600),
        Op::Chown("/foo", 5, 6),
        Op::Utimens("/A/foo", 42),
        Op::Close(2),
    ]
}

fn assert_all_pass(reports: &[Report]) {
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.passed())
        .flat_map(|r| r.failures.iter().map(ToString::to_string))
        .collect();
    assert!(
        failed.is_empty(),
        "crash test failures:\n{}",
        failed.join("\n")
    );
}

fn single_op_suite(mode: DataMode) {
    let mut reports = Vec::new();
    let (mut points, mut images, mut second) = (0, 0, 0);
    for (i, op) in single_ops().into_iter().enumerate() {
        let mut scenario = FsScenario::new(mode, Mutant::None, vec![op]);
        // The usability and leak check does not depend on the data mode: run it once.
        scenario.check_usability = mode == DataMode::InPlace;
        let report = check(&scenario, &config(i as u64));
        (points, images, second) = (
            points + report.crash_points,
            images + report.images,
            second + report.second_crash_images,
        );
        reports.push(report);
    }
    eprintln!(
        "{mode:?}: {} single operations, {points} crash points, {images} images, {second} second-crash images",
        reports.len()
    );
    assert_all_pass(&reports);
    assert!(second > 0, "double crash ran");
}

#[test]
fn every_single_operation_in_place_mode() {
    single_op_suite(DataMode::InPlace);
}

#[test]
fn every_single_operation_copy_on_write_mode() {
    single_op_suite(DataMode::CopyOnWrite);
}

#[test]
fn sampled_pairs_of_operations() {
    // Copy-on-write mode makes every operation atomic, so pairs check plainly; the pairs
    // are every 41st of all ordered pairs (deterministic), skipping pairs that cannot run.
    let ops = single_ops();
    let mut reports = Vec::new();
    let mut k = 0u64;
    for (i, a) in ops.iter().enumerate() {
        for (j, b) in ops.iter().enumerate() {
            k += 1;
            if !k.is_multiple_of(41) || i == j || !runnable(&[a.clone(), b.clone()]) {
                continue;
            }
            let mut scenario = FsScenario::new(
                DataMode::CopyOnWrite,
                Mutant::None,
                vec![a.clone(), b.clone()],
            );
            scenario.check_usability = false;
            reports.push(check(&scenario, &config(k)));
        }
    }
    eprintln!("{} pairs", reports.len());
    assert!(reports.len() >= 12);
    assert_all_pass(&reports);
}

/// Whether a sequence runs without errors on a fresh populated file system.
fn runnable(ops: &[Op]) -> bool {
    let scenario = FsScenario {
        name: String::new(),
        mode: DataMode::CopyOnWrite,
        mutant: Mutant::None,
        ops: Vec::new(),
        models: Vec::new(),
        check_usability: false,
        recoveries: std::cell::Cell::new(0),
    };
    let mut live = scenario.setup(SimPm::new(POOL, SimConfig::default()));
    ops.iter()
        .all(|op| try_op(&live.fs, &mut live.fds, op).is_ok())
}

/// `ForwardRollback` is not here: every file-system transaction logs all its ranges in one
/// batch before writing any of them, so the undo order cannot matter at this level (the
/// mutant is equivalent); the journal's own crash test catches it.
#[test]
fn mutants_are_caught() {
    let cases = [
        (
            Mutant::InPlaceRename,
            DataMode::InPlace,
            Op::Rename("/foo", "/fop"),
        ),
        (
            Mutant::SkipDirtyFlush,
            DataMode::InPlace,
            Op::Creat("/A/new"),
        ),
        (
            Mutant::SkipLogFlush,
            DataMode::InPlace,
            Op::Unlink("/A/foo"),
        ),
        (
            Mutant::TruncateBeforeRollback,
            DataMode::InPlace,
            Op::Truncate("/bar", 5000),
        ),
        (
            Mutant::NoDataFence,
            DataMode::InPlace,
            Op::Pwrite(0, 3000, 3000, 8),
        ),
    ];
    let mut missed = Vec::new();
    for (mutant, mode, op) in cases {
        let mut scenario = FsScenario::new(mode, mutant, vec![op.clone()]);
        scenario.check_usability = false;
        let report = check(&scenario, &config(1));
        eprintln!("{mutant:?} on {op:?}: {} failures", report.failures.len());
        if report.passed() {
            missed.push(format!("{mutant:?} on {op:?}"));
        }
    }
    assert!(missed.is_empty(), "mutants not caught: {missed:?}");
}

#[test]
fn durability_check_passes_for_every_operation() {
    let config = Config {
        points: Points::DurabilityOnly,
        ..Config::quick(SimMode::Adr)
    };
    for op in single_ops() {
        let scenario = FsScenario::new(DataMode::InPlace, Mutant::None, vec![op]);
        check(&scenario, &config).assert_passed();
    }
}

#[test]
fn eadr_platform_single_operations() {
    let mut reports = Vec::new();
    for (i, op) in single_ops().into_iter().enumerate().step_by(3) {
        let mut scenario = FsScenario::new(DataMode::InPlace, Mutant::None, vec![op]);
        scenario.check_usability = false;
        let config = Config {
            sim: SimConfig {
                mode: SimMode::Eadr,
                ..SimConfig::default()
            },
            ..config(i as u64)
        };
        reports.push(check(&scenario, &config));
    }
    assert_all_pass(&reports);
}

/// mkfs itself, crashed at every fence: the pool reads as not formatted, or as the complete
/// empty file system, never anything else.
struct MkfsScenario;

enum MkfsLive {
    Pool(Pool<SimPm>),
    Gone,
}

impl Scenario for MkfsScenario {
    type Model = Option<State>;
    type Live = MkfsLive;

    fn name(&self) -> String {
        "fs/mkfs".into()
    }
    fn pool_size(&self) -> u64 {
        POOL
    }
    fn op_count(&self) -> usize {
        1
    }
    fn initial_model(&self) -> Option<State> {
        None
    }
    fn apply_to_model(&self, model: &mut Option<State>, _op: usize) {
        *model = Some(State::new());
    }
    fn setup(&self, pm: SimPm) -> MkfsLive {
        MkfsLive::Pool(Pool::format(pm, &fs::pool_options(POOL)).expect("pool"))
    }
    fn run_op(&self, live: &mut MkfsLive, _op: usize) {
        let MkfsLive::Pool(pool) = std::mem::replace(live, MkfsLive::Gone) else {
            panic!("mkfs runs once");
        };
        let options = options(DataMode::InPlace, Mutant::None);
        let fs = Fs::mkfs(pool, &MkfsOptions::default(), options).expect("mkfs");
        fs.pool().pm().durability_point();
        fs.abandon();
    }
    fn recover(&self, pm: SimPm) -> Result<Option<State>, String> {
        let pool = Pool::attach(pm, fs::LAYOUT).map_err(|e| e.to_string())?;
        match Fs::mount(pool, options(DataMode::InPlace, Mutant::None)) {
            Err(fs::FsError::NotFormatted(_)) => Ok(None),
            Err(e) => Err(e.to_string()),
            Ok(fs) => {
                fs.fsck().map_err(|e| format!("fsck: {}", e.0))?;
                dump(&fs).map(Some)
            }
        }
    }
}

#[test]
fn interrupted_mkfs_is_not_formatted_or_complete() {
    let report = check(&MkfsScenario, &Config::thorough(SimMode::Adr, 5));
    eprintln!("{report}");
    report.assert_passed();
    assert!(report.crash_points >= 4);
}
