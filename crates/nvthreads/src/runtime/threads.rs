//! Threads as processes (`docs/nvthreads.md` §3.1, §3.7): `pthread_create` is a
//! synchronisation point followed by `fork`; joins wait on the child's slot in the shared
//! thread table; detached threads free their own slot; signals, names and affinity go to
//! the thread-process.

use super::commit::MergeEnd;
use super::sigchld::SigchldBlocked;
use super::{LOCAL, Runtime, depth, fatal, get, set};
use crate::shared::{
    Clock, MAX_THREADS, Patience, ThreadSlot, futex_wait, futex_wait_until, futex_wake,
    thread_state,
};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

impl Runtime {
    /// `pthread_create`: a synchronisation point, then `fork`. Returns the new thread's
    /// handle, or an errno. In the child, runs `start(arg)` and exits; never returns.
    pub fn spawn(
        &self,
        start: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
        arg: usize,
        detached: bool,
    ) -> Result<u64, i32> {
        reap_exited_children();
        // The child starts from the shared view: everything this thread wrote is merged
        // (inside a section, the section opens, so the child depends on it) and every private
        // copy is dropped.
        if depth() == 0 {
            self.apply_pending_name();
            self.merge(MergeEnd::Interval, true);
        } else {
            self.open_section(true);
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
            return Err(libc::EAGAIN);
        };
        let slot = &self.shared.threads[index];
        slot.detached.store(u32::from(detached), Ordering::SeqCst);
        slot.parent.store(super::me(), Ordering::Relaxed);
        slot.retval.store(0, Ordering::Relaxed);
        slot.name_pending.store(0, Ordering::Relaxed);
        self.shared.live_threads.fetch_add(1, Ordering::AcqRel);
        // Empty stdio buffers first: the child would otherwise inherit (and print again)
        // output the parent has not flushed yet. The child flushes its own at exit.
        // SAFETY: fflush(NULL) flushes every open output stream; no pointer is passed.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        line_buffer_stdout();
        let creator = super::process::real_pid();
        // The new thread's end raises SIGCHLD here; the program's handler must not see it
        // (`super::sigchld`), so the child is in the set before that signal can be handled.
        let unblock = SigchldBlocked::block();
        let pid = fork_thread_process();
        if pid < 0 {
            drop(unblock);
            self.shared.live_threads.fetch_sub(1, Ordering::AcqRel);
            slot.state.store(thread_state::FREE, Ordering::Release);
            return Err(libc::EAGAIN);
        }
        if pid == 0 {
            super::fork::in_thread_process();
            // From here `getpid()` answers the program's id in this process.
            super::process::became_thread(super::process::real_pid());
            crate::pages::alt_stack_for_new_thread();
            CHILDREN.clear();
            drop(unblock);
            die_with_creator(creator);
            start_as_new_thread();
            LOCAL.me.store(index as u32, Ordering::Relaxed);
            super::dispositions::thread_started(slot);
            // Every process writes the unlogged regions in place, as pthreads do (§3.2): a
            // data-race-free program reads another thread's write only after synchronising
            // with it. With NVT_ISOLATE_VOLATILE=1 a thread-process tracks and merges them.
            if super::env::env().isolate_volatile {
                self.tracker
                    .set_tracking(true)
                    .unwrap_or_else(|e| fatal(&e.to_string()));
            }
            self.tracker.after_fork();
            self.tracker.set_writer(index);
            LOCAL.depth.store(0, Ordering::Relaxed);
            crate::malloc::pending_frees().clear();
            self.forget_deferred();
            // It depends on what its creator depended on, but its section is not open.
            set(&LOCAL.member, false);
            set(&LOCAL.child, true);
            let result = start(arg as *mut libc::c_void);
            self.exit_thread(result as u64);
        }
        slot.pid.store(pid, Ordering::Release);
        if !CHILDREN.insert(pid) {
            fatal("more unreaped thread-processes than thread slots");
        }
        drop(unblock);
        Ok(index as u64 + 1)
    }

