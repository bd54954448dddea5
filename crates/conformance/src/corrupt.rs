//! Seeded media damage: does every engine refuse a damaged pool with a typed error, or open
//! it with its data verifiably intact, and does the deep check agree?
//!
//! A campaign builds two pool images per engine × workload: one closed cleanly, one as a
//! process crash leaves it (every store on the media, the logs not checkpointed, and an
//! undo transaction in flight with four logged writes). It then damages copies of them —
//! seeded byte flips in each structure, fields rewritten with a valid check (descriptors,
//! engine and pool headers, log record headers), truncations — and for each
//! copy:
//!
//! 1. runs the deep check (`tx::check`, `mvcc::check`, `heap::check_heap`) on it;
//! 2. opens it (recovery); a typed error is a refusal;
//! 3. otherwise reads the workload's content and the allocated-block count, compares them
//!    with the undamaged pool's, runs more operations and compares again.
//!
//! Every variant ends as **refused**, **intact**, or — for damage confined to the newest
//! record of a log in a crashed pool, which no check can tell from a torn write — **read as
//! a torn tail** (recovery discards it, and the check reports that tail). Anything else is a
//! failure: a **silent** wrong state, a **disagreement** between the check and the open, a
//! panic, or a hang (a watchdog aborts the process).
//!
//! Not damaged on purpose, because the result is another valid state that no check can tell
//! from a legitimate one: user data (objects, the root region), which no engine checksums;
//! record payloads rewritten with a valid check (a different committed write); counters and
//! watermarks rewritten with a valid check (an undo generation, a redo or MVCC watermark:
//! any value is one a pool can hold); and descriptor edits that yield another valid heap
//! state (a large span freed or shortened; `docs/heap-format.md` §5).

use crate::{Factory, LAYOUT};
use crashsim::SimPm;
use heap::{Descriptor, Layout as HeapLayout, SIZE_CLASSES};
use mvcc::layout::MvccLayout;
use pmem::integrity::{Finding, Severity};
use pmem::{CreateOptions, Persist, Pool, PoolError, Region, checked};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tx::layout::{EngineLayout, WATERMARK_OFFSET};
use tx::{Engine, EngineKind, PPtr, Tx, TxError};
use workloads::Workload;

/// How a campaign damages pools.
#[derive(Clone, Copy, Debug)]
pub struct CorruptConfig {
    /// Seed of every choice.
    pub seed: u64,
    /// Pool size.
    pub pool_size: u64,
    /// Workload operations before the image is taken.
    pub ops: u64,
    /// Operations run after a damaged pool opened.
    pub more_ops: u64,
    /// Byte flips per image.
    pub flips: usize,
    /// Fields rewritten with a valid check, per image.
    pub edits: usize,
    /// Truncated copies, per image.
    pub truncations: usize,
}

/// How one damaged copy ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// A typed error at open, and the check reported damage.
    Refused,
    /// Opened with the content and block count of the undamaged pool, before and after more
    /// operations; the check reported no damage.
    Intact,
    /// Damage to the newest record of a log in a crashed pool: recovery discarded it as a
    /// torn tail, and the check reported that tail.
    TornTail,
    /// An MVCC operation record rewritten with a valid check, refused when recovery
    /// re-executed it; the check, which cannot re-execute, reported the re-execution to come
    /// but no damage.
    RefusedOnReplay,
    /// Opened with a wrong state: damage served as data.
    Silent,
    /// The check and the open disagree.
    Disagreement,
    /// Something panicked.
    Panic,
}

/// What a campaign saw.
#[derive(Clone, Debug, Default)]
pub struct CorruptReport {
    /// Engine × workload.
    pub name: String,
    /// Verdicts by damage kind.
    pub counts: BTreeMap<(String, Verdict), usize>,
    /// Every failure (silent, disagreement, panic), described.
    pub failures: Vec<String>,
}

