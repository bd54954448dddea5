/*
 * nvthreads.h - Ferrite NVthreads: crash-consistent pthreads on persistent memory.
 *
 * Link an unmodified pthreads program with -lnvthreads_rt (libnvthreads_rt.so, placed before
 * libc on the link line, which is the default), or run it with LD_PRELOAD=libnvthreads_rt.so.
 * The library replaces pthread_create/join/exit/self/detach/kill, pthread_mutex_*,
 * pthread_cond_* (timed waits included), pthread_barrier_*, pthread_once, pthread_rwlock_*
 * (readers share the lock, as with glibc: reader preference by default, writer preference
 * with PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP; try, timed and clock variants),
 * pthread_spin_* (as mutexes), C11 <threads.h> (thrd_*, mtx_*, cnd_*, tss_*, call_once; on
 * the same runtime), the malloc family, getpid/getppid/kill/sigqueue (one process id, below)
 * and the signal-action functions, and adds the persistence API below. It starts before
 * main. Design: docs/nvthreads.md.
 *
 * Guarantee. Persistent data is what nvmalloc returns (and, with NVT_MALLOC=persistent,
 * what malloc returns). After a crash (the whole program killed, or power lost with the pool
 * on real PM) and a restart, persistent data is as if the program had stopped at a moment
 * when no thread held a lock:
 *   - a durable code section runs from the lock that takes a thread from holding no mutex to
 *     holding one, to the unlock that returns it to holding none (nested and chained locks
 *     form one section; a read or write lock of a pthread_rwlock_t counts as a lock, so
 *     readers holding one together each run a section of their own); it is all or nothing;
 *   - writes made outside sections are committed at the thread's next synchronisation
 *     operation (trylock or unlock at depth 0, cond wait/signal/broadcast, barrier wait,
 *     once, create, join, thread exit, nvmalloc, nvrecover, nvcheckpoint); a lock at depth
 *     0 commits them together with the section it starts (no other thread can see them
 *     before that section's unlock);
 *   - sections under different locks run and commit at the same time, independently;
 *   - a section that synchronised with an open section (one that blocked while holding a
 *     lock: cond_wait with another lock held, a blocking lock with inner locks released,
 *     a barrier or pthread_create inside a section) - through a mutex that section
 *     released, a condition variable it signalled, a barrier, a join or a create - becomes
 *     durable only together with it, and so does everything its thread does after;
 *   - when pthread_mutex_unlock returns 0 at depth 0 and the section depends on no open
 *     section, the section is durable. In general a thread's writes up to its last
 *     synchronisation point are durable once nvt_durable_epoch() >= nvt_section_epoch();
 *     a dependent section reaches that when the open section it depends on ends.
 * Stdout is made line-buffered (a 64 KiB buffer) when the first thread starts, unless the
 * program chose its buffering before (setvbuf, setbuf, setlinebuf): a line printed by one
 * call goes out in one write, so it never tears on a file up to 64 KiB, nor on a pipe up to
 * 4 KiB (PIPE_BUF); longer lines can tear across threads.
 *
 * Memory. Threads are processes. Shared between them, with pthreads semantics for
 * data-race-free programs (a thread sees another's writes after synchronising with it):
 * the persistent heap, the program's own globals (.data/.bss of the executable; not
 * persistent), and memory from malloc, calloc, realloc, posix_memalign, aligned_alloc,
 * memalign, valloc, pvalloc, strdup and strndup (NVT_MALLOC=shared, the default: not
 * persistent; NVT_MALLOC=persistent: allocated in the persistent heap, logged and recovered
 * like nvmalloc'd memory, never reused by a later run; NVT_MALLOC=private: glibc's
 * allocator, private to each thread after pthread_create). Volatile shared memory (malloc'd
 * and globals, unless persistent) is written in place by every thread, as with pthreads; a
 * racy program sees races as it would under pthreads. Private to each thread (a copy of
 * the creator's at creation): stacks, thread-local variables, other libraries' globals, and
 * memory libc allocates for itself (stdio buffers, DIR streams, ...). What libc allocates
 * and hands to the program is shared like malloc's memory for asprintf (x86-64),
 * vasprintf, getline, getdelim, realpath, canonicalize_file_name, getcwd(NULL, n),
 * get_current_dir_name, scandir, scandirat, getaddrinfo and open_memstream's buffer;
 * other results libc allocates (open_wmemstream's buffer, getifaddrs' list, ...) stay
 * private to the thread that made them. Each thread has its own copy of
 * every FILE and its buffer: two threads using one FILE lose or repeat data, even under a
 * mutex (each reads ahead into its own buffer; output goes out at each one's flushes), so
 * give each thread its own stream, or use read/write on the descriptor. Streams are flushed
 * at pthread_create and at each thread's exit. Descriptors are one table for all threads,
 * as with pthreads: one a thread opens, closes or dup2s is so in every thread, and so are
 * the working directory and umask (on x86-64
 * with glibc, in a process where glibc started no thread of its own, not under valgrind;
 * otherwise each thread
 * has a copy of its creator's table and directory made at pthread_create, so a pipe's
 * write end closed by one thread stays open in the others).
 *
 * Threads are processes, also for signals and atomics. wait, waitpid, wait3, wait4 and
 * waitid skip threads' processes (a wait for any child returns only the program's own
 * children, ECHILD when only threads are left), and a SIGCHLD handler installed with
 * sigaction, signal, bsd_signal, sysv_signal or sigset is called for the program's own
 * children only (SIGCHLD taken with sigwaitinfo or signalfd is raised when a thread ends
 * too). A SIGSEGV handler installed with any of them is called for the program's own
 * faults only, not for the write faults the runtime uses to track writes (its handler
 * stays installed and passes the others on). A signal's action set with sigaction, signal,
 * bsd_signal, sysv_signal, sigset, sigignore or siginterrupt while threads run is installed
 * in every thread, as pthreads share one set of actions (sigaction returns once every
 * thread has it, or after 50 ms), and a one-shot handler (SA_RESETHAND, sysv_signal) taken
 * by one thread is reset in every thread (a one-shot SIGCHLD or SIGSEGV handler in the
 * thread that took it only); handlers other than SIGCHLD's and SIGSEGV's run behind the
 * runtime's trampoline (sigaction reads back the program's own); the runtime uses SIGRTMAX
 * for it: sigaction of SIGRTMAX fails with EINVAL,
 * sigprocmask and pthread_sigmask leave it unblocked, a sigwait on a set holding it may
 * return it, and a thread in pause, sleep, poll, select or another call a caught signal
 * interrupts returns early (EINTR) when another thread sets an action. A thread made by a
 * thread dies with the main process (a thread's process whose thread has ended stays, idle,
 * until the threads it made have ended). One process id: getpid() and getppid() are the
 * program's (the main thread's) in every thread, gettid() each thread's own; kill() or
 * sigqueue() of getpid() from any thread of the program goes to one thread that does not
 * block the signal (main first; a thread waiting for it in sigwait counts), as the kernel
 * picks a thread of a process, and SIGSTOP/SIGCONT stop and continue every thread; raise()
 * and pthread_kill() reach the thread they name, as with pthreads. A signal to the whole
 * program from outside it or to its process group (a shell's kill of its pid or of a
 * thread's id, Ctrl-C, kill -INT -PGID, the program's kill(0, ...)) runs the handler once,
 * in main unless main blocks it, else in the first thread that does not; one main blocks
 * reaches a thread waiting for it in sigwait, sigwaitinfo or sigtimedwait (within 10 ms,
 * with the sender's si_code and si_pid), and one that leaves it unblocked or reads it from
 * a signalfd only while main waits in a join, lock or condition variable (within 0.2 s;
 * under pthreads at once, whatever main does; the signalfd's ssi_code is then -0x4e56,
 * with the sender's code in ssi_errno). Such signals are told by si_code and
 * si_pid (SI_KERNEL for the terminal's SIGINT, SIGQUIT, SIGTSTP, SIGHUP, SIGWINCH,
 * SIGTTIN, SIGTTOU; SI_USER or SI_QUEUE from outside the program): two group signals of
 * one number from one sender count as one for a thread that took no copy of the first, a
 * copy taken more than 1 s late runs again, and a signal from outside to a thread's own id
 * within 1 s after such a group signal is taken for its copy; SIGALRM and other SI_KERNEL
 * signals stay the receiving thread's. A group SIGCHLD or SIGSEGV runs its handler in every
 * thread. A handler's si_pid for a signal from inside the program names the sending thread
 * (its gettid()). A program's alternate signal stack (sigaltstack) of
 * at least 64 KiB is used as with pthreads; a smaller or disabled one is reported back as
 * set, but SA_ONSTACK handlers run on the runtime's 64 KiB stack. Volatile malloc'd memory and globals
 * are written in place by every thread, so atomics (C11 <stdatomic.h>, __atomic) and
 * lock-free synchronisation there work as with pthreads. In memory the runtime merges (the
 * persistent heap; malloc'd memory and globals too when persistent or with
 * NVT_ISOLATE_VOLATILE=1) writes, atomic ones too, reach another thread only when both
 * synchronise through the pthread or C11 calls, so lock-free synchronisation does not work
 * there. Memory the runtime does not share (see Memory; stacks, mmap
 * MAP_PRIVATE|MAP_ANONYMOUS) is per thread; a MAP_SHARED mapping made before creating
 * threads is really shared, neither merged nor persistent.
 *
 * Limits. Mutex attributes other than the type are ignored; pthread_cancel returns ENOTSUP;
 * thread attributes other than the detach state do not apply (a thread runs on a copy of its
 * creator's stack); pthread_key (and tss) destructors do not run, and a key created after a
 * thread exists is unknown to that thread; a new thread starts with errno 0 and a null
 * value for every key, but with a copy of its creator's thread-local variables (__thread,
 * _Thread_local); pthread and C11 calls never change errno, as with glibc; at most 255
 * threads exist at a time (pthread_create returns EAGAIN beyond); pthread_atfork handlers
 * do not run at pthread_create, except where descriptors are copied (above). PMFS's preload
 * (libpmfs_preload.so) does not work with it: it refuses (its served calls fail with
 * EOPNOTSUPP and it says why on stderr); use the FUSE mount (docs/nvthreads.md §9). read, pread and fread into the persistent heap (and persistent globals or
 * malloc'd memory) are wrapped to work; other system calls that write into persistent
 * memory (recv, readv, ...) fail with EFAULT unless the thread wrote to those pages since its
 * last synchronisation (into volatile malloc'd memory and globals they all work). fork()
 * outside pthread_create must be followed by exec: a child that calls a pthread function or
 * this API instead ends at once with a message and exit status 70 (EX_SOFTWARE), and its
 * exit() leaves the pool to its parent; so a server that daemonises (if (fork()) exit(0);)
 * must do it before the runtime starts (a service manager, or fork then exec). Only one process may run the program on a
 * pool at a time: a second one ends at once with a message and exit status 75 (EX_TEMPFAIL).
 * The runtime needs a write that faults to run again alone and with its registers once the
 * fault is handled, as the kernel does; where it does not (valgrind by default: run it with
 * --vex-guest-max-insns=1), the program ends at start-up, before the pool is opened, with a
 * message and exit status 78 (EX_CONFIG). Every other reason the runtime cannot start ends the
 * program the same way, with one line "nvthreads: cannot start: ..." and status 78: an NVT_* or
 * FERRITE_* value that does not parse, a pool that cannot be created or opened (a missing
 * directory, a file of another layout or format version, a damaged runtime header, lap word
 * or heap metadata, or a redo log damaged in the middle of a lane -- a record that fails its
 * check with intact records of the same lap after it, which no crash leaves; the message
 * names the lane and offsets: a damaged pool is refused, left unchanged, never formatted
 * over, and `ferrite pool check` reports the same damage). A lane's torn last record, which
 * a crash does leave, is discarded silently.
 * With LD_PRELOAD, the runtime starts only in a process whose executable itself imports
 * pthread_create or thrd_create (or is linked with -lnvthreads_rt), or where any loaded
 * object uses this API: a wrapper
 * (timeout, env, strace, a shell; the libraries it loads may create threads) passes the
 * pool on to the program it runs. A wrapper whose executable itself imports pthread_create
 * takes the pool and leaves the program dormant: an interpreter with its core linked into
 * the executable (Debian's /usr/bin/python3.11) does, one whose threads come from a shared
 * libpython (a pyenv or --enable-shared python3) passes the pool on like any wrapper
 * (readelf -r EXE | grep pthread_create tells which). To be sure, link the program with
 * -lnvthreads_rt, or preload it alone (python3 ... env LD_PRELOAD=... ./prog).
 * A program whose threads are all created by a library (C++ std::thread) is linked with
 * -Wl,--no-as-needed -lnvthreads_rt, or preloaded with NVT_ENABLE=1.
 * A program that uses the runtime, started (system(), exec) by a running program on the same
 * pool, runs with the runtime dormant (plain pthreads, nothing persistent) and says so on
 * stderr.
 * A thread that dies (a fatal signal, abort(), _exit(), killed from outside, an internal
 * error of the runtime) ends the whole program, as in a pthreads process: a line on stderr
 * says which thread died, and every process of the program is killed with SIGKILL (the
 * program's status: killed by signal 9, 137 in a shell). exit(status) called by a thread
 * other than main ends the program with that status, as with pthreads: its atexit
 * handlers run (in that thread), a line on stderr says so, the other threads are killed
 * and main ends with _exit(status) (output main buffered and did not flush is lost), and
 * the pool is left as after a crash (the next run recovers it).
 * A death no handler sees is noticed
 * within 0.2 s by any thread waiting in the runtime (a lock, a condition variable, a join).
 * The pool keeps every committed section; the next run recovers it.
 *
 * Environment: NVT_POOL (pool file; default /dev/shm/nvthreads-<program>-<uid>.pool),
 * NVT_HEAP_MB (heap size of a new pool, default 64), NVT_LOG_MB (log size, default 16),
 * NVT_MALLOC (shared | persistent | private), NVT_MALLOC_MB (size of the shared malloc
 * region, default 2048), NVT_PMALLOC_MB (size of the persistent malloc arena made on first
 * use; default three quarters of the free heap) — every *_MB value from 1 to 1048576, NVT_GLOBALS (shared, the default: globals
 * shared by the threads, not persistent | persistent: shared, logged and recovered |
 * private or 0: each thread its own copy),
 * NVT_ISOLATE_VOLATILE=1 (threads track their writes to volatile malloc'd memory and globals
 * and merge them at synchronisation points instead of writing in place: the original's
 * isolation, slower; kernel writes into them then fail as into persistent memory),
 * NVT_NVM_NS_PER_PAGE (emulated NVM write latency: nanoseconds per 4 KiB written to the
 * log), NVT_DISABLE=1 (dormant: plain pthreads and glibc malloc; nvmalloc returns ordinary
 * zeroed memory), NVT_ENABLE=1 (run even where the imports say the process does not use
 * the runtime; NVT_DISABLE=1 wins), NVT_DEBUG=1 (print why a call of this API failed), NVT_STATS=1 (print the
 * runtime's counters at exit), NVT_PROFILE=1 (time every step of every section and print
 * the totals at exit), NVT_CRASH_AT=n (kill the process group after the n-th fence of the
 * log protocol, recovery included; for tests), NVT_PFAIL (power-failure images at that
 * point; for tests), NVT_FAIL_AT=<panic|abort|stall>@<exit|lane|checkpoint> (a thread
 * fails there; for tests), FERRITE_PERSIST_MODE / FERRITE_FLUSH (see Ferrite's README).
 * Switches (NVT_DISABLE, NVT_ENABLE, NVT_DEBUG, NVT_STATS, NVT_PROFILE,
 * NVT_ISOLATE_VOLATILE) accept exactly 1 (on) or 0 or an empty value (off); sizes and
 * counts a decimal number; NVT_POOL a non-empty path. A value that does not parse (yes,
 * true, 2, NVT_GLOBALS=1, NVT_POOL=) ends the program at start, before the pool is
 * touched, with "nvthreads: cannot start: NAME=VALUE: expected ..." and status 78.
 */
