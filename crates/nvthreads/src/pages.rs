//! The page tracker: a heap seen through two mappings of one shared-memory file, with the
//! writes of this process found page by page (`docs/nvthreads.md` §3.2).
//!
//! - The **shared view** maps the file `MAP_SHARED`: the merged state every process sees.
//! - The **private view** maps the same file `MAP_PRIVATE` and read-only, at the heap's fixed
//!   address. The program reads and writes the heap there. A page this process has not
//!   written shows the shared contents as they are now; the first write to it faults.
//! - The `SIGSEGV` handler (on an alternate stack) makes the page (or a window of pages)
//!   writable, forces the kernel's private copies (`MADV_POPULATE_WRITE`, or an atomic no-op
//!   write of each page's first word), copies each page to its **twin**, and records the
//!   pages in the dirty list. The write then retries and lands in the private copy.
//! - At a merge the runtime diffs each logged dirty page against its twin ([`crate::diff`])
//!   and logs the runs, and publishes every dirty page's changed bytes into the shared view
//!   ([`Tracker::publish_page`]), noting the page in the **publish log** shared by all
//!   processes; [`Tracker::reset`] then write-protects the pages again and keeps their
//!   private copies, except those of pages another process published into since they were
//!   taken, which it drops (`MADV_DONTNEED`) so the next access sees the shared contents.
//!   When the process synchronises, [`Tracker::catch_up`] drops the kept copies of pages
//!   others published into.
//! - Besides the heap, existing memory can be *adopted* ([`Tracker::install_with`]): the
//!   runtime adopts the program's writable data segment, so globals are shared the same way.
//!
//! One tracker per process ([`Tracker::install`]); a forked child inherits it (mappings,
//! handler, alternate stack and dirty state are all copied by `fork`), which is how every
//! thread-process gets its own dirty list.
//!
//! # Async-signal safety of the handler
//! The handler only loads an `AtomicPtr` to state that is never freed, does arithmetic,
//! calls `mprotect`, `madvise` and `sigaction` (plain system calls; `sigaction` is on the
//! POSIX list and the others are raw system calls on Linux with no user-space state), copies
//! 4 KiB between memory it owns, and updates atomics. It takes no lock, allocates nothing,
//! and touches no `std` state; of thread-local state only `errno`, which it saves and
//! restores. So it is safe whatever code it interrupted — including the runtime itself, which
//! never holds the dirty list while heap pages can fault.

use crate::diff::{self, Span};
use std::io;
use std::ptr;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Tracking granularity.
pub const PAGE: usize = 4096;
const ALT_STACK: usize = 64 * 1024;

static ACTIVE: AtomicPtr<Tracker> = AtomicPtr::new(ptr::null_mut());

/// Whether the kernel supports `MADV_POPULATE_WRITE` (Linux 5.14; probed at installation).
static POPULATE_WRITE: AtomicBool = AtomicBool::new(false);

/// Twin slots populated at once when a fault needs one not mapped yet.
const TWIN_BATCH: usize = 64;

/// Most pages one write fault makes writable (and twins) for a sequential writer.
const MAX_WINDOW: usize = 16;

/// Most *hot* pages a process keeps: pages it changed lately, left writable (with their
/// twins refreshed) across intervals, so that writing them again takes no fault. It bounds
/// what idle hot pages can cost a merge (a whole-page compare each: 0.1–0.2 µs while the
/// pages stay in the core's caches, 0.8–0.9 µs for a writer of many pages); which pages stay
/// is decided by [`HOT_IDLE`]. 16 was too few for a program whose sections write one of a few
/// dozen pages each (reverse_index with persistent `malloc`: links on 32 pages, index
/// buckets, allocation frontiers), 64 too many for one writing a page it comes back to only
/// after hundreds of sections (`eval/sections.c cold`): `docs/nvthreads.md` §3.2 and §10.
pub const HOT_MAX: usize = 32;
/// Intervals a hot page may go unchanged before it is write-protected again. Keeping a page
/// hot costs a diff of an unchanged page at every merge (0.1–0.2 µs on the project's
/// virtual machine); cooling it costs, if it is written again, a write fault, a twin, two
/// `mprotect`s and, when another process publishes into the cooled copy meanwhile, an
/// `madvise` to drop it — 28–33 µs of the run (hold time included) measured in
/// reverse_index with persistent `malloc`. As in ski rental, a page is kept until its idle diffs have cost about
/// what a fault would: `docs/nvthreads.md` §3.2.
pub const HOT_IDLE: u8 = 128;

/// Most tracked regions (the heap plus adopted ranges such as the program's globals).
pub const MAX_REGIONS: usize = 4;

/// Entries of each process's publish ring: a reader that falls further behind one ring
/// drops every kept copy.
const RING_ENTRIES: usize = 1 << 12;
/// Publish rings: one per thread slot (the main thread's is ring 0).
pub const RINGS: usize = crate::shared::MAX_THREADS;
/// A publish-log entry meaning "any page may have changed".
const ALL_PAGES: u32 = u32::MAX;
/// Bytes per cache line: the granularity of the publish log's line masks.
pub const LINE: usize = 64;
/// A line mask naming every line of a page (a page holds exactly 64 lines).
pub const ALL_LINES: u64 = u64::MAX;
const _: () = assert!(
    PAGE / LINE == 64,
    "a line mask is one bit per line of a page"
);

/// The pages one process published, in its merge order, each with the mask of the 64-byte
/// lines the publish wrote (bit `i`: bytes `64 i .. 64 i + 64` of the page): a ring written
/// only by the thread-process in its slot. `reserved` counts the entries begun, `published`
/// those complete; entry `n` is in slot `n % RING_ENTRIES` of both arrays.
#[repr(C)]
struct Ring {
    reserved: AtomicU64,
    published: AtomicU64,
    pages: [AtomicU32; RING_ENTRIES],
    lines: [AtomicU64; RING_ENTRIES],
}

/// The pages every process published: a ring per thread slot, so processes merging at once
/// never write the same ring, in memory shared by all processes (mapped before the first
/// fork). `total` counts every entry of every ring, so a reader with nothing new to see
/// learns it from one load.
#[repr(C)]
struct PublishLog {
    total: AtomicU64,
    /// One past the highest ring ever written: readers look no further.
    rings_used: AtomicUsize,
    rings: [Ring; RINGS],
}

impl std::fmt::Debug for PublishLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishLog")
            .field("total", &self.total)
            .finish_non_exhaustive()
    }
}

impl PublishLog {
    fn map() -> io::Result<&'static PublishLog> {
        let len = std::mem::size_of::<PublishLog>().next_multiple_of(PAGE);
        let at = map_shared_zeroed(len)?;
        // SAFETY: a fresh, zeroed, suitably aligned shared mapping of at least the struct's
        // size, never unmapped; all-zero bytes are valid atomics.
        Ok(unsafe { &*at.cast::<PublishLog>() })
    }
}

/// A set of page numbers: one bit per page, and one summary bit per word of bits, so taking
/// every member costs in proportion to the words in use rather than to all pages.
#[derive(Debug)]
struct PageSet {
    bits: Box<[AtomicU64]>,
    summary: Box<[AtomicU64]>,
}

impl PageSet {
    fn new(pages: usize) -> PageSet {
        let bits = bitmap(pages);
        let summary = bitmap(bits.len());
        PageSet { bits, summary }
    }

    fn insert(&self, page: usize) {
        test_and_set(&self.bits, page);
        test_and_set(&self.summary, page / 64);
    }

    /// Removes `page`; returns whether it was a member.
    fn remove(&self, page: usize) -> bool {
        let mask = 1u64 << (page % 64);
        self.bits[page / 64].fetch_and(!mask, Ordering::Relaxed) & mask != 0
    }

    /// Empties the set, appending its members to `pages` in ascending order.
    fn take_all(&self, pages: &mut Vec<usize>) {
        for (index, summary) in self.summary.iter().enumerate() {
            let mut words = summary.swap(0, Ordering::Relaxed);
            while words != 0 {
                let word = index * 64 + words.trailing_zeros() as usize;
                words &= words - 1;
                let mut bits = self.bits[word].swap(0, Ordering::Relaxed);
                while bits != 0 {
                    pages.push(word * 64 + bits.trailing_zeros() as usize);
                    bits &= bits - 1;
                }
            }
        }
    }
}

/// Buffers reused by every catch-up and reset.
#[derive(Debug, Default)]
struct Scratch {
    /// Catch-up: the `(page, lines)` entries read from the other processes' rings.
    unseen: Vec<(u32, u64)>,
    /// Catch-up: kept copies to drop. Reset: the pages that cool down.
    pages: Vec<usize>,
    /// Reset: the pages that stay hot.
    hot: Vec<usize>,
    /// Reset: the pages that may stay hot, with their idle intervals.
    candidates: Vec<(u8, usize)>,
}

/// One tracked range: a private view the program uses and a shared view, both mapping one
/// file. Pages are numbered globally: region `r` owns pages `first_page..first_page + len /
/// PAGE`, and a global offset is `global page × PAGE + offset in the page`.
#[derive(Debug, Clone, Copy)]
struct Region {
    private: *mut u8,
    shared: *mut u8,
    len: usize,
    first_page: usize,
    fd: i32,
    /// Whether its runs go to the redo log (the persistent heap) or are only published.
    logged: bool,
}

/// What to track: one region of a [`Tracker`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionSpec {
    /// Where the private view goes (`None`: anywhere, for tests).
    pub addr: Option<usize>,
    /// Bytes (a multiple of [`PAGE`]).
    pub len: usize,
    /// Its first global page number (regions are given in ascending order, without overlap).
    pub first_page: usize,
    /// Whether existing memory at `addr` is adopted (its contents move into the region's
    /// file, mapped over the same addresses); otherwise the region starts zeroed at an
    /// address that must be free.
    pub adopt: bool,
    /// Whether the runtime logs its runs (persistent) or only publishes them (shared).
    pub logged: bool,
    /// Whether writes are tracked from the start. Unlogged regions may be untracked: the
    /// private view is then the shared mapping itself, written in place (the runtime's main
    /// process works so; each thread-process turns tracking on after `fork`,
    /// [`Tracker::set_tracking`]). Logged regions are always tracked.
    pub tracked: bool,
}

/// The heap's mappings, any adopted ranges, and this process's dirty pages.
#[derive(Debug)]
pub struct Tracker {
    fd: i32,
    /// Global pages covered (every region's pages are below this).
    pages: usize,
    regions: [Region; MAX_REGIONS],
    region_count: usize,
    /// Per region: whether its private view is the tracked copy-on-write mapping (else the
    /// shared mapping itself, read-write).
    tracked: [std::sync::atomic::AtomicBool; MAX_REGIONS],
    /// Twin slots: the twin of the `k`-th page of the dirty list is at slot `k`, so an
    /// interval reuses the slots (already mapped) of the intervals before it.
    twins: *mut u8,
    /// Per page: its twin's slot while it is dirty.
    twin_slot: Box<[AtomicU32]>,
    /// Twin slots known to be mapped writable in this process (populated ahead in batches).
    twins_ready: AtomicUsize,
    /// One bit per page: written in the current interval (private copy, twin taken).
    dirty_bits: Box<[AtomicU64]>,
    /// The dirty pages, in fault order (`dirty_count` valid entries).
    dirty: Box<[AtomicU32]>,
    dirty_count: AtomicUsize,
    /// The private copies kept across intervals (not dropped at reset).
    kept: PageSet,
    /// One bit per dirty page: published something in the current interval.
    changed_bits: Box<[AtomicU64]>,
    /// Per hot page: intervals since it last changed.
    idle: Box<[std::sync::atomic::AtomicU8]>,
    /// The pages every process published into (shared by all processes).
    log: &'static PublishLog,
    /// This process's ring in `log` (its thread slot).
    writer: AtomicUsize,
    /// Per ring: how many of its entries this process has taken into account.
    seen: Box<[AtomicU64]>,
    /// `log.total` when this process last caught up.
    seen_total: AtomicU64,
    /// Buffers of catch-up and reset, kept across calls so their common path allocates
    /// nothing (the process's one thread takes it; never the fault handler).
    scratch: Mutex<Scratch>,
    faults: AtomicU64,
    /// Nanoseconds spent handling them (measured with `NVT_PROFILE=1` only).
    fault_nanos: AtomicU64,
    /// The page after the last fault's window, and that window's size (sequential-write
    /// detection in the fault handler).
    window_end: AtomicUsize,
    window: AtomicUsize,
}

