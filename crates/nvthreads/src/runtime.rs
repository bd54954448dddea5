//! The runtime behind the C ABI (`docs/nvthreads.md` §3, §5): threads as processes over
//! one shared heap, durable code sections, merges, commits, and the persistent allocator.
//!
//! Every process of a run is single-threaded (a "thread" is a process made by `fork`), so
//! the per-process state below is plain atomics used with relaxed ordering; `fork` copies it
//! into each child. What all processes share is in [`Shared`]; what persists is in the
//! [`Journal`]. The entry points are called by the `cdylib` (`ffi/lib.rs`), never by Rust
//! code in the same process as a test harness: they fork, and they own the process's
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

use crate::heapmeta;
use crate::journal::{Config, Journal, LAYOUT, Mutation};
use crate::pages::{PAGE, Tracker};
use crate::record::Run;
use crate::shared::{MAX_THREADS, Shared, Table, futex_wait, futex_wake, thread_state};
use pmem::{CreateOptions, Native, NativeOptions, Pool};
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
    journal: Mutex<Option<Journal<Native>>>,
    tracker: &'static Tracker,
    shared: &'static Shared,
    heap_len: u64,
    crashed: bool,
    /// Test-only protocol bug (`NVT_MUTANT`), which the C-program tests must catch.
    mutant: Mutant,
}

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
/// The merge generation this process's private copies are consistent with.
static SEEN_GEN: AtomicU64 = AtomicU64::new(0);

fn get(flag: &AtomicBool) -> bool {
    flag.load(Ordering::Relaxed)
}

fn set(flag: &AtomicBool, value: bool) {
    flag.store(value, Ordering::Relaxed);
}