#ifndef FERRITE_NVTHREADS_H
#define FERRITE_NVTHREADS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Programs built without -lnvthreads_rt, to be run with LD_PRELOAD, define NVT_WEAK_API
 * before including this header: the API becomes weak references, which the dynamic linker
 * binds to the preloaded library (and which are NULL without it).
 */
#ifdef NVT_WEAK_API
#define NVT_API __attribute__((weak))
#else
#define NVT_API
#endif

/*
 * Returns the persistent object called `name`, or allocates `size` zeroed bytes, records the
 * name and returns them. The heap sits at the same virtual address in every run, so pointers
 * stored in persistent objects stay valid after recovery. `name` may be NULL (an anonymous
 * allocation, reachable only through pointers stored in named objects); names have at most
 * 47 bytes and at most 63 exist (62 with NVT_MALLOC=persistent, whose arena takes one).
 * Outside a section the allocation is durable on return; inside one it commits with the
 * section. Objects are never freed.
 * On failure returns NULL, sets errno, and nvt_error() says why:
 *   ENAMETOOLONG  the name has more than 47 bytes
 *   EINVAL        the size is 0, or the name is empty
 *   EEXIST        an object of that name exists and is smaller than `size`
 *   ENOSPC        all 63 names are in use (the message counts the arena's)
 *   ENOMEM        the heap has no `size` free bytes (NVT_HEAP_MB sizes a new pool's heap)
 * With NVT_DEBUG=1 the reason is also printed on stderr. With the runtime dormant
 * (NVT_DISABLE=1) the errors are the same, except that names are unlimited (no ENOSPC) and
 * ENOMEM means glibc's calloc failed.
 */