// SAFETY: the raw pointers are mappings owned by the tracker for the life of the process;
// every mutable field is an atomic, and the heap memory they point at is only accessed
// through explicit raw copies by the single thread of each process.
unsafe impl Sync for Tracker {}
// SAFETY: as above; nothing is tied to the creating thread.
unsafe impl Send for Tracker {}

fn os_error<T>(what: &str) -> io::Result<T> {
    let error = io::Error::last_os_error();
    Err(io::Error::new(error.kind(), format!("{what}: {error}")))
}

fn bitmap(pages: usize) -> Box<[AtomicU64]> {
    zeroed_atomics(pages.div_ceil(64))
}

fn list(pages: usize) -> Box<[AtomicU32]> {
    zeroed_atomics(pages)
}

/// A zeroed slice of atomics (large ones come from zero pages the kernel maps lazily).
fn zeroed_atomics<T>(len: usize) -> Box<[T]> {
    // SAFETY: only used with AtomicU32 and AtomicU64, for which all-zero bytes are a valid
    // value (zero).
    unsafe { Box::<[T]>::new_zeroed_slice(len).assume_init() }
}

fn test_and_set(bits: &[AtomicU64], page: usize) -> bool {
    let mask = 1u64 << (page % 64);
    bits[page / 64].fetch_or(mask, Ordering::Relaxed) & mask != 0
}

fn is_set(bits: &[AtomicU64], page: usize) -> bool {
    bits[page / 64].load(Ordering::Relaxed) & 1u64 << (page % 64) != 0
}

fn clear(bits: &[AtomicU64], page: usize) {
    bits[page / 64].fetch_and(!(1u64 << (page % 64)), Ordering::Relaxed);
}

/// Makes a file of `spec.len` bytes and maps it twice: shared (anywhere) and, at
/// `spec.addr`, private read-only (tracked) or the shared file again read-write (untracked).
/// An adopted range is mapped over the existing memory after its contents are copied.
fn make_region(spec: &RegionSpec) -> io::Result<Region> {
    let len = spec.len;
    assert!(
        len > 0 && len.is_multiple_of(PAGE),
        "region size {len} is not a page multiple"
    );
    // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::memfd_create(c"nvthreads-heap".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return os_error("memfd_create");
    }
    // SAFETY: fd is the file just created.
    if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
        return os_error("ftruncate of the heap file");
    }
    let shared = map(
        None,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
        fd,
    )?;
    if spec.adopt {
        let at = spec.addr.expect("adopting needs an address");
        // SAFETY: the caller guarantees the adopted range is mapped and readable for `len`
        // bytes; the shared view is a fresh writable mapping of `len` bytes.
        unsafe { ptr::copy_nonoverlapping(at as *const u8, shared, len) };
    }
    let tracked = spec.tracked || spec.logged;
    let private = match (spec.adopt, spec.addr) {
        (true, Some(at)) => {
            remap_view(at as *mut u8, len, fd, tracked)?;
            at as *mut u8
        }
        _ => {
            let (prot, flags) = view_mode(tracked);
            map(spec.addr, len, prot, flags, fd)?
        }
    };
    Ok(Region {
        private,
        shared,
        len,
        first_page: spec.first_page,
        fd,
        logged: spec.logged,
    })
}

/// Protection and flags of a private view: tracked (copy-on-write, read-only until a write
/// faults) or untracked (the shared file, read-write).
fn view_mode(tracked: bool) -> (i32, i32) {
    if tracked {
        (libc::PROT_READ, libc::MAP_PRIVATE)
    } else {
        (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED)
    }
}

/// Maps the region's file over its private view at `at` in the given mode.
fn remap_view(at: *mut u8, len: usize, fd: i32, tracked: bool) -> io::Result<()> {
    let (prot, flags) = view_mode(tracked);
    // SAFETY: MAP_FIXED over a range the tracker owns (the region's private view, or an
    // adopted range whose contents are in the file); each process has one thread, and no
    // reference into the range is held across the call.
    let got = unsafe { libc::mmap(at.cast(), len, prot, flags | libc::MAP_FIXED, fd, 0) };
    if got == libc::MAP_FAILED {
        return os_error("mmap over a tracked region");
    }
    Ok(())
}

