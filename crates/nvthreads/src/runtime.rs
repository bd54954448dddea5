//! The runtime behind the C ABI (`docs/nvthreads.md` §3, §5): threads as processes over
//! one shared heap, durable code sections, merges, commits, and the persistent allocator.
//!
//! Every process of a run is single-threaded (a "thread" is a process made by `fork`), so
//! the per-process state below is plain atomics used with relaxed ordering; `fork` copies it
//! into each child. What all processes share is in [`Shared`]; what persists is in the
//! journal ([`RtJournal`]). The entry points are called by the `cdylib` (`ffi/lib.rs`), never
//! by Rust code in the same process as a test harness: they fork, and they own the process's
//! `SIGSEGV` handler.
//!
//! Section rules:
//! - Holding the commit token is required to merge, to append to the log, and to acquire
//!   a mutex. A thread takes it at the acquire that moves its lock depth 0 → 1 and keeps it
//!   until the release that moves it back to 0 ("durable code section"), so sections run one
//!   at a time and the token holder never waits for anything but the program's own code.
//! - A thread that must block while holding locks (a `cond_wait` at depth > 1, a mutex held
//!   by a thread that is itself blocked) merges its open section into the shared view
//!   without committing it, counts itself in `open_sections`, and gives up the token.
//! - A merge with nothing open is a global commit point: one epoch flip commits every record
//!   appended since the last one (including those of sections that ran while another was
//!   open and may have observed it — the conservative form of the paper's dependences).

use crate::diff::Span;
use crate::heapmeta;
use crate::journal::{Config, LAYOUT, Mutation};
use crate::pages::{PAGE, RegionSpec, Tracker};
use crate::pfail::{RtJournal, RtPool};
use crate::record::Run;
use crate::shared::{
    Clock, MAX_THREADS, Shared, SyncSlot, Table, futex_wait, futex_wait_for, futex_wait_until,
    futex_wake, mutex_kind, thread_state,
};
use pmem::{CreateOptions, NativeOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Default heap size (`NVT_HEAP_MB`).
pub const DEFAULT_HEAP_MB: u64 = 64;
/// Default log size (`NVT_LOG_MB`).
pub const DEFAULT_LOG_MB: u64 = 16;

/// The per-run runtime (one per process; children inherit the parent's by `fork`).
#[derive(Debug)]
pub struct Runtime {
    journal: Mutex<Option<RtJournal>>,
    pub(crate) tracker: &'static Tracker,
    pub(crate) shared: &'static Shared,
    heap_len: u64,
    crashed: bool,
    /// Test-only protocol bug (`NVT_MUTANT`), which the C-program tests must catch.
    mutant: Mutant,
    /// Global offsets `(start, end)` of the bytes of persistent globals that the dynamic
    /// loader writes at every start: published but never logged (sorted).
    excluded: Vec<(u64, u64)>,
    /// Where `malloc`'d memory lives (`NVT_MALLOC`).
    pub(crate) malloc_mode: MallocMode,
    /// The allocator of the interposed `malloc` family (none in `private` mode).
    pub(crate) arena: OnceLock<crate::alloc::Arena>,
    /// Persistent mode: the arena's header chunk (private view), holding the high-water
    /// marks.
    pub(crate) arena_header: std::sync::atomic::AtomicUsize,
}

/// Where the interposed `malloc` family allocates (`NVT_MALLOC`, `docs/nvthreads.md` §3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MallocMode {
    /// `shared` (default): a volatile region shared by all thread-processes and merged at
    /// synchronisation points like globals; not persistent.
    Shared,
    /// `persistent`: a range of the persistent heap; logged and recovered like `nvmalloc`'d
    /// memory (the paper's "every malloc persistent" setting). Memory malloc'd by an earlier
    /// run is never reused.
    Persistent,
    /// `private`: glibc's allocator; each thread-process has its own copy after creation.
    Private,
}

impl MallocMode {
    fn from_env() -> MallocMode {
        match std::env::var("NVT_MALLOC").as_deref() {
            Err(_) | Ok("shared") => MallocMode::Shared,
            Ok("persistent") => MallocMode::Persistent,
            Ok("private") => MallocMode::Private,
            Ok(other) => fatal(&format!(
                "NVT_MALLOC={other}: expected shared, persistent or private"
            )),
        }
    }
}

/// Default size of the volatile `malloc` region (`NVT_MALLOC_MB`).
pub const DEFAULT_MALLOC_MB: u64 = 2048;
/// Fixed address of the volatile `malloc` region (after any heap of up to 8 TiB).
pub const MALLOC_BASE: u64 = 0x6800_0000_0000;

/// Deliberate runtime bugs, selected by `NVT_MUTANT` (tests only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mutant {
    None,
    /// `commit-per-page`: every dirty page is logged and committed on its own, so a section
    /// can be torn.
    CommitPerPage,
    /// `no-dependence`: a section that ends while another is open commits anyway, so it can
    /// become durable without the section it observed.
    NoDependence,
}

impl Mutant {
    fn from_env() -> Mutant {
        match std::env::var("NVT_MUTANT").as_deref() {
            Ok("commit-per-page") => Mutant::CommitPerPage,
            Ok("no-dependence") => Mutant::NoDependence,
            _ => Mutant::None,
        }
    }
}

/// The journal's own bug selected by `NVT_MUTANT` (tests only): `no-log-flush` fences the
/// records without flushing them, which only a power failure (`NVT_PFAIL`) can expose.
fn journal_mutation() -> Mutation {
    match std::env::var("NVT_MUTANT").as_deref() {
        Ok("no-log-flush") => Mutation::NoLogFlush,
        _ => Mutation::None,
    }
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();
/// The shared block, for the fence hook (set once it is mapped).
static SHARED: OnceLock<&'static Shared> = OnceLock::new();
/// Persistence steps taken before the shared block exists (recovery).
static EARLY_STEPS: AtomicU64 = AtomicU64::new(0);
/// `NVT_CRASH_AT` (0: off), read once.
static CRASH_AT: OnceLock<u64> = OnceLock::new();
/// This process's thread slot (0 = main).
static ME: AtomicU32 = AtomicU32::new(0);
/// Mutexes held by this thread.
static DEPTH: AtomicU32 = AtomicU32::new(0);
/// Whether this thread holds the commit token.
static HOLDS: AtomicBool = AtomicBool::new(false);
/// Whether this thread is counted in `open_sections`.
static OPEN: AtomicBool = AtomicBool::new(false);
/// Whether this process is a thread-process (not the main one).
static CHILD: AtomicBool = AtomicBool::new(false);
/// Whether this thread-process is ending (its last merge need not reset its pages).
static EXITING: AtomicBool = AtomicBool::new(false);
/// The epoch that commits this thread's writes up to its last merge that logged something.
static LAST_EPOCH: AtomicU64 = AtomicU64::new(0);

fn get(flag: &AtomicBool) -> bool {
    flag.load(Ordering::Relaxed)
}

fn set(flag: &AtomicBool, value: bool) {
    flag.store(value, Ordering::Relaxed);
}

fn depth() -> u32 {
    DEPTH.load(Ordering::Relaxed)
}

/// This thread's tag in mutex owner fields (slot + 1, never 0).
fn me_tag() -> u32 {
    ME.load(Ordering::Relaxed) + 1
}

/// Prints `message` and kills the run: every thread-process, then this one.
pub fn fatal(message: &str) -> ! {
    let _ = writeln!(std::io::stderr(), "nvthreads: {message}");
    if let Some(runtime) = RUNTIME.get() {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        for slot in &runtime.shared.threads {
            let pid = slot.pid.load(Ordering::Relaxed);
            if pid > 0 && pid != me && slot.state.load(Ordering::Relaxed) == thread_state::RUNNING {
                // SAFETY: signalling a process of this run.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    std::process::abort()
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| fatal(&format!("{name}={text} is not a number"))),
        Err(_) => default,
    }
}

fn pool_path() -> PathBuf {
    if let Some(path) = std::env::var_os("NVT_POOL") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().ok();
    let name = exe.as_ref().and_then(|exe| exe.file_name()).map_or_else(
        || "program".into(),
        |name| name.to_string_lossy().into_owned(),
    );
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!(
        "{}/nvthreads-{name}-{uid}.pool",
        pmem::DEFAULT_POOL_DIR
    ))
}

/// The runtime, started on first use.
pub fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(|| Runtime::start().unwrap_or_else(|error| fatal(&error)))
}