NVT_API void *nvmalloc(size_t size, const char *name);

/*
 * Why the calling thread's last failed call of the persistence API failed, as a message
 * valid until its next failure; an empty string if none failed.
 */
NVT_API const char *nvt_error(void);

/*
 * Copies min(size, object size) bytes of the recovered object `name` into `dest` and returns
 * the number of bytes copied (0 if no such object). With the fixed-address heap this is
 * rarely needed: nvmalloc(size, name) already returns the recovered object in place.
 * A NULL `dest` with a nonzero `size` copies nothing and returns 0 with errno EINVAL
 * (nvt_error() says why).
 */
NVT_API size_t nvrecover(void *dest, size_t size, const char *name);

/* 1 if the previous run of this program on this pool did not exit cleanly, else 0. */
NVT_API int crashed(void);
/* The original NVthreads name of crashed(). */
NVT_API int isCrashed(void);

/* Commits the calling thread's writes made outside critical sections. */
NVT_API void nvcheckpoint(void);

/*
 * How far the calling thread's writes are durable: the number (a sequence number of the log,
 * growing) of its latest durable synchronisation point. Per thread: compare it only with
 * the same thread's nvt_section_epoch().
 */
NVT_API uint64_t nvt_durable_epoch(void);

/*
 * The number of the calling thread's last synchronisation point that logged something: its
 * writes up to there are durable once nvt_durable_epoch() >= nvt_section_epoch(). (A section
 * that depends on an open section is durable only when that one ends.)
 */
NVT_API uint64_t nvt_section_epoch(void);

/* Starts the runtime now (it otherwise starts before main, or on first use). */
NVT_API void nvt_init(void);

/*
 * 1 if the runtime runs in this process (its threads are processes), 0 if it is dormant
 * (NVT_DISABLE=1, a wrapper, a system() child of a running program). Libraries whose state
 * cannot be shared between processes use it to refuse loudly: PMFS's preload does.
 */
NVT_API int nvt_active(void);

#ifdef __cplusplus
}
#endif

#endif /* FERRITE_NVTHREADS_H */