impl Tracker {
    /// Creates the heap file and its mappings, installs the fault handler and an alternate
    /// signal stack, and makes this the process's tracker. `len` is a multiple of [`PAGE`];
    /// `fixed_addr` is where the private view must go (`None`: anywhere, for tests).
    /// Fails if a tracker is already installed.
    pub fn install(len: usize, fixed_addr: Option<usize>) -> io::Result<&'static Tracker> {
        Self::install_with(len, fixed_addr, &[])
    }

    /// [`Tracker::install`], also adopting each `(address, length)` range of existing
    /// memory (page-aligned; e.g. the program's writable data segment): its contents move
    /// into a tracked file mapped over the same addresses, so writes to it are found and
    /// merged like heap writes (global offsets after the heap's, in the order given; not
    /// logged).
    pub fn install_with(
        len: usize,
        fixed_addr: Option<usize>,
        adopt: &[(usize, usize)],
    ) -> io::Result<&'static Tracker> {
        let mut specs = vec![RegionSpec {
            addr: fixed_addr,
            len,
            first_page: 0,
            adopt: false,
            logged: true,
            tracked: true,
        }];
        let mut next = len / PAGE;
        for &(addr, size) in adopt {
            specs.push(RegionSpec {
                addr: Some(addr),
                len: size,
                first_page: next,
                adopt: true,
                logged: false,
                tracked: true,
            });
            next += size / PAGE;
        }
        Self::install_regions(&specs)
    }

    /// Installs a tracker over `specs`: the first is the persistent heap (logged, at page 0);
    /// the others follow in ascending page order.
    pub fn install_regions(specs: &[RegionSpec]) -> io::Result<&'static Tracker> {
        assert!(
            !specs.is_empty() && specs.len() <= MAX_REGIONS,
            "1 to {MAX_REGIONS} regions"
        );
        assert!(
            specs[0].first_page == 0 && specs[0].logged,
            "the first region is the heap"
        );
        for pair in specs.windows(2) {
            assert!(
                pair[0].first_page + pair[0].len / PAGE <= pair[1].first_page,
                "regions overlap or are out of order"
            );
        }
        for spec in specs {
            assert!(
                spec.addr.is_none_or(|addr| addr.is_multiple_of(PAGE)),
                "region at {:?} is not page-aligned",
                spec.addr
            );
        }
        let last = specs.last().expect("non-empty");
        let pages = last.first_page + last.len / PAGE;
        assert!(pages <= u32::MAX as usize / 2, "tracked space too large");
        if Self::active().is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a tracker is installed",
            ));
        }
        let empty = Region {
            private: ptr::null_mut(),
            shared: ptr::null_mut(),
            len: 0,
            first_page: 0,
            fd: -1,
            logged: false,
        };
        let mut regions = [empty; MAX_REGIONS];
        let tracked: [std::sync::atomic::AtomicBool; MAX_REGIONS] = Default::default();
        for (i, spec) in specs.iter().enumerate() {
            regions[i] = make_region(spec)?;
            tracked[i].store(spec.tracked || spec.logged, Ordering::Relaxed);
        }
        let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        let twins = map(
            None,
            pages * PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            anon,
            -1,
        )?;
        let tracker = Box::leak(Box::new(Tracker {
            fd: regions[0].fd,
            pages,
            regions,
            region_count: specs.len(),
            tracked,
            twins,
            twin_slot: list(pages),
            twins_ready: AtomicUsize::new(0),
            dirty_bits: bitmap(pages),
            dirty: list(pages),
            dirty_count: AtomicUsize::new(0),
            kept: PageSet::new(pages),
            changed_bits: bitmap(pages),
            idle: zeroed_atomics(pages),
            log: PublishLog::map()?,
            writer: AtomicUsize::new(0),
            seen: zeroed_atomics(RINGS),
            seen_total: AtomicU64::new(0),
            scratch: Mutex::default(),
            faults: AtomicU64::new(0),
            fault_nanos: AtomicU64::new(0),
            window_end: AtomicUsize::new(usize::MAX),
            window: AtomicUsize::new(1),
        }));
        if ACTIVE
            .compare_exchange(
                ptr::null_mut(),
                tracker,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "a tracker is installed",
            ));
        }
        install_handler()?;
        Ok(tracker)
    }

    /// Turns tracking of the unlogged regions on or off. Untracked, the private view is the
    /// shared mapping itself: writes need no faults, twins or merges, they are visible to
    /// other processes at once, and the kernel can write into the memory. Turning tracking
    /// off requires that no page of those regions is dirty; their kept copies are dropped
    /// with the mapping.
    pub fn set_tracking(&self, on: bool) -> io::Result<()> {
        for (index, region) in self.regions[..self.region_count].iter().enumerate() {
            if region.logged || self.tracked[index].load(Ordering::Relaxed) == on {
                continue;
            }
            let pages = region.first_page..region.first_page + region.len / PAGE;
            if !on {
                assert!(
                    !self.dirty_pages().iter().any(|page| pages.contains(page)),
                    "untracking a region with unmerged writes"
                );
                self.forget_kept(&pages);
            }
            remap_view(region.private, region.len, region.fd, on)?;
            self.tracked[index].store(on, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Removes the pages in `range` from the kept set (their mapping is being replaced).
    fn forget_kept(&self, range: &std::ops::Range<usize>) {
        for page in range.clone() {
            self.kept.remove(page);
        }
    }

    /// Whether runs of global page `page` belong to the redo log (else only published).
    pub fn is_logged(&self, page: usize) -> bool {
        self.region_of_page(page).logged
    }

    /// The private view's address of global offset `offset` (for allocators over a region).
    pub fn private_addr(&self, offset: usize) -> *mut u8 {
        self.addresses(offset).0
    }

    /// Global page number of the first page of the region whose private view starts at
    /// `addr`, and its length; `None` if no region starts there.
    pub fn region_at(&self, addr: usize) -> Option<(usize, usize)> {
        self.regions[..self.region_count]
            .iter()
            .find(|region| region.private as usize == addr)
            .map(|region| (region.first_page, region.len))
    }

    /// The region holding global page `page`. The heap (region 0, from page 0) is checked
    /// first: nearly every page a merge, publish or rebase visits is a heap page.
    fn region_of_page(&self, page: usize) -> &Region {
        let heap = &self.regions[0];
        if page < heap.len / PAGE {
            return heap;
        }
        self.regions[..self.region_count]
            .iter()
            .rev()
            .find(|region| region.first_page <= page)
            .filter(|region| page < region.first_page + region.len / PAGE)
            .unwrap_or_else(|| panic!("page {page} outside every tracked region"))
    }

    /// Private and shared addresses of global offset `offset` (which must not cross a page
    /// boundary together with the length the caller uses).
    fn addresses(&self, offset: usize) -> (*mut u8, *mut u8) {
        let region = self.region_of_page(offset / PAGE);
        let local = offset - region.first_page * PAGE;
        // SAFETY: `local < region.len`, so both are inside their mappings.
        unsafe { (region.private.add(local), region.shared.add(local)) }
    }

    /// Sorted `pages` as `(first, count)` runs, never across a region's start.
    fn runs<'a>(&'a self, pages: &'a [usize]) -> impl Iterator<Item = (usize, usize)> + 'a {
        let starts = &self.regions[..self.region_count];
        runs_of_pages_in(pages, move |page| {
            starts.iter().any(|region| region.first_page == page)
        })
    }

    /// For sorted `pages`: per region holding any, the `(first, count)` range from its first
    /// to its last page in `pages`.
    fn spans_per_region<'a>(
        &'a self,
        pages: &'a [usize],
    ) -> impl Iterator<Item = (usize, usize)> + 'a {
        self.regions[..self.region_count]
            .iter()
            .filter_map(move |region| {
                let end = region.first_page + region.len / PAGE;
                let inside = &pages[pages.partition_point(|&page| page < region.first_page)
                    ..pages.partition_point(|&page| page < end)];
                Some((*inside.first()?, *inside.last()? + 1 - inside.first()?))
            })
    }

    /// The buffers of catch-up and reset.
    fn scratch(&self) -> MutexGuard<'_, Scratch> {
        self.scratch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pages of the heap (region 0); global pages from here on belong to adopted ranges.
    pub fn heap_pages(&self) -> usize {
        self.regions[0].len / PAGE
    }

    /// Makes every tracked page overlapping `[addr, addr + len)` writable for the kernel
    /// (a system call that writes into it would otherwise fail with `EFAULT` instead of
    /// faulting): touches one byte per page, so the fault handler runs as for a program write
    /// and the page is dirty, with its twin, for the rest of the interval. Untracked memory is
    /// left alone.
    pub fn touch_for_kernel(&self, addr: usize, len: usize) {
        if len == 0 {
            return;
        }
        let end = addr.saturating_add(len);
        for (index, region) in self.regions[..self.region_count].iter().enumerate() {
            if !self.tracked[index].load(Ordering::Relaxed) {
                continue;
            }
            let base = region.private as usize;
            let start = addr.max(base);
            let stop = end.min(base + region.len);
            let mut page = start / PAGE * PAGE;
            while page < stop {
                // The aligned word holding the range's first byte of this page (in the page).
                let at = (page.max(start) & !7) as *mut u8;
                // SAFETY: `at` is an aligned word of the region's private mapping (always
                // readable); the no-op write goes through the fault handler if the page is
                // write-protected. The calling thread is the process's only thread.
                unsafe { make_private(at) };
                page += PAGE;
            }
        }
    }

    /// The process's tracker, if installed.
    pub fn active() -> Option<&'static Tracker> {
        let tracker = ACTIVE.load(Ordering::Acquire);
        // SAFETY: ACTIVE only ever holds null or a leaked (never freed) tracker.
        unsafe { tracker.as_ref() }
    }

    /// Bytes of global page space (every region lies below).
    pub fn len(&self) -> usize {
        self.pages * PAGE
    }

    /// Whether the tracker covers nothing (never).
    pub fn is_empty(&self) -> bool {
        self.pages == 0
    }

    /// Start of the heap's private view (where the program sees the heap).
    pub fn private_base(&self) -> *mut u8 {
        self.regions[0].private
    }

    /// The heap file's descriptor.
    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// Write faults taken so far.
    pub fn faults(&self) -> u64 {
        self.faults.load(Ordering::Relaxed)
    }

    /// Nanoseconds spent in the fault handler so far (0 unless the profile is on).
    pub fn fault_nanos(&self) -> u64 {
        self.fault_nanos.load(Ordering::Relaxed)
    }

    /// Pages written in the current interval, in fault order.
    pub fn dirty_pages(&self) -> Vec<usize> {
        let count = self.dirty_count.load(Ordering::Acquire);
        (0..count)
            .map(|i| self.dirty[i].load(Ordering::Relaxed) as usize)
            .collect()
    }

    /// [`Tracker::dirty_pages`] into `pages` (emptied first; its allocation is reused).
    pub fn dirty_pages_into(&self, pages: &mut Vec<usize>) {
        pages.clear();
        let count = self.dirty_count.load(Ordering::Acquire);
        pages.extend((0..count).map(|i| self.dirty[i].load(Ordering::Relaxed) as usize));
    }

    /// Appends the runs this process changed in dirty page `page` (page-relative).
    pub fn diff_page(&self, page: usize, out: &mut Vec<Span>) {
        diff::spans(self.private_page(page), self.twin_page(page), out);
    }

    /// The private view of `page`, which must be dirty (private to this process): another
    /// page may change under the caller as other processes merge, which a `&[u8]` must
    /// not, so a page that is not dirty panics (this is a safe function).
    pub fn private_page(&self, page: usize) -> &[u8] {
        assert!(is_set(&self.dirty_bits, page), "page {page} is not dirty");
        let (private, _) = self.addresses(page * PAGE);
        // SAFETY: a whole page of a private mapping, which is always readable; the page is
        // dirty (checked above): this process's own copy, which no other process changes,
        // and which the program's handlers do not write while the runtime holds the slice
        // (merges hold them off, `runtime::signals::HandlersHeldOff`).
        unsafe { std::slice::from_raw_parts(private, PAGE) }
    }

    fn twin_page(&self, page: usize) -> &[u8] {
        assert!(is_set(&self.dirty_bits, page), "page {page} has no twin");
        // SAFETY: a dirty page's slot is below the dirty count, so in bounds of the twin
        // mapping, which only this process writes (in the fault handler, never concurrently
        // with this read on a single-threaded process).
        unsafe { std::slice::from_raw_parts(self.twin_ptr(page), PAGE) }
    }

    /// The twin of dirty page `page`.
    fn twin_ptr(&self, page: usize) -> *mut u8 {
        let slot = self.twin_slot[page].load(Ordering::Relaxed) as usize;
        // SAFETY: slots are below the page count, the twin mapping's size in pages.
        unsafe { self.twins.add(slot * PAGE) }
    }

    /// Makes sure twin slots `..upto` are mapped writable, populating them in batches (one
    /// system call for many twins instead of a page fault each). Async-signal-safe.
    fn prepare_twins(&self, upto: usize) {
        let ready = self.twins_ready.load(Ordering::Relaxed);
        if upto <= ready {
            return;
        }
        let next = upto.max(ready + TWIN_BATCH).min(self.pages);
        if POPULATE_WRITE.load(Ordering::Relaxed) {
            // SAFETY: slots `ready..next` lie inside the twin mapping; populating changes no
            // byte. A failure only leaves the pages to fault on first use.
            unsafe {
                libc::madvise(
                    self.twins.add(ready * PAGE).cast(),
                    (next - ready) * PAGE,
                    libc::MADV_POPULATE_WRITE,
                );
            }
        }
        self.twins_ready.store(next, Ordering::Relaxed);
    }

    /// In a process just forked: its twin slots are shared copy-on-write with the parent's,
    /// so they are populated (copied) again in batches rather than faulted one by one.
    pub fn after_fork(&self) {
        self.twins_ready.store(0, Ordering::Relaxed);
        self.faults.store(0, Ordering::Relaxed);
        self.fault_nanos.store(0, Ordering::Relaxed);
    }

    /// Publishes dirty page `page`: copies every byte where the private page differs from its
    /// twin — exactly the bytes of [`Tracker::diff_page`]'s runs — into the shared view, each
    /// aligned 8-byte word in one store as [`Tracker::publish`] does, in one pass over the
    /// page (no runs are built; a page of scattered small changes, such as the low bytes of
    /// every integer of an array, would otherwise cost one call and one compare-and-swap per
    /// run). Returns whether any byte was published; if so, the page is logged for the other
    /// processes ([`Tracker::catch_up`]). `page` is dirty. Other processes may publish their
    /// own bytes of the same page at the same moment (sections under other locks, and the
    /// main process writing the unlogged regions in place): a word changed in part is
    /// merged by a compare-and-swap, so both keep their bytes.
    pub fn publish_page(&self, page: usize) -> bool {
        let (private, shared) = self.addresses(page * PAGE);
        assert!(is_set(&self.dirty_bits, page), "page {page} has no twin");
        let twin = self.twin_ptr(page);
        // SAFETY: whole pages of the region's private view (dirty: a private copy only this
        // thread writes), of its twin slot (this process's own), and of the region's
        // writable shared view; the three are distinct mappings and page-aligned.
        let lines = unsafe { publish_changed_words(private, twin, shared) };
        self.note_published(page, lines)
    }

    /// After publishing the `lines` of dirty page `page`: marks it changed in this interval
    /// and logs it for the other processes, if any line was written. Returns whether one was.
    fn note_published(&self, page: usize, lines: u64) -> bool {
        if lines == 0 {
            return false;
        }
        test_and_set(&self.changed_bits, page);
        self.log_published(page as u32, lines);
        true
    }

    /// [`Tracker::publish_page`] for a page whose changes are already known as `spans`
    /// (its diff against the twin): only the words they cover are visited. Returns whether
    /// any byte was published.
    pub fn publish_spans(&self, page: usize, spans: &[Span]) -> bool {
        if spans.is_empty() {
            return false;
        }
        let (private, shared) = self.addresses(page * PAGE);
        assert!(is_set(&self.dirty_bits, page), "page {page} has no twin");
        let twin = self.twin_ptr(page);
        let mut lines = 0;
        for span in spans {
            assert!(span.start + span.len <= PAGE, "span past the page");
            let (first, last) = (span.start / 8, (span.start + span.len).div_ceil(8));
            // SAFETY: words `first..last` of the page lie inside it; the three pages are as
            // in `publish_page` (own private copy and twin, the region's shared view).
            lines |= unsafe { publish_word_range(private, twin, shared, first, last) };
        }
        self.note_published(page, lines)
    }

    /// Writes `bytes` straight into the shared view at `offset` (initialisation from the
    /// home image, before any tracked access).
    pub fn load_shared(&self, offset: usize, bytes: &[u8]) {
        let heap = &self.regions[0];
        assert!(offset + bytes.len() <= heap.len, "load past the heap");
        // SAFETY: in bounds of the heap's writable shared mapping; `bytes` is ordinary memory.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), heap.shared.add(offset), bytes.len()) }
    }

    /// The tracked region holding `addr` in its private view: `(region index, region)`.
    fn tracked_region_of(&self, addr: usize) -> Option<&Region> {
        self.regions[..self.region_count]
            .iter()
            .enumerate()
            .find(|(index, region)| {
                let base = region.private as usize;
                addr >= base
                    && addr < base + region.len
                    && self.tracked[*index].load(Ordering::Relaxed)
            })
            .map(|(_, region)| region)
    }

    /// Whether any page overlapping `[addr, addr + len)` of a tracked region is dirty (this
    /// process may have unmerged writes there).
    pub fn any_dirty(&self, addr: usize, len: usize) -> bool {
        let Some(region) = self.tracked_region_of(addr) else {
            return false;
        };
        let base = region.private as usize;
        let end = (addr + len.max(1)).min(base + region.len);
        ((addr - base) / PAGE..(end - base).div_ceil(PAGE))
            .any(|local| is_set(&self.dirty_bits, region.first_page + local))
    }

    /// Makes this process's view of `[addr, addr + len)` (memory it was just handed by an
    /// allocator) equal to the shared view: a dirty page gets the range's shared bytes in both
    /// its private copy and its twin (so later writes diff against the current state, and the
    /// stale bytes of a copy made before another process merged there are never published);
    /// a kept copy is dropped. Clean pages map the shared file already.
    pub fn refresh_range(&self, addr: usize, len: usize) -> io::Result<()> {
        let Some(region) = self.tracked_region_of(addr) else {
            return Ok(());
        };
        let base = region.private as usize;
        let end = (addr + len).min(base + region.len);
        let mut at = addr;
        while at < end {
            let local = (at - base) / PAGE;
            let page = region.first_page + local;
            let stop = end.min(base + (local + 1) * PAGE);
            let offset = at - base;
            if is_set(&self.dirty_bits, page) {
                // SAFETY: `[offset, offset + stop - at)` lies in one page of the region's
                // mappings; the page is dirty, so its private copy is writable; the twin
                // mapping covers every page; the three ranges are distinct mappings.
                unsafe {
                    let shared = region.shared.add(offset);
                    ptr::copy_nonoverlapping(shared, region.private.add(offset), stop - at);
                    let twin = self.twin_ptr(page).add(offset % PAGE);
                    ptr::copy_nonoverlapping(shared, twin, stop - at);
                }
            } else if self.kept.remove(page) {
                self.discard(page, 1)?;
            }
            at = stop;
        }
        Ok(())
    }

    /// Reads the shared view of any region at global offset `offset` (page by page).
    pub fn read_shared_at(&self, offset: usize, dst: &mut [u8]) {
        let mut done = 0;
        while done < dst.len() {
            let at = offset + done;
            let len = (PAGE - at % PAGE).min(dst.len() - done);
            let (_, shared) = self.addresses(at);
            // SAFETY: within one page of a region's shared mapping (always readable).
            unsafe { ptr::copy_nonoverlapping(shared, dst[done..].as_mut_ptr(), len) };
            done += len;
        }
    }

    /// Writes the shared view of any region at global offset `offset` (initialisation from
    /// the home image, before any thread-process exists).
    pub fn write_shared_at(&self, offset: usize, bytes: &[u8]) {
        let mut done = 0;
        while done < bytes.len() {
            let at = offset + done;
            let len = (PAGE - at % PAGE).min(bytes.len() - done);
            let (_, shared) = self.addresses(at);
            // SAFETY: within one page of a region's writable shared mapping.
            unsafe { ptr::copy_nonoverlapping(bytes[done..].as_ptr(), shared, len) };
            done += len;
        }
    }

    /// Reads the shared view (the merged state) at `offset`.
    pub fn read_shared(&self, offset: usize, dst: &mut [u8]) {
        let heap = &self.regions[0];
        assert!(offset + dst.len() <= heap.len, "read past the heap");
        // SAFETY: in bounds of the heap's shared mapping. Another process may publish into
        // these bytes during the copy (word-sized atomic stores); the bytes copied are then
        // a mix of old and new values, which callers (tests, with no concurrent writer) do
        // not rely on.
        unsafe { ptr::copy_nonoverlapping(heap.shared.add(offset), dst.as_mut_ptr(), dst.len()) }
    }

    /// Ends an interval, after publishing. With `drop_private`, every dirty page is
    /// write-protected again and every private copy (this interval's and any kept earlier)
    /// discarded, so the next access sees the shared view. Without it, the pages published
    /// in this interval stay *hot*: writable, with their twins refreshed to their current
    /// contents, so that the next interval's writes to them take no fault and diff as
    /// exactly the new changes (up to [`HOT_MAX`] of them; a hot page unchanged for
    /// [`HOT_IDLE`] intervals cools down). The others are write-protected and kept: a copy
    /// equals the shared view plus this process's own merged changes, and stays valid until
    /// another process publishes into its page (the next [`Tracker::catch_up`] drops it
    /// then; a publish made while this interval ran is still in that process's ring).
    pub fn reset(&self, drop_private: bool) -> io::Result<()> {
        if !drop_private && self.all_stay_hot() {
            return Ok(());
        }
        let mut scratch = self.scratch();
        let Scratch {
            pages: cold,
            hot,
            candidates,
            ..
        } = &mut *scratch;
        cold.clear();
        hot.clear();
        let count = self.dirty_count.load(Ordering::Acquire);
        let dirty = (0..count).map(|i| self.dirty[i].load(Ordering::Relaxed) as usize);
        if drop_private {
            cold.extend(dirty);
        } else {
            self.sort_hot(dirty, hot, cold, candidates);
        }
        cold.sort_unstable();
        // In a tracked region exactly the dirty pages are writable, so with no hot page
        // left, one call per region, from its first dirty page to its last, write-protects
        // them all (a call per run of pages would split and merge the mapping once for every
        // scattered page); otherwise one call per run of cold pages, leaving the hot ones.
        if hot.is_empty() {
            for (first, count) in self.spans_per_region(cold) {
                self.protect(first, count, libc::PROT_READ)?;
            }
        } else {
            for (first, count) in self.runs(cold) {
                self.protect(first, count, libc::PROT_READ)?;
            }
        }
        for &page in cold.iter() {
            clear(&self.dirty_bits, page);
            clear(&self.changed_bits, page);
            self.idle[page].store(0, Ordering::Relaxed);
            if drop_private {
                self.kept.remove(page);
            } else {
                self.kept.insert(page);
            }
        }
        self.retwin_hot(hot);
        if drop_private {
            for (first, count) in self.runs(cold) {
                self.discard(first, count)?;
            }
            drop(scratch);
            self.drop_kept()?;
        }
        Ok(())
    }

    /// The common end of an interval in a lock-heavy program: every dirty page stays hot
    /// (at most [`HOT_MAX`] of them, none unchanged for [`HOT_IDLE`] intervals). Then the
    /// dirty list, the twin slots and the protections stay exactly as they are (what
    /// [`Tracker::sort_hot`] and [`Tracker::retwin_hot`] would leave); only each page's idle
    /// count advances and its changed bit clears. Returns false, changing nothing, when a
    /// page would cool down.
    fn all_stay_hot(&self) -> bool {
        let count = self.dirty_count.load(Ordering::Acquire);
        if count > HOT_MAX {
            return false;
        }
        let dirty = || (0..count).map(|i| self.dirty[i].load(Ordering::Relaxed) as usize);
        let idle_after = |page: usize| {
            if is_set(&self.changed_bits, page) {
                0
            } else {
                self.idle[page].load(Ordering::Relaxed).saturating_add(1)
            }
        };
        if dirty().any(|page| idle_after(page) >= HOT_IDLE) {
            return false;
        }
        for page in dirty() {
            self.idle[page].store(idle_after(page), Ordering::Relaxed);
            clear(&self.changed_bits, page);
        }
        true
    }

    /// Splits this interval's dirty pages into those that stay hot (appended to `hot`) and
    /// those that cool down (to `cold`), updating how long each has gone unchanged. Of the
    /// pages unchanged for fewer than [`HOT_IDLE`] intervals, the [`HOT_MAX`] changed most
    /// recently stay hot (a page a fault window just made writable is kept over one idle for
    /// many intervals).
    fn sort_hot(
        &self,
        pages: impl Iterator<Item = usize>,
        hot: &mut Vec<usize>,
        cold: &mut Vec<usize>,
        candidates: &mut Vec<(u8, usize)>,
    ) {
        candidates.clear();
        for page in pages {
            let idle = if is_set(&self.changed_bits, page) {
                0
            } else {
                self.idle[page].load(Ordering::Relaxed).saturating_add(1)
            };
            self.idle[page].store(idle, Ordering::Relaxed);
            if idle < HOT_IDLE {
                candidates.push((idle, page));
            } else {
                cold.push(page);
            }
        }
        if candidates.len() > HOT_MAX {
            candidates.sort_by_key(|&(idle, _)| idle);
            cold.extend(candidates.drain(HOT_MAX..).map(|(_, page)| page));
        }
        hot.extend(candidates.iter().map(|&(_, page)| page));
    }

    /// Makes `hot` the new dirty list, each page's twin at its new position's slot. Their
    /// twins already equal their private pages: publishing refreshed the changed words, and
    /// an unchanged page diffs as nothing. A hot page keeps its position when it lies within
    /// the new list; only those beyond it move, each into a position a cooled page left
    /// (its twin copied there), so cooling one page copies at most one twin.
    fn retwin_hot(&self, hot: &[usize]) {
        let count = hot.len();
        assert!(count <= HOT_MAX, "at most HOT_MAX pages stay hot");
        let mut placed: [Option<usize>; HOT_MAX] = [None; HOT_MAX];
        let (mut movers, mut moving) = ([0usize; HOT_MAX], 0);
        for &page in hot {
            clear(&self.changed_bits, page);
            let old = self.twin_slot[page].load(Ordering::Relaxed) as usize;
            if old < count {
                placed[old] = Some(page);
            } else {
                movers[moving] = page;
                moving += 1;
            }
        }
        let (mut vacant, mut vacancies) = ([0usize; HOT_MAX], 0);
        for slot in (0..count).filter(|&slot| placed[slot].is_none()) {
            vacant[vacancies] = slot;
            vacancies += 1;
        }
        for (&page, &slot) in movers[..moving].iter().zip(&vacant[..vacancies]) {
            let old = self.twin_slot[page].load(Ordering::Relaxed) as usize;
            // SAFETY: twin slots `old` and `slot` (< `count` <= `old`) lie in the twin mapping
            // and are mapped (below the old dirty count); distinct slots, this process's own;
            // the page that held `slot` cooled down, so its twin is no longer needed.
            unsafe {
                ptr::copy_nonoverlapping(
                    self.twins.add(old * PAGE),
                    self.twins.add(slot * PAGE),
                    PAGE,
                )
            };
            self.twin_slot[page].store(slot as u32, Ordering::Relaxed);
            placed[slot] = Some(page);
        }
        for (slot, page) in placed[..count].iter().enumerate() {
            let page = page.expect("every position of the new dirty list is filled");
            self.dirty[slot].store(page as u32, Ordering::Relaxed);
        }
        self.dirty_count.store(count, Ordering::Release);
    }

    /// Discards every private copy kept by `reset(false)`, except those written again in the
    /// current interval: they hold writes not merged yet, and the next `reset` decides.
    pub fn drop_kept(&self) -> io::Result<()> {
        let mut scratch = self.scratch();
        let pages = &mut scratch.pages;
        pages.clear();
        self.kept.take_all(pages);
        pages.retain(|&page| !is_set(&self.dirty_bits, page));
        for (first, count) in self.runs(pages) {
            self.discard(first, count)?;
        }
        Ok(())
    }

    /// Makes this process's thread slot `slot` its publish ring (a process just forked).
    pub fn set_writer(&self, slot: usize) {
        assert!(slot < RINGS, "thread slot {slot} has no publish ring");
        self.writer.store(slot, Ordering::Relaxed);
    }

    /// Takes into account what other processes published since this process last did: a
    /// kept copy of a page they published into is dropped (the next access reads the shared
    /// view), and a dirty page they published into is *rebased* line by line: in each 64-byte
    /// line they wrote, the bytes this process has not changed are refreshed from the shared
    /// view, in its private copy and its twin, so its next reads see the others' merged bytes
    /// and its diff still holds only its own. Called when the process synchronises (after an
    /// acquire, a wake-up, a join); costs one load when nobody published. A process that fell
    /// a whole ring behind, or a publish of every page ([`Tracker::publish_everything`]),
    /// drops every kept copy and rebases every dirty page whole.
    ///
    /// Why rebasing only the logged lines misses nothing. Invariant: for a dirty page, every
    /// byte of the shared page that changed since this process's private copy and twin last
    /// matched it (the copy taken at the fault, or the last rebase of that line) lies in a
    /// line named by an entry this process has not read yet. The shared view changes only by
    /// publishes, and each publish writes its bytes first and then logs the page with the
    /// mask of every line holding a word it wrote (`publish_word_range` sets the bit of each
    /// word it stores); a writer that may change any byte without publishing (the main
    /// process writing unlogged regions in place) logs "every page, every line". An entry
    /// whose bytes landed before the fault's copy is read later and only rebases a line
    /// that already matches, which changes nothing; one whose bytes landed after is still
    /// unread. So the union of the masks read here covers every changed line; a ring read
    /// past its capacity (entries overwritten) falls back to every line of every page.
    pub fn catch_up(&self) -> io::Result<()> {
        let total = self.log.total.load(Ordering::Acquire);
        if total == self.seen_total.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut scratch = self.scratch();
        let Scratch { unseen, pages, .. } = &mut *scratch;
        unseen.clear();
        let everything = self.unseen_pages(unseen);
        self.seen_total.store(total, Ordering::Relaxed);
        if everything {
            for slot in 0..self.dirty_count.load(Ordering::Acquire) {
                self.rebase(self.dirty[slot].load(Ordering::Relaxed) as usize, ALL_LINES);
            }
            drop(scratch);
            return self.drop_kept();
        }
        // Entry by entry, unsorted (a catch-up reads a few entries; sorting them cost as
        // much as the rest of it): a page named twice is rebased twice, each time in the
        // lines of one entry, which is the rebase of their union (lines are independent,
        // and each takes the shared view's current bytes).
        pages.clear();
        for &(page, lines) in unseen.iter() {
            let page = page as usize;
            if page >= self.pages {
                continue;
            }
            if is_set(&self.dirty_bits, page) {
                self.rebase(page, lines);
            } else if self.kept.remove(page) {
                pages.push(page);
            }
        }
        pages.sort_unstable();
        for (first, count) in self.runs(pages) {
            self.discard(first, count)?;
        }
        Ok(())
    }

    /// Appends to `unseen` the `(page, lines)` entries of the other processes' rings beyond
    /// what this process has seen (their positions advance); returns whether any entry
    /// means every page or was overwritten before it was read.
    fn unseen_pages(&self, unseen: &mut Vec<(u32, u64)>) -> bool {
        let mine = self.writer.load(Ordering::Relaxed);
        let mut everything = false;
        let used = self.log.rings_used.load(Ordering::Acquire);
        for (index, ring) in self.log.rings[..used].iter().enumerate() {
            let published = ring.published.load(Ordering::Acquire);
            let seen = self.seen[index].load(Ordering::Relaxed);
            if index == mine || published == seen {
                continue;
            }
            self.seen[index].store(published, Ordering::Relaxed);
            if everything || published - seen > RING_ENTRIES as u64 {
                everything = true;
                continue;
            }
            for at in seen..published {
                let slot = (at % RING_ENTRIES as u64) as usize;
                let page = ring.pages[slot].load(Ordering::Relaxed);
                everything |= page == ALL_PAGES;
                unseen.push((page, ring.lines[slot].load(Ordering::Relaxed)));
            }
            // Entries overwritten while they were read: a writer reserves its slot (and
            // fences) before writing it.
            fence(Ordering::Acquire);
            everything |= ring.reserved.load(Ordering::Relaxed) - seen > RING_ENTRIES as u64;
        }
        everything
    }

    /// Refreshes the `lines` of dirty page `page` from the shared view where this process
    /// has not changed them (see [`Tracker::catch_up`]).
    fn rebase(&self, page: usize, lines: u64) {
        let (private, shared) = self.addresses(page * PAGE);
        let twin = self.twin_ptr(page);
        // SAFETY: whole pages: the private copy (dirty, so writable and this process's own),
        // its twin slot (below the dirty count), and the region's shared view (readable);
        // three distinct mappings, page-aligned. Only this single-threaded process touches
        // the first two; the shared page is read word by word atomically.
        unsafe {
            if lines == ALL_LINES {
                rebase_words(private, twin, shared);
            } else {
                rebase_lines(private, twin, shared, lines);
            }
        }
    }

    /// Records that this process published into the `lines` of `page` (`ALL_PAGES`:
    /// anywhere), in its own ring (one writer). Called after the bytes are in the shared
    /// view, so a reader that sees the entry (acquiring `published`) sees them.
    fn log_published(&self, page: u32, lines: u64) {
        let writer = self.writer.load(Ordering::Relaxed);
        let ring = &self.log.rings[writer];
        if self.log.rings_used.load(Ordering::Relaxed) <= writer {
            self.log.rings_used.fetch_max(writer + 1, Ordering::AcqRel);
        }
        let at = ring.reserved.load(Ordering::Relaxed);
        ring.reserved.store(at + 1, Ordering::Relaxed);
        // A reader that sees the entry below also sees the reservation (and so knows when
        // the slot it read was overwritten).
        fence(Ordering::Release);
        let slot = (at % RING_ENTRIES as u64) as usize;
        ring.pages[slot].store(page, Ordering::Relaxed);
        ring.lines[slot].store(lines, Ordering::Relaxed);
        ring.published.store(at + 1, Ordering::Release);
        self.log.total.fetch_add(1, Ordering::AcqRel);
    }

    /// Records that this process may have changed any page of the shared views without
    /// publishing (the runtime's main process writes the unlogged regions in place): every
    /// other process drops its kept copies, and rebases its dirty pages, when it next
    /// synchronises.
    pub fn publish_everything(&self) {
        self.log_published(ALL_PAGES, ALL_LINES);
    }

    fn protect(&self, first: usize, count: usize, prot: i32) -> io::Result<()> {
        let (private, _) = self.addresses(first * PAGE);
        // SAFETY: the run lies in one region's private mapping (runs never cross regions).
        let rc = unsafe { libc::mprotect(private.cast(), count * PAGE, prot) };
        if rc != 0 {
            return os_error("mprotect of heap pages");
        }
        Ok(())
    }

    fn discard(&self, first: usize, count: usize) -> io::Result<()> {
        let (private, _) = self.addresses(first * PAGE);
        // SAFETY: the run lies in one region's private mapping; MADV_DONTNEED on a private
        // file mapping drops our copies, and later accesses read the file (the shared view).
        let rc = unsafe { libc::madvise(private.cast(), count * PAGE, libc::MADV_DONTNEED) };
        if rc != 0 {
            return os_error("madvise(MADV_DONTNEED) of heap pages");
        }
        Ok(())
    }

    /// Handles a write fault at `addr` if it lies in the private view. Returns false for
    /// faults that are not ours (or a fault on a page already dirty: a real error).
    fn on_fault(&self, addr: usize) -> bool {
        let Some((index, region)) =
            self.regions[..self.region_count]
                .iter()
                .enumerate()
                .find(|(_, region)| {
                    let base = region.private as usize;
                    addr >= base && addr < base + region.len
                })
        else {
            return false;
        };
        if !self.tracked[index].load(Ordering::Relaxed) {
            return false;
        }
        let local = (addr - region.private as usize) / PAGE;
        let page = region.first_page + local;
        if test_and_set(&self.dirty_bits, page) {
            return false;
        }
        // Sequential writers (filling an array) take one fault per window of pages instead of
        // one per page: after a fault right behind the previous window, the window doubles
        // (up to MAX_WINDOW), and every page of it is made writable, copied and twinned at
        // once. A page of the window that is never written costs a copy and an empty diff.
        let window = if page == self.window_end.load(Ordering::Relaxed) {
            (self.window.load(Ordering::Relaxed) * 2).min(MAX_WINDOW)
        } else {
            1
        };
        let region_end = region.first_page + region.len / PAGE;
        let mut count = 1;
        while count < window && page + count < region_end && !is_set(&self.dirty_bits, page + count)
        {
            test_and_set(&self.dirty_bits, page + count);
            count += 1;
        }
        self.window.store(window, Ordering::Relaxed);
        self.window_end.store(page + count, Ordering::Relaxed);
        // SAFETY: the pages lie inside the region's private mapping. mprotect and madvise
        // are system calls; `MADV_POPULATE_WRITE` (or, without it, the no-op atomic write of
        // each page's first word, now writable and page-aligned) makes the kernel give this
        // process its private copies at once, so each twin copied next is exactly the private
        // page the program's writes will land on.
        unsafe {
            let start = region.private.add(local * PAGE);
            if libc::mprotect(
                start.cast(),
                count * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
            ) != 0
            {
                return false;
            }
            // One system call makes the whole window private, where a write per page would
            // take a page fault each (and a read fault mapping the file's pages first, which
            // the copies then replace). The kernel copies each page as a write fault would.
            let populated = POPULATE_WRITE.load(Ordering::Relaxed)
                && libc::madvise(start.cast(), count * PAGE, libc::MADV_POPULATE_WRITE) == 0;
            let slot = self.dirty_count.load(Ordering::Relaxed);
            self.prepare_twins(slot + count);
            for i in 0..count {
                let at = start.add(i * PAGE);
                if !populated {
                    make_private(at);
                }
                self.twin_slot[page + i].store((slot + i) as u32, Ordering::Relaxed);
                ptr::copy_nonoverlapping(at, self.twins.add((slot + i) * PAGE), PAGE);
            }
        }
        let slot = self.dirty_count.load(Ordering::Relaxed);
        for i in 0..count {
            self.dirty[slot + i].store((page + i) as u32, Ordering::Relaxed);
        }
        self.dirty_count.store(slot + count, Ordering::Release);
        self.faults.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds (async-signal-safe: `clock_gettime`).
fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `now`; it is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Makes the kernel give this process its private copy of the copy-on-write page holding
/// `at` (an aligned word, writable) without changing any byte of it: a compare-and-swap of
/// the word with itself, repeated until it succeeds.
///
/// Its write faults before it reads, so the value it stores back is read from the fresh
/// private copy. A separate read and write back (what this replaces) is not enough: the
/// read sees the shared page, which another process may publish into before the write's
/// fault copies it, and the write then stores the value read before into the copy: a word
/// half old and half new in this process's view (and twin, so it is never corrected). That
/// tore the program's GOT slots (in the first word of the globals' page) and killed
/// thread-processes with `SIGSEGV` or `SIGTRAP` at a mixed-up jump target.
///
/// # Safety
/// `at` is 8-byte aligned, in a mapping this process may write; no other thread of this
/// process accesses the word meanwhile. Async-signal-safe (atomics only).
unsafe fn make_private(at: *mut u8) {
    debug_assert!((at as usize).is_multiple_of(8), "unaligned word {at:p}");
    // SAFETY: per the contract: aligned, mapped and writable, not accessed concurrently by
    // this process (other processes only write the shared page behind it).
    let word = unsafe { AtomicU64::from_ptr(at.cast::<u64>()) };
    let mut seen = word.load(Ordering::Relaxed);
    while let Err(now) =
        word.compare_exchange_weak(seen, seen, Ordering::Relaxed, Ordering::Relaxed)
    {
        seen = now;
    }
}

/// `0xff` in every byte where `x` has a non-zero byte, `0x00` elsewhere.
fn nonzero_bytes(x: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    // Bit 7 of each byte: set if its low 7 bits are non-zero (the sum cannot carry into the
    // next byte: 0x7f + 0x7f = 0xfe) or its own bit 7 is set.
    let high = (((x & LOW7) + LOW7) | x) & !LOW7;
    (high >> 7) * 0xff
}

/// Copies the bytes where `private` differs from `twin` (a page each) into `shared`, each
/// aligned word of `shared` in one store: a word changed in all 8 bytes by an atomic store,
/// one changed in part by a compare-and-swap that keeps its other bytes (other processes may
/// publish other bytes of the page at the same moment, and the main process writes the
/// unlogged regions in place). Readers of the shared view see each word as it was or as
/// published, never torn (a GOT slot of the program, rewritten by lazy binding in every
/// process, must never be seen half old, half new).
/// Each changed word is also written into `twin`, so afterwards the twin equals the private
/// page and the next diff holds only later writes. Returns the mask of the 64-byte lines
/// holding a changed word (0: no byte differed).
///
/// # Safety
/// The three pointers are page-aligned pages: `private` readable and not written meanwhile
/// by this process, `twin` readable and writable and this process's own, `shared`
/// writable; no overlap.
unsafe fn publish_changed_words(private: *const u8, twin: *mut u8, shared: *mut u8) -> u64 {
    // SAFETY: forwarded: every word of the three pages.
    unsafe { publish_word_range(private, twin, shared, 0, PAGE / 8) }
}

/// [`publish_changed_words`] over words `first..last` of the pages only.
///
/// # Safety
/// As [`publish_changed_words`]; `last <= PAGE / 8`.
unsafe fn publish_word_range(
    private: *const u8,
    twin: *mut u8,
    shared: *mut u8,
    first: usize,
    last: usize,
) -> u64 {
    let mut lines = 0;
    for index in first..last {
        // SAFETY: word `index` of two readable, aligned pages.
        let (mine, before) = unsafe {
            (
                private.cast::<u64>().add(index).read(),
                twin.cast::<u64>().add(index).read(),
            )
        };
        let changed = mine ^ before;
        if changed == 0 {
            continue;
        }
        lines |= 1u64 << (index * 8 / LINE);
        // SAFETY: word `index` of the twin page, writable and this process's own.
        unsafe { twin.cast::<u64>().add(index).write(mine) };
        // SAFETY: an aligned word of the writable shared page, only accessed atomically here.
        let word = unsafe { AtomicU64::from_ptr(shared.cast::<u64>().add(index)) };
        let mask = nonzero_bytes(changed);
        if mask == u64::MAX {
            word.store(mine, Ordering::Relaxed);
            continue;
        }
        let mut current = word.load(Ordering::Relaxed);
        while let Err(now) = word.compare_exchange_weak(
            current,
            (current & !mask) | (mine & mask),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            current = now;
        }
    }
    lines
}

/// Rebases a dirty page on the shared view: every byte this process has not changed (equal
/// in `private` and `twin`) takes the shared page's current value, in both `private` and
/// `twin`; changed bytes keep the private value and their old twin value, so the diff of
/// the two is still exactly this process's changes.
///
/// # Safety
/// The three pointers are page-aligned pages: `private` and `twin` readable and writable and
/// used by nothing else meanwhile, `shared` readable; no overlap.
unsafe fn rebase_words(private: *mut u8, twin: *mut u8, shared: *const u8) {
    // SAFETY: forwarded from the caller's contract (both pages readable, not written by
    // anyone else while the slices live).
    let unchanged = unsafe {
        std::slice::from_raw_parts(private, PAGE) == std::slice::from_raw_parts(twin, PAGE)
    };
    if unchanged {
        // SAFETY: forwarded from the caller's contract.
        unsafe { refresh_words(private, twin, shared) };
        return;
    }
    for index in 0..PAGE / 8 {
        // SAFETY: word `index` of the three pages of the caller's contract.
        unsafe { rebase_word(private, twin, shared, index) };
    }
}

/// [`rebase_words`] restricted to the 64-byte lines of `lines` (bit `i`: line `i`): the
/// other lines of `private` and `twin` are left as they are.
///
/// # Safety
/// As [`rebase_words`].
unsafe fn rebase_lines(private: *mut u8, twin: *mut u8, shared: *const u8, mut lines: u64) {
    const WORDS: usize = LINE / 8;
    while lines != 0 {
        let line = lines.trailing_zeros() as usize;
        lines &= lines - 1;
        let words = line * WORDS..(line + 1) * WORDS;
        // SAFETY: the line's words (< PAGE / 8: line < 64) of the caller's pages.
        if unsafe { line_unchanged(private, twin, line) } {
            for index in words {
                // SAFETY: as above.
                unsafe { refresh_word(private, twin, shared, index) };
            }
            continue;
        }
        for index in words {
            // SAFETY: word `index` (< PAGE / 8: line < 64) of the three pages of the
            // caller's contract.
            unsafe { rebase_word(private, twin, shared, index) };
        }
    }
}

/// Whether 64-byte line `line` is equal in `private` and `twin` (this process has not
/// changed it since its last merge or rebase, the usual case when it synchronises).
///
/// # Safety
/// As [`rebase_words`]; `line < PAGE / LINE`.
unsafe fn line_unchanged(private: *const u8, twin: *const u8, line: usize) -> bool {
    const { assert!(LINE == 64) };
    // SAFETY: one line inside both pages of the caller's contract.
    let (mine, before) = unsafe {
        (
            std::slice::from_raw_parts(private.add(line * LINE), LINE),
            std::slice::from_raw_parts(twin.add(line * LINE), LINE),
        )
    };
    !diff::block_differs(mine, before, 0)
}

/// [`rebase_word`] for a word equal in `private` and `twin`: both take the shared word.
///
/// # Safety
/// As [`rebase_word`].
unsafe fn refresh_word(private: *mut u8, twin: *mut u8, shared: *const u8, index: usize) {
    // SAFETY: word `index` of three aligned pages; the shared word is read atomically.
    unsafe {
        let current =
            AtomicU64::from_ptr(shared.cast::<u64>().add(index).cast_mut()).load(Ordering::Relaxed);
        private.cast::<u64>().add(index).write(current);
        twin.cast::<u64>().add(index).write(current);
    }
}

/// Rebases word `index`: its bytes equal in `private` and `twin` take the shared word's
/// value in both; the others keep their private value and their old twin value.
///
/// # Safety
/// As [`rebase_words`]; `index < PAGE / 8`.
unsafe fn rebase_word(private: *mut u8, twin: *mut u8, shared: *const u8, index: usize) {
    // SAFETY: word `index` of three aligned pages; the shared word is read atomically
    // (other processes publish into it).
    unsafe {
        let mine_at = private.cast::<u64>().add(index);
        let twin_at = twin.cast::<u64>().add(index);
        let current =
            AtomicU64::from_ptr(shared.cast::<u64>().add(index).cast_mut()).load(Ordering::Relaxed);
        let (mine, before) = (mine_at.read(), twin_at.read());
        let mask = nonzero_bytes(mine ^ before);
        mine_at.write((current & !mask) | (mine & mask));
        twin_at.write((current & !mask) | (before & mask));
    }
}

/// The common case of [`rebase_words`]: a hot page this process has not changed since its
/// last merge (private equal to twin) takes the shared page whole, in both. The shared words
/// are read atomically, as other processes may be publishing into them; the twin is copied
/// from the private page afterwards (both this process's own). A third of the lock-heavy
/// kernel's CPU time at 4 workers went to word-by-word rebases with masks before.
///
/// # Safety
/// As [`rebase_words`].
unsafe fn refresh_words(private: *mut u8, twin: *mut u8, shared: *const u8) {
    for index in 0..PAGE / 8 {
        // SAFETY: word `index` of two aligned pages; the shared word is read atomically.
        unsafe {
            let current = AtomicU64::from_ptr(shared.cast::<u64>().add(index).cast_mut())
                .load(Ordering::Relaxed);
            private.cast::<u64>().add(index).write(current);
        }
    }
    // SAFETY: two distinct page-sized buffers of this process (the caller's contract).
    unsafe { ptr::copy_nonoverlapping(private, twin, PAGE) };
}

/// Coalesces sorted, distinct page numbers into `(first, count)` runs, never across a
/// region start (`is_start`: whether a page is the first global page of a region).
fn runs_of_pages_in<'a>(
    pages: &'a [usize],
    is_start: impl Fn(usize) -> bool + 'a,
) -> impl Iterator<Item = (usize, usize)> + 'a {
    pages
        .chunk_by(move |&a, &b| b == a + 1 && !is_start(b))
        .map(|run| (run[0], run.len()))
}