impl Runtime {
    fn start() -> Result<Runtime, String> {
        let path = pool_path();
        let mut options = NativeOptions::default().with_env_overrides();
        // Emulated NVM: the paper charged each 4 KiB page written to its log; the pool charges
        // each 64-byte line written back.
        options.latency.line_writeback_ns = env_u64("NVT_NVM_NS_PER_PAGE", 0).div_ceil(64);
        let (journal, state, crashed) = if path.exists() {
            let pool = open_pool(&path, &options)?;
            let (journal, state, recovery) =
                RtJournal::open_in(pool, journal_mutation(), Some(step))
                    .map_err(|e| format!("recovering {}: {e}", path.display()))?;
            (journal, state, !recovery.was_clean)
        } else {
            let config = Config {
                heap_len: env_u64("NVT_HEAP_MB", DEFAULT_HEAP_MB) << 20,
                log_len: env_u64("NVT_LOG_MB", DEFAULT_LOG_MB) << 20,
                base_addr: crate::DEFAULT_BASE_ADDR,
            };
            // Made under another name and renamed into place once formatted: a crash while
            // creating leaves no half-made pool at `path` (the next run starts over).
            let creating = path.with_extension("creating");
            let _ = std::fs::remove_file(&creating);
            let mut create = CreateOptions::new(LAYOUT, config.pool_size());
            create.native = options;
            let pool = RtPool::create(&creating, &create)
                .map_err(|e| format!("creating {}: {e}", creating.display()))?;
            let (mut journal, state) =
                RtJournal::create_in(pool, &config).map_err(|e| e.to_string())?;
            std::fs::rename(&creating, &path)
                .map_err(|e| format!("renaming {} into place: {e}", creating.display()))?;
            journal.set_fence_hook(Some(step));
            journal.set_mutation(journal_mutation());
            (journal, state, false)
        };
        let geo = journal.geometry();
        let malloc_mode = MallocMode::from_env();
        let layout = GlobalsLayout::plan(&journal)?;
        let specs = region_specs(&layout, geo.base_addr, malloc_mode);
        let tracker =
            Tracker::install_regions(&specs).map_err(|e| format!("mapping the heap: {e}"))?;
        let formatted = load_home(&journal, tracker, &layout)?;
        let shared = Shared::map().map_err(|e| format!("mapping shared state: {e}"))?;
        shared
            .steps
            .store(EARLY_STEPS.load(Ordering::Relaxed), Ordering::Relaxed);
        let _ = SHARED.set(shared);
        LAST_EPOCH.store(state.committed, Ordering::Relaxed);
        shared.set_journal_state(&state);
        shared.live_threads.store(1, Ordering::Relaxed);
        let main = &shared.threads[0];
        main.state.store(thread_state::RUNNING, Ordering::Relaxed);
        // SAFETY: getpid has no preconditions.
        main.pid.store(unsafe { libc::getpid() }, Ordering::Relaxed);
        // SAFETY: registering a plain extern "C" function with no arguments.
        unsafe { libc::atexit(at_exit) };
        install_fatal_handlers();
        let runtime = Runtime {
            journal: Mutex::new(Some(journal)),
            tracker,
            shared,
            heap_len: layout.heap_len,
            crashed,
            mutant: Mutant::from_env(),
            malloc_mode,
            arena: OnceLock::new(),
            arena_header: std::sync::atomic::AtomicUsize::new(0),
            excluded: layout.excluded_offsets(),
        };
        if !formatted {
            // The reservation for persistent globals is part of the format, so a crash
            // before the globals are first logged cannot leave a heap without it.
            let meta = runtime.meta();
            heapmeta::format(meta);
            heapmeta::set_globals(meta, layout.pool_heap_len - layout.heap_len, 0, 0);
            runtime.sync_point();
        }
        if layout.persistent && !layout.recovered {
            runtime.record_globals(&layout);
        }
        match malloc_mode {
            MallocMode::Shared => {
                let len = specs.last().expect("the malloc region").len;
                let arena = crate::alloc::Arena::new(MALLOC_BASE as usize, len, 0)
                    .map_err(|e| format!("mapping the allocator's metadata: {e}"))?;
                let _ = runtime.arena.set(arena);
            }
            MallocMode::Persistent => runtime.open_persistent_arena()?,
            MallocMode::Private => {}
        }
        mark_active(&path);
        Ok(runtime)
    }

    /// Whether the previous run ended without a clean exit.
    pub fn crashed(&self) -> bool {
        self.crashed
    }

    /// Last committed epoch.
    pub fn durable_epoch(&self) -> u64 {
        self.shared.journal_state().committed
    }

    /// This thread's slot in the thread table (0: main).
    pub fn thread_index(&self) -> usize {
        ME.load(Ordering::Relaxed) as usize
    }

    /// Size of the persistent heap.
    pub fn heap_len(&self) -> u64 {
        self.heap_len
    }

    /// Address of the persistent heap (the private view).
    pub fn heap_base(&self) -> *mut u8 {
        self.tracker.private_base()
    }

    /// The heap metadata page, read-only.
    pub(crate) fn heap_meta(&self) -> &[u8] {
        // SAFETY: page 0 of the private view, mapped for the life of the process and always
        // readable; only this (single-threaded) process writes its private copy.
        unsafe { std::slice::from_raw_parts(self.tracker.private_base(), heapmeta::META_LEN) }
    }

    /// First run of this executable with persistent globals: logs their current contents
    /// (their initial values; excluded bytes left out) and records the executable's
    /// fingerprint in the heap metadata, in one commit. If another executable's globals are
    /// in the reservation, the log is checkpointed and the reservation cleared first (a
    /// crash before the commit leaves the old fingerprint, and the next start does this
    /// again).
    fn record_globals(&self, layout: &GlobalsLayout) {
        self.take_token();
        let reserved = layout.pool_heap_len - layout.heap_len;
        let mut images = Vec::new();
        let mut offset = layout.heap_len as usize;
        for &(_, len) in &layout.globals.ranges {
            let mut bytes = vec![0u8; len];
            self.tracker.read_shared_at(offset, &mut bytes);
            images.push((offset, bytes));
            offset += len;
        }
        // Only the non-zero bytes: the reservation is zero until now.
        let zero = [0u8; PAGE];
        let mut runs = Vec::new();
        let mut spans = Vec::new();
        for (offset, bytes) in &images {
            for (index, page) in bytes.chunks(PAGE).enumerate() {
                spans.clear();
                crate::diff::spans(page, &zero[..page.len()], &mut spans);
                let base = offset + index * PAGE;
                runs.extend(spans.iter().flat_map(|span| {
                    without(
                        Run {
                            offset: (base + span.start) as u64,
                            bytes: &page[span.start..span.start + span.len],
                        },
                        &self.excluded,
                    )
                }));
            }
        }
        {
            let guard = self.journal.lock().unwrap_or_else(|e| e.into_inner());
            let journal = guard
                .as_ref()
                .unwrap_or_else(|| fatal("logging globals after close"));
            let mut state = self.shared.journal_state();
            let (_, fingerprint, _) = heapmeta::globals(self.heap_meta());
            if fingerprint != 0 {
                journal
                    .checkpoint(&mut state)
                    .unwrap_or_else(|e| fatal(&e.to_string()));
                journal.clear_home(layout.heap_len, reserved);
            }
            let budget = journal.geometry().log_len / 4;
            let mut start = 0;
            while start < runs.len() {
                let mut end = start;
                let mut bytes = 0;
                while end < runs.len() && (end == start || bytes < budget) {
                    bytes += 16 + runs[end].bytes.len() as u64;
                    end += 1;
                }
                journal
                    .append(&mut state, &runs[start..end])
                    .unwrap_or_else(|e| fatal(&log_error(&e)));
                start = end;
            }
            self.shared.set_journal_state(&state);
        }
        heapmeta::set_globals(
            self.meta(),
            reserved,
            layout.globals.fingerprint,
            layout.globals.len() as u64,
        );
        self.merge(true, false);
        self.give_token();
    }