impl CorruptReport {
    /// Damaged copies tried.
    pub fn variants(&self) -> usize {
        self.counts.values().sum()
    }

    /// Copies that ended with `verdict`.
    pub fn count(&self, verdict: Verdict) -> usize {
        self.counts
            .iter()
            .filter(|((_, v), _)| *v == verdict)
            .map(|(_, n)| n)
            .sum()
    }

    fn note(&mut self, kind: &str, verdict: Verdict, detail: impl FnOnce() -> String) {
        *self.counts.entry((kind.to_owned(), verdict)).or_default() += 1;
        if verdict >= Verdict::Silent {
            self.failures
                .push(format!("{kind}: {verdict:?}: {}", detail()));
        }
    }
}

impl fmt::Display for CorruptReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: {} damaged copies", self.name, self.variants())?;
        for ((kind, verdict), n) in &self.counts {
            writeln!(f, "  {kind:<34} {verdict:?}: {n}")?;
        }
        for failure in &self.failures {
            writeln!(f, "  FAILED {failure}")?;
        }
        Ok(())
    }
}

/// The deep check of the engine area in `arena`, whichever engine formatted it, on a private
/// copy of the pool (the checks store the logs' effects to see the heap as an open would).
/// An arena that starts with neither an engine's magic nor zeros is damage: an engine header
/// whose magic was hit, or another program's data; an all-zero start is a pool without an
/// engine.
pub fn check_engine_area<P: Persist>(pm: &P, arena: Region) -> Vec<Finding> {
    if let Some(findings) = tx::check::check_tx_area(pm, arena) {
        return findings;
    }
    if mvcc::check::is_mvcc_area(pm, arena) {
        return mvcc::check::check_area(pm, arena);
    }
    let mut start = [0u8; 64];
    pm.read(arena.offset, &mut start);
    if start.iter().all(|&b| b == 0) {
        return vec![Finding::new(
            Severity::Note,
            "arena",
            Some(arena.offset),
            "no transaction engine area (an empty arena)",
        )];
    }
    vec![Finding::damage(
        "arena",
        arena.offset,
        "the arena starts with neither an engine's magic nor zeros: an engine header whose \
         magic is damaged (or whose creation was interrupted), or another program's data",
    )]
}

/// A byte range of an image that damage may hit, by structure.
#[derive(Clone, Debug)]
struct Area {
    group: &'static str,
    start: u64,
    len: u64,
}

/// An undamaged image and what opening it must give.
struct Base<M> {
    name: &'static str,
    image: Vec<u8>,
    content: M,
    blocks: u64,
    after: M,
    blocks_after: u64,
    /// The block the crashed image's in-flight transaction wrote, which must read back as it
    /// was before (crashed images only).
    scratch: Option<PPtr<()>>,
    areas: Vec<Area>,
    /// Byte ranges of the newest record of each log (crashed images): damage there is read
    /// as a torn tail.
    newest: Vec<(u64, u64)>,
}

/// The last operation index a watchdog saw progress on; it aborts a hung campaign.
static PROGRESS: AtomicU64 = AtomicU64::new(0);

fn watchdog() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        std::thread::spawn(|| {
            let mut last = u64::MAX;
            loop {
                std::thread::sleep(Duration::from_secs(120));
                let now = PROGRESS.load(Ordering::Relaxed);
                if now == last {
                    eprintln!("corruption campaign: no progress for 120 s (a hang)");
                    std::process::abort();
                }
                last = now;
            }
        });
    });
}