/// A fresh zero-filled `MAP_SHARED | MAP_ANONYMOUS` mapping of `len` bytes, shared with every
/// process forked after it is made; untouched pages cost nothing (`MAP_NORESERVE`).
pub(crate) fn map_shared_zeroed(len: usize) -> io::Result<*mut u8> {
    map(
        None,
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
        -1,
    )
}

fn map(addr: Option<usize>, len: usize, prot: i32, flags: i32, fd: i32) -> io::Result<*mut u8> {
    let (hint, extra) = match addr {
        Some(addr) => (addr as *mut libc::c_void, libc::MAP_FIXED_NOREPLACE),
        None => (ptr::null_mut(), 0),
    };
    // SAFETY: a fresh mapping; MAP_FIXED_NOREPLACE never replaces an existing one.
    let got = unsafe { libc::mmap(hint, len, prot, flags | extra, fd, 0) };
    if got == libc::MAP_FAILED {
        return os_error(&format!("mmap of {len} bytes"));
    }
    if let Some(addr) = addr
        && got as usize != addr
    {
        // Old kernels ignore MAP_FIXED_NOREPLACE and treat the address as a hint.
        // SAFETY: unmapping the mapping just made.
        unsafe { libc::munmap(got, len) };
        return Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("heap address {addr:#x} is not available"),
        ));
    }
    Ok(got.cast())
}

