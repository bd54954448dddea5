//! Memory-mapped access (`pmfs::mmap`, PMFS' direct `mmap` of file data): stores through
//! a mapping are durable in every crash image after `persist` and, before it, each 8-byte
//! word of the stored range is old or new; `write()` and mapped loads are coherent (both
//! data modes); truncate while mapped turns accesses past the end into `EFAULT` and keeps the
//! blocks allocated until the unmap; a 2 MiB-leaf file maps as one extent per leaf; raw
//! pointers of a native pool store straight into PM.

use crashsim::{Budget, Config, DoubleCrash, Points, Scenario, SimConfig, SimMode, SimPm, check};
use pmem::Pool;
use pmfs::posix::{O_CREAT, O_RDONLY, O_RDWR};
use pmfs::{Clock, DataMode, Errno, Fs, MkfsOptions, MountOptions, Mutant, Posix};

fn options(mode: DataMode, clock: Clock, mutant: Mutant, huge: bool) -> MountOptions {
    MountOptions {
        data_mode: mode,
        clock,
        huge_files: huge,
        mutant,
    }
}

fn sim_fs(size: u64, options: MountOptions) -> Fs<SimPm> {
    let pool = Pool::format(
        SimPm::new(size, SimConfig::default()),
        &pmfs::pool_options(size),
    )
    .expect("pool");
    let mkfs = MkfsOptions {
        inodes: Some(64),
        journal_entries: 128,
        ..MkfsOptions::default()
    };
    Fs::mkfs(pool, &mkfs, options).expect("mkfs")
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| seed ^ (i as u8).wrapping_mul(29) ^ (i >> 7) as u8)
        .collect()
}

#[test]
fn mapped_stores_and_write_are_coherent_in_both_modes() {
    for mode in [DataMode::InPlace, DataMode::CopyOnWrite] {
        let fs = sim_fs(
            4 << 20,
            options(mode, Clock::Stepping(1_000), Mutant::None, false),
        );
        let px = Posix::new(fs);
        let fs = px.fs();
        let fd = px.open("/f", O_CREAT | O_RDWR, 0o644).expect("open");
        px.pwrite(fd, &pattern(20_000, 1), 0).expect("fill");
        let map = px.mmap(fd, 4096, 12_000, true).expect("map");
        assert_eq!(map.extents().iter().map(|e| e.len).sum::<u64>(), 12_000);
        // Stores through the map are seen by read().
        map.write(100, b"through the map").expect("store");
        let mut buf = [0u8; 15];
        px.pread(fd, &mut buf, 4196).expect("read");
        assert_eq!(&buf, b"through the map");
        // write() is seen by mapped loads (in place even in copy-on-write mode).
        px.pwrite(fd, b"through write()", 4096 + 5000)
            .expect("write");
        let mut seen = [0u8; 15];
        map.read(5000, &mut seen).expect("load");
        assert_eq!(&seen, b"through write()", "{mode:?}");
        let before = px.fstat(fd).expect("stat");
        map.persist(0, 200).expect("persist");
        let after = px.fstat(fd).expect("stat");
        assert!(
            after.mtime > before.mtime && after.ctime == after.mtime,
            "{mode:?}"
        );
        drop(map);
        px.close(fd).expect("close");
        fs.fsck().expect("fsck");
    }
}