    /// `pthread_exit` in a thread-process (also the end of its start routine).
    pub fn exit_thread(&self, retval: u64) -> ! {
        let index = super::me() as usize;
        // This thread's own stdio output, before a joiner can print (the parent emptied the
        // buffers the child inherited before forking).
        // SAFETY: fflush(NULL) flushes every open output stream; no pointer is passed.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        LOCAL.depth.store(0, Ordering::Relaxed);
        set(&LOCAL.exiting, true);
        self.end_section();
        self.release_deferred();
        self.account_faults();
        super::signals::fail_point(super::env::FailPoint::Exit);
        let slot = &self.shared.threads[index];
        slot.dep.store(self.dependency(), Ordering::Release);
        slot.retval.store(retval, Ordering::Release);
        self.shared.live_threads.fetch_sub(1, Ordering::AcqRel);
        ignore_signals_once_ended();
        super::routing::forget_signalfds();
        slot.state.store(thread_state::DONE, Ordering::SeqCst);
        if slot.detached.load(Ordering::SeqCst) == 1 {
            free_if_done(slot);
        }
        futex_wake(&slot.state, i32::MAX);
        super::sigchld::thread_ended();
        outlive_children();
        // SAFETY: ends the thread-process without running the program's exit handlers (they
        // belong to the main thread's process exit).
        unsafe { libc::_exit(0) }
    }

    /// Whether this process is a thread-process.
    pub fn is_child(&self) -> bool {
        get(&LOCAL.child)
    }

    /// The slot of a joinable or running thread handle, or an errno.
    fn thread_slot(&self, handle: u64) -> Result<&'static ThreadSlot, i32> {
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
        if index == super::me() as usize {
            return Err(libc::EDEADLK);
        }
        if index == 0 {
            return Err(libc::ESRCH);
        }
        let slot = self.thread_slot(handle)?;
        if slot.detached.load(Ordering::SeqCst) != 0 {
            return Err(libc::EINVAL);
        }
        if matches!(wait, JoinWait::Try) && slot.state.load(Ordering::Acquire) != thread_state::DONE
        {
            return Err(libc::EBUSY);
        }
        if depth() == 0 {
            self.sync_interval();
        }
        self.before_blocking();
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
                // Every watchdog period, the run ends if a thread died without ending
                // (this one included): waiting for it would never return.
                _ => futex_wait(&slot.state, state),
            }
        }
        if timed_out {
            self.refresh_kept();
            return Err(libc::ETIMEDOUT);
        }
        self.after_acquire(slot.dep.load(Ordering::Acquire));
        reap_exited_children();
        let retval = slot.retval.load(Ordering::Acquire);
        slot.pid.store(0, Ordering::Relaxed);
        slot.state.store(thread_state::FREE, Ordering::Release);
        Ok(retval)
    }

    /// `pthread_detach`: the thread frees its own slot when it ends (at once if it has).
    pub fn detach(&self, handle: u64) -> i32 {
        let Ok(slot) = self.thread_slot(handle) else {
            return libc::ESRCH;
        };
        if handle == 1 {
            return 0; // the main thread's end is the process's
        }
        if slot
            .detached
            .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return libc::EINVAL;
        }
        free_if_done(slot);
        0
    }

    /// `pthread_kill`: sends `signal` to the thread-process (0 only checks it exists), with
    /// `tgkill` as glibc's does: the delivery's code is `SI_TKILL`, a signal to one thread,
    /// which `super::routing` never takes for a copy of a signal to the program (a `kill`'s
    /// `SI_USER` from a process that had just sent the signal to its group was).
    pub fn kill_thread(&self, handle: u64, signal: i32) -> i32 {
        match self.thread_pid(handle) {
            // SAFETY: tgkill has no memory preconditions; each thread-process is the only
            // thread of its thread group.
            Some(pid) => match unsafe { libc::syscall(libc::SYS_tgkill, pid, pid, signal) } {
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
            return Some(super::process::real_pid());
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

    pub(super) fn apply_pending_name(&self) {
        let slot = &self.shared.threads[super::me() as usize];
        if let Some(name) = slot.pending_name() {
            slot.name_pending.store(0, Ordering::Release);
            let len = name.iter().position(|&b| b == 0).unwrap_or(15);
            set_own_name(&name[..len]);
        }
    }

    /// This thread's handle (`pthread_self`).
    pub fn self_handle(&self) -> u64 {
        u64::from(super::me()) + 1
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
        let mut patience = Patience::new();
        while self.shared.live_threads.load(Ordering::Acquire) > 1 {
            // Detached threads still running: wait for them as the process would (one that
            // died without ending would never leave: the watchdog ends the run then).
            std::thread::sleep(std::time::Duration::from_millis(1));
            reap_exited_children();
            patience.tick();
        }
    }
}

/// Makes the new thread-process die when its creator does, as a thread dies with its
/// process: every thread-process is killed when the process that forked it ends, and a
/// thread-process whose thread has ended stays (as an empty process) until the threads it
/// created have ended (`outlive_children`). So killing the main process ends the whole run,
/// down to threads created by threads, and a detached thread still outlives the thread that
/// created it. A creator that died before the setting took effect ends this process here.
fn die_with_creator(creator: i32) {
    // SAFETY: prctl with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    if super::process::real_parent_pid() != creator {
        // SAFETY: ends this new process before it ran anything of the program.
        unsafe { libc::_exit(0) };
    }
}

/// Keeps a thread-process whose thread has ended until every thread-process it created has
/// ended (see `die_with_creator`): its children die with it. Its slot is already done, so
/// joiners and the watchdog no longer count it.
fn outlive_children() {
    for pid in CHILDREN.pids() {
        // SAFETY: a blocking wait for one of this process's own children; EINTR retried.
        while unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) } < 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
        {}
        CHILDREN.remove(pid);
    }
}