/// Runs a campaign for `factory` × `workload`.
pub fn campaign<F: Factory, W: Workload>(
    factory: &F,
    workload: &W,
    config: &CorruptConfig,
) -> Result<CorruptReport, String> {
    watchdog();
    let mut report = CorruptReport {
        name: format!("{}/{}", factory.name(), workload.name()),
        ..CorruptReport::default()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    for crashed in [false, true] {
        let base = build(factory, workload, config, crashed)?;
        for variant in damage(&base, config, &mut rng) {
            PROGRESS.fetch_add(1, Ordering::Relaxed);
            let verdict = judge(factory, workload, config, &base, &variant);
            let kind = format!("{}: {}", base.name, variant.kind);
            report.note(&kind, verdict.0, || {
                format!("{} at {:#x}: {}", variant.what, variant.at, verdict.1)
            });
        }
    }
    Ok(report)
}

fn build<F: Factory, W: Workload>(
    factory: &F,
    workload: &W,
    config: &CorruptConfig,
    crashed: bool,
) -> Result<Base<W::Model>, String> {
    let pm = SimPm::new(config.pool_size, Default::default());
    let pool = Pool::format(pm.clone(), &CreateOptions::new(LAYOUT, config.pool_size))
        .map_err(|e| e.to_string())?;
    let engine = factory.create(pool).map_err(|e| e.to_string())?;
    workload.setup(&engine).map_err(|e| e.to_string())?;
    for op in 0..config.ops {
        workload.run_op(&engine, 0, op).map_err(|e| e.to_string())?;
    }
    let content = workload.check(&engine)?;
    let (image, blocks, scratch) = if crashed {
        let (image, blocks, scratch) =
            crash_mid_transaction(&engine, &pm, factory.blocks(&engine))?;
        (image, blocks, Some(scratch))
    } else {
        let blocks = factory.blocks(&engine);
        drop(engine);
        (pm.volatile_image(), blocks, None)
    };
    let (after, blocks_after) = continue_from(factory, workload, config, &image)?;
    let (areas, newest) = areas(&image, crashed)?;
    Ok(Base {
        name: if crashed { "crashed" } else { "clean" },
        image,
        content,
        blocks,
        after,
        blocks_after,
        scratch,
        areas,
        newest,
    })
}

/// The image of a process that dies inside a transaction that wrote four words of a block it
/// allocated before (so an undo lane holds four live entries); the block count after the
/// rollback includes that block.
fn crash_mid_transaction<E: Engine>(
    engine: &E,
    pm: &SimPm,
    blocks: u64,
) -> Result<(Vec<u8>, u64, PPtr<()>), String> {
    let block: PPtr<()> = engine
        .transaction(|tx| {
            let block = tx.alloc(256)?;
            tx.write(block, 0, &SCRATCH)?;
            Ok::<_, TxError>(block)
        })
        .map_err(|e| e.to_string())?;
    let mut image = Vec::new();
    let _: Result<(), TxError> = engine.transaction(|tx| {
        for word in 0..4 {
            tx.write_u64(block, 64 * word, word + 7)?;
        }
        image = pm.volatile_image();
        Err(TxError::abort("the process died here"))
    });
    Ok((image, blocks + 1, block))
}

/// The bytes the scratch block held before the crashed transaction wrote it.
const SCRATCH: [u8; 256] = [0x5A; 256];

/// The content and block count after `more_ops` operations on the recovered `image`.
fn continue_from<F: Factory, W: Workload>(
    factory: &F,
    workload: &W,
    config: &CorruptConfig,
    image: &[u8],
) -> Result<(W::Model, u64), String> {
    let pool = Pool::attach(
        SimPm::from_image(image.to_vec(), Default::default()),
        LAYOUT,
    )
    .map_err(|e| e.to_string())?;
    let engine = factory.open(pool).map_err(|e| e.to_string())?;
    for op in config.ops..config.ops + config.more_ops {
        workload.run_op(&engine, 0, op).map_err(|e| e.to_string())?;
    }
    Ok((workload.check(&engine)?, factory.blocks(&engine)))
}

/// One damaged copy.
struct Variant {
    kind: &'static str,
    what: String,
    at: u64,
    image: Vec<u8>,
}

fn damage<M>(base: &Base<M>, config: &CorruptConfig, rng: &mut ChaCha8Rng) -> Vec<Variant> {
    let mut variants = Vec::new();
    let groups: Vec<&'static str> = {
        let mut g: Vec<_> = base.areas.iter().map(|a| a.group).collect();
        g.dedup();
        g
    };
    for _ in 0..config.flips {
        let group = groups[rng.random_range(0..groups.len())];
        let areas: Vec<&Area> = base.areas.iter().filter(|a| a.group == group).collect();
        let area = areas[rng.random_range(0..areas.len())];
        let at = area.start + rng.random_range(0..area.len);
        let mask: u8 = rng.random_range(1..=255);
        let mut image = base.image.clone();
        image[at as usize] ^= mask;
        variants.push(Variant {
            kind: "byte flip",
            what: format!("{group} byte ^ {mask:#04x}"),
            at,
            image,
        });
    }
    for _ in 0..config.edits {
        if let Some(variant) = edit(base, rng) {
            variants.push(variant);
        }
    }
    for _ in 0..config.truncations {
        let len = rng.random_range(0..base.image.len());
        variants.push(Variant {
            kind: "truncation",
            what: format!("cut to {len} bytes"),
            at: len as u64,
            image: base.image[..len].to_vec(),
        });
    }
    variants
}