    /// The epoch that commits this thread's writes up to its last synchronisation point
    /// (they are durable once [`Runtime::durable_epoch`] reaches it).
    pub fn section_epoch(&self) -> u64 {
        LAST_EPOCH.load(Ordering::Relaxed)
    }

    /// The heap metadata page, through the private view (writes are tracked).
    #[allow(clippy::mut_from_ref)]
    fn meta(&self) -> &mut [u8] {
        // SAFETY: page 0 of the private view, mapped for the life of the process. Callers hold
        // the commit token, this process has one thread, and no other reference to the page
        // is alive while the slice is used; write faults are resolved by the tracker.
        unsafe { std::slice::from_raw_parts_mut(self.tracker.private_base(), heapmeta::META_LEN) }
    }

    fn heap_ptr(&self, offset: u64) -> *mut u8 {
        debug_assert!(offset <= self.heap_len);
        // SAFETY: offsets come from the heap metadata, validated against the heap size.
        unsafe { self.tracker.private_base().add(offset as usize) }
    }

    fn take_token(&self) {
        self.take_token_until(None);
    }

    /// Takes the commit token, waiting until `deadline` at most; returns whether it is held.
    fn take_token_until(&self, deadline: Option<(Clock, &libc::timespec)>) -> bool {
        if !get(&HOLDS) {
            if !self.shared.token.lock_until(deadline) {
                return false;
            }
            set(&HOLDS, true);
            self.refresh_kept();
        }
        true
    }

    /// Drops the private copies kept from earlier intervals of pages another process has
    /// published into since they were taken (called before reading shared data after
    /// synchronising, and before merging).
    fn refresh_kept(&self) {
        self.tracker
            .catch_up()
            .unwrap_or_else(|e| fatal(&e.to_string()));
    }

    fn give_token(&self) {
        if get(&HOLDS) {
            set(&HOLDS, false);
            self.shared.token.unlock();
        }
    }

    /// Logs this process's changes, commits if nothing is open and `commit` is asked,
    /// publishes the changes to the shared view and ends the tracking interval.
    /// Requires the token.
    fn merge(&self, commit: bool, force_drop: bool) {
        assert!(get(&HOLDS), "merge without the commit token");
        let tracker = self.tracker;
        // Others' publishes first, so that this merge's own are not mistaken for theirs.
        self.refresh_kept();
        // Heap runs are logged and published; runs in adopted ranges (the program's globals)
        // and the shared malloc region are only published: shared, not persistent.
        let dirty = tracker.dirty_pages();
        self.shared.counters[3].fetch_add(dirty.len() as u64, Ordering::Relaxed);
        // Unlogged pages are published at once, word by word from the page and its twin,
        // without building runs (a page of small scattered changes would cost a call and a
        // compare-and-swap per run); logged pages are diffed into runs for the log first.
        let mut page_spans: Vec<(usize, Vec<Span>)> = Vec::new();
        for page in dirty {
            if tracker.is_logged(page) {
                let mut spans = Vec::new();
                tracker.diff_page(page, &mut spans);
                page_spans.push((page, spans));
            } else {
                tracker.publish_page(page);
            }
        }
        // A page whose runs would take more log space than the page itself (many scattered
        // changes) is logged as its after-image: the shared page with this merge's runs
        // applied. That is exact because merges are serialised by the token and the log is
        // replayed in merge order; bytes of other sections in it were merged earlier, and
        // if they are not committed yet neither is this record (an open section holds back
        // every commit).
        let heap_pages = self.heap_len as usize / PAGE;
        let images: Vec<Option<Vec<u8>>> = page_spans
            .iter()
            .map(|(page, spans)| {
                (*page < heap_pages && encoded_len(spans) > PAGE + 16)
                    .then(|| tracker.after_image(*page, spans))
            })
            .collect();
        let mut logged = Vec::new();
        for ((page, spans), image) in page_spans.iter().zip(&images) {
            let bytes = tracker.private_page(*page);
            let page_runs = spans.iter().map(|span| Run {
                offset: (page * PAGE + span.start) as u64,
                bytes: &bytes[span.start..span.start + span.len],
            });
            match image {
                Some(image) => logged.push(Run {
                    offset: (page * PAGE) as u64,
                    bytes: image,
                }),
                None if *page >= heap_pages => {
                    logged.extend(page_runs.flat_map(|run| without(run, &self.excluded)));
                }
                None => logged.extend(page_runs),
            }
        }
        let guard = self.journal.lock().unwrap_or_else(|e| e.into_inner());
        let journal = guard.as_ref().unwrap_or_else(|| fatal("merge after close"));
        let mut state = self.shared.journal_state();
        if self.mutant == Mutant::CommitPerPage {
            for page_runs in
                logged.chunk_by(|a, b| a.offset / PAGE as u64 == b.offset / PAGE as u64)
            {
                journal
                    .append(&mut state, page_runs)
                    .unwrap_or_else(|e| fatal(&e.to_string()));
                journal.commit(&mut state);
                self.shared.set_journal_state(&state);
            }
            for (page, _) in &page_spans {
                tracker.publish_page(*page);
            }
            drop(guard);
            self.end_interval(true);
            self.release_pending_frees();
            return;
        }
        if !logged.is_empty() {
            let lap = state.lap;
            let record = journal
                .append(&mut state, &logged)
                .unwrap_or_else(|e| fatal(&log_error(&e)));
            LAST_EPOCH.store(state.committed + 1, Ordering::Relaxed);
            self.shared.set_journal_state(&state);
            let bytes: u64 = logged.iter().map(|run| run.bytes.len() as u64).sum();
            let counters = &self.shared.counters;
            counters[1].fetch_add(1, Ordering::Relaxed);
            counters[2].fetch_add(bytes, Ordering::Relaxed);
            counters[5].fetch_add(record, Ordering::Relaxed);
            if state.lap != lap {
                counters[4].fetch_add(1, Ordering::Relaxed);
            }
        }
        let nothing_open = self.shared.open_sections.load(Ordering::Acquire) == 0;
        if commit && (nothing_open || self.mutant == Mutant::NoDependence) {
            if journal.commit(&mut state) {
                self.shared.set_journal_state(&state);
                self.shared.counters[0].fetch_add(1, Ordering::Relaxed);
            }
            if journal
                .maybe_checkpoint(&mut state)
                .unwrap_or_else(|e| fatal(&e.to_string()))
            {
                self.shared.set_journal_state(&state);
                self.shared.counters[4].fetch_add(1, Ordering::Relaxed);
            }
        }
        drop(guard);
        for (page, spans) in &page_spans {
            if !spans.is_empty() {
                tracker.publish_page(*page);
            }
        }
        self.end_interval(force_drop);
        self.release_pending_frees();
    }