/// Forks a thread-process that shares its creator's descriptor table, as pthreads share one
/// (`docs/nvthreads.md` §3.1): a descriptor one thread opens, closes or `dup2`s is so in every
/// thread, and a pipe's write end closed by one thread is not held open by the others' copies
/// (a reader waited for end-of-file for ever); and its working directory, root and umask
/// (a `chdir` in one thread moves every thread). `fork(2)` copies both, so this is
/// `clone(2)` with `CLONE_FILES | CLONE_FS` and otherwise `fork`'s flags: the kernel writes the child's
/// id into glibc's record of it (`CLONE_CHILD_SETTID`, which `raise`, `abort` and glibc's
/// locks use) as glibc's `fork` has it do. glibc's own bookkeeping around `fork` (its locks,
/// and the program's `pthread_atfork` handlers, which pthreads do not run at
/// `pthread_create`) is skipped; the locks are free because the process is single-threaded.
/// Where that cannot be relied on — glibc started a thread of its own in this process (a
/// `SIGEV_THREAD` timer, ...), or its thread record is not where this build expects it —
/// this is glibc's `fork`, and the table is copied as before. Returns `fork`'s result.
fn fork_thread_process() -> i32 {
    let Some(tid_record) = glibc_tid_record() else {
        // SAFETY: fork; the child only runs the program's start routine and the runtime,
        // then leaves with _exit.
        return unsafe { libc::fork() };
    };
    let flags = libc::CLONE_FILES
        | libc::CLONE_FS
        | libc::CLONE_CHILD_SETTID
        | libc::CLONE_CHILD_CLEARTID
        | libc::SIGCHLD;
    // SAFETY: clone without CLONE_VM and without a new stack is fork with a shared descriptor
    // table: the child runs on its copy of this stack and returns 0 here. `tid_record` is
    // the calling thread's own glibc record of its id (checked by `glibc_tid_record`), which
    // the kernel sets in the child's copy of memory; no other thread can hold a lock of
    // glibc's in this single-threaded process.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::c_long::from(flags),
            0 as libc::c_long,
            std::ptr::null_mut::<libc::pid_t>(),
            tid_record,
            0 as libc::c_long,
        )
    };
    pid as i32
}

