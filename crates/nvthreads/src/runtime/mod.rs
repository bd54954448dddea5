//! The runtime behind the C ABI (`docs/nvthreads.md` §3, §5): threads as processes over
//! one shared heap, durable code sections, merges, commits, and the persistent allocator.
//!
//! Every process of a run is single-threaded (a "thread" is a process made by `fork`), so
//! the per-process state ([`Local`]) is plain atomics used with relaxed ordering; `fork`
//! copies it into each child. What all processes share is in [`Shared`]; what persists is in
//! the journal ([`RtJournal`]). The entry points are called by the `cdylib` (`ffi/lib.rs`),
//! never by Rust code in the same process as a test harness: they fork, and they own the
//! process's `SIGSEGV` handler.
//!
//! By concern:
//! - [`env`]: the `NVT_*` settings, parsed once;
//! - [`layout`]: where the heap, the program's globals and the `malloc` region are mapped,
//!   and loading the recovered home image into the shared view;
//! - [`commit`]: merges, log appends to the thread's lane, groups and checkpoints;
//! - [`sync`]: mutexes, condition variables, barriers, once-controls;
//! - [`rwlock`]: read-write locks, readers sharing them;
//! - [`threads`]: creating, joining, detaching, signalling and naming thread-processes;
//! - [`process`]: one process id for the program (`getpid`, `kill` of that id);
//! - [`signals`]: a fatal signal in any process ends the whole run;
//! - [`sigchld`]: the program's `SIGCHLD` handler sees its own children, not threads;
//! - [`dispositions`]: a signal action set while threads exist reaches every thread;
//! - [`fork`]: a `fork()` by the program outside `pthread_create` ends its child if it uses
//!   the runtime without `exec`.

pub mod commit;
pub mod dispositions;
pub mod env;
pub mod fork;
pub mod layout;
pub(crate) mod mask;
pub mod process;
pub mod routing;
pub mod rwlock;
pub mod sigchld;
pub mod signals;
pub mod sync;
pub mod threads;

pub use env::{DEFAULT_HEAP_MB, DEFAULT_LOG_MB, DEFAULT_MALLOC_MB, Env, GlobalsMode, MallocMode};
pub use layout::MALLOC_BASE;
pub use threads::JoinWait;