fn depth() -> u32 {
    DEPTH.load(Ordering::Relaxed)
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
        let options = NativeOptions::default().with_env_overrides();
        let (journal, state, crashed) = if path.exists() {
            let pool = open_pool(&path, &options)?;
            let (journal, state, recovery) = Journal::open_in(pool, Mutation::None, Some(step))
                .map_err(|e| format!("recovering {}: {e}", path.display()))?;
            (journal, state, !recovery.was_clean)
        } else {
            let config = Config {
                heap_len: env_u64("NVT_HEAP_MB", DEFAULT_HEAP_MB) << 20,
                log_len: env_u64("NVT_LOG_MB", DEFAULT_LOG_MB) << 20,
                base_addr: crate::DEFAULT_BASE_ADDR,
            };
            let mut create = CreateOptions::new(LAYOUT, config.pool_size());
            create.native = options;
            let pool = Pool::create(&path, &create)
                .map_err(|e| format!("creating {}: {e}", path.display()))?;
            let (mut journal, state) =
                Journal::create_in(pool, &config).map_err(|e| e.to_string())?;
            journal.set_fence_hook(Some(step));
            (journal, state, false)
        };
        let geo = journal.geometry();
        let mut globals = if env_u64("NVT_GLOBALS", 1) == 0 {
            Vec::new()
        } else {
            program_globals()
        };
        globals.truncate(crate::pages::MAX_REGIONS - 1);
        let tracker = Tracker::install_with(
            geo.heap_len as usize,
            Some(geo.base_addr as usize),
            &globals,
        )
        .map_err(|e| format!("mapping the heap: {e}"))?;
        let formatted = load_home(&journal, tracker)?;
        let shared = Shared::map().map_err(|e| format!("mapping shared state: {e}"))?;
        shared
            .steps
            .store(EARLY_STEPS.load(Ordering::Relaxed), Ordering::Relaxed);
        let _ = SHARED.set(shared);
        shared.set_journal_state(&state);
        shared.live_threads.store(1, Ordering::Relaxed);
        let main = &shared.threads[0];
        main.state.store(thread_state::RUNNING, Ordering::Relaxed);
        // SAFETY: getpid has no preconditions.
        main.pid.store(unsafe { libc::getpid() }, Ordering::Relaxed);
        // SAFETY: registering a plain extern "C" function with no arguments.
        unsafe { libc::atexit(at_exit) };
        let runtime = Runtime {
            journal: Mutex::new(Some(journal)),
            tracker,
            shared,
            heap_len: geo.heap_len,
            crashed,
            mutant: Mutant::from_env(),
        };
        if !formatted {
            heapmeta::format(runtime.meta());
            runtime.sync_point();
        }
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
        if !get(&HOLDS) {
            self.shared.token.lock();
            set(&HOLDS, true);
            self.refresh_kept();
        }
    }

    /// Drops the private copies kept from earlier intervals if another process has merged
    /// since they were taken (called before reading shared data after synchronising).
    fn refresh_kept(&self) {
        if self.shared.merge_gen.load(Ordering::Acquire) != SEEN_GEN.load(Ordering::Relaxed) {
            self.tracker
                .drop_kept()
                .unwrap_or_else(|e| fatal(&e.to_string()));
        }
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
        // Heap runs are logged and published; runs in adopted ranges (the program's globals)
        // are only published: they are shared but not persistent.
        let mut runs = Vec::new();
        let mut volatile = Vec::new();
        let mut spans = Vec::new();
        for page in tracker.dirty_pages() {
            spans.clear();
            tracker.diff_page(page, &mut spans);
            let bytes = tracker.private_page(page);
            let target = if page < tracker.heap_pages() {
                &mut runs
            } else {
                &mut volatile
            };
            target.extend(spans.iter().map(|span| Run {
                offset: (page * PAGE + span.start) as u64,
                bytes: &bytes[span.start..span.start + span.len],
            }));
        }
        for run in &volatile {
            tracker.publish(run.offset as usize, run.bytes.len());
        }
        let guard = self.journal.lock().unwrap_or_else(|e| e.into_inner());
        let journal = guard.as_ref().unwrap_or_else(|| fatal("merge after close"));
        let mut state = self.shared.journal_state();
        if self.mutant == Mutant::CommitPerPage {
            for page_runs in runs.chunk_by(|a, b| a.offset / PAGE as u64 == b.offset / PAGE as u64)
            {
                journal
                    .append(&mut state, page_runs)
                    .unwrap_or_else(|e| fatal(&e.to_string()));
                journal.commit(&mut state);
                self.shared.set_journal_state(&state);
            }
            runs.iter()
                .for_each(|run| tracker.publish(run.offset as usize, run.bytes.len()));
            drop(guard);
            self.end_interval(!runs.is_empty() || !volatile.is_empty(), true);
            return;
        }
        if !runs.is_empty() {
            journal
                .append(&mut state, &runs)
                .unwrap_or_else(|e| fatal(&e.to_string()));
            self.shared.set_journal_state(&state);
            let bytes: u64 = runs.iter().map(|run| run.bytes.len() as u64).sum();
            self.shared.counters[1].fetch_add(1, Ordering::Relaxed);
            self.shared.counters[2].fetch_add(bytes, Ordering::Relaxed);
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
            }
        }
        drop(guard);
        for run in &runs {
            tracker.publish(run.offset as usize, run.bytes.len());
        }
        self.end_interval(!runs.is_empty() || !volatile.is_empty(), force_drop);
    }

    /// After publishing: advances the merge generation if anything was published, and
    /// write-protects this interval's pages, keeping the private copies only if no other
    /// process has merged since this one's copies were taken (lazy dropping).
    fn end_interval(&self, published: bool, force_drop: bool) {
        let stale =
            self.shared.merge_gen.load(Ordering::Acquire) != SEEN_GEN.load(Ordering::Relaxed);
        let generation = if published {
            self.shared.merge_gen.fetch_add(1, Ordering::AcqRel) + 1
        } else {
            self.shared.merge_gen.load(Ordering::Acquire)
        };
        self.tracker
            .reset(force_drop || stale)
            .unwrap_or_else(|e| fatal(&e.to_string()));
        SEEN_GEN.store(generation, Ordering::Relaxed);
    }

    /// Takes the token for a synchronisation operation; at depth 0 that commits the writes
    /// made since the thread's last synchronisation point.
    fn begin(&self) {
        if get(&HOLDS) {
            return;
        }
        self.take_token();
        if depth() == 0 {
            self.merge(true, false);
        }
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

    /// `pthread_mutex_lock`.
    pub fn mutex_lock(&self, key: u64) -> i32 {
        let slot = self.sync_slot(Table::Mutex, key);
        let mut contended = false;
        loop {
            self.begin();
            if slot.word.try_lock(contended) {
                DEPTH.fetch_add(1, Ordering::Relaxed);
                return 0;
            }
            self.release_for_wait();
            slot.word.wait_free();
            contended = true;
            if depth() > 0 {
                self.take_token();
            }
        }
    }

    /// `pthread_mutex_trylock`: never blocks on the mutex (only on the commit token).
    pub fn mutex_trylock(&self, key: u64) -> i32 {
        let slot = self.sync_slot(Table::Mutex, key);
        self.begin();
        if slot.word.try_lock(false) {
            DEPTH.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        if depth() == 0 {
            self.give_token();
        }
        libc::EBUSY
    }

    /// `pthread_mutex_unlock`.
    pub fn mutex_unlock(&self, key: u64) -> i32 {
        let slot = self.sync_slot(Table::Mutex, key);
        if depth() == 0 {
            return libc::EPERM;
        }
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

    /// `pthread_cond_wait`.
    pub fn cond_wait(&self, cond: u64, mutex: u64) -> i32 {
        let cond_slot = self.sync_slot(Table::Cond, cond);
        let mutex_slot = self.sync_slot(Table::Mutex, mutex);
        if depth() == 0 {
            return libc::EPERM;
        }
        self.begin();
        let seq = cond_slot.seq.load(Ordering::Acquire);
        let left = DEPTH.fetch_sub(1, Ordering::Relaxed) - 1;
        if left == 0 {
            self.end_section();
        } else {
            self.merge_open();
        }
        mutex_slot.word.unlock();
        self.give_token();
        futex_wait(&cond_slot.seq, seq);
        self.mutex_lock(mutex)
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
        let slot = self.sync_slot(Table::Barrier, key);
        slot.arrived.store(0, Ordering::Relaxed);
        slot.count.store(count, Ordering::Release);
        0
    }

    /// `pthread_barrier_wait`: a synchronisation point, then wait for the generation.
    pub fn barrier_wait(&self, key: u64) -> i32 {
        let slot = self.sync_slot(Table::Barrier, key);
        self.begin();
        self.release_for_wait();
        let generation = slot.seq.load(Ordering::Acquire);
        let count = slot.count.load(Ordering::Acquire);
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
        self.refresh_kept();
        if depth() > 0 {
            self.take_token();
        }
        serial
    }

    fn sync_slot(&self, table: Table, key: u64) -> &'static crate::shared::SyncSlot {
        self.shared
            .slot(table, key)
            .unwrap_or_else(|| fatal(&format!("too many {table:?} objects")))
    }

    /// `pthread_create`: a synchronisation point, then `fork`. Returns the new thread's
    /// handle, or an errno. In the child, runs `start(arg)` and exits; never returns.
    pub fn spawn(
        &self,
        start: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
        arg: usize,
    ) -> Result<u64, i32> {
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
            ME.store(index as u32, Ordering::Relaxed);
            DEPTH.store(0, Ordering::Relaxed);
            set(&HOLDS, false);
            set(&OPEN, false);
            set(&CHILD, true);
            let result = start(arg as *mut libc::c_void);
            self.exit_thread(result as u64);
        }
        slot.pid.store(pid, Ordering::Release);
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
        self.end_section();
        let slot = &self.shared.threads[index];
        slot.retval.store(retval, Ordering::Release);
        self.shared.live_threads.fetch_sub(1, Ordering::AcqRel);
        slot.state.store(thread_state::DONE, Ordering::Release);
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

    /// `pthread_join`: a synchronisation point, then wait for the thread's end.
    pub fn join(&self, handle: u64) -> Result<u64, i32> {
        let index = handle.wrapping_sub(1) as usize;
        if index == 0 || index >= MAX_THREADS || index == ME.load(Ordering::Relaxed) as usize {
            return Err(libc::EINVAL);
        }
        let slot = &self.shared.threads[index];
        if slot.state.load(Ordering::Acquire) == thread_state::FREE {
            return Err(libc::ESRCH);
        }
        self.begin();
        self.release_for_wait();
        loop {
            let state = slot.state.load(Ordering::Acquire);
            if state == thread_state::DONE {
                break;
            }
            futex_wait(&slot.state, state);
        }
        self.refresh_kept();
        let pid = slot.pid.load(Ordering::Acquire);
        // SAFETY: reaping our own child (a thread-process made by a sibling is not our
        // child: waitpid then fails with ECHILD, which is harmless).
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        let retval = slot.retval.load(Ordering::Acquire);
        slot.pid.store(0, Ordering::Relaxed);
        slot.state.store(thread_state::FREE, Ordering::Release);
        if depth() > 0 {
            self.take_token();
        }
        Ok(retval)
    }

    /// This thread's handle (`pthread_self`).
    pub fn self_handle(&self) -> u64 {
        u64::from(ME.load(Ordering::Relaxed)) + 1
    }

    /// Waits for every other thread-process (main's `pthread_exit`).
    pub fn join_all(&self) {
        for handle in 2..=MAX_THREADS as u64 {
            let state = self.shared.threads[handle as usize - 1]
                .state
                .load(Ordering::Acquire);
            if state != thread_state::FREE {
                let _ = self.join(handle);
            }
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
                journal.pool().mark_unclean_on_drop();
            }
            return;
        }
        self.take_token();
        self.merge(true, false);
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

extern "C" fn at_exit() {
    if let Some(runtime) = RUNTIME.get() {
        runtime.finish();
    }
}

/// The page-aligned writable part of the program's own data segment (`.data`, `.bss`),
/// without its RELRO part: shared between thread-processes like the heap (not persistent).
fn program_globals() -> Vec<(usize, usize)> {
    let mut found: Vec<(usize, usize)> = Vec::new();
    // SAFETY: dl_iterate_phdr calls the callback with valid program headers; `data` is our
    // `Vec`, used only during the call. The first object reported is the executable.
    unsafe {
        libc::dl_iterate_phdr(Some(first_object_globals), (&raw mut found).cast());
    }
    found
}

unsafe extern "C" fn first_object_globals(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut libc::c_void,
) -> i32 {
    // SAFETY: per dl_iterate_phdr, `info` points to a valid header list of `dlpi_phnum`
    // entries; `data` is the `Vec` passed by `program_globals`.
    let (info, found) = unsafe { (&*info, &mut *data.cast::<Vec<(usize, usize)>>()) };
    // SAFETY: as above.
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let page = PAGE as u64;
    let relro_end = headers
        .iter()
        .find(|h| h.p_type == libc::PT_GNU_RELRO)
        .map_or(0, |h| {
            (info.dlpi_addr + h.p_vaddr + h.p_memsz) / page * page
        });
    for header in headers {
        if header.p_type != libc::PT_LOAD || header.p_flags & libc::PF_W == 0 {
            continue;
        }
        let start = ((info.dlpi_addr + header.p_vaddr) / page * page).max(relro_end);
        let end = (info.dlpi_addr + header.p_vaddr + header.p_memsz).div_ceil(page) * page;
        if end > start {
            found.push((start as usize, (end - start) as usize));
        }
    }
    1 // stop after the executable
}

/// A persistence step (every fence of the log protocol: recovery, append, commit,
/// checkpoint): counts it across all thread-processes and, at the `NVT_CRASH_AT`-th, kills
/// the process group.
fn step() {
    let n = match SHARED.get() {
        Some(shared) => shared.steps.fetch_add(1, Ordering::Relaxed) + 1,
        None => EARLY_STEPS.fetch_add(1, Ordering::Relaxed) + 1,
    };
    let crash_at = *CRASH_AT.get_or_init(|| env_u64("NVT_CRASH_AT", 0));
    if crash_at != 0 && n == crash_at {
        // SAFETY: kill(0, SIGKILL) signals our own process group.
        unsafe { libc::kill(0, libc::SIGKILL) };
    }
}

/// Opens the pool, waiting up to 3 s while it is locked: after a crash, the killed run's
/// thread-processes (which share the lock) may still be exiting.
fn open_pool(path: &std::path::Path, options: &NativeOptions) -> Result<Pool<Native>, String> {
    let mut tries = 0;
    loop {
        match Pool::open(path, LAYOUT, options) {
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
fn load_home(journal: &Journal<Native>, tracker: &Tracker) -> Result<bool, String> {
    let mut meta = vec![0u8; heapmeta::META_LEN];
    journal.read_home(0, &mut meta);
    let heap_len = journal.geometry().heap_len;
    if !heapmeta::is_formatted(&meta) {
        return Ok(false);
    }
    heapmeta::validate(&meta, heap_len)?;
    let used = heapmeta::top(&meta).div_ceil(PAGE as u64) * PAGE as u64;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < used {
        let len = (used - at).min(buf.len() as u64) as usize;
        journal.read_home(at, &mut buf[..len]);
        tracker.load_shared(at as usize, &buf[..len]);
        at += len as u64;
    }
    Ok(true)
}