/// Opens the damaged copy and judges it; the second value says why.
fn judge<F: Factory, W: Workload>(
    factory: &F,
    workload: &W,
    config: &CorruptConfig,
    base: &Base<W::Model>,
    variant: &Variant,
) -> (Verdict, String) {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let checked = deep_check(&variant.image);
        let opened = open_and_compare(factory, workload, config, base, &variant.image);
        (checked, opened)
    }));
    let Ok((checked, opened)) = outcome else {
        return (Verdict::Panic, "panicked".into());
    };
    let damaged = match &checked {
        Err(_) => true,
        Ok(findings) => findings.iter().any(Finding::is_damage),
    };
    match opened {
        Opened::Refused(error) if damaged => (Verdict::Refused, error),
        Opened::Refused(error) if error.contains("could not re-execute") => {
            (Verdict::RefusedOnReplay, error)
        }
        Opened::Refused(error) => (
            Verdict::Disagreement,
            format!("the open refused ({error}) but the check found no damage"),
        ),
        Opened::Intact if !damaged => (Verdict::Intact, String::new()),
        Opened::Intact => (
            Verdict::Disagreement,
            format!("the pool opened intact but the check reports {checked:?}"),
        ),
        Opened::Wrong(why) if !damaged && read_as_torn(base, variant, &checked) => {
            (Verdict::TornTail, why)
        }
        Opened::Wrong(why) => (Verdict::Silent, why),
    }
}

/// Whether the damage lies in the newest record of a log and the check reports a torn tail
/// there.
fn read_as_torn<M>(
    base: &Base<M>,
    variant: &Variant,
    checked: &Result<Vec<Finding>, PoolError>,
) -> bool {
    let Some(&(start, len)) = base
        .newest
        .iter()
        .find(|&&(start, len)| variant.at >= start && variant.at < start + len)
    else {
        return false;
    };
    checked.as_ref().is_ok_and(|findings| {
        findings.iter().any(|f| {
            f.severity == Severity::Recovery
                && f.offset.is_some_and(|at| at >= start && at < start + len)
        })
    })
}

/// The deep check of a copy, as `ferrite pool check` runs it (the pool header and state word
/// first: an attach on a private copy validates them).
fn deep_check(image: &[u8]) -> Result<Vec<Finding>, PoolError> {
    let pool = Pool::attach(
        SimPm::from_image(image.to_vec(), Default::default()),
        LAYOUT,
    )?;
    Ok(check_engine_area(pool.pm(), pool.arena()))
}

enum Opened {
    Refused(String),
    Intact,
    Wrong(String),
}