extern "C" fn on_segv(signal: i32, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // The interrupted code may be about to read `errno`; the system calls below must not
    // change it.
    // SAFETY: `__errno_location` returns this thread's errno, valid for the thread's life.
    let errno = unsafe { libc::__errno_location() };
    // SAFETY: as above.
    let saved_errno = unsafe { *errno };
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let started = crate::profile::enabled().then(monotonic_ns);
    let handled = Tracker::active().is_some_and(|tracker| {
        let handled = tracker.on_fault(addr);
        if let Some(started) = started {
            tracker
                .fault_nanos
                .fetch_add(monotonic_ns().saturating_sub(started), Ordering::Relaxed);
        }
        handled
    });
    // SAFETY: as above.
    unsafe { *errno = saved_errno };
    if handled {
        return;
    }
    // Not a tracked write: the program's own handler, if it installed one, handles it as
    // the kernel would have called it (it may recover with siglongjmp, or end the process).
    if pass_to_program(signal, info, context) {
        return;
    }
    // Otherwise the program crashes. Let the runtime end the other processes of
    // the run (as a crash of one thread ends a pthreads process), then restore the default
    // action and return, so the faulting instruction runs again and the process dies of
    // SIGSEGV as it would without us.
    let hook = FATAL_HOOK.load(Ordering::Acquire);
    if hook != 0 {
        // SAFETY: FATAL_HOOK only ever holds 0 or a `fn()` stored by `set_fatal_hook`.
        let hook: fn() = unsafe { std::mem::transmute::<usize, fn()>(hook) };
        hook();
    }
    // SAFETY: a zeroed sigaction is SIG_DFL with an empty mask.
    let default: libc::sigaction = unsafe { std::mem::zeroed() };
    glibc_sigaction(signal, &default, ptr::null_mut());
}

