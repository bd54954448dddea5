//! Crash consistency at every fence (in the style of ACE, Mohan et al., OSDI 2018):
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
use pmem::{Persist, Pool};
use pmfs::{Clock, DataMode, Fd, FileType, Fs, MkfsOptions, MountOptions, Mutant, Posix, TimeSet};
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
    /// Closes handle `h` (the last close of the unlinked file, or of /C once removed, frees
    /// it).
    Close(usize),
    /// Sets an extended attribute to `len` bytes of a pattern.
    Setxattr(&'static str, &'static str, usize),
    /// Removes an extended attribute.
    Removexattr(&'static str, &'static str),
    /// `fallocate(path, off, len)`, keeping the size when set.
    Fallocate(&'static str, u64, u64, bool),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Node {
    kind: FileType,
    perm: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    mtime: u64,
    ctime: u64,
    content: Vec<u8>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
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
        // Every reading advances, so a torn pair of times is visible; reruns of the same
        // operations read the same times, so the model runs agree with the crashed runs.
        clock: Clock::Stepping(1_000_000),
        mutant,
        ..MountOptions::default()
    }
}

/// The pre-populated namespace: /A (dir) with foo (2.5 blocks), sub (empty dir) and a hard
/// link foo2; /B (empty dir); /C (empty dir); /foo (100 bytes); /bar (3 blocks); /l →
/// foo; /q (1.5 blocks, not open); an unlinked file still open; the empty directory /C open.
/// Handles: 0 = /foo, 1 = /bar, 2 = the unlinked file, 3 = /C.
fn populate(px: &Posix<SimPm>) -> Vec<Fd> {
    use pmfs::posix::{O_CREAT, O_RDWR};
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
    px.setxattr(
        "/foo",
        b"user.kept",
        b"old value",
        pmfs::SetMode::Any,
        false,
    )
    .expect("setxattr");
    let bar = write_file("/bar", 12_288, 3);
    px.symlink("foo", "/l").expect("symlink");
    let q = write_file("/q", 6000, 5);
    px.close(q).expect("close");
    let orphan = write_file("/O", 9_000, 4);
    px.unlink("/O").expect("unlink");
    let dir = px
        .open("/C", pmfs::posix::O_RDONLY | pmfs::posix::O_DIRECTORY, 0)
        .expect("open /C");
    vec![small, bar, orphan, dir]
}

fn dump(px: &Posix<SimPm>) -> Result<State, String> {
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
                _ if st.kind.is_special() => Vec::new(),
                _ => {
                    let mut buf = vec![0u8; st.size as usize];
                    px.fs()
                        .read(st.ino, 0, &mut buf)
                        .map_err(|e| format!("read {path}: {e}"))?;
                    buf
                }
            };
            let mut xattrs = Vec::new();
            for name in px
                .listxattr(&path, false)
                .map_err(|e| format!("listxattr {path}: {e}"))?
            {
                let value = px
                    .getxattr(&path, &name, false)
                    .map_err(|e| format!("getxattr {path}: {e}"))?;
                xattrs.push((name, value));
            }
            state.insert(
                path,
                Node {
                    kind: st.kind,
                    perm: st.perm,
                    uid: st.uid,
                    gid: st.gid,
                    nlink: st.nlink,
                    mtime: st.mtime,
                    ctime: st.ctime,
                    content,
                    xattrs,
                },
            );
        }
    }
    Ok(state)
}

fn run_op(px: &Posix<SimPm>, fds: &mut [Option<Fd>], op: &Op) {
    try_op(px, fds, op).unwrap_or_else(|e| panic!("{op:?}: {e}"));
}