fn open_and_compare<F: Factory, W: Workload>(
    factory: &F,
    workload: &W,
    config: &CorruptConfig,
    base: &Base<W::Model>,
    image: &[u8],
) -> Opened {
    let pool = match Pool::attach(
        SimPm::from_image(image.to_vec(), Default::default()),
        LAYOUT,
    ) {
        Ok(pool) => pool,
        Err(error) => return Opened::Refused(error.to_string()),
    };
    let engine = match factory.open(pool) {
        Ok(engine) => engine,
        Err(error) => return Opened::Refused(error.to_string()),
    };
    if let Some(why) = compare(workload, factory, &engine, &base.content, base.blocks) {
        return Opened::Wrong(format!("after recovery: {why}"));
    }
    if let Some(block) = base.scratch {
        let mut bytes = [0u8; 256];
        match engine.read_only(|tx| tx.read(block, 0, &mut bytes)) {
            Ok(()) if bytes == SCRATCH => {}
            Ok(()) => return Opened::Wrong("the in-flight transaction was not rolled back".into()),
            Err(error) => return Opened::Wrong(format!("reading the rolled-back block: {error}")),
        }
    }
    for op in config.ops..config.ops + config.more_ops {
        if let Err(error) = workload.run_op(&engine, 0, op) {
            return Opened::Wrong(format!("operation {op} failed: {error}"));
        }
    }
    match compare(workload, factory, &engine, &base.after, base.blocks_after) {
        Some(why) => Opened::Wrong(format!("after {} more operations: {why}", config.more_ops)),
        None => Opened::Intact,
    }
}

fn compare<F: Factory, W: Workload>(
    workload: &W,
    factory: &F,
    engine: &F::Engine<SimPm>,
    content: &W::Model,
    blocks: u64,
) -> Option<String> {
    match workload.check(engine) {
        Err(error) => Some(format!("invariants broken: {error}")),
        Ok(found) if &found != content => Some("content differs".into()),
        Ok(_) if factory.blocks(engine) != blocks => Some(format!(
            "{} allocated blocks, expected {blocks}",
            factory.blocks(engine)
        )),
        Ok(_) => None,
    }
}

/// Byte ranges `(start, len)` of the newest record of each log.
type Newest = Vec<(u64, u64)>;

/// The structures of an image, grouped for damage, and the newest record of each log.
fn areas(image: &[u8], crashed: bool) -> Result<(Vec<Area>, Newest), String> {
    let pm = SimPm::from_image(image.to_vec(), Default::default());
    let pool = Pool::attach(pm, LAYOUT).map_err(|e| e.to_string())?;
    let (pm, arena) = (pool.pm(), pool.arena());
    let mut areas = vec![
        area("pool header", 0, 256),
        area("pool header", 256, 8),
        area("pool header", pmem::header::COPY_OFFSET, 256),
        area("engine header", arena.offset, 64),
    ];
    let mut newest = Vec::new();
    let heap = match tx::check::engine_kind(pm, arena) {
        Some(kind) => {
            let layout = EngineLayout::read(pm, arena, kind).map_err(|e| e.to_string())?;
            match kind {
                EngineKind::Redo => redo_areas(pm, &layout, &mut areas, &mut newest),
                EngineKind::Undo => undo_areas(pm, &layout, crashed, &mut areas, &mut newest),
            }
            layout.heap
        }
        None => {
            let layout = MvccLayout::read(pm, arena).map_err(|e| e.to_string())?;
            mvcc_areas(pm, &layout, &mut areas, &mut newest);
            layout.heap
        }
    };
    heap_areas(pm, heap, &mut areas)?;
    areas.sort_by_key(|a| a.group);
    Ok((areas, newest))
}

fn area(group: &'static str, start: u64, len: u64) -> Area {
    Area { group, start, len }
}