/// The program's own `SIGSEGV` action. The library's `sigaction` and `signal`
/// (`ffi/signal.rs`) record it here instead of installing it: the tracker's handler must
/// stay installed (the program's would get the tracker's write faults: a program with a
/// crash handler "crashed" at its first write to the persistent heap), and passes every
/// fault that is not a tracked write on to it ([`pass_to_program`]). Per process, like
/// every signal action of a thread-process. `SIG_DFL` (0) until the program sets one.
static PROGRAM_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PROGRAM_FLAGS: AtomicI32 = AtomicI32::new(0);
const MASK_WORDS: usize = std::mem::size_of::<libc::sigset_t>() / 8;
static PROGRAM_MASK: [AtomicU64; MASK_WORDS] = [const { AtomicU64::new(0) }; MASK_WORDS];

/// The program's `SIGSEGV` action, as `sigaction` reports it (`SIG_DFL` until it sets one).
pub fn program_segv_action() -> libc::sigaction {
    // SAFETY: a zeroed sigaction is a valid value (SIG_DFL, empty mask, no flags).
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = PROGRAM_HANDLER.load(Ordering::Acquire);
    action.sa_flags = PROGRAM_FLAGS.load(Ordering::Relaxed);
    // SAFETY: sigset_t is MASK_WORDS plain 8-byte words.
    let mask: &mut [u64; MASK_WORDS] = unsafe { &mut *(&raw mut action.sa_mask).cast() };
    for (word, saved) in mask.iter_mut().zip(&PROGRAM_MASK) {
        *word = saved.load(Ordering::Relaxed);
    }
    action
}