#[test]
fn mapping_checks_its_arguments_and_fills_holes() {
    let fs = sim_fs(
        4 << 20,
        options(DataMode::InPlace, Clock::Fixed(5), Mutant::None, false),
    );
    let px = Posix::new(fs);
    let fs = px.fs();
    px.mkdir("/d", 0o755).expect("mkdir");
    let fd = px.open("/sparse", O_CREAT | O_RDWR, 0o644).expect("open");
    px.ftruncate(fd, 64 << 10).expect("sparse file");
    assert_eq!(px.fstat(fd).expect("stat").blocks, 0, "a hole");
    let ino = px.fstat(fd).expect("stat").ino;
    assert_eq!(px.mmap(fd, 1, 100, true).err(), Some(Errno::EINVAL));
    assert_eq!(px.mmap(fd, 0, 0, true).err(), Some(Errno::EINVAL));
    assert_eq!(px.mmap(fd, 60 << 10, 8192, true).err(), Some(Errno::ENXIO));
    let d = fs.lookup(1, b"d").expect("dir").ino;
    assert_eq!(fs.map(d, 0, 4096, false).err(), Some(Errno::ENODEV));
    let map = px.mmap(fd, 8192, 16 << 10, true).expect("map");
    assert_eq!(
        px.fstat(fd).expect("stat").blocks,
        5 * 8,
        "holes filled (4 leaves, 1 node)"
    );
    let mut zeros = vec![1u8; 16 << 10];
    map.read(0, &mut zeros).expect("load");
    assert!(zeros.iter().all(|&b| b == 0));
    assert_eq!(map.read(16 << 10, &mut [0u8; 1]), Err(Errno::EFAULT));
    drop(map);
    let ro = px.open("/sparse", O_RDONLY, 0).expect("open ro");
    assert_eq!(px.mmap(ro, 0, 4096, true).err(), Some(Errno::EACCES));
    let map = px.mmap(ro, 0, 4096, false).expect("read-only map");
    assert_eq!(map.write(0, b"x"), Err(Errno::EACCES));
    assert_eq!(map.ino(), ino);
    drop(map);
    fs.fsck().expect("fsck");
}

#[test]
fn truncate_while_mapped_faults_past_the_end_and_defers_the_free() {
    let fs = sim_fs(
        4 << 20,
        options(DataMode::InPlace, Clock::Fixed(5), Mutant::None, false),
    );
    let px = Posix::new(fs);
    let fs = px.fs();
    let fd = px.open("/f", O_CREAT | O_RDWR, 0o644).expect("open");
    px.pwrite(fd, &pattern(40_960, 3), 0).expect("fill");
    let free_before = fs.statfs().free_blocks;
    let map = px.mmap(fd, 0, 40_960, true).expect("map");
    px.ftruncate(fd, 8192).expect("shrink");
    // Cut blocks stay allocated (unreachable) while the map lives; fsck accounts for them.
    assert_eq!(fs.statfs().free_blocks, free_before);
    fs.fsck().expect("fsck while mapped");
    assert_eq!(map.write(8000, &[0u8; 200]), Err(Errno::EFAULT), "past EOF");
    map.write(0, b"still mapped").expect("inside");
    // Growing again does not resurrect the old blocks through the map.
    px.ftruncate(fd, 40_960).expect("grow");
    assert_eq!(map.read(20_000, &mut [0u8; 8]), Err(Errno::EFAULT));
    drop(map);
    assert_eq!(fs.statfs().free_blocks, free_before + 8, "freed at unmap");
    // Unlink while mapped: the data stays until the unmap and the last close.
    let map = px.mmap(fd, 0, 8192, true).expect("map again");
    px.unlink("/f").expect("unlink");
    let mut buf = [0u8; 12];
    map.read(0, &mut buf).expect("load after unlink");
    assert_eq!(&buf, b"still mapped");
    drop(map);
    px.close(fd).expect("close");
    fs.fsck().expect("fsck");
    // The file's 10 blocks and tree node, and the emptied root directory's block.
    assert_eq!(fs.statfs().free_blocks, free_before + 10 + 1 + 1);
}

#[test]
fn a_huge_leaf_file_maps_as_one_extent_per_leaf() {
    let fs = sim_fs(
        16 << 20,
        options(DataMode::InPlace, Clock::Fixed(5), Mutant::None, true),
    );
    let px = Posix::new(fs);
    let fs = px.fs();
    let fd = px.open("/h", O_CREAT | O_RDWR, 0o644).expect("open");
    px.ftruncate(fd, 4 << 20).expect("size");
    let map = px.mmap(fd, 0, 4 << 20, true).expect("map");
    // Each 2 MiB leaf is contiguous (adjacent leaves merge into one extent).
    assert!(map.extents().len() <= 2, "{:?}", map.extents());
    assert_eq!(map.extents().iter().map(|e| e.len).sum::<u64>(), 4 << 20);
    for e in map.extents() {
        assert_eq!(e.len % (2 << 20), 0, "whole leaves");
        assert_eq!(e.pool_off % (2 << 20), 0, "2 MiB-aligned leaf");
    }
    map.write((2 << 20) - 4, b"straddle")
        .expect("store across leaves");
    map.persist((2 << 20) - 4, 8).expect("persist");
    let mut buf = [0u8; 8];
    px.pread(fd, &mut buf, (2 << 20) - 4).expect("read");
    assert_eq!(&buf, b"straddle");
    drop(map);
    fs.fsck().expect("fsck");
}

