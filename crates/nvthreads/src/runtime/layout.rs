//! Where things are mapped (`docs/nvthreads.md` §3.2, §3.6, §4.7): the persistent heap at
//! its fixed address, the program's globals (shared, or persistent in a reservation at the
//! heap's end), the shared `malloc` region; and the start-up copy of the recovered home
//! image into the shared view.

use super::env::{GlobalsMode, MallocMode};
use super::warn;
use crate::heapmeta;
use crate::pages::{PAGE, RegionSpec, Tracker};
use crate::pfail::RtJournal;

/// Fixed address of the volatile `malloc` region (after any heap of up to 8 TiB).
pub const MALLOC_BASE: u64 = 0x6800_0000_0000;

/// The page-aligned regions the tracker maps: the persistent heap, the program's globals
/// (shared, unless `NVT_GLOBALS=0`; logged at the heap's end with `NVT_GLOBALS=persistent`)
/// and, in shared `malloc` mode, the volatile region.
pub(super) fn region_specs(
    layout: &GlobalsLayout,
    base_addr: u64,
    malloc: MallocMode,
    malloc_mb: u64,
) -> Vec<RegionSpec> {
    let mut specs = vec![RegionSpec {
        addr: Some(base_addr as usize),
        len: layout.heap_len as usize,
        first_page: 0,
        adopt: false,
        logged: true,
        tracked: true,
    }];
    let mut next = if layout.persistent {
        layout.heap_len as usize / PAGE
    } else {
        layout.pool_heap_len as usize / PAGE
    };
    for &(addr, len) in layout
        .globals
        .ranges
        .iter()
        .take(crate::pages::MAX_REGIONS - 2)
    {
        specs.push(RegionSpec {
            addr: Some(addr),
            len,
            first_page: next,
            adopt: true,
            logged: layout.persistent,
            tracked: layout.persistent,
        });
        next += len / PAGE;
    }
    if layout.persistent {
        next = next.max(layout.pool_heap_len as usize / PAGE);
    }
    if malloc == MallocMode::Shared {
        let len = (malloc_mb << 20).next_multiple_of(crate::alloc::CHUNK as u64) as usize;
        specs.push(RegionSpec {
            addr: Some(MALLOC_BASE as usize),
            len,
            first_page: next,
            adopt: false,
            logged: false,
            tracked: false,
        });
    }
    specs
}

/// How the program's globals are placed (`NVT_GLOBALS`, `docs/nvthreads.md` §4.6).
#[derive(Debug)]
pub(super) struct GlobalsLayout {
    /// The globals (none with `NVT_GLOBALS=0`).
    pub(super) globals: crate::globals::ProgramGlobals,
    /// The pool's heap size.
    pub(super) pool_heap_len: u64,
    /// The heap the allocator may use: the pool's minus the globals' reservation.
    pub(super) heap_len: u64,
    /// Whether the globals are logged into the reservation.
    pub(super) persistent: bool,
    /// Whether the reservation holds this executable's globals from an earlier run.
    pub(super) recovered: bool,
}