fn try_op(px: &Posix<SimPm>, fds: &mut [Option<Fd>], op: &Op) -> Result<(), pmfs::Errno> {
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
            .pwrite(fds[h].ok_or(pmfs::Errno::EBADF)?, &pattern(len, seed), off)
            .map(|_| ()),
        Op::Truncate(p, len) => px.truncate(p, len),
        Op::Chmod(p, m) => px.chmod(p, m),
        Op::Chown(p, u, g) => px.chown(p, Some(u), Some(g)),
        Op::Utimens(p, t) => px.utimens(p, Some(TimeSet::At(t)), Some(TimeSet::At(t + 1))),
        Op::Close(h) => px.close(fds[h].take().ok_or(pmfs::Errno::EBADF)?),
        Op::Setxattr(p, name, len) => px.setxattr(
            p,
            name.as_bytes(),
            &pattern(len, len as u8),
            pmfs::SetMode::Any,
            false,
        ),
        Op::Removexattr(p, name) => px.removexattr(p, name.as_bytes(), false),
        Op::Fallocate(p, off, len, keep) => {
            let ino = px.stat(p)?.ino;
            px.fs().fallocate(ino, off, len, keep)
        }
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

/// Whether `got` has the size before the write and is the content before, except that
/// each 8-byte word of the written range `[off, off + len)` may be the one before or after.
/// (A write that grows the file changes the size in its transaction, after the data is
/// durable: a mix at the new size is never acceptable.)
fn words_mix(got: &[u8], before: &Node, after: &Node, off: u64, len: usize) -> bool {
    if got.len() != before.content.len() {
        return false;
    }
    let candidate = &before.content;
    let (start, end) = (off as usize, off as usize + len);
    (0..got.len()).step_by(8).all(|w| {
        let r = w..(w + 8).min(got.len());
        let in_range = r.start < end && r.end > start;
        let g = &got[r.clone()];
        let same_as = |c: &Vec<u8>| c.get(r.clone()) == Some(g);
        same_as(candidate) || (in_range && (same_as(&before.content) || same_as(&after.content)))
    })
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
    px: Posix<SimPm>,
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
        let mut models = vec![dump(&live.px).expect("dump")];
        for op in &scenario.ops {
            run_op(&live.px, &mut live.fds, op);
            models.push(dump(&live.px).expect("dump"));
        }
        scenario.models = models;
        scenario
    }

    /// For an in-place overwrite in flight (operation `k` of the sequence): a state equal
    /// to the one before it except for the written file, whose written words are each old
    /// or new (its other bytes those of the state before or after), and whose `ctime` and
    /// `mtime` are each old or new with a new `mtime` only beside a new `ctime` (the
    /// overwrite path stores `ctime` first, docs/pmfs-format.md §9.2) and a new time only
    /// beside the whole new data (the data is fenced before the times), is mapped to the
    /// state before it.
    fn normalize(&self, state: &mut State) {
        if self.mode != DataMode::InPlace {
            return;
        }
        for (k, op) in self.ops.iter().enumerate() {
            let Some((path, off, len)) = overwrite_of(op) else {
                continue;
            };
            let (pre, post) = (&self.models[k], &self.models[k + 1]);
            let others_as_before = state.len() == pre.len()
                && state
                    .iter()
                    .all(|(p, n)| p == path || pre.get(p) == Some(n));
            let (Some(before), Some(after), Some(got)) =
                (pre.get(path), post.get(path), state.get(path))
            else {
                continue;
            };
            if !others_as_before || got == before || got == after {
                continue;
            }
            let same_meta = (got.kind, got.perm, got.uid, got.gid, got.nlink)
                == (
                    before.kind,
                    before.perm,
                    before.uid,
                    before.gid,
                    before.nlink,
                );
            let time_ok = |g: u64, a: u64, b: u64| g == a || g == b;
            let times_ok = time_ok(got.ctime, before.ctime, after.ctime)
                && time_ok(got.mtime, before.mtime, after.mtime)
                && !(got.mtime == after.mtime
                    && after.mtime != before.mtime
                    && got.ctime != after.ctime);
            // The data is fenced before either time is stored: a new time only beside the
            // whole new data.
            let new_time = (got.ctime != before.ctime) || (got.mtime != before.mtime);
            let data_first = !new_time || got.content == after.content;
            if same_meta
                && times_ok
                && data_first
                && words_mix(&got.content, before, after, off, len)
            {
                state.insert(path.to_owned(), before.clone());
                return;
            }
        }
    }

    /// A file created, written, read back and removed in every directory; then everything
    /// removed: no inode but the root and no block but the root directory's may stay in use.
    fn usability(&self, image: Vec<u8>) -> Result<(), String> {
        let pool = Pool::attach(SimPm::from_image(image, SimConfig::default()), pmfs::LAYOUT)
            .map_err(|e| e.to_string())?;
        let px = Posix::new(
            Fs::mount(pool, options(self.mode, Mutant::None)).map_err(|e| e.to_string())?,
        );
        let state = dump(&px)?;
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
            let flags = pmfs::posix::O_CREAT | pmfs::posix::O_RDWR;
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
        let report = px
            .fs()
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
        let pool = Pool::format(pm, &pmfs::pool_options(POOL)).expect("pool");
        let mkfs = MkfsOptions {
            inodes: Some(64),
            journal_entries: 128,
            ..MkfsOptions::default()
        };
        let px = Posix::new(Fs::mkfs(pool, &mkfs, options(self.mode, self.mutant)).expect("mkfs"));
        let fds = populate(&px).into_iter().map(Some).collect();
        Live { px, fds }
    }
    fn run_op(&self, live: &mut Live, op: usize) {
        run_op(&live.px, &mut live.fds, &self.ops[op]);
    }
    fn recover(&self, pm: SimPm) -> Result<State, String> {
        let pool = Pool::attach(pm, pmfs::LAYOUT).map_err(|e| e.to_string())?;
        let fs = Fs::mount(pool, options(self.mode, self.mutant)).map_err(|e| e.to_string())?;
        fs.fsck().map_err(|e| format!("fsck: {}", e.0))?;
        let px = Posix::new(fs);
        let mut state = dump(&px)?;
        self.normalize(&mut state);
        self.recoveries.set(self.recoveries.get() + 1);
        if self.check_usability && self.recoveries.get() % 3 == 1 {
            self.usability(px.fs().pool().pm().volatile_image())?;
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
        Op::Rmdir("/C"),
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
        Op::Close(3),
        Op::Setxattr("/bar", "user.new", 100),
        Op::Setxattr("/A", "user.tag", 3000),
        Op::Setxattr("/foo", "user.kept", 20),
        Op::Removexattr("/foo", "user.kept"),
        Op::Fallocate("/bar", 12_288, 20_000, false),
        Op::Fallocate("/foo", 0, 30_000, true),
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

/// Every 41st of all ordered pairs of single operations (deterministic, starting at
/// `phase`), skipping pairs that cannot run, in data mode `mode`.
fn sampled_pairs(mode: DataMode, phase: u64) {
    let ops = single_ops();
    let mut reports = Vec::new();
    let mut k = 0u64;
    for (i, a) in ops.iter().enumerate() {
        for (j, b) in ops.iter().enumerate() {
            k += 1;
            if k % 41 != phase || i == j || !runnable(&[a.clone(), b.clone()]) {
                continue;
            }
            let mut scenario = FsScenario::new(mode, Mutant::None, vec![a.clone(), b.clone()]);
            scenario.check_usability = false;
            reports.push(check(&scenario, &config(k)));
        }
    }
    eprintln!("{mode:?}: {} pairs", reports.len());
    assert!(reports.len() >= 12);
    assert_all_pass(&reports);
}

#[test]
fn sampled_pairs_of_operations() {
    sampled_pairs(DataMode::CopyOnWrite, 0);
}

/// In place, an overwrite in either position of the pair may leave a word mix (and torn
/// times) while it is in flight, never after it returned.
#[test]
fn sampled_pairs_of_operations_in_place_mode() {
    sampled_pairs(DataMode::InPlace, 20);
}

/// A directory removed while open lives on the truncate list until its last close: the
/// removal (by rmdir or by a rename over it) and the close, crashed at every fence, in both
/// modes.
#[test]
fn removing_an_open_directory_then_closing_it() {
    let pairs = [
        [Op::Rmdir("/C"), Op::Close(3)],
        [Op::Rename("/A/sub", "/C"), Op::Close(3)],
    ];
    let mut reports = Vec::new();
    for mode in [DataMode::InPlace, DataMode::CopyOnWrite] {
        for (k, pair) in pairs.iter().enumerate() {
            assert!(runnable(pair), "{pair:?}");
            let scenario = FsScenario::new(mode, Mutant::None, pair.to_vec());
            reports.push(check(&scenario, &config(k as u64)));
        }
    }
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
        .all(|op| try_op(&live.px, &mut live.fds, op).is_ok())
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
        (
            Mutant::TimesOutOfOrder,
            DataMode::InPlace,
            Op::Pwrite(1, 5000, 200, 9),
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
        MkfsLive::Pool(Pool::format(pm, &pmfs::pool_options(POOL)).expect("pool"))
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
        let pool = Pool::attach(pm, pmfs::LAYOUT).map_err(|e| e.to_string())?;
        match Fs::mount(pool, options(DataMode::InPlace, Mutant::None)) {
            Err(pmfs::FsError::NotFormatted(_)) => Ok(None),
            Err(e) => Err(e.to_string()),
            Ok(fs) => {
                fs.fsck().map_err(|e| format!("fsck: {}", e.0))?;
                dump(&Posix::new(fs)).map(Some)
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

/// A damaged superblock slot is repaired from the other one at mount; the damage and the
/// repair are crashed at every fence: every image mounts (from whichever slot is good) to
/// the same file system, and after that mount both slots are good and identical.
struct SbRepairScenario {
    /// The damaged slot, relative to the root region (`SB_PRIMARY` or `SB_COPY`).
    slot: u64,
    model: std::cell::OnceCell<State>,
}

impl SbRepairScenario {
    fn mount_options() -> MountOptions {
        options(DataMode::InPlace, Mutant::None)
    }
}

impl Scenario for SbRepairScenario {
    type Model = State;
    type Live = Option<Posix<SimPm>>;

    fn name(&self) -> String {
        format!("fs/superblock-repair/{:#x}", self.slot)
    }
    fn pool_size(&self) -> u64 {
        POOL
    }
    fn op_count(&self) -> usize {
        1
    }
    fn initial_model(&self) -> State {
        self.model
            .get_or_init(|| {
                let live = self.setup(SimPm::new(POOL, SimConfig::default()));
                dump(live.as_ref().expect("mounted")).expect("dump")
            })
            .clone()
    }
    fn apply_to_model(&self, _model: &mut State, _op: usize) {}
    fn setup(&self, pm: SimPm) -> Option<Posix<SimPm>> {
        let pool = Pool::format(pm, &pmfs::pool_options(POOL)).expect("pool");
        let mkfs = MkfsOptions {
            inodes: Some(32),
            journal_entries: 64,
            ..MkfsOptions::default()
        };
        let px = Posix::new(Fs::mkfs(pool, &mkfs, Self::mount_options()).expect("mkfs"));
        px.mkdir("/A", 0o755).expect("mkdir");
        let fd = px
            .open("/A/f", pmfs::posix::O_CREAT | pmfs::posix::O_RDWR, 0o644)
            .expect("create");
        px.write(fd, &pattern(5000, 3)).expect("write");
        px.close(fd).expect("close");
        Some(px)
    }
    fn run_op(&self, live: &mut Option<Posix<SimPm>>, _op: usize) {
        let fs = live.take().expect("mounted").into_fs();
        let at = fs.superblock().root_offset + self.slot + 0x20;
        let pool = fs.into_pool();
        pool.pm().write(at, &[0xA5; 16], pmem::WriteClass::Meta);
        pool.pm().persist(at, 16);
        let fs = Fs::mount(pool, Self::mount_options()).expect("mount repairs");
        fs.pool().pm().durability_point();
        *live = Some(Posix::new(fs));
    }
    fn recover(&self, pm: SimPm) -> Result<State, String> {
        let pool = Pool::attach(pm, pmfs::LAYOUT).map_err(|e| e.to_string())?;
        let fs = Fs::mount(pool, Self::mount_options()).map_err(|e| e.to_string())?;
        fs.fsck().map_err(|e| format!("fsck: {}", e.0))?;
        let root = fs.superblock().root_offset;
        let read = |slot: u64| {
            let mut bytes = vec![0u8; pmfs::layout::SB_LEN];
            fs.pool().pm().read(root + slot, &mut bytes);
            bytes
        };
        let (primary, copy) = (read(pmfs::layout::SB_PRIMARY), read(pmfs::layout::SB_COPY));
        if primary != copy || primary[..8] != pmfs::layout::SB_MAGIC {
            return Err("the superblock slots differ after mount".into());
        }
        dump(&Posix::new(fs))
    }
}

#[test]
fn superblock_fallback_and_repair_survive_crashes() {
    for slot in [pmfs::layout::SB_PRIMARY, pmfs::layout::SB_COPY] {
        let scenario = SbRepairScenario {
            slot,
            model: std::cell::OnceCell::new(),
        };
        let report = check(&scenario, &Config::thorough(SimMode::Adr, slot));
        eprintln!("{report}");
        report.assert_passed();
        assert!(report.crash_points >= 3, "{report}");
    }
}

/// Operations too large for the harness's structured image set (one image per pending
/// line and per pending non-temporal chunk: ~10^5 at a 1.5 MiB write), checked at every
/// crash point with a bounded sample: nothing more persisted, everything persisted, and
/// seeded random mixes. Writes over 1 MiB (several transactions in place) and files with
/// 2 MiB leaves.
mod large {
    use super::*;
    use crashsim::{Choice, Snapshot};

    const LARGE_POOL: u64 = 12 << 20;
    const RANDOM_IMAGES: usize = 6;

    fn mount_options(mode: DataMode, huge: bool) -> MountOptions {
        MountOptions {
            huge_files: huge,
            ..options(mode, Mutant::None)
        }
    }

    fn mkfs(pm: SimPm, mode: DataMode, huge: bool) -> Posix<SimPm> {
        let pool = Pool::format(pm, &pmfs::pool_options(LARGE_POOL)).expect("pool");
        // The default journal: copy-on-write pieces reach 4 MiB only with at least 187
        // entries (docs/pmfs-format.md §9.3).
        let mkfs = MkfsOptions {
            inodes: Some(32),
            journal_entries: pmfs::layout::JOURNAL_DEFAULT,
            ..MkfsOptions::default()
        };
        Posix::new(Fs::mkfs(pool, &mkfs, mount_options(mode, huge)).expect("mkfs"))
    }

    fn write_file(px: &Posix<SimPm>, path: &str, off: u64, len: usize, seed: u8) {
        let fd = px
            .open(path, pmfs::posix::O_CREAT | pmfs::posix::O_RDWR, 0o644)
            .expect("open");
        px.pwrite(fd, &pattern(len, seed), off).expect("write");
        px.close(fd).expect("close");
    }

    /// The sampled images of one snapshot.
    fn sample(snapshot: &Snapshot, seed: u64) -> Vec<Choice> {
        let mut x = seed ^ snapshot.fences.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut choices = vec![snapshot.nothing(), snapshot.everything()];
        for _ in 0..RANDOM_IMAGES {
            let prefixes = snapshot
                .lines
                .iter()
                .map(|(_, chunks)| (next() % (chunks.len() as u64 + 1)) as u32)
                .collect();
            let nt = snapshot.nt.iter().map(|_| next() % 2 == 0).collect();
            choices.push(Choice { prefixes, nt });
        }
        choices
    }

    /// Runs `op` on a file system made by `setup`, crashes it at every point with sampled
    /// images, and requires every recovered state to satisfy `allowed` (told whether the
    /// operation had returned); returns the images checked.
    fn sampled_check(
        setup: &dyn Fn(SimPm) -> Posix<SimPm>,
        op: &dyn Fn(&Posix<SimPm>),
        allowed: &dyn Fn(&State, bool) -> Result<(), String>,
        mode: DataMode,
        huge: bool,
    ) -> usize {
        let px = setup(SimPm::new(LARGE_POOL, SimConfig::default()));
        let pm = px.fs().pool().pm();
        let base = pm.durability_points();
        pm.set_capture(true);
        op(&px);
        let mut snapshots = pm.take_snapshots();
        snapshots.push(pm.crash_now());
        let mut images = 0;
        for snapshot in &snapshots {
            let returned = snapshot.durability_points > base;
            for choice in sample(snapshot, 7) {
                if !snapshot.accepts(&choice) {
                    continue;
                }
                let image = snapshot.image(&choice);
                let pool =
                    Pool::attach(SimPm::from_image(image, SimConfig::default()), pmfs::LAYOUT)
                        .expect("attach");
                let fs = Fs::mount(pool, mount_options(mode, huge))
                    .unwrap_or_else(|e| panic!("{} {choice:?}: mount: {e}", snapshot.kind));
                fs.fsck()
                    .unwrap_or_else(|e| panic!("{}: fsck: {}", snapshot.kind, e.0));
                let state = dump(&Posix::new(fs)).expect("dump");
                if let Err(why) = allowed(&state, returned) {
                    panic!("{} (returned: {returned}): {why}", snapshot.kind);
                }
                images += 1;
            }
        }
        images
    }

    /// `got` equals `pre` or `post`, or (when `prefixes` is set, before the operation
    /// returned) `pre` with a prefix of the written file's new bytes: each piece of a large
    /// in-place write commits on its own.
    fn pre_post_or_piece(
        got: &State,
        pre: &State,
        post: &State,
        returned: bool,
        path: &str,
        prefixes: &[u64],
    ) -> Result<(), String> {
        if got == post || (!returned && got == pre) {
            return Ok(());
        }
        let as_before = got.iter().all(|(p, n)| p == path || pre.get(p) == Some(n));
        let (Some(g), Some(after)) = (got.get(path), post.get(path)) else {
            return Err(format!("{path} missing"));
        };
        let prefix = g.content.len() as u64;
        if !returned
            && as_before
            && got.len() == pre.len()
            && prefixes.contains(&prefix)
            && after.content.starts_with(&g.content)
        {
            return Ok(());
        }
        Err(format!(
            "unexpected state: {path} has {prefix} bytes (before {}, after {})",
            pre.get(path).map_or(0, |n| n.content.len()),
            after.content.len()
        ))
    }

    fn models(setup: &dyn Fn(SimPm) -> Posix<SimPm>, op: &dyn Fn(&Posix<SimPm>)) -> (State, State) {
        let px = setup(SimPm::new(LARGE_POOL, SimConfig::default()));
        let pre = dump(&px).expect("dump");
        op(&px);
        (pre, dump(&px).expect("dump"))
    }

    #[test]
    fn appends_over_one_mib_commit_piece_by_piece_in_place_and_at_once_with_cow() {
        for mode in [DataMode::InPlace, DataMode::CopyOnWrite] {
            let setup = move |pm: SimPm| {
                let px = mkfs(pm, mode, false);
                write_file(&px, "/big", 0, 600 << 10, 1);
                px
            };
            let op = |px: &Posix<SimPm>| write_file(px, "/big", 600 << 10, 1536 << 10, 2);
            let (pre, post) = models(&setup, &op);
            // In place: pieces of 1 MiB (aligned), so the size may stop at 1 MiB or 2 MiB;
            // copy-on-write: one transaction (up to 4 MiB), all or nothing.
            let pieces: &[u64] = match mode {
                DataMode::InPlace => &[1 << 20, 2 << 20],
                DataMode::CopyOnWrite => &[],
            };
            let allowed = |got: &State, returned: bool| {
                pre_post_or_piece(got, &pre, &post, returned, "/big", pieces)
            };
            let images = sampled_check(&setup, &op, &allowed, mode, false);
            eprintln!("{mode:?}: 1.5 MiB append, {images} images");
            assert!(images > 20);
        }
    }

    #[test]
    fn files_with_two_mib_leaves() {
        let setup = |pm: SimPm| {
            let px = mkfs(pm, DataMode::InPlace, true);
            write_file(&px, "/h", 0, 1 << 20, 1);
            write_file(&px, "/small", 0, 3000, 2);
            px
        };
        type Op = (&'static str, fn(&Posix<SimPm>));
        let ops: [Op; 4] = [
            ("append across a leaf boundary", |px| {
                write_file(px, "/h", 1 << 20, 1536 << 10, 3)
            }),
            ("overwrite inside a leaf", |px| {
                write_file(px, "/h", 4096, 300 << 10, 4)
            }),
            ("truncate into the first leaf", |px| {
                px.truncate("/h", 100 << 10).expect("truncate")
            }),
            ("unlink", |px| px.unlink("/h").expect("unlink")),
        ];
        for (name, op) in ops {
            let (pre, post) = models(&setup, &op);
            let allowed = |got: &State, returned: bool| {
                if got == &post || (!returned && got == &pre) {
                    return Ok(());
                }
                // The in-place overwrite of mapped leaves may mix words while in flight.
                let mut normalized = got.clone();
                if !returned
                    && name.starts_with("overwrite")
                    && let (Some(g), Some(b), Some(a)) =
                        (got.get("/h"), pre.get("/h"), post.get("/h"))
                    && words_mix(&g.content, b, a, 4096, 300 << 10)
                {
                    normalized.insert("/h".into(), b.clone());
                }
                let times_only = |x: &State, y: &State| {
                    x.len() == y.len()
                        && x.iter().zip(y).all(|((p, n), (q, m))| {
                            p == q
                                && Node {
                                    mtime: 0,
                                    ctime: 0,
                                    ..n.clone()
                                } == Node {
                                    mtime: 0,
                                    ctime: 0,
                                    ..m.clone()
                                }
                        })
                };
                if !returned && (normalized == pre || times_only(&normalized, &pre)) {
                    return Ok(());
                }
                Err(format!("{name}: neither before nor after"))
            };
            let images = sampled_check(&setup, &op, &allowed, DataMode::InPlace, true);
            eprintln!("2 MiB leaves, {name}: {images} images");
            assert!(images > 5, "{name}");
        }
    }
}

/// `Fs::repair` crashed at every fence: a pool one damaged inode made unmountable is
/// repaired, and every crash image, repaired again, becomes the same file system as an
/// uninterrupted repair makes (the repair is journaled step by step and derives each step
/// from the media, so it resumes where it stopped).
struct FsckRepairScenario {
    /// The path whose inode's mode is damaged.
    victim: &'static str,
    model: std::cell::OnceCell<State>,
}

impl FsckRepairScenario {
    fn mount_options() -> MountOptions {
        options(DataMode::InPlace, Mutant::None)
    }

    fn repaired(pm: SimPm) -> Result<Posix<SimPm>, String> {
        let pool = Pool::attach(pm, pmfs::LAYOUT).map_err(|e| e.to_string())?;
        let (fs, _) = Fs::repair(pool, Self::mount_options()).map_err(|e| e.to_string())?;
        fs.fsck()
            .map_err(|e| format!("fsck after repair: {}", e.0))?;
        Ok(Posix::new(fs))
    }
}

impl Scenario for FsckRepairScenario {
    type Model = State;
    type Live = Option<Pool<SimPm>>;

    fn name(&self) -> String {
        format!("fs/fsck-repair/{}", self.victim)
    }
    fn pool_size(&self) -> u64 {
        POOL
    }
    fn op_count(&self) -> usize {
        1
    }
    fn initial_model(&self) -> State {
        self.model
            .get_or_init(|| {
                let mut live = self.setup(SimPm::new(POOL, SimConfig::default()));
                self.run_op(&mut live, 0);
                let image = live.expect("repaired").pm().volatile_image();
                let pm = SimPm::from_image(image, SimConfig::default());
                dump(&Self::repaired(pm).expect("repair")).expect("dump")
            })
            .clone()
    }
    fn apply_to_model(&self, _model: &mut State, _op: usize) {}
    fn setup(&self, pm: SimPm) -> Option<Pool<SimPm>> {
        let pool = Pool::format(pm, &pmfs::pool_options(POOL)).expect("pool");
        let mkfs = MkfsOptions {
            inodes: Some(32),
            journal_entries: 64,
            ..MkfsOptions::default()
        };
        let px = Posix::new(Fs::mkfs(pool, &mkfs, Self::mount_options()).expect("mkfs"));
        px.mkdir("/A", 0o755).expect("mkdir");
        px.mkdir("/A/B", 0o755).expect("mkdir");
        for (i, path) in ["/A/f", "/A/B/g", "/keep"].into_iter().enumerate() {
            let fd = px
                .open(path, pmfs::posix::O_CREAT | pmfs::posix::O_RDWR, 0o644)
                .expect("create");
            px.write(fd, &pattern(5000, i as u8)).expect("write");
            px.close(fd).expect("close");
        }
        px.link("/A/B/g", "/g2").expect("link");
        let victim = px.stat(self.victim).expect("victim").ino;
        let fs = px.into_fs();
        let at = fs.superblock().inode_offset(victim) + pmfs::inode::field::MODE;
        let pool = fs.into_pool();
        pool.pm()
            .write(at, &0o170_777u32.to_le_bytes(), pmem::WriteClass::Meta);
        pool.pm().persist(at, 4);
        Some(pool)
    }
    fn run_op(&self, live: &mut Option<Pool<SimPm>>, _op: usize) {
        let pool = live.take().expect("damaged pool");
        let (fs, repairs) = Fs::repair(pool, Self::mount_options()).expect("repair");
        assert!(!repairs.is_empty(), "the damage is repaired");
        *live = Some(fs.into_pool());
    }
    fn recover(&self, pm: SimPm) -> Result<State, String> {
        dump(&Self::repaired(pm)?)
    }
}

#[test]
fn fsck_repair_survives_crashes_at_every_fence() {
    for (seed, victim) in [(1, "/A/f"), (2, "/A/B")] {
        let scenario = FsckRepairScenario {
            victim,
            model: std::cell::OnceCell::new(),
        };
        let report = check(&scenario, &Config::thorough(SimMode::Adr, seed));
        eprintln!("{report}");
        report.assert_passed();
        assert!(report.crash_points >= 3, "{report}");
    }
}