    /// After publishing: write-protects this interval's pages, keeping the private copies of
    /// pages no other process has published into since they were taken (lazy dropping, §3.2).
    fn end_interval(&self, force_drop: bool) {
        // The main process writes the unlogged regions in place (untracked): whenever it
        // synchronises, the others must drop copies that may predate its writes.
        if !self.is_child() && self.shared.live_threads.load(Ordering::Acquire) > 1 {
            self.tracker.publish_everything();
        }
        // A thread-process that is ending never touches these pages again: write-protecting
        // them and dropping its copies would only delay the thread's end (and its joiner).
        if !get(&EXITING) {
            self.tracker
                .reset(force_drop)
                .unwrap_or_else(|e| fatal(&e.to_string()));
        }
    }

    /// Takes the token for a synchronisation operation; at depth 0 that commits the writes
    /// made since the thread's last synchronisation point.
    fn begin(&self) {
        self.begin_until(None);
    }

    /// [`Runtime::begin`], giving up at `deadline` if the token is not free by then (a
    /// section of another thread runs); returns whether the token is held.
    fn begin_until(&self, deadline: Option<(Clock, &libc::timespec)>) -> bool {
        if get(&HOLDS) {
            return true;
        }
        self.apply_pending_name();
        if !self.take_token_until(deadline) {
            return false;
        }
        if depth() == 0 {
            self.merge(true, false);
        }
        true
    }

    /// Merges an open section without committing it, before giving up the token.
    fn merge_open(&self) {
        if !get(&OPEN) {
            set(&OPEN, true);
            self.shared.open_sections.fetch_add(1, Ordering::AcqRel);
        }
        self.merge(false, true);
    }

    /// Ends a durable section (depth just became 0): merge, commit if nothing else is open.
    fn end_section(&self) {
        if get(&OPEN) {
            set(&OPEN, false);
            self.shared.open_sections.fetch_sub(1, Ordering::AcqRel);
        }
        self.merge(true, false);
    }

    /// A synchronisation point with no lock taken: commit this thread's interval.
    pub fn sync_point(&self) {
        self.begin();
        if depth() == 0 {
            self.give_token();
        }
    }

    /// Gives up the token to block: an open section is merged (not committed) first.
    fn release_for_wait(&self) {
        if depth() > 0 {
            self.merge_open();
        }
        self.give_token();
    }

    /// `pthread_mutex_init` (and the lock functions of read-write and spin locks): a fresh,
    /// unlocked slot of `kind` ([`mutex_kind`]) for the object at `key`.
    pub fn mutex_init(&self, key: u64, kind: u32) -> i32 {
        let slot = self.shared.reinit(Table::Mutex, key, &|slot| {
            slot.kind.store(kind, Ordering::Relaxed)
        });
        if slot.is_none() {
            return libc::ENOMEM;
        }
        0
    }

    /// `pthread_mutex_destroy`: frees the slot (`EBUSY` if the mutex is held).
    pub fn mutex_destroy(&self, key: u64) -> i32 {
        if let Some(slot) = self.shared.find(Table::Mutex, key)
            && slot.word.is_held()
        {
            return libc::EBUSY;
        }
        self.shared.release(Table::Mutex, key);
        0
    }

    /// `pthread_mutex_lock`. `kind_at_first_use` gives the kind of a mutex never initialised
    /// by `pthread_mutex_init` (from its static initialiser).
    pub fn mutex_lock(&self, key: u64, kind_at_first_use: u32) -> i32 {
        self.mutex_lock_until(key, kind_at_first_use, None)
    }

    /// `pthread_mutex_timedlock` (`deadline`) and `pthread_mutex_lock` (`None`).
    pub fn mutex_lock_until(
        &self,
        key: u64,
        kind_at_first_use: u32,
        deadline: Option<(Clock, &libc::timespec)>,
    ) -> i32 {
        let slot = self.mutex_slot(key, kind_at_first_use);
        if let Some(result) = self.relock(slot) {
            return result;
        }
        let mut contended = false;
        loop {
            if !self.begin_until(deadline) {
                return libc::ETIMEDOUT;
            }
            if slot.word.try_lock(contended) {
                self.acquired(slot);
                return 0;
            }
            self.release_for_wait();
            let freed = slot.word.wait_free_until(deadline);
            contended = true;
            if depth() > 0 {
                self.take_token();
            }
            if !freed {
                return libc::ETIMEDOUT;
            }
        }
    }