#[test]
fn raw_pointers_store_straight_into_the_native_pool() {
    let path = format!("/dev/shm/ferrite-fs-mmap-{}.pool", std::process::id());
    let _ = std::fs::remove_file(&path);
    let size = 8 << 20;
    let fs = Fs::mkfs(
        Pool::create(&path, &pmfs::pool_options(size)).expect("pool"),
        &MkfsOptions::default(),
        MountOptions::default(),
    )
    .expect("mkfs");
    let px = Posix::new(fs);
    let fd = px.open("/direct", O_CREAT | O_RDWR, 0o644).expect("open");
    px.ftruncate(fd, 3 * 4096).expect("size");
    let map = px.mmap(fd, 0, 3 * 4096, true).expect("map");
    let message = b"stored through a raw pointer";
    let raw = map.raw_extents();
    assert!(raw[0].len >= message.len());
    // SAFETY: the extent lies inside the pool's mapping (the map keeps its blocks allocated
    // to this file), and nothing else reads or writes these bytes meanwhile.
    unsafe { std::ptr::copy_nonoverlapping(message.as_ptr(), raw[0].ptr, message.len()) };
    map.persist(0, message.len() as u64).expect("persist");
    drop(map);
    px.close(fd).expect("close");
    px.into_fs().unmount().expect("unmount");
    let pool = Pool::open(&path, pmfs::LAYOUT, &pmem::NativeOptions::default()).expect("reopen");
    let fs = Fs::mount(pool, MountOptions::default()).expect("mount");
    let mut buf = vec![0u8; message.len()];
    let px = Posix::new(fs);
    let fd = px.open("/direct", O_RDONLY, 0).expect("open");
    px.pread(fd, &mut buf, 0).expect("read");
    assert_eq!(&buf, message);
    px.close(fd).expect("close");
    px.into_fs().unmount().expect("unmount");
    std::fs::remove_file(&path).expect("remove");
}

/// The logical state the crash test compares: the file's bytes and its two times.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileState {
    content: Vec<u8>,
    mtime: u64,
    ctime: u64,
}

/// Mapped stores in three operations, each ending with one persist (its durability point):
/// unaligned pieces across lines and blocks, persisting exactly the range stored (ops 0
/// and 1) or the whole map (op 2).
struct MapScenario {
    mutant: Mutant,
    models: Vec<FileState>,
}

const POOL: u64 = 512 << 10;
const FILE_LEN: usize = 16_384;