fn redo_areas(
    pm: &SimPm,
    layout: &EngineLayout,
    areas: &mut Vec<Area>,
    newest: &mut Vec<(u64, u64)>,
) {
    let at = layout.base + WATERMARK_OFFSET;
    areas.push(area("engine words", at, 8));
    let watermark = checked::open(pm.read_u64(at), at, "w").unwrap_or(0);
    for lane in 0..layout.lane_count as usize {
        let (base, limit) = (layout.lane(lane), layout.lane(lane) + layout.lane_size);
        areas.push(area("log (anywhere)", base, layout.lane_size));
        let mut live: Vec<(u64, u64, u64)> = (base..limit)
            .step_by(64)
            .filter_map(|pos| {
                tx::record::read(pm, pos, limit, watermark)
                    .ok()
                    .flatten()
                    .map(|r| (pos, r))
            })
            .filter(|(_, r)| r.seq > watermark)
            .map(|(pos, r)| (r.seq, pos, u64::from(r.len)))
            .collect();
        live.sort_unstable();
        live.iter()
            .for_each(|&(_, pos, len)| areas.push(area("log (live records)", pos, len)));
        newest.extend(live.last().map(|&(_, pos, len)| (pos, len)));
    }
}

fn undo_areas(
    pm: &SimPm,
    layout: &EngineLayout,
    crashed: bool,
    areas: &mut Vec<Area>,
    newest: &mut Vec<(u64, u64)>,
) {
    let action_area = (layout.lane_size / 4).next_multiple_of(64).max(128);
    for lane in 0..layout.lane_count as usize {
        let base = layout.lane(lane);
        areas.push(area("engine words", base, 16));
        let count = u64::from(pm.read_u32(base + 72)).min(8);
        areas.push(area("log (live records)", base + 64, 16 + 16 * count));
        let entries = base + 64 + action_area;
        let generation = checked::open(pm.read_u64(base), base, "g").unwrap_or(0);
        if crashed && pm.read_u64(entries) == generation {
            // The in-flight transaction's four entries, 32 bytes each; the last one is
            // what a torn last batch looks like.
            areas.push(area("log (live records)", entries, 4 * 32));
            newest.push((entries + 3 * 32, 32));
        }
        areas.push(area(
            "log (anywhere)",
            entries,
            layout.lane_size - 64 - action_area,
        ));
    }
}

fn mvcc_areas(
    pm: &SimPm,
    layout: &MvccLayout,
    areas: &mut Vec<Area>,
    newest: &mut Vec<(u64, u64)>,
) {
    areas.push(area("engine words", layout.watermark_slot(0), 32));
    let watermark = layout.read_watermark(pm).map_or(0, |w| w.value);
    let (clog, clog_end) = (layout.clog, layout.clog + layout.clog_size);
    areas.push(area("log (anywhere)", clog, layout.clog_size));
    let mut live = records(pm, clog, clog_end, watermark);
    live.iter()
        .for_each(|&(_, pos, len)| areas.push(area("log (live records)", pos, len)));
    newest.extend(live.last().map(|&(_, pos, len)| (pos, len)));
    let floor = live.last().map_or(watermark, |&(ts, _, _)| ts);
    for lane in 0..layout.lane_count as usize {
        areas.push(area("engine header", layout.lane(lane), 64));
        let (base, len) = layout.olog(lane);
        areas.push(area("log (anywhere)", base, len));
        live = records(pm, base, base + len, floor);
        live.iter()
            .for_each(|&(_, pos, len)| areas.push(area("log (live records)", pos, len)));
        newest.extend(live.last().map(|&(_, pos, len)| (pos, len)));
    }
}

/// The intact MVCC records in `[start, end)` newer than `floor`: (ts, pos, len), oldest first.
fn records(pm: &SimPm, start: u64, end: u64, floor: u64) -> Vec<(u64, u64, u64)> {
    let mut live: Vec<_> = (start..end)
        .step_by(64)
        .filter_map(|pos| mvcc::record::read(pm, pos, end).ok().flatten())
        .filter(|r| r.ts > floor)
        .map(|r| (r.ts, r.pos, r.len))
        .collect();
    live.sort_unstable();
    live
}