    fn mutex_slot(&self, key: u64, kind_at_first_use: u32) -> &'static SyncSlot {
        self.sync_slot_with(Table::Mutex, key, &|slot| {
            slot.kind.store(kind_at_first_use, Ordering::Relaxed)
        })
    }

    /// A lock request by the mutex's holder: counted for a recursive mutex, `EDEADLK` for an
    /// error-checking one; `None` if the caller does not hold it (or it is a normal mutex,
    /// which then deadlocks as with pthreads).
    fn relock(&self, slot: &SyncSlot) -> Option<i32> {
        if slot.owner.load(Ordering::Acquire) != me_tag() {
            return None;
        }
        match slot.kind.load(Ordering::Acquire) {
            mutex_kind::RECURSIVE => {
                slot.recursion.fetch_add(1, Ordering::Relaxed);
                DEPTH.fetch_add(1, Ordering::Relaxed);
                Some(0)
            }
            mutex_kind::ERRORCHECK => Some(libc::EDEADLK),
            _ => None,
        }
    }

    fn acquired(&self, slot: &SyncSlot) {
        slot.owner.store(me_tag(), Ordering::Release);
        slot.recursion.store(1, Ordering::Relaxed);
        DEPTH.fetch_add(1, Ordering::Relaxed);
    }

    /// `pthread_mutex_trylock`: never blocks on the mutex (only on the commit token).
    pub fn mutex_trylock(&self, key: u64, kind_at_first_use: u32) -> i32 {
        let slot = self.mutex_slot(key, kind_at_first_use);
        if slot.owner.load(Ordering::Acquire) == me_tag() {
            return match self.relock(slot) {
                Some(0) => 0,
                _ => libc::EBUSY,
            };
        }
        self.begin();
        if slot.word.try_lock(false) {
            self.acquired(slot);
            return 0;
        }
        if depth() == 0 {
            self.give_token();
        }
        libc::EBUSY
    }

    /// `pthread_mutex_unlock`.
    pub fn mutex_unlock(&self, key: u64, kind_at_first_use: u32) -> i32 {
        let slot = self.mutex_slot(key, kind_at_first_use);
        if depth() == 0 || slot.owner.load(Ordering::Acquire) != me_tag() {
            return libc::EPERM;
        }
        if slot.recursion.fetch_sub(1, Ordering::Relaxed) > 1 {
            DEPTH.fetch_sub(1, Ordering::Relaxed);
            return 0;
        }
        slot.owner.store(0, Ordering::Release);
        let left = DEPTH.fetch_sub(1, Ordering::Relaxed) - 1;
        if left == 0 {
            self.end_section();
            slot.word.unlock();
            self.give_token();
        } else {
            slot.word.unlock();
        }
        0
    }

    /// `pthread_cond_init`: a fresh slot whose deadlines are measured on `clock`.
    pub fn cond_init(&self, key: u64, clock: Clock) -> i32 {
        match self
            .shared
            .reinit(Table::Cond, key, &|slot| slot.set_clock(clock))
        {
            Some(_) => 0,
            None => libc::ENOMEM,
        }
    }

    /// `pthread_cond_destroy`: frees the slot.
    pub fn cond_destroy(&self, key: u64) -> i32 {
        self.shared.release(Table::Cond, key);
        0
    }

    /// `pthread_cond_wait`.
    pub fn cond_wait(&self, cond: u64, mutex: u64) -> i32 {
        self.cond_wait_until(cond, mutex, None)
    }

    /// `pthread_cond_timedwait` / `pthread_cond_clockwait` (`deadline`: an absolute time on
    /// `clock`, or the condition variable's own clock when `clock` is `None`) and
    /// `pthread_cond_wait` (no deadline). The mutex is held again on return, also after a
    /// timeout (`ETIMEDOUT`).
    pub fn cond_wait_until(
        &self,
        cond: u64,
        mutex: u64,
        deadline: Option<(Option<Clock>, &libc::timespec)>,
    ) -> i32 {
        let cond_slot = self.sync_slot(Table::Cond, cond);
        let mutex_slot = self.mutex_slot(mutex, mutex_kind::NORMAL);
        if depth() == 0 || mutex_slot.owner.load(Ordering::Acquire) != me_tag() {
            return libc::EPERM;
        }
        self.begin();
        let seq = cond_slot.seq.load(Ordering::Acquire);
        // A recursive mutex is released entirely and taken back at the same depth.
        let levels = mutex_slot.recursion.swap(0, Ordering::Relaxed).max(1);
        mutex_slot.owner.store(0, Ordering::Release);
        let left = DEPTH.fetch_sub(levels, Ordering::Relaxed) - levels;
        if left == 0 {
            self.end_section();
        } else {
            self.merge_open();
        }
        mutex_slot.word.unlock();
        self.give_token();
        let timed_out = match deadline {
            None => {
                futex_wait(&cond_slot.seq, seq);
                false
            }
            Some((clock, at)) => {
                let clock = clock.unwrap_or_else(|| cond_slot.clock());
                !futex_wait_until(&cond_slot.seq, seq, clock, at)
                    && cond_slot.seq.load(Ordering::Acquire) == seq
            }
        };
        self.mutex_lock(mutex, mutex_kind::NORMAL);
        if levels > 1 {
            mutex_slot.recursion.store(levels, Ordering::Relaxed);
            DEPTH.fetch_add(levels - 1, Ordering::Relaxed);
        }
        if timed_out { libc::ETIMEDOUT } else { 0 }
    }

    /// `pthread_cond_signal` (`all`: broadcast).
    pub fn cond_signal(&self, cond: u64, all: bool) -> i32 {
        let slot = self.sync_slot(Table::Cond, cond);
        if depth() == 0 {
            self.sync_point();
        }
        slot.seq.fetch_add(1, Ordering::AcqRel);
        futex_wake(&slot.seq, if all { i32::MAX } else { 1 });
        0
    }

    /// `pthread_barrier_init`.
    pub fn barrier_init(&self, key: u64, count: u32) -> i32 {
        if count == 0 {
            return libc::EINVAL;
        }
        match self.shared.reinit(Table::Barrier, key, &|slot| {
            slot.count.store(count, Ordering::Relaxed)
        }) {
            Some(_) => 0,
            None => libc::ENOMEM,
        }
    }

    /// `pthread_barrier_destroy`: frees the slot (`EBUSY` while threads wait at it).
    pub fn barrier_destroy(&self, key: u64) -> i32 {
        if let Some(slot) = self.shared.find(Table::Barrier, key)
            && slot.arrived.load(Ordering::Acquire) > 0
        {
            return libc::EBUSY;
        }
        self.shared.release(Table::Barrier, key);
        0
    }

    /// `pthread_barrier_wait`: a synchronisation point, then wait for the generation.
    pub fn barrier_wait(&self, key: u64) -> i32 {
        let slot = self.sync_slot(Table::Barrier, key);
        let count = slot.count.load(Ordering::Acquire);
        if count == 0 {
            return libc::EINVAL;
        }
        self.begin();
        self.release_for_wait();
        let generation = slot.seq.load(Ordering::Acquire);
        let serial = if slot.arrived.fetch_add(1, Ordering::AcqRel) + 1 >= count {
            slot.arrived.store(0, Ordering::Release);
            slot.seq.fetch_add(1, Ordering::AcqRel);
            futex_wake(&slot.seq, i32::MAX);
            libc::PTHREAD_BARRIER_SERIAL_THREAD
        } else {
            while slot.seq.load(Ordering::Acquire) == generation {
                futex_wait(&slot.seq, generation);
            }
            0
        };
        self.after_wait();
        serial
    }

    /// After blocking: drop private copies others may have made stale, and take the token
    /// back if a section is open.
    fn after_wait(&self) {
        self.refresh_kept();
        if depth() > 0 {
            self.take_token();
        }
    }

    /// `pthread_once`: runs `init` once across all threads; its writes are published (and,
    /// outside a section, committed) before any other caller returns.
    pub fn once(&self, key: u64, init: extern "C" fn()) -> i32 {
        const NOT_RUN: u32 = 0;
        const RUNNING: u32 = 1;
        const DONE: u32 = 2;
        let slot = self.sync_slot(Table::Once, key);
        loop {
            match slot
                .seq
                .compare_exchange(NOT_RUN, RUNNING, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    init();
                    if depth() == 0 {
                        self.sync_point();
                    } else {
                        self.take_token();
                        self.merge_open();
                    }
                    slot.seq.store(DONE, Ordering::Release);
                    futex_wake(&slot.seq, i32::MAX);
                    return 0;
                }
                Err(DONE) => {
                    self.refresh_kept();
                    return 0;
                }
                Err(_) => {
                    self.begin();
                    self.release_for_wait();
                    futex_wait(&slot.seq, RUNNING);
                    self.after_wait();
                }
            }
        }
    }

    fn sync_slot(&self, table: Table, key: u64) -> &'static SyncSlot {
        self.sync_slot_with(table, key, &|_| {})
    }

    fn sync_slot_with(
        &self,
        table: Table,
        key: u64,
        init: &dyn Fn(&SyncSlot),
    ) -> &'static SyncSlot {
        self.shared.slot(table, key, init).unwrap_or_else(|| {
            fatal(&format!(
                "too many live {table:?} objects (each needs a slot until it is destroyed)"
            ))
        })
    }

    /// `pthread_create`: a synchronisation point, then `fork`. Returns the new thread's
    /// handle, or an errno. In the child, runs `start(arg)` and exits; never returns.
    pub fn spawn(
        &self,
        start: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
        arg: usize,
        detached: bool,
    ) -> Result<u64, i32> {
        reap_exited_children();
        self.take_token();
        if depth() == 0 {
            self.merge(true, true);
        } else {
            self.merge_open();
        }
        let Some(index) = (1..MAX_THREADS).find(|&i| {
            self.shared.threads[i]
                .state
                .compare_exchange(
                    thread_state::FREE,
                    thread_state::RUNNING,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
        }) else {
            self.leave_spawn();
            return Err(libc::EAGAIN);
        };
        let slot = &self.shared.threads[index];
        slot.detached.store(u32::from(detached), Ordering::SeqCst);
        slot.parent
            .store(ME.load(Ordering::Relaxed), Ordering::Relaxed);
        slot.retval.store(0, Ordering::Relaxed);
        slot.name_pending.store(0, Ordering::Relaxed);
        self.shared.live_threads.fetch_add(1, Ordering::AcqRel);
        // Empty stdio buffers first: the child would otherwise inherit (and print again)
        // output the parent has not flushed yet. The child flushes its own at exit.
        // SAFETY: fflush(NULL) flushes every open output stream; no pointer is passed.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        // SAFETY: fork in a single-threaded process; the child only runs the program's start
        // routine and the runtime, then leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            self.shared.live_threads.fetch_sub(1, Ordering::AcqRel);
            slot.state.store(thread_state::FREE, Ordering::Release);
            self.leave_spawn();
            return Err(libc::EAGAIN);
        }
        if pid == 0 {
            if ME.load(Ordering::Relaxed) == 0 {
                // A thread dies with the program's main process (as with pthreads).
                // SAFETY: prctl with an integer argument.
                unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            }
            ME.store(index as u32, Ordering::Relaxed);
            // The main process works on the shared view of the unlogged regions directly;
            // a thread-process tracks its writes. Fork copied no page-table entries of
            // those shared mappings, so replacing them is cheap.
            self.tracker
                .set_tracking(true)
                .unwrap_or_else(|e| fatal(&e.to_string()));
            self.tracker.after_fork();
            DEPTH.store(0, Ordering::Relaxed);
            crate::malloc::pending_frees().clear();
            set(&HOLDS, false);
            set(&OPEN, false);
            set(&CHILD, true);
            children().clear();
            let result = start(arg as *mut libc::c_void);
            self.exit_thread(result as u64);
        }
        slot.pid.store(pid, Ordering::Release);
        children().push(pid);
        self.leave_spawn();
        Ok(index as u64 + 1)
    }

    fn leave_spawn(&self) {
        if depth() == 0 {
            self.give_token();
        }
    }

    /// `pthread_exit` in a thread-process (also the end of its start routine).
    pub fn exit_thread(&self, retval: u64) -> ! {
        let index = ME.load(Ordering::Relaxed) as usize;
        // This thread's own stdio output, before a joiner can print (the parent emptied the
        // buffers the child inherited before forking).
        // SAFETY: fflush(NULL) flushes every open output stream; no pointer is passed.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        self.take_token();
        DEPTH.store(0, Ordering::Relaxed);
        set(&EXITING, true);
        self.end_section();
        let slot = &self.shared.threads[index];
        slot.retval.store(retval, Ordering::Release);
        self.shared.live_threads.fetch_sub(1, Ordering::AcqRel);
        slot.state.store(thread_state::DONE, Ordering::SeqCst);
        if slot.detached.load(Ordering::SeqCst) == 1 {
            free_if_done(slot);
        }
        futex_wake(&slot.state, i32::MAX);
        self.give_token();
        // SAFETY: ends the thread-process without running the program's exit handlers (they
        // belong to the main thread's process exit).
        unsafe { libc::_exit(0) }
    }

    /// Whether this process is a thread-process.
    pub fn is_child(&self) -> bool {
        get(&CHILD)
    }

    /// The slot of a joinable or running thread handle, or an errno.
    fn thread_slot(&self, handle: u64) -> Result<&'static crate::shared::ThreadSlot, i32> {
        let index = handle.wrapping_sub(1) as usize;
        if index >= MAX_THREADS {
            return Err(libc::ESRCH);
        }
        let slot = &self.shared.threads[index];
        if slot.state.load(Ordering::Acquire) == thread_state::FREE {
            return Err(libc::ESRCH);
        }
        Ok(slot)
    }

    /// `pthread_join`: a synchronisation point, then wait for the thread's end.
    pub fn join(&self, handle: u64) -> Result<u64, i32> {
        self.join_until(handle, JoinWait::Block)
    }

    /// `pthread_join` (`Block`), `pthread_tryjoin_np` (`Try`: `EBUSY` if the thread runs)
    /// and `pthread_timedjoin_np` (`Until`: `ETIMEDOUT` after the realtime deadline).
    pub fn join_until(&self, handle: u64, wait: JoinWait<'_>) -> Result<u64, i32> {
        let index = handle.wrapping_sub(1) as usize;
        if index == 0 || index == ME.load(Ordering::Relaxed) as usize {
            return Err(if index == 0 {
                libc::ESRCH
            } else {
                libc::EDEADLK
            });
        }
        let slot = self.thread_slot(handle)?;
        if slot.detached.load(Ordering::SeqCst) == 1 {
            return Err(libc::EINVAL);
        }
        if matches!(wait, JoinWait::Try) && slot.state.load(Ordering::Acquire) != thread_state::DONE
        {
            return Err(libc::EBUSY);
        }
        let token_deadline = match wait {
            JoinWait::Until(at) => Some((Clock::Realtime, at)),
            _ => None,
        };
        if !self.begin_until(token_deadline) {
            return Err(libc::ETIMEDOUT);
        }
        self.release_for_wait();
        let mut timed_out = false;
        loop {
            let state = slot.state.load(Ordering::Acquire);
            if state == thread_state::DONE {
                break;
            }
            match wait {
                JoinWait::Until(deadline) => {
                    if !futex_wait_until(&slot.state, state, Clock::Realtime, deadline) {
                        timed_out = slot.state.load(Ordering::Acquire) != thread_state::DONE;
                        if timed_out {
                            break;
                        }
                    }
                }
                _ => futex_wait_for(&slot.state, state, JOIN_WATCHDOG),
            }
            self.check_alive(handle, slot);
        }
        self.after_wait();
        if timed_out {
            return Err(libc::ETIMEDOUT);
        }
        reap_exited_children();
        let retval = slot.retval.load(Ordering::Acquire);
        slot.pid.store(0, Ordering::Relaxed);
        slot.state.store(thread_state::FREE, Ordering::Release);
        Ok(retval)
    }

    /// Ends the run if the thread `handle` died without ending (a signal, or `exit` in a
    /// thread-process that was not the program's): waiting for it would never return.
    fn check_alive(&self, handle: u64, slot: &crate::shared::ThreadSlot) {
        if slot.state.load(Ordering::Acquire) != thread_state::RUNNING {
            return;
        }
        let pid = slot.pid.load(Ordering::Acquire);
        if pid > 0
            && !process_alive(pid)
            && slot.state.load(Ordering::Acquire) == thread_state::RUNNING
        {
            fatal(&format!(
                "thread {handle} (process {pid}) died without ending; ending the program"
            ));
        }
    }

    /// `pthread_detach`: the thread frees its own slot when it ends (at once if it has).
    pub fn detach(&self, handle: u64) -> i32 {
        let Ok(slot) = self.thread_slot(handle) else {
            return libc::ESRCH;
        };
        if handle == 1 {
            return 0; // the main thread's end is the process's
        }
        if slot.detached.swap(1, Ordering::SeqCst) == 1 {
            return libc::EINVAL;
        }
        free_if_done(slot);
        0
    }

    /// `pthread_kill`: sends `signal` to the thread-process (0 only checks it exists).
    pub fn kill_thread(&self, handle: u64, signal: i32) -> i32 {
        match self.thread_pid(handle) {
            // SAFETY: kill has no memory preconditions.
            Some(pid) => match unsafe { libc::kill(pid, signal) } {
                0 => 0,
                _ => std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::ESRCH),
            },
            None => libc::ESRCH,
        }
    }

    /// The process id of a live thread handle.
    pub fn thread_pid(&self, handle: u64) -> Option<i32> {
        let slot = self.thread_slot(handle).ok()?;
        if slot.state.load(Ordering::Acquire) != thread_state::RUNNING {
            return None;
        }
        if handle == self.self_handle() {
            // SAFETY: getpid has no preconditions.
            return Some(unsafe { libc::getpid() });
        }
        Some(slot.pid.load(Ordering::Acquire)).filter(|&pid| pid > 0)
    }

    /// `pthread_setname_np` of another thread: recorded for it to apply at its next
    /// synchronisation point (a process cannot rename another).
    pub fn set_thread_name(&self, handle: u64, name: &[u8]) -> i32 {
        match self.thread_slot(handle) {
            Ok(slot) if handle == self.self_handle() => {
                slot.name_pending.store(0, Ordering::Release);
                set_own_name(name)
            }
            Ok(slot) => {
                slot.set_pending_name(name);
                0
            }
            Err(errno) => errno,
        }
    }

    /// The name set for a thread by another that it has not applied yet.
    pub fn pending_thread_name(&self, handle: u64) -> Option<[u8; 16]> {
        self.thread_slot(handle).ok()?.pending_name()
    }

    fn apply_pending_name(&self) {
        let slot = &self.shared.threads[ME.load(Ordering::Relaxed) as usize];
        if let Some(name) = slot.pending_name() {
            slot.name_pending.store(0, Ordering::Release);
            let len = name.iter().position(|&b| b == 0).unwrap_or(15);
            set_own_name(&name[..len]);
        }
    }

    /// This thread's handle (`pthread_self`).
    pub fn self_handle(&self) -> u64 {
        u64::from(ME.load(Ordering::Relaxed)) + 1
    }

    /// Waits for every other joinable thread-process (main's `pthread_exit`).
    pub fn join_all(&self) {
        for handle in 2..=MAX_THREADS as u64 {
            let slot = &self.shared.threads[handle as usize - 1];
            if slot.state.load(Ordering::Acquire) != thread_state::FREE
                && slot.detached.load(Ordering::SeqCst) == 0
            {
                let _ = self.join(handle);
            }
        }
        while self.shared.live_threads.load(Ordering::Acquire) > 1 {
            // Detached threads still running: wait for them as the process would.
            std::thread::sleep(std::time::Duration::from_millis(1));
            reap_exited_children();
        }
    }

    /// `nvmalloc`: the named object if it exists, else a fresh zeroed one. Durable on return
    /// outside a section; part of the section inside one.
    pub fn nvmalloc(&self, size: u64, name: Option<&[u8]>) -> *mut u8 {
        self.begin();
        let meta = self.meta();
        let found = name.and_then(|name| heapmeta::lookup(meta, name));
        let result = match found {
            Some((offset, existing)) if existing >= size => Ok(offset),
            Some(_) => Err(()),
            None => heapmeta::allocate(meta, self.heap_len, size, name).map_err(|_| ()),
        };
        if depth() == 0 {
            self.end_section();
            self.give_token();
        }
        match result {
            Ok(offset) => self.heap_ptr(offset),
            Err(()) => std::ptr::null_mut(),
        }
    }

    /// `nvrecover`: copies the named object's recovered bytes (at most `size`) to `dest`.
    /// Returns the number of bytes copied (0 if there is no such object).
    ///
    /// # Safety
    /// `dest` must be valid for writes of `size` bytes.
    pub unsafe fn nvrecover(&self, dest: *mut u8, size: u64, name: &[u8]) -> u64 {
        self.begin();
        let copied = match heapmeta::lookup(self.meta(), name) {
            Some((offset, existing)) => {
                let len = existing.min(size);
                let src = self.heap_ptr(offset);
                if src != dest {
                    // SAFETY: `src` is `len` bytes of the heap; `dest` is valid for `size ≥
                    // len` bytes (caller); `copy` allows overlap.
                    unsafe { std::ptr::copy(src, dest, len as usize) };
                }
                len
            }
            None => 0,
        };
        if depth() == 0 {
            self.end_section();
            self.give_token();
        }
        copied
    }

    /// The main thread's process exit: commit and close cleanly if every thread has ended
    /// and no lock is held; otherwise leave the pool as a crash would.
    fn finish(&self) {
        if self.is_child() {
            // `exit` called by a thread: with pthreads it ends the whole program.
            let _ = writeln!(
                std::io::stderr(),
                "nvthreads: exit() called in thread {}: ending the program",
                self.self_handle()
            );
            kill_other_processes();
            return;
        }
        let others = self
            .shared
            .live_threads
            .load(Ordering::Acquire)
            .saturating_sub(1);
        if others > 0 || depth() > 0 {
            for slot in &self.shared.threads[1..] {
                let pid = slot.pid.load(Ordering::Acquire);
                if pid > 0 && slot.state.load(Ordering::Acquire) == thread_state::RUNNING {
                    // SAFETY: killing and reaping a thread-process of this run.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                        libc::waitpid(pid, std::ptr::null_mut(), 0);
                    }
                }
            }
            if let Some(journal) = self
                .journal
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                journal.mark_unclean_on_drop();
            }
            return;
        }
        self.take_token();
        self.merge(true, false);
        if env_u64("NVT_STATS", 0) == 1 {
            let [commits, records, bytes, pages, checkpoints, log_bytes] = &self.shared.counters;
            let _ = writeln!(
                std::io::stderr(),
                "nvthreads-stats commits={} records={} logged_bytes={} merged_pages={} \
                 checkpoints={} log_bytes={}",
                commits.load(Ordering::Relaxed),
                records.load(Ordering::Relaxed),
                bytes.load(Ordering::Relaxed),
                pages.load(Ordering::Relaxed),
                checkpoints.load(Ordering::Relaxed),
                log_bytes.load(Ordering::Relaxed)
            );
        }
        if let Some(journal) = self
            .journal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            && let Err(error) = journal.close()
        {
            let _ = writeln!(std::io::stderr(), "nvthreads: closing the pool: {error}");
        }
        self.give_token();
    }
}