/// Per operation: the stores `(offset, length, seed)` and the range persisted (`None`: all).
type MapOp = (&'static [(u64, usize, u8)], Option<(u64, u64)>);
const OPS: [MapOp; 3] = [
    (&[(60, 20, 1), (4090, 12, 2)], Some((60, 4042))),
    (&[(5000, 300, 3)], Some((5000, 300))),
    (&[(9000, 64, 4), (12_000, 9, 5)], None),
];

impl MapScenario {
    fn new(mutant: Mutant) -> Self {
        let mut scenario = MapScenario {
            mutant,
            models: Vec::new(),
        };
        let live = scenario.setup(SimPm::new(POOL, SimConfig::default()));
        let mut models = vec![state(&live).expect("state")];
        for op in 0..OPS.len() {
            run(&live, op);
            models.push(state(&live).expect("state"));
        }
        scenario.models = models;
        scenario
    }

    /// An image taken while op `k` is in flight may show, in place of the state before it,
    /// any 8-byte mix of old and new words in the stored ranges and each time old or new
    /// (`mtime` new only with `ctime` new). Such a state is reported as the one before.
    fn normalize(&self, got: FileState) -> FileState {
        for k in 0..OPS.len() {
            let (pre, post) = (&self.models[k], &self.models[k + 1]);
            if got == *post || got.content.len() != pre.content.len() {
                continue;
            }
            let words_ok = got.content.chunks(8).enumerate().all(|(w, g)| {
                let r = w * 8..w * 8 + g.len();
                g == &pre.content[r.clone()] || g == &post.content[r]
            });
            let time_ok = |g: u64, a: u64, b: u64| g == a || g == b;
            let times_ok = time_ok(got.mtime, pre.mtime, post.mtime)
                && time_ok(got.ctime, pre.ctime, post.ctime)
                && !(got.mtime == post.mtime && got.ctime != post.ctime && pre.mtime != post.mtime);
            if words_ok && times_ok {
                return pre.clone();
            }
        }
        got
    }
}

fn run(fs: &Fs<SimPm>, op: usize) {
    let ino = fs.lookup(1, b"m").expect("m").ino;
    let map = fs.map(ino, 0, FILE_LEN as u64, true).expect("map");
    let (stores, persisted) = OPS[op];
    for &(at, len, seed) in stores {
        map.write(at, &pattern(len, seed)).expect("store");
    }
    match persisted {
        Some((at, len)) => map.persist(at, len).expect("persist"),
        None => map.persist_all().expect("persist"),
    }
}

fn state(fs: &Fs<SimPm>) -> Result<FileState, String> {
    let attr = fs.lookup(1, b"m").map_err(|e| e.to_string())?;
    let mut content = vec![0u8; attr.size as usize];
    fs.read(attr.ino, 0, &mut content)
        .map_err(|e| e.to_string())?;
    Ok(FileState {
        content,
        mtime: attr.mtime,
        ctime: attr.ctime,
    })
}

impl Scenario for MapScenario {
    type Model = FileState;
    type Live = Fs<SimPm>;

    fn name(&self) -> String {
        format!("fs/mmap/{:?}", self.mutant)
    }
    fn pool_size(&self) -> u64 {
        POOL
    }
    fn op_count(&self) -> usize {
        OPS.len()
    }
    fn initial_model(&self) -> FileState {
        self.models[0].clone()
    }
    fn apply_to_model(&self, model: &mut FileState, op: usize) {
        *model = self.models[op + 1].clone();
    }
    fn setup(&self, pm: SimPm) -> Fs<SimPm> {
        let pool = Pool::format(pm, &pmfs::pool_options(POOL)).expect("pool");
        let mkfs = MkfsOptions {
            inodes: Some(32),
            journal_entries: 64,
            ..MkfsOptions::default()
        };
        let options = options(
            DataMode::InPlace,
            Clock::Stepping(1_000_000),
            self.mutant,
            false,
        );
        let fs = Fs::mkfs(pool, &mkfs, options).expect("mkfs");
        let px = Posix::new(fs);
        let fd = px.open("/m", O_CREAT | O_RDWR, 0o644).expect("create");
        px.pwrite(fd, &pattern(FILE_LEN, 9), 0).expect("fill");
        px.close(fd).expect("close");
        px.into_fs()
    }
    fn run_op(&self, live: &mut Fs<SimPm>, op: usize) {
        run(live, op);
    }
    fn recover(&self, pm: SimPm) -> Result<FileState, String> {
        let pool = Pool::attach(pm, pmfs::LAYOUT).map_err(|e| e.to_string())?;
        let fs = Fs::mount(
            pool,
            options(DataMode::InPlace, Clock::Fixed(1), Mutant::None, false),
        )
        .map_err(|e| e.to_string())?;
        fs.fsck().map_err(|e| format!("fsck: {}", e.0))?;
        Ok(self.normalize(state(&fs)?))
    }
}

fn crash_config(seed: u64) -> Config {
    Config {
        budget: Budget {
            exhaustive_max: 64,
            random: 16,
        },
        double_crash: Some(DoubleCrash {
            points: 2,
            budget: Budget {
                exhaustive_max: 4,
                random: 0,
            },
        }),
        ..Config::thorough(SimMode::Adr, seed)
    }
}

#[test]
fn mapped_stores_are_durable_after_persist_in_every_crash_image() {
    let report = check(&MapScenario::new(Mutant::None), &crash_config(11));
    eprintln!("{report}");
    report.assert_passed();
    assert!(report.images > 20, "{report}");
}

#[test]
fn mapped_persist_passes_the_durability_check() {
    let config = Config {
        points: Points::DurabilityOnly,
        ..Config::quick(SimMode::Adr)
    };
    check(&MapScenario::new(Mutant::None), &config).assert_passed();
}

#[test]
fn a_persist_that_does_not_flush_is_caught() {
    let report = check(&MapScenario::new(Mutant::MapNoFlush), &crash_config(12));
    assert!(
        !report.passed(),
        "the missing flush went unnoticed: {report}"
    );
}