fn heap_areas(pm: &SimPm, region: Region, areas: &mut Vec<Area>) -> Result<(), String> {
    let layout = HeapLayout::read(pm, region).map_err(|e| e.to_string())?;
    areas.push(area("heap header", region.offset, 64));
    areas.push(area(
        "heap descriptors",
        layout.descriptors,
        8 * layout.chunk_count,
    ));
    for chunk in 0..layout.chunk_count {
        let word = pm.read_u64(layout.descriptor_at(chunk));
        match Descriptor::decode(word, chunk) {
            Ok(Descriptor::Run { class }) => {
                let words = layout
                    .run_geometry(usize::from(class))
                    .map_or(1, |g| g.bitmap_words);
                areas.push(area("heap descriptors", layout.descriptor_at(chunk), 8));
                areas.push(area(
                    "heap bitmaps",
                    layout.chunk_start(chunk),
                    8 * (1 + words),
                ));
            }
            Ok(Descriptor::Large { .. }) => {
                areas.push(area("heap descriptors", layout.descriptor_at(chunk), 8));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A field rewritten with a valid check.
fn edit<M>(base: &Base<M>, rng: &mut ChaCha8Rng) -> Option<Variant> {
    let pm = SimPm::from_image(base.image.clone(), Default::default());
    let pool = Pool::attach(pm.clone(), LAYOUT).ok()?;
    let arena = pool.arena();
    let choice = rng.random_range(0..4);
    let (what, at) = match choice {
        0 => edit_descriptor(&pm, &pool, rng)?,
        1 => edit_engine_header(&pm, arena, rng),
        2 => edit_record(&pm, arena, rng)?,
        _ => edit_pool_header(&pm, rng),
    };
    pool.abandon();
    Some(Variant {
        kind: "field rewritten, valid check",
        what,
        at,
        image: pm.volatile_image(),
    })
}

fn heap_region(pm: &SimPm, arena: Region) -> Option<Region> {
    match tx::check::engine_kind(pm, arena) {
        Some(kind) => EngineLayout::read(pm, arena, kind).ok().map(|l| l.heap),
        None => MvccLayout::read(pm, arena).ok().map(|l| l.heap),
    }
}

/// A descriptor rewritten to another kind or class (never a large span freed or shortened:
/// that is a valid heap state).
fn edit_descriptor(pm: &SimPm, pool: &Pool<SimPm>, rng: &mut ChaCha8Rng) -> Option<(String, u64)> {
    let layout = HeapLayout::read(pm, heap_region(pm, pool.arena())?).ok()?;
    let chunk = rng.random_range(0..layout.chunk_count);
    let at = layout.descriptor_at(chunk);
    let old = Descriptor::decode(pm.read_u64(at), chunk).ok()?;
    let class = rng.random_range(0..SIZE_CLASSES.len()) as u8;
    let new = match old {
        Descriptor::Run { class: c } if c != class && rng.random_bool(0.5) => {
            Descriptor::Run { class }
        }
        Descriptor::Run { .. } if rng.random_bool(0.5) => Descriptor::Free,
        Descriptor::Run { .. } => Descriptor::Large {
            span: rng.random_range(1..4),
        },
        Descriptor::Large { span } if rng.random_bool(0.5) => Descriptor::Large {
            span: span + rng.random_range(1..4),
        },
        Descriptor::Large { .. } | Descriptor::Free => Descriptor::Run { class },
    };
    pm.write_u64(at, new.encode(chunk), pmem::WriteClass::Meta);
    Some((
        format!("descriptor of chunk {chunk}: {old:?} -> {new:?}"),
        at,
    ))
}

/// A field of the engine header changed and its CRC recomputed.
fn edit_engine_header(pm: &SimPm, arena: Region, rng: &mut ChaCha8Rng) -> (String, u64) {
    let mut header = [0u8; 64];
    pm.read(arena.offset, &mut header);
    let field = [12usize, 16, 24, 32, 40, 48][rng.random_range(0..6)];
    header[field] = header[field].wrapping_add(rng.random_range(1..=255));
    let crc = crc32(&header[..60]);
    header[60..64].copy_from_slice(&crc.to_le_bytes());
    pm.write(arena.offset, &header, pmem::WriteClass::Meta);
    (
        format!("engine header byte {field}"),
        arena.offset + field as u64,
    )
}

/// A live log record re-encoded at its place with another sequence number or timestamp.
fn edit_record(pm: &SimPm, arena: Region, rng: &mut ChaCha8Rng) -> Option<(String, u64)> {
    let shift = rng.random_range(1..6u64);
    match tx::check::engine_kind(pm, arena) {
        Some(EngineKind::Redo) => {
            let layout = EngineLayout::read(pm, arena, EngineKind::Redo).ok()?;
            let lane = layout.lane(rng.random_range(0..layout.lane_count) as usize);
            let limit = lane + layout.lane_size;
            let at = layout.base + WATERMARK_OFFSET;
            let watermark = checked::open(pm.read_u64(at), at, "w").unwrap_or(0);
            let found: Vec<_> = (lane..limit)
                .step_by(64)
                .filter_map(|pos| {
                    tx::record::read(pm, pos, limit, watermark)
                        .ok()
                        .flatten()
                        .map(|r| (pos, r))
                })
                .collect();
            let (pos, rec) = found.get(rng.random_range(0..found.len().max(1)))?;
            let seq = if rng.random_bool(0.5) {
                rec.seq + shift
            } else {
                rec.seq.saturating_sub(shift).max(1)
            };
            let kind = rec.kind;
            let ranges = rec.ranges.iter().map(|(a, b)| (*a, b.as_slice()));
            let mut out = Vec::new();
            tx::record::encode(*pos, kind, seq, ranges, &rec.actions, &mut out);
            pm.write(*pos, &out, pmem::WriteClass::Log);
            Some((format!("redo record sequence {} -> {seq}", rec.seq), *pos))
        }
        Some(EngineKind::Undo) => None,
        None => {
            let layout = MvccLayout::read(pm, arena).ok()?;
            let lane = rng.random_range(0..layout.lane_count) as usize;
            let (base, len) = layout.olog(lane);
            let found: Vec<_> = (base..base + len)
                .step_by(64)
                .filter_map(|pos| mvcc::record::read(pm, pos, base + len).ok().flatten())
                .collect();
            let rec = found.get(rng.random_range(0..found.len().max(1)))?;
            let ts = if rng.random_bool(0.5) {
                rec.ts + shift
            } else {
                rec.ts.saturating_sub(shift).max(1)
            };
            let ranges = rec.ranges.iter().map(|(a, b)| (*a, b.as_slice()));
            let mut out = Vec::new();
            mvcc::record::encode(
                rec.pos,
                rec.kind,
                ts,
                rec.prev,
                rec.op,
                &rec.args,
                ranges,
                &rec.actions,
                &mut out,
            );
            pm.write(rec.pos, &out, pmem::WriteClass::Log);
            Some((format!("mvcc record time {} -> {ts}", rec.ts), rec.pos))
        }
    }
}

/// A geometry field of the pool header changed and its CRC recomputed.
fn edit_pool_header(pm: &SimPm, rng: &mut ChaCha8Rng) -> (String, u64) {
    let mut header = [0u8; 256];
    pm.read(0, &mut header);
    let field = [0x20usize, 0x38, 0x40, 0x48][rng.random_range(0..4)];
    header[field + 1] = header[field + 1].wrapping_add(rng.random_range(1..=255));
    let crc = crc32(&header[..252]);
    header[252..256].copy_from_slice(&crc.to_le_bytes());
    pm.write(0, &header, pmem::WriteClass::Meta);
    (format!("pool header field at {field:#x}"), field as u64)
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(bytes);
    hasher.finalize()
}