/// Log bytes of a page's runs as record entries (header plus bytes padded to 8).
fn encoded_len(spans: &[Span]) -> usize {
    spans
        .iter()
        .map(|span| 16 + span.len.next_multiple_of(8))
        .sum()
}

/// The message for a failed log operation (a full log names the settings to change).
fn log_error(error: &crate::NvtError) -> String {
    match error {
        crate::NvtError::LogFull { .. } => format!(
            "{error}: the changes of one synchronisation interval, together with those of \
             sections still open in cond_wait, must fit in the log; create the pool with a \
             larger NVT_LOG_MB"
        ),
        _ => error.to_string(),
    }
}

/// The page-aligned regions the tracker maps: the persistent heap, the program's globals
/// (shared, unless `NVT_GLOBALS=0`; logged at the heap's end with `NVT_GLOBALS=persistent`)
/// and, in shared `malloc` mode, the volatile region.
fn region_specs(layout: &GlobalsLayout, base_addr: u64, malloc: MallocMode) -> Vec<RegionSpec> {
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
        let len = (env_u64("NVT_MALLOC_MB", DEFAULT_MALLOC_MB) << 20)
            .next_multiple_of(crate::alloc::CHUNK as u64) as usize;
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
struct GlobalsLayout {
    /// The globals (none with `NVT_GLOBALS=0`).
    globals: crate::globals::ProgramGlobals,
    /// The pool's heap size.
    pool_heap_len: u64,
    /// The heap the allocator may use: the pool's minus the globals' reservation.
    heap_len: u64,
    /// Whether the globals are logged into the reservation.
    persistent: bool,
    /// Whether the reservation holds this executable's globals from an earlier run.
    recovered: bool,
}

impl GlobalsLayout {
    /// Decides from `NVT_GLOBALS` and the heap metadata of the home image.
    fn plan(journal: &RtJournal) -> Result<GlobalsLayout, String> {
        let pool_heap_len = journal.geometry().heap_len;
        let mode = std::env::var("NVT_GLOBALS").unwrap_or_default();
        let globals = match mode.as_str() {
            "0" | "private" => crate::globals::ProgramGlobals::default(),
            "" | "1" | "shared" | "persistent" => crate::globals::program_globals(),
            other => {
                return Err(format!(
                    "NVT_GLOBALS={other}: expected shared, persistent or private"
                ));
            }
        };
        let mut meta = vec![0u8; heapmeta::META_LEN];
        journal.read_home(0, &mut meta);
        let formatted = heapmeta::is_formatted(&meta);
        let (recorded, fingerprint, recorded_len) = if formatted {
            heapmeta::globals(&meta)
        } else {
            (0, 0, 0)
        };
        let wanted = mode == "persistent" && !globals.is_empty();
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
    fn excluded_offsets(&self) -> Vec<(u64, u64)> {
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

/// The parts of `run` outside the sorted `excluded` offset ranges.
fn without<'a>(run: Run<'a>, excluded: &[(u64, u64)]) -> Vec<Run<'a>> {
    let mut parts = Vec::new();
    let (mut at, end) = (run.offset, run.offset + run.bytes.len() as u64);
    for &(start, stop) in excluded {
        if stop <= at {
            continue;
        }
        if start >= end {
            break;
        }
        if start > at {
            parts.push(Run {
                offset: at,
                bytes: &run.bytes[(at - run.offset) as usize..(start - run.offset) as usize],
            });
        }
        at = at.max(stop);
    }
    if at < end {
        parts.push(Run {
            offset: at,
            bytes: &run.bytes[(at - run.offset) as usize..],
        });
    }
    parts
}

fn warn(message: &str) {
    let _ = writeln!(std::io::stderr(), "nvthreads: {message}");
}

/// Tells processes started from this one (a `system()` call inheriting `LD_PRELOAD`) that
/// the pool at `path` is in use, so their copy of the runtime stays dormant instead of
/// waiting for the pool's lock.
fn mark_active(path: &std::path::Path) {
    if let Ok(value) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) {
        // SAFETY: called from the runtime's start, before the program creates threads; both
        // strings are NUL-terminated and copied by setenv.
        unsafe { libc::setenv(c"NVT_ACTIVE".as_ptr(), value.as_ptr(), 1) };
    }
}

/// Whether the runtime must stay dormant in this process (every interposed function then
/// forwards to libc): `NVT_DISABLE=1`, or a process of a running program on the same pool
/// started this one.
pub fn should_stay_dormant() -> bool {
    if std::env::var("NVT_DISABLE").is_ok_and(|v| v == "1") {
        return true;
    }
    std::env::var_os("NVT_ACTIVE").is_some_and(|active| active == pool_path().as_os_str())
}

/// How often a joiner checks that the thread it waits for still lives.
const JOIN_WATCHDOG: std::time::Duration = std::time::Duration::from_millis(200);

/// Whether `pid` is alive (not gone, not a zombie). A child of this process that has exited
/// is reaped here.
fn process_alive(pid: i32) -> bool {
    if children().contains(&pid) {
        // SAFETY: a non-blocking wait for one of our own children.
        let reaped = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        if reaped == pid {
            children().retain(|&child| child != pid);
            return false;
        }
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_none_or(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// Says on stderr which thread dies of which signal (async-signal-safe: no allocation,
/// one `write`).
fn report_fatal_signal(signal: i32) {
    let mut message = *b"nvthreads: thread ### died of signal ##; ending the program\n";
    let mut put = |at: usize, width: usize, mut value: u64| {
        for i in (0..width).rev() {
            message[at + i] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(18, 3, u64::from(ME.load(Ordering::Relaxed)) + 1);
    put(37, 2, signal.unsigned_abs().into());
    // SAFETY: write(2) of a stack buffer is async-signal-safe.
    unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
}

/// The fatal hook of the page tracker: a fault that is not a tracked write.
fn on_foreign_fault() {
    report_fatal_signal(libc::SIGSEGV);
    kill_other_processes();
}

/// Ends every other process of the run (async-signal-safe: atomics and `kill`): a thread
/// that dies of a signal, or calls `exit`, ends the whole program as with pthreads.
fn kill_other_processes() {
    let Some(shared) = SHARED.get() else {
        return;
    };
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    for slot in &shared.threads {
        let pid = slot.pid.load(Ordering::Relaxed);
        if pid > 0 && pid != me && slot.state.load(Ordering::Relaxed) == thread_state::RUNNING {
            // SAFETY: signalling a process of this run.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

extern "C" fn on_fatal_signal(signal: i32) {
    report_fatal_signal(signal);
    kill_other_processes();
    // SAFETY: restoring the default action and re-raising is async-signal-safe; the process
    // then dies of the signal as it would without the runtime.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
}

/// A fatal signal in any process of the run ends every process of it.
fn install_fatal_handlers() {
    crate::pages::set_fatal_hook(on_foreign_fault);
    for signal in [
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGABRT,
        libc::SIGTRAP,
    ] {
        let handler: extern "C" fn(i32) = on_fatal_signal;
        // SAFETY: installing a handler with the plain one-argument signature; it only uses
        // async-signal-safe calls.
        unsafe { libc::signal(signal, handler as libc::sighandler_t) };
    }
}

/// Names the calling process (`prctl(PR_SET_NAME)`); returns an errno.
fn set_own_name(name: &[u8]) -> i32 {
    let mut bytes = [0u8; 16];
    bytes[..name.len().min(15)].copy_from_slice(&name[..name.len().min(15)]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    match unsafe { libc::prctl(libc::PR_SET_NAME, bytes.as_ptr()) } {
        0 => 0,
        _ => std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL),
    }
}

/// How `join_until` waits.
#[derive(Clone, Copy, Debug)]
pub enum JoinWait<'a> {
    /// Until the thread ends.
    Block,
    /// Not at all: `EBUSY` if it runs.
    Try,
    /// Until the absolute `CLOCK_REALTIME` deadline.
    Until(&'a libc::timespec),
}

/// Thread-processes this process created and has not reaped (private to each process).
fn children() -> std::sync::MutexGuard<'static, Vec<i32>> {
    static CHILDREN: Mutex<Vec<i32>> = Mutex::new(Vec::new());
    CHILDREN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reaps the children that have exited without being joined (detached threads).
fn reap_exited_children() {
    children().retain(|&pid| {
        // SAFETY: a non-blocking wait for one of our own children.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) == 0 }
    });
}

/// Frees a detached thread's slot once it has ended (called by the thread and by the
/// detacher; the exchange makes exactly one of them do it).
fn free_if_done(slot: &crate::shared::ThreadSlot) {
    if slot
        .state
        .compare_exchange(
            thread_state::DONE,
            thread_state::FREE,
            Ordering::SeqCst,
            Ordering::SeqCst,
        )
        .is_ok()
    {
        slot.pid.store(0, Ordering::Relaxed);
    }
}

extern "C" fn at_exit() {
    if let Some(runtime) = RUNTIME.get() {
        runtime.finish();
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

/// A persistence step (every fence of the log protocol: recovery, append, commit,
/// checkpoint): counts it across all thread-processes and, at the `NVT_CRASH_AT`-th, kills
/// the process group — with `NVT_PFAIL`, after rolling back the pool's pending lines as a
/// power failure just before that fence would (`crate::pfail`).
fn step() {
    let n = match SHARED.get() {
        Some(shared) => shared.steps.fetch_add(1, Ordering::Relaxed) + 1,
        None => EARLY_STEPS.fetch_add(1, Ordering::Relaxed) + 1,
    };
    let crash_at = *CRASH_AT.get_or_init(|| env_u64("NVT_CRASH_AT", 0));
    if crash_at != 0 && n == crash_at {
        crate::pfail::power_failure(n);
        // SAFETY: kill(0, SIGKILL) signals our own process group.
        unsafe { libc::kill(0, libc::SIGKILL) };
    }
}

/// Opens the pool, waiting up to 3 s while it is locked: after a crash, the killed run's
/// thread-processes (which share the lock) may still be exiting.
fn open_pool(path: &std::path::Path, options: &NativeOptions) -> Result<RtPool, String> {
    let mut tries = 0;
    loop {
        match RtPool::open(path, options) {
            Err(pmem::PoolError::AlreadyOpen) if tries < 300 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            result => return result.map_err(|e| format!("opening {}: {e}", path.display())),
        }
    }
}

/// Copies the used part of the home image into the shared view. Returns whether the heap
/// metadata was already there.
fn load_home(
    journal: &RtJournal,
    tracker: &Tracker,
    layout: &GlobalsLayout,
) -> Result<bool, String> {
    let mut meta = vec![0u8; heapmeta::META_LEN];
    journal.read_home(0, &mut meta);
    if !heapmeta::is_formatted(&meta) {
        return Ok(false);
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