use crate::heapmeta::{self, AllocError};
use crate::journal::Config;
use crate::pages::Tracker;
use crate::pfail::{RtJournal, RtPool};
use crate::shared::{Shared, thread_state};
use env::env;
use layout::GlobalsLayout;
use pmem::{CreateOptions, NativeOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// The per-run runtime (one per process; children inherit the parent's by `fork`).
#[derive(Debug)]
pub struct Runtime {
    journal: Mutex<Option<RtJournal>>,
    /// Lanes of the log (a thread appends to lane `slot % lanes`).
    lanes: usize,
    /// Bytes of each lane.
    lane_len: u64,
    pub(crate) tracker: &'static Tracker,
    pub(crate) shared: &'static Shared,
    heap_len: u64,
    crashed: bool,
    /// Global offsets `(start, end)` of the bytes of persistent globals that the dynamic
    /// loader writes at every start: published but never logged (sorted).
    excluded: Vec<(u64, u64)>,
    /// Where `malloc`'d memory lives (`NVT_MALLOC`).
    pub(crate) malloc_mode: MallocMode,
    /// The allocator of the interposed `malloc` family (none in `private` mode).
    pub(crate) arena: OnceLock<crate::alloc::Arena>,
    /// Persistent mode: the arena's header chunk (private view), holding the high-water
    /// marks.
    pub(crate) arena_header: AtomicUsize,
    /// The buffers of this process's merges (`commit.rs`).
    merge_buffers: Mutex<commit::MergeBuffers>,
}

/// The calling thread-process's own state (private to each process; `fork` copies it).
#[derive(Debug)]
struct Local {
    /// This process's thread slot (0 = main).
    me: AtomicU32,
    /// Mutexes held by this thread (counting recursive acquisitions).
    depth: AtomicU32,
    /// The group of open sections this thread depends on (0: none; see `crate::groups`).
    group: AtomicU64,
    /// Whether this thread's current section is open: a member of `group`.
    member: AtomicBool,
    /// Whether this process is a thread-process (not the main one).
    child: AtomicBool,
    /// Whether this thread-process is ending (its last merge need not reset its pages).
    exiting: AtomicBool,
    /// Sequence number of this thread's last data record.
    last_seq: AtomicU64,
    /// Sequence number of this thread's last data record known durable.
    durable_seq: AtomicU64,
}

static LOCAL: Local = Local {
    me: AtomicU32::new(0),
    depth: AtomicU32::new(0),
    group: AtomicU64::new(0),
    member: AtomicBool::new(false),
    child: AtomicBool::new(false),
    exiting: AtomicBool::new(false),
    last_seq: AtomicU64::new(0),
    durable_seq: AtomicU64::new(0),
};

fn get(flag: &AtomicBool) -> bool {
    flag.load(Ordering::Relaxed)
}

fn set(flag: &AtomicBool, value: bool) {
    flag.store(value, Ordering::Relaxed);
}

fn depth() -> u32 {
    LOCAL.depth.load(Ordering::Relaxed)
}

/// This thread's slot index (0: main).
fn me() -> u32 {
    LOCAL.me.load(Ordering::Relaxed)
}

/// This thread's tag in mutex owner fields (slot + 1, never 0).
fn me_tag() -> u32 {
    me() + 1
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// Prints `message` and kills the run: every thread-process, then this one.
pub fn fatal(message: &str) -> ! {
    let _ = writeln!(std::io::stderr(), "nvthreads: {message}");
    if RUNTIME.get().is_some() {
        signals::kill_other_processes();
    }
    std::process::abort()
}

fn warn(message: &str) {
    // One write: a process killed right after (a run being ended) never leaves half a line.
    let line = format!("nvthreads: {message}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// A line on stderr for `NVT_DEBUG=1`.
pub fn warn_debug(message: &str) {
    warn(message);
}

/// The exit status of a program whose runtime cannot start (`EX_CONFIG` of `sysexits.h`: a
/// bad `NVT_*` or `FERRITE_*` value, a pool that cannot be created or opened — a missing
/// directory, another layout or version, damage —, or write faults that do not resume
/// precisely), documented in `include/nvthreads.h`.
pub const EXIT_CANNOT_START: i32 = 78;

/// Ends a program whose runtime cannot start, before any thread-process exists: one line and
/// [`EXIT_CANNOT_START`], not an abort (at most the pool's own recovery has run, which the
/// next start repeats harmlessly).
pub fn cannot_start(message: &str) -> ! {
    let _ = writeln!(
        std::io::stderr(),
        "nvthreads: cannot start: {message} (exit status {EXIT_CANNOT_START})"
    );
    std::process::exit(EXIT_CANNOT_START)
}

/// The runtime, started on first use.
pub fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(|| Runtime::start().unwrap_or_else(|error| cannot_start(&error)))
}

/// Whether the runtime runs in this process, and why not if it does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dormancy {
    /// It runs.
    Active,
    /// `NVT_DISABLE=1`.
    Disabled,
    /// The executable creates no threads and nothing loaded uses the persistence API (a
    /// wrapper such as `timeout`, `env`, `strace` or a shell started with `LD_PRELOAD`),
    /// and `NVT_ENABLE=1` is not set: the pool is left to the programs it starts.
    NotUsed,
    /// A running program on the same pool started this one (`system()` inheriting
    /// `LD_PRELOAD`, or a program running another on its own pool): the pool is taken.
    PoolInUse,
}

/// Decides (once per process, by the caller) whether the runtime runs here; every
/// interposed function forwards to libc when it does not.
pub fn dormancy() -> Dormancy {
    let settings = env();
    if settings.disable {
        Dormancy::Disabled
    } else if !settings.enable && !crate::imports::process_uses_runtime() {
        Dormancy::NotUsed
    } else if settings.dormant() {
        Dormancy::PoolInUse
    } else {
        Dormancy::Active
    }
}

/// Says on stderr why a program that uses the runtime runs without it.
pub fn warn_pool_in_use() {
    warn(&format!(
        "the pool {} is in use by the program that started this one: running as plain \
         pthreads, nothing is persistent (give this program its own NVT_POOL)",
        env().pool.display()
    ));
}

impl Runtime {
    fn start() -> Result<Runtime, String> {
        signals::install_start_panic_hook();
        crate::faultprobe::require_precise_write_faults();
        let settings = env();
        let (journal, state, crashed) = open_or_create_journal(settings)?;
        let geo = journal.geometry();
        let malloc_mode = settings.malloc;
        let layout = GlobalsLayout::plan(&journal, settings.globals)?;
        let specs = layout::region_specs(&layout, geo.base_addr, malloc_mode, settings.malloc_mb);
        let tracker =
            Tracker::install_regions(&specs).map_err(|e| format!("mapping the heap: {e}"))?;
        let formatted = layout::load_home(&journal, tracker, &layout)?;
        let shared = Shared::map().map_err(|e| format!("mapping shared state: {e}"))?;
        commit::attach_steps(shared);
        if settings.profile {
            crate::profile::enable();
        }
        shared.log.set_state(&state);
        shared.live_threads.store(1, Ordering::Relaxed);
        let main = &shared.threads[0];
        main.state.store(thread_state::RUNNING, Ordering::Relaxed);
        let pid = process::real_pid();
        main.pid.store(pid, Ordering::Relaxed);
        process::set_program(pid);
        unsafe extern "C" {
            /// glibc's `on_exit`: an exit handler told the status `exit` was called with.
            fn on_exit(
                handler: extern "C" fn(libc::c_int, *mut libc::c_void),
                arg: *mut libc::c_void,
            ) -> libc::c_int;
        }
        // SAFETY: registering an extern "C" function of on_exit's handler type; its argument
        // is unused.
        unsafe { on_exit(signals::at_exit, std::ptr::null_mut()) };
        fork::watch_forks();
        signals::install_fatal_handlers();
        dispositions::install_handler();
        let lanes = geo.lanes as usize;
        let runtime = Runtime {
            journal: Mutex::new(Some(journal)),
            lanes,
            lane_len: geo.lane_len,
            tracker,
            shared,
            heap_len: layout.heap_len,
            crashed,
            malloc_mode,
            arena: OnceLock::new(),
            arena_header: AtomicUsize::new(0),
            merge_buffers: Mutex::default(),
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
        runtime.start_malloc(specs.last().map(|spec| spec.len))?;
        mark_active(&settings.pool);
        Ok(runtime)
    }

    /// Sets up the allocator of the interposed `malloc` family for the mode in use.
    fn start_malloc(&self, shared_region_len: Option<usize>) -> Result<(), String> {
        match self.malloc_mode {
            MallocMode::Shared => {
                let len = shared_region_len.ok_or("no malloc region")?;
                let arena = crate::alloc::Arena::new(MALLOC_BASE as usize, len, 0)
                    .map_err(|e| format!("mapping the allocator's metadata: {e}"))?;
                let _ = self.arena.set(arena);
                Ok(())
            }
            MallocMode::Persistent => self.open_persistent_arena(),
            MallocMode::Private => Ok(()),
        }
    }

    /// Whether the previous run ended without a clean exit.
    pub fn crashed(&self) -> bool {
        self.crashed
    }

    /// How far the calling thread's writes are durable: the sequence number of its latest
    /// record that is durable (all its earlier ones are too). It reaches
    /// [`Runtime::section_epoch`] when the thread's last section does not depend on an open
    /// section, or when the group it depends on is closed.
    pub fn durable_epoch(&self) -> u64 {
        if self
            .shared
            .groups
            .is_pending(LOCAL.group.load(Ordering::Relaxed))
        {
            LOCAL.durable_seq.load(Ordering::Relaxed)
        } else {
            LOCAL.last_seq.load(Ordering::Relaxed)
        }
    }

    /// The sequence number of the calling thread's last record: its writes up to its last
    /// synchronisation point are durable once [`Runtime::durable_epoch`] reaches it.
    pub fn section_epoch(&self) -> u64 {
        LOCAL.last_seq.load(Ordering::Relaxed)
    }

    /// This thread's slot in the thread table (0: main).
    pub fn thread_index(&self) -> usize {
        me() as usize
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

    /// The heap metadata page, through the private view (writes are tracked).
    #[allow(clippy::mut_from_ref)]
    fn meta(&self) -> &mut [u8] {
        // SAFETY: page 0 of the private view, mapped for the life of the process. Callers hold
        // the heap lock, this process has one thread, and no other reference to the page is
        // alive while the slice is used; write faults are resolved by the tracker.
        unsafe { std::slice::from_raw_parts_mut(self.tracker.private_base(), heapmeta::META_LEN) }
    }

    fn heap_ptr(&self, offset: u64) -> *mut u8 {
        debug_assert!(offset <= self.heap_len);
        // SAFETY: offsets come from the heap metadata, validated against the heap size.
        unsafe { self.tracker.private_base().add(offset as usize) }
    }

    /// `nvmalloc`: the named object if it exists, else a fresh zeroed one. Durable on return
    /// outside a section; part of the section inside one. The error says why nothing was
    /// allocated (and which `errno` the C API sets).
    pub fn nvmalloc(&self, size: u64, name: Option<&[u8]>) -> Result<*mut u8, AllocError> {
        heapmeta::check_request(size, name)?;
        self.lock_heap();
        let meta = self.meta();
        let result = match name.and_then(|name| heapmeta::lookup(meta, name)) {
            Some((offset, existing)) if existing >= size => Ok(offset),
            Some((_, existing)) => Err(AllocError::TooSmall { existing, size }),
            None => {
                heapmeta::allocate(meta, self.heap_len, size, name).map_err(|error| match error {
                    AllocError::DirectoryFull { .. } => AllocError::DirectoryFull {
                        arena: heapmeta::lookup(meta, crate::malloc::ARENA_NAME).is_some(),
                    },
                    other => other,
                })
            }
        };
        self.unlock_heap();
        result.map(|offset| self.heap_ptr(offset))
    }

    /// `nvrecover`: copies the named object's recovered bytes (at most `size`) to `dest`.
    /// Returns the number of bytes copied (0 if there is no such object).
    ///
    /// # Safety
    /// `dest` must be valid for writes of `size` bytes.
    pub unsafe fn nvrecover(&self, dest: *mut u8, size: u64, name: &[u8]) -> u64 {
        self.lock_heap();
        let copied = match heapmeta::lookup(self.meta(), name) {
            Some((offset, existing)) => {
                let len = existing.min(size);
                let src = self.heap_ptr(offset);
                // `copy` needs a non-null `dest` even for 0 bytes: `nvrecover(NULL, 0, …)`.
                if src != dest && len > 0 {
                    // SAFETY: `src` is `len` bytes of the heap; `dest` is valid for `size ≥
                    // len` bytes (caller); `copy` allows overlap.
                    unsafe { std::ptr::copy(src, dest, len as usize) };
                }
                len
            }
            None => 0,
        };
        self.unlock_heap();
        copied
    }

    /// Takes the lock of the heap metadata (the `nvmalloc` directory and bump pointer): an
    /// internal mutex, so an allocation outside a section is a section of its own, and one
    /// inside a section belongs to it.
    fn lock_heap(&self) {
        self.mutex_lock(heap_lock_key(), crate::shared::mutex_kind::NORMAL);
    }

    fn unlock_heap(&self) {
        self.mutex_unlock(heap_lock_key(), crate::shared::mutex_kind::NORMAL);
    }

    /// The main thread's process exit: commit and close cleanly if every thread has ended
    /// and no lock is held; otherwise leave the pool as a crash would. `status` is what
    /// `exit` was called with.
    fn finish(&self, status: i32) {
        if self.is_child() {
            // `exit` called by a thread: with pthreads it ends the whole program, with this
            // status.
            warn(&format!(
                "exit({status}) called in thread {}: ending the program",
                self.self_handle()
            ));
            signals::end_run_with_status(status);
            return;
        }
        let others = self
            .shared
            .live_threads
            .load(Ordering::Acquire)
            .saturating_sub(1);
        if others > 0 || depth() > 0 {
            // A thread that died without ending ends the run as a crash, with its message.
            signals::check_run();
            self.abandon();
            return;
        }
        self.sync_interval();
        // The next start then has nothing to replay.
        self.checkpoint(None);
        self.account_faults();
        if env().stats {
            let _ = writeln!(
                std::io::stderr(),
                "{}",
                self.shared.counters.snapshot().line()
            );
        }
        if env().profile {
            let _ = writeln!(std::io::stderr(), "{}", self.shared.profile.line());
        }
        if let Some(journal) = self.take_journal()
            && let Err(error) = journal.close()
        {
            warn(&format!("closing the pool: {error}"));
        }
    }

    /// Ends the run with threads still running or a lock held: kills the thread-processes
    /// and leaves the pool as a crash would (the next run recovers it).
    fn abandon(&self) {
        for slot in &self.shared.threads[1..] {
            let pid = slot.pid.load(Ordering::Acquire);
            if pid > 0 && slot.state.load(Ordering::Acquire) == thread_state::RUNNING {
                // SAFETY: killing and reaping a thread-process of this run.
                unsafe {
                    libc::syscall(libc::SYS_kill, pid, libc::SIGKILL);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
            }
        }
        if let Some(journal) = self.take_journal() {
            journal.mark_unclean_on_drop();
        }
    }

    /// Adds this process's write faults (and, profiled, their time) to the run's profile.
    pub(crate) fn account_faults(&self) {
        let profile = &self.shared.profile;
        profile.add(
            crate::profile::Step::Fault,
            self.tracker.faults(),
            self.tracker.fault_nanos(),
        );
    }

    fn take_journal(&self) -> Option<RtJournal> {
        self.journal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// The key of the heap metadata's internal mutex: the address of a static of this library,
/// the same in every thread-process and never a program object's.
fn heap_lock_key() -> u64 {
    static HEAP_LOCK: u8 = 0;
    std::ptr::from_ref(&HEAP_LOCK) as u64
}

/// Opens and recovers the pool at `NVT_POOL`, or creates it. Returns the journal, its
/// state, and whether the previous run crashed.
fn open_or_create_journal(
    settings: &Env,
) -> Result<(RtJournal, crate::JournalState, bool), String> {
    let path = &settings.pool;
    let mut options = NativeOptions::default()
        .try_with_env_overrides()
        .map_err(|e| e.to_string())?;
    // Emulated NVM: the paper charged each 4 KiB page written to its log; the pool charges
    // each 64-byte line written back.
    options.latency.line_writeback_ns = settings.nvm_ns_per_page.div_ceil(64);
    if path.exists() {
        let pool = open_pool(path, &options, settings)?;
        let (journal, state, recovery) =
            RtJournal::open_in(pool, commit::journal_mutation(), Some(commit::step))
                .map_err(|e| recovery_failed(path, &e))?;
        return Ok((journal, state, !recovery.was_clean));
    }
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty())
        && !dir.is_dir()
    {
        return Err(format!(
            "creating {}: the directory {} does not exist (NVT_POOL names the pool file)",
            path.display(),
            dir.display()
        ));
    }
    let log_len = settings.log_mb << 20;
    let config = Config {
        heap_len: settings.heap_mb << 20,
        log_len,
        lanes: Config::lanes_for(log_len),
        base_addr: crate::DEFAULT_BASE_ADDR,
    };
    // Made under another name and renamed into place once formatted: a crash while
    // creating leaves no half-made pool at `path` (the next run starts over).
    let creating = path.with_extension("creating");
    let _ = std::fs::remove_file(&creating);
    let mut create = CreateOptions::new(crate::journal::LAYOUT, config.pool_size());
    create.native = options;
    let pool = RtPool::create(&creating, &create, settings.pfail)
        .map_err(|e| format!("creating {}: {e}{}", path.display(), sizing_hint(&e)))?;
    let (mut journal, state) = RtJournal::create_in(pool, &config).map_err(|e| e.to_string())?;
    std::fs::rename(&creating, path)
        .map_err(|e| format!("renaming {} into place: {e}", creating.display()))?;
    journal.set_fence_hook(Some(commit::step));
    journal.set_mutation(commit::journal_mutation());
    Ok((journal, state, false))
}

/// Why the pool at `path` cannot be recovered; for a damaged log, also that nothing was
/// written (the pool is kept as found for inspection).
fn recovery_failed(path: &Path, error: &crate::NvtError) -> String {
    let kept = if matches!(error, crate::NvtError::DamagedLog { .. }) {
        "; the pool was left unchanged (`ferrite pool check` lists the damage)"
    } else {
        ""
    };
    format!("recovering {}: {error}{kept}", path.display())
}

/// The exit status of a program whose pool another running program holds (`EX_TEMPFAIL`
/// of `sysexits.h`: try again later), documented in `include/nvthreads.h`.
pub const EXIT_POOL_BUSY: i32 = 75;

/// Opens the pool. If it is locked by a live process (another run of the program), the
/// program ends at once with a message and [`EXIT_POOL_BUSY`]; while its holders are only
/// the dying processes of a run killed a moment ago, it waits for them (3 s at most).
fn open_pool(path: &Path, options: &NativeOptions, settings: &Env) -> Result<RtPool, String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        match RtPool::open(path, options, settings.pfail) {
            Err(pmem::PoolError::AlreadyOpen) => {
                let holders = pmem::flock_holders(path);
                if let Some(&pid) = holders.iter().find(|&&pid| !is_dying(pid)) {
                    pool_busy(path, &format!("process {pid}"));
                }
                if std::time::Instant::now() > deadline {
                    pool_busy(path, "processes that did not exit within 3 s");
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            result => return result.map_err(|e| format!("opening {}: {e}", path.display())),
        }
    }
}

/// Which variables chose a new pool's size, for an error about that size.
fn sizing_hint(error: &pmem::PoolError) -> &'static str {
    match error {
        pmem::PoolError::OutOfSpace { .. } => {
            " (a new pool holds NVT_HEAP_MB of heap and NVT_LOG_MB of log)"
        }
        _ => "",
    }
}

/// Ends the program because `holder` holds the pool.
fn pool_busy(path: &Path, holder: &str) -> ! {
    warn(&format!(
        "the pool {} is in use by {holder} (another run of this program?): exiting with \
         status {EXIT_POOL_BUSY}; give this run its own NVT_POOL to run both",
        path.display()
    ));
    std::process::exit(EXIT_POOL_BUSY)
}

/// Whether process `pid` is gone, a zombie, or has `SIGKILL` pending (its run was killed;
/// it releases the pool as it exits).
fn is_dying(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
            .unwrap_or("")
    };
    let killed = |mask: &str| u64::from_str_radix(mask, 16).is_ok_and(|m| m & (1 << 8) != 0);
    field("State:").starts_with(['Z', 'X']) || killed(field("SigPnd:")) || killed(field("ShdPnd:"))
}

/// Tells processes started from this one (a `system()` call inheriting `LD_PRELOAD`) that
/// the pool at `path` is in use, so their copy of the runtime stays dormant instead of
/// waiting for the pool's lock.
fn mark_active(path: &Path) {
    if let Ok(value) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) {
        // SAFETY: called from the runtime's start, before the program creates threads; both
        // strings are NUL-terminated and copied by setenv.
        unsafe { libc::setenv(c"NVT_ACTIVE".as_ptr(), value.as_ptr(), 1) };
    }
}