impl GlobalsLayout {
    /// Decides from `NVT_GLOBALS` (`mode`) and the heap metadata of the home image.
    pub(super) fn plan(journal: &RtJournal, mode: GlobalsMode) -> Result<GlobalsLayout, String> {
        let pool_heap_len = journal.geometry().heap_len;
        let globals = match mode {
            GlobalsMode::Private => crate::globals::ProgramGlobals::default(),
            GlobalsMode::Shared | GlobalsMode::Persistent => crate::globals::program_globals(),
        };
        let mut meta = vec![0u8; heapmeta::META_LEN];
        journal.read_home(0, &mut meta);
        let formatted = match heapmeta::state(&meta) {
            heapmeta::MetaState::Blank => false,
            heapmeta::MetaState::Formatted => true,
            heapmeta::MetaState::Damaged(why) => return Err(why),
        };
        let (recorded, fingerprint, recorded_len) = if formatted {
            heapmeta::globals(&meta)
        } else {
            (0, 0, 0)
        };
        let wanted = mode == GlobalsMode::Persistent && !globals.is_empty();
        let needed = (globals.len() as u64).next_multiple_of(PAGE as u64);
        let reserved = if formatted {
            recorded
        } else if wanted {
            needed
        } else {
            0
        };
        let mut persistent = wanted;
        if wanted && globals.fingerprint == 0 {
            warn("NVT_GLOBALS=persistent: the executable has no build id; globals stay volatile");
            persistent = false;
        } else if wanted && reserved < needed {
            warn(&format!(
                "NVT_GLOBALS=persistent: the pool reserves {reserved} bytes for {needed} bytes \
                 of globals (make a new pool); globals stay volatile"
            ));
            persistent = false;
        }
        if reserved + 2 * PAGE as u64 > pool_heap_len {
            return Err(format!(
                "the heap ({pool_heap_len} bytes) is too small for {reserved} bytes of globals"
            ));
        }
        let recovered = persistent
            && fingerprint == globals.fingerprint
            && recorded_len == globals.len() as u64;
        if persistent && formatted && fingerprint != 0 && !recovered {
            warn("the executable changed: its persistent globals start from their initial values");
        }
        Ok(GlobalsLayout {
            globals,
            pool_heap_len,
            heap_len: pool_heap_len - reserved,
            persistent,
            recovered,
        })
    }

    /// The excluded bytes of persistent globals as global offsets `(start, end)`.
    pub(super) fn excluded_offsets(&self) -> Vec<(u64, u64)> {
        if !self.persistent {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut offset = self.heap_len;
        for &(addr, len) in &self.globals.ranges {
            for &(start, size) in &self.globals.excluded {
                let (from, to) = (start.max(addr), (start + size).min(addr + len));
                if from < to {
                    out.push((offset + (from - addr) as u64, offset + (to - addr) as u64));
                }
            }
            offset += len as u64;
        }
        out
    }
}

/// Restores the recovered globals from the reservation at the heap's end into the globals'
/// shared view, except the excluded bytes (this run's loader wrote them).
fn load_globals(journal: &RtJournal, tracker: &Tracker, layout: &GlobalsLayout) {
    let mut offset = layout.heap_len as usize;
    for &(addr, len) in &layout.globals.ranges {
        for (part, size) in layout.globals.persistent_parts(addr, len) {
            let at = offset + (part - addr);
            let mut bytes = vec![0u8; size];
            journal.read_home(at as u64, &mut bytes);
            tracker.write_shared_at(at, &bytes);
        }
        offset += len;
    }
}

/// Copies the used part of the home image into the shared view. Returns whether the heap
/// metadata was already there.
pub(super) fn load_home(
    journal: &RtJournal,
    tracker: &Tracker,
    layout: &GlobalsLayout,
) -> Result<bool, String> {
    let mut meta = vec![0u8; heapmeta::META_LEN];
    journal.read_home(0, &mut meta);
    match heapmeta::state(&meta) {
        heapmeta::MetaState::Blank => return Ok(false),
        heapmeta::MetaState::Formatted => {}
        heapmeta::MetaState::Damaged(why) => return Err(why),
    }
    heapmeta::validate(&meta, layout.pool_heap_len)?;
    if layout.recovered {
        load_globals(journal, tracker, layout);
    }
    let used = heapmeta::top(&meta).div_ceil(PAGE as u64) * PAGE as u64;
    // The persistent malloc arena is mostly never-used (zero) chunks above its high-water
    // mark: only its used part is copied.
    let skipped =
        crate::malloc::unused_arena_range(&meta, |offset, bytes| journal.read_home(offset, bytes));
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < used {
        if let Some((start, end)) = skipped
            && (start..end).contains(&at)
        {
            at = end;
            continue;
        }
        let stop = skipped.map_or(
            used,
            |(start, _)| if at < start { start.min(used) } else { used },
        );
        let len = (stop - at).min(buf.len() as u64) as usize;
        journal.read_home(at, &mut buf[..len]);
        tracker.load_shared(at as usize, &buf[..len]);
        at += len as u64;
    }
    Ok(true)
}