/// glibc's record of the calling thread's kernel id (`tid` in its `struct pthread`), if this
/// process is single-threaded to glibc and the record is where glibc 2.28–2.40 keep it on
/// this architecture and holds the id now; `None` otherwise (the caller then uses `fork`),
/// and under valgrind, which implements `clone` only with the flags of `fork` and of
/// threads and ends the program on any other ("Unsupported clone() flags").
fn glibc_tid_record() -> Option<*mut libc::pid_t> {
    if under_valgrind() {
        return None;
    }
    unsafe extern "C" {
        /// glibc (2.32+): nonzero while the process has never had a second thread.
        static __libc_single_threaded: libc::c_char;
    }
    #[cfg(not(target_arch = "x86_64"))]
    return None;
    /// `offsetof(struct pthread, tid)` in glibc on x86-64 (checked against `gettid` below).
    const TID_OFFSET: usize = 0x2d0;
    // SAFETY: a byte glibc writes only when it starts a second thread, which this thread is
    // not doing.
    if unsafe { std::ptr::addr_of!(__libc_single_threaded).read_volatile() } == 0 {
        return None;
    }
    // glibc's own pthread_self: the name, called from this library, reaches the library's
    // interposed one, which returns the runtime's thread number.
    static GLIBC_PTHREAD_SELF: AtomicUsize = AtomicUsize::new(0);
    let mut found = GLIBC_PTHREAD_SELF.load(Ordering::Relaxed);
    if found == 0 {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name: the next definition after
        // this object, glibc's.
        found = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_self".as_ptr()) } as usize;
        if found == 0 {
            return None;
        }
        GLIBC_PTHREAD_SELF.store(found, Ordering::Relaxed);
    }
    // SAFETY: `found` is glibc's pthread_self, whose C signature this is.
    let glibc_pthread_self: extern "C" fn() -> libc::pthread_t =
        unsafe { std::mem::transmute(found) };
    // glibc's pthread_self is the address of the calling thread's `struct pthread`.
    let record = glibc_pthread_self() as usize + TID_OFFSET;
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: `struct pthread` is larger than the offset (glibc's layout on this
    // architecture); an aligned read of the calling thread's own record.
    let recorded = unsafe { (record as *const libc::pid_t).read_volatile() };
    (recorded == tid).then_some(record as *mut libc::pid_t)
}

/// Whether the program runs under valgrind: its core is preloaded into the program
/// (`LD_PRELOAD` names `vgpreload_core-…`). Read once and kept (thread-processes inherit it).
fn under_valgrind() -> bool {
    const UNKNOWN: u8 = 0;
    const NO: u8 = 1;
    const YES: u8 = 2;
    static SEEN: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(UNKNOWN);
    match SEEN.load(Ordering::Relaxed) {
        NO => false,
        YES => true,
        _ => {
            let valgrind = std::env::var_os("LD_PRELOAD").is_some_and(|preload| {
                preload
                    .as_encoded_bytes()
                    .windows(10)
                    .any(|w| w == b"vgpreload_")
            });
            SEEN.store(if valgrind { YES } else { NO }, Ordering::Relaxed);
            valgrind
        }
    }
}

/// Ignores every signal a process can ignore, except `SIGCHLD` and the synchronous ones that
/// report an internal error, once this process's thread has ended: it only waits for the
/// threads it made (`outlive_children`), and is no thread of the program any more. A signal
/// to the process group (Ctrl-C) otherwise ran the program's handler in it (an ended
/// thread's handler call), or, under an action set after it was made, killed it: its
/// threads died with it (`die_with_creator`) and the run ended with `SIGKILL`.
fn ignore_signals_once_ended() {
    // SAFETY: a zeroed sigaction is a valid value (empty mask, no flags).
    let mut ignore: libc::sigaction = unsafe { std::mem::zeroed() };
    ignore.sa_sigaction = libc::SIG_IGN;
    for signal in 1..=libc::SIGRTMAX() {
        let kept = [
            libc::SIGKILL,
            libc::SIGSTOP,
            libc::SIGCHLD,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
            libc::SIGABRT,
        ];
        if !kept.contains(&signal) {
            // glibc's sigaction: the library's own would publish the action to every thread.
            // glibc refuses its internal signals (EINVAL), which stay as they are.
            crate::pages::glibc_sigaction(signal, &ignore, std::ptr::null_mut());
        }
    }
}

/// What a new thread starts with under pthreads, which the fork would otherwise copy from
/// its creator: `errno` 0, and no thread-specific data (`pthread_getspecific` returns null
/// for every key, so the usual lazily allocated per-thread buffer is the thread's own).
/// Thread-local variables (`__thread`, `_Thread_local`) keep the creator's values (§2).
fn start_as_new_thread() {
    for key in 0..PTHREAD_KEYS_MAX {
        // SAFETY: glibc's pthread_setspecific on a key that is not allocated returns EINVAL
        // and changes nothing; on an allocated one it clears this process's value (null
        // values never allocate).
        unsafe { libc::pthread_setspecific(key, std::ptr::null()) };
    }
    // SAFETY: `__errno_location` returns this thread's errno.
    unsafe { *libc::__errno_location() = 0 };
}

/// glibc's number of thread-specific data keys (`PTHREAD_KEYS_MAX`).
const PTHREAD_KEYS_MAX: libc::pthread_key_t = 1024;

/// Whether `pid` is alive (not gone, not a zombie). A child of this process that has exited
/// is reaped here.
pub(super) fn process_alive(pid: i32) -> bool {
    if CHILDREN.contains(pid) {
        return !reap_if_ended(pid);
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_none_or(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
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

unsafe extern "C" {
    /// glibc's standard output stream.
    static stdout: *mut libc::FILE;
}

/// Makes standard output line-buffered (once, in the process that creates the first
/// thread; every thread-process inherits the setting). Threads of one glibc process share
/// one buffer, so a line is never cut; thread-processes each have their own, and a full
/// buffer written out in the middle of a line would interleave with another thread's
/// output. Line-buffered, every write is whole lines. Called with the buffer just flushed.
/// Size of stdout's line buffer once threads run: the longest line a thread prints to a file
/// without tearing.
const STDOUT_BUFFER: usize = 64 * 1024;

fn line_buffer_stdout() {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if DONE.swap(true, Ordering::Relaxed) {
        return;
    }
    // A line goes out in one `write` if it fits the buffer: whole on a file up to its size
    // (on a pipe, up to PIPE_BUF). glibc ignores the size of a buffer it allocates itself.
    // SAFETY: reading the address glibc's `stdout` holds, valid for the process's life.
    if chose_buffering(unsafe { stdout }) {
        return;
    }
    let buffer: &'static mut [u8] = Box::leak(vec![0u8; STDOUT_BUFFER].into_boxed_slice());
    // SAFETY: `stdout` is glibc's stream, valid for the process's life; its buffer is empty
    // (flushed just before), which is when glibc accepts a change of buffering; the buffer
    // is never freed.
    unsafe {
        libc::setvbuf(
            stdout,
            buffer.as_mut_ptr().cast(),
            libc::_IOLBF,
            buffer.len(),
        )
    };
}

/// Whether the program chose `stream`'s buffering itself (`setvbuf` unbuffered, line-buffered
/// or with a buffer of its own; `setbuf`, `setlinebuf`): glibc's flags word, the first `int`
/// of every `FILE` (`_IO_USER_BUF`, `_IO_UNBUFFERED`, `_IO_LINE_BUF`). A terminal's
/// line buffering is set at the first output, so a stream not yet written reads as not chosen.
fn chose_buffering(stream: *mut libc::FILE) -> bool {
    const CHOSEN: i32 = 0x0001 | 0x0002 | 0x0200;
    // SAFETY: `stream` is glibc's `stdout`, a valid FILE whose first member is `int _flags`.
    let flags = unsafe { stream.cast::<i32>().read() };
    flags & CHOSEN != 0
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

/// Thread-processes this process created and has not reaped (private to each process): a
/// fixed set of atomic slots rather than a locked list, because the `SIGCHLD` filter
/// (`super::sigchld`) reads it in a signal handler that may interrupt any update. Each
/// process is single-threaded, so a slot is only written by the code the handler
/// interrupts; a pid leaves the set only after it is reaped, so a `SIGCHLD` raised by a
/// thread's end (handled at the latest on the return of the wait that reaps it) always
/// finds it there.
struct ChildSet([AtomicI32; MAX_THREADS]);

static CHILDREN: ChildSet = ChildSet([const { AtomicI32::new(0) }; MAX_THREADS]);

/// Every thread-process this process reaped, one bit per process id (Linux's largest
/// `pid_max` on 64-bit, 2^22: 512 KiB of zeroed memory, of which only the pages holding
/// reaped ids are ever touched). A `SIGCHLD` raised by a thread's end while the program
/// blocked the signal is handled after the join reaped that thread, and signals of one kind
/// merge while pending, the kernel keeping the first one's report: a program that blocks
/// `SIGCHLD` while it makes and joins threads is handed the report of the first of them,
/// however many followed. A ring of the last 64 ids forgot it after 64 joins, and the
/// handler was called for a thread. (An id reused by a child of the program later is told
/// apart by `super::sigchld`: a reaped thread-process is no longer in this task's list of
/// children, the program's child is.)
static REAPED: [AtomicU64; REAPED_WORDS] = [const { AtomicU64::new(0) }; REAPED_WORDS];
const REAPED_WORDS: usize = (1 << 22) / 64;

/// Records that thread-process `pid` was reaped.
fn note_reaped(pid: i32) {
    if let Some((word, bit)) = reaped_bit(pid) {
        REAPED[word].fetch_or(bit, Ordering::Relaxed);
    }
}

/// Where `pid`'s bit is in [`REAPED`].
fn reaped_bit(pid: i32) -> Option<(usize, u64)> {
    let pid = usize::try_from(pid).ok().filter(|&pid| pid > 0)?;
    (pid / 64 < REAPED_WORDS).then(|| (pid / 64, 1u64 << (pid % 64)))
}

impl ChildSet {
    /// Adds `pid`; false if every slot is taken.
    fn insert(&self, pid: i32) -> bool {
        self.0
            .iter()
            .find(|slot| slot.load(Ordering::Relaxed) == 0)
            .map(|slot| slot.store(pid, Ordering::Relaxed))
            .is_some()
    }

    /// Takes `pid` out (it was reaped) and notes it among the recently reaped.
    fn remove(&self, pid: i32) {
        if let Some(slot) = self.0.iter().find(|s| s.load(Ordering::Relaxed) == pid) {
            slot.store(0, Ordering::Relaxed);
            note_reaped(pid);
        }
    }

    fn contains(&self, pid: i32) -> bool {
        pid > 0
            && self
                .0
                .iter()
                .any(|slot| slot.load(Ordering::Relaxed) == pid)
    }

    /// The pids in the set now.
    fn pids(&self) -> Vec<i32> {
        self.0
            .iter()
            .map(|slot| slot.load(Ordering::Relaxed))
            .filter(|&pid| pid != 0)
            .collect()
    }

    fn clear(&self) {
        for slot in &self.0 {
            slot.store(0, Ordering::Relaxed);
        }
    }
}

/// Whether `pid` is a thread-process this process created and has not reaped. Safe in a
/// signal handler (no lock, no allocation).
pub fn is_thread_process(pid: i32) -> bool {
    CHILDREN.contains(pid)
}

/// Whether `pid` is a thread-process of this process, or was one it reaped. Safe in a
/// signal handler.
pub fn is_or_was_thread_process(pid: i32) -> bool {
    CHILDREN.contains(pid)
        || reaped_bit(pid)
            .is_some_and(|(word, bit)| REAPED[word].load(Ordering::Relaxed) & bit != 0)
}

/// Reaps thread-process `pid` if it has ended (the program's `wait` met it first).
pub fn reap_thread_process(pid: i32) {
    reap_if_ended(pid);
}

/// Reaps thread-process `pid` if it has ended and takes it out of the set; whether it is
/// gone. A child the kernel reaped itself (the program ignores `SIGCHLD` or set
/// `SA_NOCLDWAIT`) is gone too: the wait then fails with `ECHILD`.
fn reap_if_ended(pid: i32) -> bool {
    // SAFETY: a non-blocking wait for one of our own children.
    let reaped = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    let gone = reaped == pid
        || (reaped < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD));
    if gone {
        CHILDREN.remove(pid);
    }
    gone
}

/// Whether this process has a child that is not a thread-process (one the program made with
/// `fork`, `posix_spawn`, `system`, ...): the kernel's list of the calling task's children
/// (`/proc/self/task/TID/children`) less the thread-processes. `true` when the list cannot be
/// read, so a `wait` then waits as the kernel would.
pub fn has_program_children() -> bool {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let Ok(list) = std::fs::read_to_string(format!("/proc/self/task/{tid}/children")) else {
        return true;
    };
    list.split_whitespace()
        .filter_map(|pid| pid.parse::<i32>().ok())
        .any(|pid| !CHILDREN.contains(pid))
}

/// Reaps the children that have exited without being joined (detached threads).
fn reap_exited_children() {
    for pid in CHILDREN.pids() {
        reap_if_ended(pid);
    }
}

/// Frees a detached thread's slot once it has ended (called by the thread and by the
/// detacher; the exchange of `detached` from 1 to 2 makes exactly one of them do it). The
/// process id is cleared before the slot is free: the watchdog never pairs a new thread's
/// `RUNNING` state with the ended process of the slot's previous thread.
fn free_if_done(slot: &ThreadSlot) {
    if slot.state.load(Ordering::SeqCst) == thread_state::DONE
        && slot
            .detached
            .compare_exchange(1, 2, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    {
        slot.pid.store(0, Ordering::SeqCst);
        slot.state.store(thread_state::FREE, Ordering::SeqCst);
    }
}