/// Records `action` as the program's `SIGSEGV` action, the handler last. Not atomic: a
/// fault in between (only from a handler of another signal interrupting this, as
/// `SIGSEGV` is synchronous) finds the previous handler with the new mask and flags.
pub fn set_program_segv_action(action: &libc::sigaction) {
    // SAFETY: sigset_t is MASK_WORDS plain 8-byte words.
    let mask: &[u64; MASK_WORDS] = unsafe { &*(&raw const action.sa_mask).cast() };
    for (word, saved) in mask.iter().zip(&PROGRAM_MASK) {
        saved.store(*word, Ordering::Relaxed);
    }
    PROGRAM_FLAGS.store(action.sa_flags, Ordering::Relaxed);
    PROGRAM_HANDLER.store(action.sa_sigaction, Ordering::Release);
}

/// Fills `set` with every signal but the synchronous ones (`SIGSEGV`, `SIGBUS`, `SIGILL`,
/// `SIGFPE`, `SIGTRAP`, `SIGSYS`) and glibc's internal ones (`sigfillset` leaves those out):
/// the mask of the tracker's handler. A handler of the program (behind the runtime's
/// trampoline) that ran inside it and wrote a tracked page took its write fault while
/// `SIGSEGV` was blocked, and the kernel killed the process (no handler, no message), or
/// re-entered [`Tracker::on_fault`] halfway through a fault: the same twin slot and dirty
/// list position given to two pages, or a page of the outer fault's window, already marked
/// dirty but not yet writable, taken for the program's own fault.
pub(crate) fn asynchronous_signals(set: &mut libc::sigset_t) {
    // SAFETY: sigfillset and sigdelset write the sigset_t they are given.
    unsafe {
        libc::sigfillset(set);
        for fault in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
            libc::SIGTRAP,
            libc::SIGSYS,
        ] {
            libc::sigdelset(set, fault);
        }
    }
}

/// Calls the program's `SIGSEGV` handler for a fault that is not a tracked write, as the
/// kernel would have: with the interrupted code's mask (from `context`; the tracker's
/// handler blocks more, [`asynchronous_signals`]) plus the handler's own mask and, unless
/// `SA_NODEFER`, `SIGSEGV`; `SA_RESETHAND` honoured. False when the program has none
/// (default or ignored: the process dies of the fault). Async-signal-safe.
fn pass_to_program(signal: i32, info: *mut libc::siginfo_t, context: *mut libc::c_void) -> bool {
    let handler = PROGRAM_HANDLER.load(Ordering::Acquire);
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        return false;
    }
    let flags = PROGRAM_FLAGS.load(Ordering::Relaxed);
    if flags & libc::SA_RESETHAND != 0 {
        PROGRAM_HANDLER.store(libc::SIG_DFL, Ordering::Release);
    }
    let action = program_segv_action();
    // SAFETY: a zeroed sigset_t is a valid (empty) set.
    let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    if !context.is_null() {
        // SAFETY: the kernel passes an SA_SIGINFO handler a valid ucontext_t, whose
        // uc_sigmask is the mask of the code the fault interrupted.
        mask = unsafe { (*context.cast::<libc::ucontext_t>()).uc_sigmask };
    }
    // SAFETY: set operations on valid sets.
    unsafe {
        for signal in 1..=64 {
            if libc::sigismember(&action.sa_mask, signal) == 1 {
                libc::sigaddset(&mut mask, signal);
            }
        }
        if flags & libc::SA_NODEFER == 0 {
            libc::sigaddset(&mut mask, signal);
        } else {
            libc::sigdelset(&mut mask, signal);
        }
    }
    // The kernel restores the interrupted code's mask when this handler returns (a
    // siglongjmp restores the one its sigsetjmp saved).
    crate::runtime::mask::restore(&mask);
    call_program_handler(handler, flags, signal, info, context);
    true
}

/// Calls a handler the program installed (`handler` with its `sa_flags`, `flags`) for a
/// delivery of `signal` that the runtime's handler received first: as an `sa_sigaction`
/// under `SA_SIGINFO`, else as an `sa_handler`.
pub(crate) fn call_program_handler(
    handler: usize,
    flags: i32,
    signal: i32,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed this address as an `sa_sigaction` handler.
        let handler: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        handler(signal, info, context);
    } else {
        // SAFETY: the program installed this address as an `sa_handler` handler.
        let handler: extern "C" fn(i32) = unsafe { std::mem::transmute(handler) };
        handler(signal);
    }
}

/// glibc's `sigaction`. The library exports a `sigaction` of its own (`ffi/signal.rs`),
/// which a call by name from here would reach, and which records a `SIGSEGV` action as the
/// program's instead of installing it: the tracker's own installs go to glibc directly.
/// Looked up once, when the tracker installs its handler (before any fault it handles).
pub(crate) fn glibc_sigaction(
    signal: i32,
    action: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> i32 {
    static FOUND: AtomicUsize = AtomicUsize::new(0);
    let mut found = FOUND.load(Ordering::Acquire);
    if found == 0 {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name: the next definition after
        // this object, glibc's (the executable's own when this crate is linked into one).
        found = unsafe { libc::dlsym(libc::RTLD_NEXT, c"sigaction".as_ptr()) } as usize;
        if found == 0 {
            // SAFETY: as the C function; `action` and `old` are the caller's.
            return unsafe { libc::sigaction(signal, action, old) };
        }
        FOUND.store(found, Ordering::Release);
    }
    type Sigaction = unsafe extern "C" fn(i32, *const libc::sigaction, *mut libc::sigaction) -> i32;
    // SAFETY: `found` is glibc's sigaction, whose C signature this is.
    let real: Sigaction = unsafe { std::mem::transmute(found) };
    // SAFETY: as the C function; `action` and `old` are the caller's.
    unsafe { real(signal, action, old) }
}

/// The runtime's alternate signal stack (its address; 0 until installed): the tracker's
/// handler runs on it, `SA_ONSTACK`.
static RUNTIME_STACK: AtomicUsize = AtomicUsize::new(0);
/// The program's alternate stack as it set it in this process (address, size, flags), which
/// `sigaltstack` reports back: none (`SS_DISABLE`) until it sets one, and in a new thread,
/// as pthreads start a thread without one.
static PROGRAM_STACK: AtomicUsize = AtomicUsize::new(0);
static PROGRAM_STACK_SIZE: AtomicUsize = AtomicUsize::new(0);
static PROGRAM_STACK_FLAGS: AtomicI32 = AtomicI32::new(libc::SS_DISABLE);

/// Linux's `SS_AUTODISARM` (`<linux/signal.h>`; not in the `libc` crate): the stack is
/// disarmed while a handler runs on it.
const SS_AUTODISARM: i32 = 1 << 31;

fn runtime_stack() -> libc::stack_t {
    libc::stack_t {
        ss_sp: RUNTIME_STACK.load(Ordering::Acquire) as *mut libc::c_void,
        ss_flags: 0,
        ss_size: ALT_STACK,
    }
}

/// The `sigaltstack` system call (the name `sigaltstack` in the runtime's library is the
/// program's, below); the error is the errno.
fn raw_sigaltstack(
    stack: Option<&libc::stack_t>,
    old: Option<&mut libc::stack_t>,
) -> Result<(), i32> {
    let stack = stack.map_or(ptr::null(), |s| s as *const libc::stack_t);
    let old = old.map_or(ptr::null_mut(), |o| o as *mut libc::stack_t);
    // SAFETY: `stack` is null or a valid stack_t (whose memory the caller gives the kernel
    // for signal frames); `old` is null or writable.
    if unsafe { libc::syscall(libc::SYS_sigaltstack, stack, old) } != 0 {
        // SAFETY: `__errno_location` returns this thread's errno.
        return Err(unsafe { *libc::__errno_location() });
    }
    Ok(())
}

/// The program's `sigaltstack(stack, old)` while the tracker's handler is installed: its
/// handler needs more than a small stack (the kernel's frame, its own, and the program's
/// `SIGSEGV` handler it calls; a 2 KiB `MINSIGSTKSZ` stack of a program overflowed at the
/// first tracked write and the thread died). So a program's stack at least as large as the
/// runtime's (64 KiB) is installed as the program asks; a smaller one is checked by the
/// kernel (installed, then the runtime's installed again) and recorded, and the runtime's
/// stays installed: the program's `SA_ONSTACK` handlers run on that larger stack. `SS_DISABLE`
/// leaves the runtime's installed too. Returns the program's view of its stack before the
/// call (`SS_ONSTACK` when executing on the installed alternate stack), or the errno:
/// `EPERM` to change it while on the alternate stack, `EINVAL` for unknown flags, the
/// kernel's for a stack it refuses. Before the tracker is installed (or dormant), the
/// kernel's `sigaltstack`.
///
/// # Safety
/// `stack`, if given, describes memory the program gives the kernel for signal frames.
pub unsafe fn program_alt_stack(stack: Option<&libc::stack_t>) -> Result<libc::stack_t, i32> {
    if RUNTIME_STACK.load(Ordering::Acquire) == 0 {
        // SAFETY: a zeroed stack_t is a valid value to be overwritten.
        let mut old: libc::stack_t = unsafe { std::mem::zeroed() };
        raw_sigaltstack(stack, Some(&mut old))?;
        return Ok(old);
    }
    // SAFETY: a zeroed stack_t is a valid value to be overwritten.
    let mut current: libc::stack_t = unsafe { std::mem::zeroed() };
    raw_sigaltstack(None, Some(&mut current))?;
    let on_stack = current.ss_flags & libc::SS_ONSTACK != 0;
    let mut view = libc::stack_t {
        ss_sp: PROGRAM_STACK.load(Ordering::Relaxed) as *mut libc::c_void,
        ss_flags: PROGRAM_STACK_FLAGS.load(Ordering::Relaxed),
        ss_size: PROGRAM_STACK_SIZE.load(Ordering::Relaxed),
    };
    if on_stack && view.ss_flags & libc::SS_DISABLE == 0 {
        view.ss_flags = libc::SS_ONSTACK;
    }
    let Some(new) = stack else {
        return Ok(view);
    };
    if on_stack {
        return Err(libc::EPERM);
    }
    let mode = new.ss_flags & !SS_AUTODISARM;
    if mode != 0 && mode != libc::SS_ONSTACK && mode != libc::SS_DISABLE {
        return Err(libc::EINVAL);
    }
    if mode == libc::SS_DISABLE {
        raw_sigaltstack(Some(&runtime_stack()), None)?;
        PROGRAM_STACK.store(0, Ordering::Relaxed);
        PROGRAM_STACK_SIZE.store(0, Ordering::Relaxed);
        PROGRAM_STACK_FLAGS.store(libc::SS_DISABLE, Ordering::Relaxed);
        return Ok(view);
    }
    // The kernel checks the program's stack (its minimum size) by installing it.
    raw_sigaltstack(Some(new), None)?;
    if new.ss_size < ALT_STACK {
        raw_sigaltstack(Some(&runtime_stack()), None)?;
    }
    PROGRAM_STACK.store(new.ss_sp as usize, Ordering::Relaxed);
    PROGRAM_STACK_SIZE.store(new.ss_size, Ordering::Relaxed);
    PROGRAM_STACK_FLAGS.store(new.ss_flags & SS_AUTODISARM, Ordering::Relaxed);
    Ok(view)
}

/// In a new thread-process: no alternate stack of the program's (a pthread starts without
/// one), the runtime's installed (its creator's, inherited, may have been the program's).
pub fn alt_stack_for_new_thread() {
    PROGRAM_STACK.store(0, Ordering::Relaxed);
    PROGRAM_STACK_SIZE.store(0, Ordering::Relaxed);
    PROGRAM_STACK_FLAGS.store(libc::SS_DISABLE, Ordering::Relaxed);
    if RUNTIME_STACK.load(Ordering::Acquire) != 0
        && let Err(errno) = raw_sigaltstack(Some(&runtime_stack()), None)
    {
        let error = io::Error::from_raw_os_error(errno);
        crate::runtime::fatal(&format!("sigaltstack in a new thread: {error}"));
    }
}

/// Called (in the signal handler) when a fault is not the tracker's.
static FATAL_HOOK: AtomicUsize = AtomicUsize::new(0);

/// Sets the function the `SIGSEGV` handler calls before the process dies of a fault that is
/// not a tracked write. It must be async-signal-safe.
pub fn set_fatal_hook(hook: fn()) {
    FATAL_HOOK.store(hook as usize, Ordering::Release);
}

fn install_handler() -> io::Result<()> {
    let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    let stack = map(
        None,
        ALT_STACK,
        libc::PROT_READ | libc::PROT_WRITE,
        anon,
        -1,
    )?;
    RUNTIME_STACK.store(stack as usize, Ordering::Release);
    if let Err(errno) = raw_sigaltstack(Some(&runtime_stack()), None) {
        return Err(io::Error::from_raw_os_error(errno));
    }
    // Probe MADV_POPULATE_WRITE on the stack's first page (writable, private, unused yet).
    // SAFETY: madvise on a mapping this function owns; populating changes no byte.
    let populate = unsafe { libc::madvise(stack.cast(), PAGE, libc::MADV_POPULATE_WRITE) } == 0;
    POPULATE_WRITE.store(populate, Ordering::Relaxed);
    // SAFETY: a zeroed sigaction is a valid starting point; the handler has the SA_SIGINFO
    // signature and is async-signal-safe (module documentation).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        let handler: extern "C" fn(i32, *mut libc::siginfo_t, *mut libc::c_void) = on_segv;
        action.sa_sigaction = handler as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        asynchronous_signals(&mut action.sa_mask);
        if glibc_sigaction(libc::SIGSEGV, &action, ptr::null_mut()) != 0 {
            return os_error("sigaction(SIGSEGV)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonzero_bytes_marks_each_changed_byte() {
        assert_eq!(nonzero_bytes(0), 0);
        assert_eq!(nonzero_bytes(u64::MAX), u64::MAX);
        assert_eq!(nonzero_bytes(0x0100_8000_0000_7f01), 0xff00_ff00_0000_ffff);
        for byte in 0..8 {
            for value in [1u64, 0x7f, 0x80, 0xff] {
                assert_eq!(nonzero_bytes(value << (8 * byte)), 0xff << (8 * byte));
            }
        }
    }

    /// Publishing a page word by word writes exactly the bytes of its diff runs.
    #[test]
    fn publishing_a_page_writes_exactly_its_runs() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let words = PAGE / 8;
        for round in 0..200 {
            let twin: Vec<u64> = (0..words).map(|_| rng.random()).collect();
            let mut private = twin.clone();
            // Sparse byte changes, whole words, and runs across words.
            let changes = [0, 1, 5, 50, 600, 5000][round % 6];
            let bytes = bytemuck_mut(&mut private);
            for _ in 0..changes {
                let at = rng.random_range(0..PAGE);
                let len = rng.random_range(1..=12).min(PAGE - at);
                for b in &mut bytes[at..at + len] {
                    *b = rng.random();
                }
            }
            let old_shared: Vec<u64> = (0..words).map(|_| rng.random()).collect();
            let mut expected = old_shared.clone();
            let mut spans = Vec::new();
            diff::spans(bytemuck(&private), bytemuck(&twin), &mut spans);
            for span in &spans {
                let range = span.start..span.start + span.len;
                bytemuck_mut(&mut expected)[range.clone()]
                    .copy_from_slice(&bytemuck(&private)[range]);
            }
            let mut shared = old_shared.clone();
            // SAFETY: three distinct, aligned page-sized buffers, written by no one else.
            let any = unsafe {
                publish_changed_words(
                    private.as_ptr().cast(),
                    twin.clone().as_mut_ptr().cast(),
                    shared.as_mut_ptr().cast(),
                )
            };
            assert_eq!(any != 0, !spans.is_empty());
            assert_eq!(shared, expected, "round {round}");
        }
    }

    /// A random twin and a private copy of it with 0, 3, 40 or 900 random bytes changed
    /// (by `round`).
    fn twin_and_changed_copy(
        rng: &mut rand_chacha::ChaCha8Rng,
        round: usize,
    ) -> (Vec<u64>, Vec<u64>) {
        use rand::Rng;
        let twin: Vec<u64> = (0..PAGE / 8).map(|_| rng.random()).collect();
        let mut private = twin.clone();
        for _ in 0..[0, 3, 40, 900][round % 4] {
            let at = rng.random_range(0..PAGE);
            bytemuck_mut(&mut private)[at] ^= rng.random_range(1..=255u8);
        }
        (twin, private)
    }

    /// Rebasing keeps exactly this process's changed bytes and takes every other byte from
    /// the shared page, in the private copy and the twin alike.
    #[test]
    fn rebasing_a_page_keeps_its_own_changes_and_takes_the_rest() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let words = PAGE / 8;
        for round in 0..100 {
            let (twin, private) = twin_and_changed_copy(&mut rng, round);
            let mut before = Vec::new();
            diff::spans(bytemuck(&private), bytemuck(&twin), &mut before);
            let shared: Vec<u64> = (0..words).map(|_| rng.random()).collect();
            let (mut new_private, mut new_twin) = (private.clone(), twin.clone());
            // SAFETY: three distinct, aligned page-sized buffers, used by nothing else.
            unsafe {
                rebase_words(
                    new_private.as_mut_ptr().cast(),
                    new_twin.as_mut_ptr().cast(),
                    shared.as_ptr().cast(),
                )
            };
            let mut after = Vec::new();
            diff::spans(bytemuck(&new_private), bytemuck(&new_twin), &mut after);
            assert_eq!(after, before, "round {round}: the diff is unchanged");
            for at in 0..PAGE {
                let changed = bytemuck(&private)[at] != bytemuck(&twin)[at];
                let want = if changed {
                    bytemuck(&private)[at]
                } else {
                    bytemuck(&shared)[at]
                };
                assert_eq!(bytemuck(&new_private)[at], want, "round {round} byte {at}");
            }
        }
    }

    /// Rebasing by lines is [`rebase_words`] inside the masked lines and leaves every other
    /// line of the private copy and the twin exactly as it was.
    #[test]
    fn rebasing_lines_touches_exactly_the_masked_lines() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(12);
        let words = PAGE / 8;
        for round in 0..100 {
            let (twin, private) = twin_and_changed_copy(&mut rng, round);
            let shared: Vec<u64> = (0..words).map(|_| rng.random()).collect();
            let lines: u64 = rng.random::<u64>() & rng.random::<u64>();
            let (mut whole_private, mut whole_twin) = (private.clone(), twin.clone());
            let (mut new_private, mut new_twin) = (private.clone(), twin.clone());
            // SAFETY: distinct, aligned page-sized buffers, used by nothing else.
            unsafe {
                rebase_words(
                    whole_private.as_mut_ptr().cast(),
                    whole_twin.as_mut_ptr().cast(),
                    shared.as_ptr().cast(),
                );
                rebase_lines(
                    new_private.as_mut_ptr().cast(),
                    new_twin.as_mut_ptr().cast(),
                    shared.as_ptr().cast(),
                    lines,
                );
            }
            for at in 0..PAGE {
                let masked = lines & (1 << (at / LINE)) != 0;
                let (want_private, want_twin) = if masked {
                    (&whole_private, &whole_twin)
                } else {
                    (&private, &twin)
                };
                assert_eq!(
                    (bytemuck(&new_private)[at], bytemuck(&new_twin)[at]),
                    (bytemuck(want_private)[at], bytemuck(want_twin)[at]),
                    "round {round} byte {at} (masked: {masked})"
                );
            }
        }
    }

    /// Publishing reports exactly the lines holding a changed byte: the mask the publish log
    /// records, which catch-up relies on to rebase every line another process changed.
    #[test]
    fn publishing_reports_the_lines_it_wrote() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(13);
        let words = PAGE / 8;
        for round in 0..100 {
            let mut twin: Vec<u64> = (0..words).map(|_| rng.random()).collect();
            let mut private = twin.clone();
            let mut want = 0u64;
            for _ in 0..[0, 1, 5, 200][round % 4] {
                let at = rng.random_range(0..PAGE);
                bytemuck_mut(&mut private)[at] ^= rng.random_range(1..=255u8);
                want |= 1 << (at / LINE);
            }
            let mut shared = vec![0u64; words];
            // SAFETY: three distinct, aligned page-sized buffers, used by nothing else.
            let lines = unsafe {
                publish_changed_words(
                    private.as_ptr().cast(),
                    twin.as_mut_ptr().cast(),
                    shared.as_mut_ptr().cast(),
                )
            };
            assert_eq!(lines, want, "round {round}");
        }
    }

    fn bytemuck(words: &[u64]) -> &[u8] {
        // SAFETY: u64 has no padding; the byte view covers the same memory.
        unsafe { std::slice::from_raw_parts(words.as_ptr().cast(), words.len() * 8) }
    }

    fn bytemuck_mut(words: &mut [u64]) -> &mut [u8] {
        // SAFETY: as above; any byte pattern is a valid u64.
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast(), words.len() * 8) }
    }

    #[test]
    fn page_runs_coalesce() {
        let runs = |pages: &[usize], starts: &[usize]| -> Vec<(usize, usize)> {
            runs_of_pages_in(pages, |page| starts.contains(&page)).collect()
        };
        assert_eq!(
            runs(&[1, 2, 3, 7, 9, 10], &[0]),
            vec![(1, 3), (7, 1), (9, 2)]
        );
        assert!(runs(&[], &[0]).is_empty());
        assert_eq!(runs(&[3, 4, 5], &[0, 4]), vec![(3, 1), (4, 2)]);
    }
}
