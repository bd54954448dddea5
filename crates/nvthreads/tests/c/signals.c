/*
 * Signals as a pthreads program uses them (docs/nvthreads.md §3.1). Usage: signals MODE,
 * printing "MODE ok" or the first failure:
 *   blockedjoins  a SIGCHLD handler (SA_SIGINFO) is installed, SIGCHLD blocked, 100
 *                 threads made and joined one after the other, SIGCHLD unblocked: the
 *                 handler is not called (the pending signal reports the first thread's
 *                 end); then a child of the program exits and the handler is called once,
 *                 naming it.
 *   segvhandler   a SIGSEGV handler (SA_SIGINFO, as a crash handler or a memory probe
 *                 installs it) is installed before the persistent heap is written: two
 *                 threads add 1,000 each to an nvmalloc'd counter under a mutex (write
 *                 faults the runtime tracks), then each probes an unmapped address with
 *                 sigsetjmp/siglongjmp, as main does twice; the handler is called for the
 *                 four probes only (one call outside a probe ends the program with status
 *                 3), the counter is 2,000, and sigaction reports the handler back.
 *   lateaction    actions set while threads run reach them, as pthreads share one set of
 *                 actions: the program makes itself a process group, starts 3 threads
 *                 that sleep in a loop, then installs a SIGUSR1 handler (sigaction) and
 *                 ignores SIGPIPE (signal); a thread reads the SIGUSR1 action back, the
 *                 group gets SIGUSR1 (kill(0, ...), as a terminal's Ctrl-C) and nobody
 *                 dies (the handler runs; once, see groupsignal), and a thread's write to
 *                 a pipe without a reader fails with EPIPE instead of killing it.
 *                 Before, the threads kept the default actions of their creation: the
 *                 group signal killed them and the run ended with SIGKILL.
 *   oneshot       a one-shot SIGCHLD handler (SA_RESETHAND | SA_NOCLDSTOP | SA_SIGINFO,
 *                 SIGUSR1 in its mask), installed after a thread was made and joined, is
 *                 called once for a child's exit and then reads back as SIG_DFL with the
 *                 flags and mask it was installed with, as the kernel resets only the
 *                 handler (the runtime's filter reset them to 0 and an empty mask).
 *   endedthread   a thread that made a thread and ended (its process stays, idle, until
 *                 the thread it made ends) does not take signals: main installs a SIGINT
 *                 handler once it ended and sends SIGINT to the process group; the run
 *                 goes on (the idle process died of it, killing its thread, and the run
 *                 ended with SIGKILL) and the handler runs.
 *   pids          every thread has the program's process id and parent: getpid() and
 *                 getppid() in a thread, and in a thread made by a thread, equal main's,
 *                 while gettid() differs from getpid() there, as with pthreads (each
 *                 thread-process answered its own id).
 *   processkill   kill(getpid(), ...) is a signal to the program, taken by a thread that
 *                 does not block it: main blocks SIGUSR1 and a thread waits for it with
 *                 sigtimedwait; main's kill(getpid(), SIGUSR1) ends that wait. Then a thread
 *                 that blocks SIGUSR2 sends kill(getpid(), SIGUSR2), and the program's
 *                 handler runs (in main, which does not block it). Before, the first stayed
 *                 pending in main and the second in the sending thread: neither arrived.
 *   stopcont      SIGSTOP and SIGCONT sent to the program's id stop and continue every
 *                 thread: a thread counts in a MAP_SHARED page; a child of the program sends
 *                 SIGSTOP to its parent, sees the count stand still, sends SIGCONT and sees
 *                 it move again (before, only main stopped and the thread counted on).
 *   sysvchld      a SIGCHLD handler installed with sysv_signal (one-shot), then with sigset:
 *                 each time 8 threads made and joined call no handler, a child's exit
 *                 calls it once; sigset reports the one-shot handler reset to SIG_DFL.
 *                 Before, glibc installed them directly and every thread's end called them.
 *   sysvsegv      a SIGSEGV handler installed with sigset (and then sysv_signal) is called
 *                 for the program's probes only, not for the runtime's tracked writes of
 *                 threads adding to a persistent counter (before, it replaced the page
 *                 tracker's handler: called at the first tracked write); the one-shot one
 *                 reads back as SIG_DFL after main's probe.
 *   altstack      a thread sets an alternate signal stack of 2 KiB (the classic
 *                 MINSIGSTKSZ, or the kernel's minimum), writes 16 persistent pages under a
 *                 mutex three times and reads its stack back as it set it; then sets one of
 *                 128 KiB, on which a SA_ONSTACK handler runs, disables it and reads
 *                 SS_DISABLE back; a new thread starts without one. Before, the tracked
 *                 writes' faults were handled on the 2 KiB stack, which overflowed: the run
 *                 ended killed.
 *   groupsignal   a signal to the process group runs the program's handler once, as with
 *                 pthreads: 3 threads sleep, main installs a SIGINT handler, a child sends
 *                 SIGINT to the group with the kill system call (as a terminal's Ctrl-C or
 *                 a shell's kill -INT -PGID): one call, in main; main's kill(0, SIGINT):
 *                 one call; a group SIGUSR1 while main blocks it: one call, in a thread, and
 *                 none more when main unblocks it; pthread_kill of each thread still runs
 *                 it in each; a signal from outside to a thread's own id runs it once, in
 *                 main; two group signals from one sender 50 ms apart run it twice. Before,
 *                 every thread-process ran it: 4 calls for each group signal.
 *   pidsigwait    the server pattern: every thread blocks SIGTERM and SIGHUP and one waits
 *                 for them with sigwait, then sigwaitinfo; SIGTERM and SIGHUP sent to the
 *                 program's pid from outside (the kill system call, as a shell's kill) end
 *                 those waits, and sigwaitinfo reports SI_USER and the sender's pid. Before,
 *                 they stayed pending in main for ever.
 *   oneshotall    a one-shot handler (SA_RESETHAND, then sysv_signal) taken by one thread
 *                 is reset in every thread: a thread raises it, and main and a third thread
 *                 then read SIG_DFL back; main raises the sysv_signal one, and a thread reads
 *                 SIG_DFL back. Before, the kernel reset it in the taking thread only.
 *   ttyint        a terminal's Ctrl-C: the program makes itself a session whose controlling
 *                 terminal is a new pseudo-terminal, starts 3 threads and installs a SIGINT
 *                 handler; each of three ^C written to the terminal's master side, 100 ms
 *                 apart, runs it once, in main, with SI_KERNEL (before: 4 calls each).
 *   heldhandler   main blocks SIGUSR2, whose handler is installed, and joins a thread that
 *                 leaves it unblocked; SIGUSR2 sent to the program's pid from outside runs
 *                 the handler once, in that thread, and is no longer pending in main
 *                 (before: it stayed pending in main and the thread waited in vain).
 *   signalfdthread every thread blocks SIGTERM and one reads it from a signalfd while main
 *                 joins it; SIGTERM sent to the program's pid from outside reaches that
 *                 signalfd with the sender's pid (before: it stayed pending in main).
 *   handleraction a thread's handler of a timer (SIGPROF every 500 us) calls sigaction, as
 *                 a handler may (sigaction is async-signal-safe), while the thread itself
 *                 calls sigaction in a loop for 0.25 s (each call publishes the action to
 *                 main under the runtime's table lock): at least 20 handler calls are made
 *                 and none of their sigaction calls stalls for 40 ms or more and over 3
 *                 times the loop's slowest (both wait for main under load). Before, one
 *                 that interrupted the thread's own sigaction while it held the lock spun
 *                 100,000 sched_yield calls waiting for itself (38 and 72 ms seen), then took
 *                 the lock away from the code it interrupted. The window is a few
 *                 microseconds, so this run rarely hits it; the runtime's unit test
 *                 (dispositions.rs) constructs the case deterministically. Not run by the
 *                 test suite: its check is a time bound, which a loaded machine can exceed
 *                 without any bug (a test that fails now and then is no test); a smoke
 *                 check to run by hand, as the suite runs the other modes.
 *   tornaction    main switches SIGUSR1's action back and forth between two handlers with
 *                 different masks (one blocks SIGUSR2 while it runs, the other does not)
 *                 for 0.25 s while a timer sends it SIGUSR1 every 20 us: each handler runs
 *                 with its own action's mask, never with the other's (before, a signal
 *                 arriving while the library's sigaction recorded the new action for the
 *                 runtime's trampoline, before the kernel had it, ran the new handler under
 *                 the old action's mask and flags: a SA_SIGINFO handler could be called
 *                 without its siginfo).
 *   handlerwrites a thread's handler of a timer (SIGUSR1 every 20 us) adds 1 to a word of
 *                 an nvmalloc'd array of 96 pages, a different page each call, while the
 *                 thread writes another word of every page in sections (lock, write the
 *                 96 pages, unlock: each unlock merges them) for 0.25 s; main then checks
 *                 that the handler's words add up to its number of calls. The handler's
 *                 write lands in the runtime's merge of the pages now and then (publishing
 *                 them, write-protecting those that cool down): it must neither kill the
 *                 thread (a write fault on a page still marked dirty but already
 *                 write-protected was taken for the program's own fault: died of signal 11)
 *                 nor be lost (a page a handler dirtied in the middle of the end of an
 *                 interval fell off the dirty list).
 * Every mode ends itself with alarm(10) if it hangs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nvthreads.h"

static void fail(const char *mode, const char *what) {
    printf("%s FAILED: %s\n", mode, what);
    exit(1);
}

static volatile sig_atomic_t chld_calls;
static volatile sig_atomic_t chld_pid;

static void on_chld(int signal, siginfo_t *info, void *context) {
    (void)signal;
    (void)context;
    chld_calls++;
    chld_pid = info->si_pid;
}

static void *nothing(void *arg) {
    return arg;
}

/* Sleeps up to `ms` milliseconds, returning early once *flag is nonzero. */
static void wait_for(volatile sig_atomic_t *flag, int ms) {
    struct timespec step = {0, 1000000};
    for (int i = 0; i < ms && !*flag; i++)
        nanosleep(&step, NULL);
}

static void blockedjoins(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_chld;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGCHLD, &action, NULL) != 0)
        fail("blockedjoins", "sigaction");
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &chld, NULL);
    for (int i = 0; i < 100; i++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, nothing, NULL) != 0 ||
            pthread_join(thread, NULL) != 0)
            fail("blockedjoins", "create or join");
    }
    pthread_sigmask(SIG_UNBLOCK, &chld, NULL);
    wait_for(&chld_calls, 50);
    if (chld_calls != 0)
        fail("blockedjoins", "the SIGCHLD handler was called for a thread's end");
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    wait_for(&chld_calls, 2000);
    if (chld_calls != 1 || chld_pid != child)
        fail("blockedjoins", "the handler was not called once for the program's child");
    int status;
    if (waitpid(child, &status, 0) != child)
        fail("blockedjoins", "waitpid of the child");
}

/* Per thread: where the thread's probe resumes, and whether it is probing. */
static __thread sigjmp_buf probe_jump;
static __thread volatile sig_atomic_t probing;
static atomic_int segv_calls;

static void on_segv(int signal, siginfo_t *info, void *context) {
    (void)signal;
    (void)info;
    (void)context;
    if (!probing) {
        static const char message[] = "segvhandler FAILED: the handler saw a fault outside a probe\n";
        (void)!write(1, message, sizeof message - 1);
        _exit(3);
    }
    atomic_fetch_add(&segv_calls, 1);
    siglongjmp(probe_jump, 1);
}

/* An unmapped address, read through a variable so that the compiler cannot see it. */
static volatile int *volatile unmapped = (volatile int *)16;

/* 1 if reading `unmapped` faulted and the handler jumped back here. */
static int probe(void) {
    int faulted = 0;
    probing = 1;
    if (sigsetjmp(probe_jump, 1) == 0)
        (void)*unmapped;
    else
        faulted = 1;
    probing = 0;
    return faulted;
}

static pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;
static long *counter;

static void *add_only(void *unused) {
    (void)unused;
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&counter_lock);
        (*counter)++;
        pthread_mutex_unlock(&counter_lock);
    }
    return NULL;
}

static void *add_then_probe(void *unused) {
    (void)unused;
    for (int i = 0; i < 1000; i++) {
        pthread_mutex_lock(&counter_lock);
        (*counter)++;
        pthread_mutex_unlock(&counter_lock);
    }
    return (void *)(long)probe();
}

static void segvhandler(void) {
    struct sigaction action, old;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_segv;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, &old) != 0 || old.sa_handler != SIG_DFL)
        fail("segvhandler", "sigaction, or an old action other than SIG_DFL");
    if (sigaction(SIGSEGV, NULL, &old) != 0 || old.sa_sigaction != on_segv ||
        !(old.sa_flags & SA_SIGINFO))
        fail("segvhandler", "sigaction does not report the handler back");
    counter = nvmalloc(sizeof *counter, "counter");
    if (counter == NULL)
        fail("segvhandler", "nvmalloc");
    pthread_mutex_lock(&counter_lock);
    *counter = 0;
    pthread_mutex_unlock(&counter_lock);
    pthread_t threads[2];
    long probes = 0;
    for (int i = 0; i < 2; i++)
        pthread_create(&threads[i], NULL, add_then_probe, NULL);
    for (int i = 0; i < 2; i++) {
        void *faulted;
        pthread_join(threads[i], &faulted);
        probes += (long)faulted;
    }
    probes += probe();
    probes += probe();
    if (probes != 4 || atomic_load(&segv_calls) != 4)
        fail("segvhandler", "a probe's fault did not reach the handler");
    if (*counter != 2000)
        fail("segvhandler", "the counter is not 2000");
}

static atomic_int usr1_calls;
static atomic_int stop_sleepers;
static int pipe_fds[2];

static void on_usr1(int signal) {
    (void)signal;
    atomic_fetch_add(&usr1_calls, 1);
}

/* Sleeps until told to stop; then writes to the pipe (its reader is closed by then) and
 * returns 1 if the handler main installed is the action here and the write failed with
 * EPIPE. */
static void *sleeper(void *unused) {
    (void)unused;
    struct timespec step = {0, 1000000};
    while (!atomic_load(&stop_sleepers))
        nanosleep(&step, NULL);
    struct sigaction seen;
    int handler_seen = sigaction(SIGUSR1, NULL, &seen) == 0 && seen.sa_handler == on_usr1;
    errno = 0;
    int broken = write(pipe_fds[1], "x", 1) < 0 && errno == EPIPE;
    return (void *)(long)(handler_seen && broken);
}

static void lateaction(void) {
    if (setpgid(0, 0) != 0)
        fail("lateaction", "setpgid");
    if (pipe(pipe_fds) != 0)
        fail("lateaction", "pipe");
    pthread_t threads[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&threads[i], NULL, sleeper, NULL);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_usr1;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGUSR1, &action, NULL) != 0)
        fail("lateaction", "sigaction");
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
        fail("lateaction", "signal");
    close(pipe_fds[0]);
    kill(0, SIGUSR1);
    struct timespec step = {0, 1000000};
    for (int i = 0; i < 2000 && atomic_load(&usr1_calls) == 0; i++)
        nanosleep(&step, NULL);
    atomic_store(&stop_sleepers, 1);
    int good = 0;
    for (int i = 0; i < 3; i++) {
        void *result;
        pthread_join(threads[i], &result);
        good += (int)(long)result;
    }
    if (atomic_load(&usr1_calls) < 1)
        fail("lateaction", "the SIGUSR1 handler did not run");
    if (good != 3)
        fail("lateaction", "a thread does not have the handler, or its write did not fail with EPIPE");
}

static void oneshot(void) {
    pthread_t thread;
    pthread_create(&thread, NULL, nothing, NULL);
    pthread_join(thread, NULL);
    struct sigaction action, seen;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_chld;
    action.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NOCLDSTOP | SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaddset(&action.sa_mask, SIGUSR1);
    if (sigaction(SIGCHLD, &action, NULL) != 0)
        fail("oneshot", "sigaction");
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    wait_for(&chld_calls, 2000);
    int status;
    if (waitpid(child, &status, 0) != child)
        fail("oneshot", "waitpid of the child");
    if (chld_calls != 1 || chld_pid != child)
        fail("oneshot", "the handler was not called once for the child");
    if (sigaction(SIGCHLD, NULL, &seen) != 0 || seen.sa_handler != SIG_DFL)
        fail("oneshot", "the handler was not reset to SIG_DFL");
    int wanted = SA_SIGINFO | SA_RESETHAND | SA_NOCLDSTOP | SA_RESTART;
    if ((seen.sa_flags & wanted) != wanted || !sigismember(&seen.sa_mask, SIGUSR1))
        fail("oneshot", "the reset dropped the handler's flags or mask");
}

static atomic_int int_calls;
static pthread_t grandchild;

static void on_int(int signal) {
    (void)signal;
    atomic_fetch_add(&int_calls, 1);
}

static void *sleep_until_stopped(void *unused) {
    (void)unused;
    struct timespec step = {0, 1000000};
    while (!atomic_load(&stop_sleepers))
        nanosleep(&step, NULL);
    return NULL;
}

static void *make_one_and_end(void *unused) {
    (void)unused;
    return (void *)(long)pthread_create(&grandchild, NULL, sleep_until_stopped, NULL);
}

static void endedthread(void) {
    if (setpgid(0, 0) != 0)
        fail("endedthread", "setpgid");
    pthread_t maker;
    void *result;
    pthread_create(&maker, NULL, make_one_and_end, NULL);
    pthread_join(maker, &result);
    if (result != NULL)
        fail("endedthread", "pthread_create in a thread");
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_int;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGINT, &action, NULL) != 0)
        fail("endedthread", "sigaction");
    kill(0, SIGINT);
    struct timespec step = {0, 1000000};
    for (int i = 0; i < 100; i++)
        nanosleep(&step, NULL);
    atomic_store(&stop_sleepers, 1);
    pthread_join(grandchild, NULL);
    if (atomic_load(&int_calls) < 1)
        fail("endedthread", "the SIGINT handler did not run");
}

static pid_t main_pid, main_ppid;
static atomic_int pid_failures;

static void check_pids(void) {
    if (getpid() != main_pid || getppid() != main_ppid || gettid() == getpid())
        atomic_fetch_add(&pid_failures, 1);
}

static void *pids_grandchild(void *unused) {
    (void)unused;
    check_pids();
    return NULL;
}

static void *pids_child(void *unused) {
    (void)unused;
    check_pids();
    pthread_t t;
    pthread_create(&t, NULL, pids_grandchild, NULL);
    pthread_join(t, NULL);
    return NULL;
}

static void pids(void) {
    main_pid = getpid();
    main_ppid = getppid();
    if (gettid() != main_pid)
        fail("pids", "main's gettid() is not its getpid()");
    pthread_t t;
    pthread_create(&t, NULL, pids_child, NULL);
    pthread_join(t, NULL);
    if (atomic_load(&pid_failures) != 0)
        fail("pids", "a thread's getpid() or getppid() differs from main's");
}

static atomic_int waited, usr2_calls;

static void on_usr2(int signal) {
    (void)signal;
    atomic_fetch_add(&usr2_calls, 1);
}

static void *wait_for_usr1(void *unused) {
    (void)unused;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    struct timespec limit = {3, 0};
    if (sigtimedwait(&set, NULL, &limit) == SIGUSR1)
        atomic_store(&waited, 1);
    return NULL;
}

static void *send_usr2_blocked(void *unused) {
    (void)unused;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    kill(getpid(), SIGUSR2);
    return NULL;
}

static void processkill(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t waiter;
    pthread_create(&waiter, NULL, wait_for_usr1, NULL);
    struct timespec step = {0, 100000000};
    /* Sent again until taken: the waiter may not be waiting yet. */
    for (int i = 0; i < 20 && !atomic_load(&waited); i++) {
        kill(getpid(), SIGUSR1);
        nanosleep(&step, NULL);
    }
    pthread_join(waiter, NULL);
    if (!atomic_load(&waited))
        fail("processkill", "kill(getpid(), SIGUSR1) did not reach the thread waiting for it");
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_usr2;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGUSR2, &action, NULL) != 0)
        fail("processkill", "sigaction");
    pthread_t sender;
    pthread_create(&sender, NULL, send_usr2_blocked, NULL);
    pthread_join(sender, NULL);
    for (int i = 0; i < 20 && atomic_load(&usr2_calls) == 0; i++)
        nanosleep(&step, NULL);
    if (atomic_load(&usr2_calls) != 1)
        fail("processkill", "kill(getpid(), SIGUSR2) from a thread blocking it did not run the handler once");
}

static volatile long *stop_count;

static void *count_until_stopped(void *unused) {
    (void)unused;
    while (!atomic_load(&stop_sleepers))
        __atomic_add_fetch(stop_count, 1, __ATOMIC_RELAXED);
    return NULL;
}

static long count_after(long ms) {
    struct timespec step = {0, ms * 1000000L};
    nanosleep(&step, NULL);
    return __atomic_load_n(stop_count, __ATOMIC_RELAXED);
}

static void stopcont(void) {
    stop_count = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (stop_count == MAP_FAILED)
        fail("stopcont", "mmap");
    pthread_t counter;
    pthread_create(&counter, NULL, count_until_stopped, NULL);
    count_after(50);
    pid_t child = fork();
    if (child == 0) {
        pid_t program = getppid();
        kill(program, SIGSTOP);
        long before = count_after(100);
        long still = count_after(200);
        kill(program, SIGCONT);
        long first = count_after(100);
        long moved = count_after(200);
        _exit(before != still ? 1 : first == moved ? 2 : 0);
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    atomic_store(&stop_sleepers, 1);
    pthread_join(counter, NULL);
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 1)
        fail("stopcont", "a thread went on counting while the program was stopped");
    if (WEXITSTATUS(status) == 2)
        fail("stopcont", "a thread did not count again once the program was continued");
}

/* sigset is deprecated in glibc's header, still exported, and still used by old programs. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static sighandler_t sysv_sigset(int signal, sighandler_t handler) {
    return sigset(signal, handler);
}
#pragma GCC diagnostic pop

static volatile sig_atomic_t plain_chld_calls;

static void on_chld_plain(int signal) {
    (void)signal;
    plain_chld_calls++;
}

/* 8 threads made and joined call no handler; a child's exit calls it once. */
static void threads_then_child(const char *mode) {
    plain_chld_calls = 0;
    for (int i = 0; i < 8; i++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, nothing, NULL) != 0 || pthread_join(thread, NULL) != 0)
            fail(mode, "create or join");
    }
    wait_for(&plain_chld_calls, 50);
    if (plain_chld_calls != 0)
        fail(mode, "the SIGCHLD handler was called for a thread's end");
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    wait_for(&plain_chld_calls, 2000);
    if (plain_chld_calls != 1)
        fail(mode, "the handler was not called once for the program's child");
    int status;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
}

static void sysvchld(void) {
    if (sysv_signal(SIGCHLD, on_chld_plain) == SIG_ERR)
        fail("sysvchld", "sysv_signal");
    threads_then_child("sysvchld");
    if (sysv_sigset(SIGCHLD, on_chld_plain) != SIG_DFL)
        fail("sysvchld", "the one-shot handler was not reset to SIG_DFL");
    threads_then_child("sysvchld");
    if (sysv_sigset(SIGCHLD, SIG_DFL) != on_chld_plain)
        fail("sysvchld", "sigset does not report the handler back");
}

static void on_segv_plain(int signal) {
    on_segv(signal, NULL, NULL);
}

static void sysvsegv(void) {
    if (sysv_sigset(SIGSEGV, on_segv_plain) != SIG_DFL)
        fail("sysvsegv", "sigset, or an old action other than SIG_DFL");
    counter = nvmalloc(sizeof *counter, "counter");
    if (counter == NULL)
        fail("sysvsegv", "nvmalloc");
    pthread_mutex_lock(&counter_lock);
    *counter = 0;
    pthread_mutex_unlock(&counter_lock);
    pthread_t threads[2];
    long probes = 0;
    for (int i = 0; i < 2; i++)
        pthread_create(&threads[i], NULL, add_then_probe, NULL);
    for (int i = 0; i < 2; i++) {
        void *faulted;
        pthread_join(threads[i], &faulted);
        probes += (long)faulted;
    }
    probes += probe();
    if (probes != 3 || atomic_load(&segv_calls) != 3 || *counter != 2000)
        fail("sysvsegv", "sigset: the handler did not see exactly the three probes");
    /* One-shot: a thread's tracked writes do not use it up; main's probe does, and the
     * default action is back (in main: a one-shot handler is reset in the thread-process
     * that took the signal). */
    if (sysv_signal(SIGSEGV, on_segv_plain) != on_segv_plain)
        fail("sysvsegv", "sysv_signal does not report the sigset handler");
    pthread_t thread;
    pthread_create(&thread, NULL, add_only, NULL);
    pthread_join(thread, NULL);
    if (probe() != 1 || atomic_load(&segv_calls) != 4 || *counter != 3000)
        fail("sysvsegv", "sysv_signal: the handler did not see exactly the probe");
    if (sysv_sigset(SIGSEGV, SIG_DFL) != SIG_DFL)
        fail("sysvsegv", "the one-shot handler was not reset to SIG_DFL");
}

static char *alt_base;
static size_t alt_size;
static atomic_int on_alt_stack;

/* Finds itself on the program's alternate stack (a local's address inside it). */
static void on_usr1_onstack(int signal) {
    (void)signal;
    char here;
    stack_t now;
    if (&here >= alt_base && &here < alt_base + alt_size && sigaltstack(NULL, &now) == 0 &&
        (now.ss_flags & SS_ONSTACK))
        atomic_store(&on_alt_stack, 1);
}

static pthread_mutex_t pages_lock = PTHREAD_MUTEX_INITIALIZER;
static char *pages;

static void *alt_fresh(void *unused) {
    (void)unused;
    stack_t now;
    if (sigaltstack(NULL, &now) != 0 || !(now.ss_flags & SS_DISABLE))
        return (void *)1;
    return NULL;
}

static const char *read_back(const stack_t *set) {
    stack_t back;
    if (sigaltstack(NULL, &back) != 0 || back.ss_sp != set->ss_sp ||
        back.ss_size != set->ss_size || (back.ss_flags & (SS_DISABLE | SS_ONSTACK)))
        return "the stack read back is not the one set";
    return NULL;
}

static void *alt_thread(void *unused) {
    (void)unused;
    /* The classic MINSIGSTKSZ, 2 KiB (glibc's macro is larger with _GNU_SOURCE), enough for
     * a small handler where the processor's register state is small; or twice as much until
     * the kernel takes it. No signal is taken on it here. */
    size_t size = 2048;
    stack_t small = {.ss_sp = malloc(64 * 1024), .ss_size = size, .ss_flags = 0};
    while (sigaltstack(&small, NULL) != 0) {
        if (errno != ENOMEM || size >= 64 * 1024)
            return "sigaltstack";
        size *= 2;
        small.ss_size = size;
    }
    for (int round = 0; round < 3; round++) {
        pthread_mutex_lock(&pages_lock);
        for (int page = 0; page < 16; page++)
            pages[page * 4096 + round] += 1;
        pthread_mutex_unlock(&pages_lock);
    }
    const char *why = read_back(&small);
    if (why != NULL)
        return (void *)why;
    /* A large one is the stack the program's SA_ONSTACK handler runs on. */
    alt_size = 128 * 1024;
    alt_base = malloc(alt_size);
    stack_t large = {.ss_sp = alt_base, .ss_size = alt_size, .ss_flags = 0};
    if (sigaltstack(&large, NULL) != 0)
        return "sigaltstack of a large stack";
    pthread_kill(pthread_self(), SIGUSR1);
    if (!atomic_load(&on_alt_stack))
        return "the SA_ONSTACK handler did not run on the program's alternate stack";
    if ((why = read_back(&large)) != NULL)
        return (void *)why;
    stack_t off = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
    stack_t back;
    if (sigaltstack(&off, NULL) != 0 || sigaltstack(NULL, &back) != 0 ||
        !(back.ss_flags & SS_DISABLE))
        return "SS_DISABLE not read back";
    pthread_t fresh;
    void *result;
    pthread_create(&fresh, NULL, alt_fresh, NULL);
    pthread_join(fresh, &result);
    if (result != NULL)
        return "a new thread starts with an alternate stack";
    return NULL;
}

static void altstack(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_usr1_onstack;
    action.sa_flags = SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGUSR1, &action, NULL) != 0)
        fail("altstack", "sigaction");
    pages = nvmalloc(16 * 4096, "pages");
    if (pages == NULL)
        fail("altstack", "nvmalloc");
    pthread_t thread;
    void *why;
    pthread_create(&thread, NULL, alt_thread, NULL);
    pthread_join(thread, &why);
    if (why != NULL)
        fail("altstack", why);
    for (int page = 0; page < 16; page++)
        if (pages[page * 4096] != 1 || pages[page * 4096 + 2] != 1)
            fail("altstack", "a tracked write was lost");
}

/* Sends `signal` to `target` (a process id, or minus a process group's) from a child with
 * the kill system call, as a shell's kill would, from outside the program (not through the
 * library's kill) and from another process group, and waits for the child. */
static void kill_from_outside_times(pid_t target, int signal, int times) {
    pid_t child = fork();
    if (child == 0) {
        /* Out of the program's group, as a shell is (and the child's handler, which would
         * count in the globals it shares with the program, is not in the group's way). */
        setpgid(0, 0);
        struct timespec pause = {0, 50000000};
        for (int i = 0; i < times; i++) {
            if (i > 0)
                nanosleep(&pause, NULL);
            syscall(SYS_kill, target, signal);
        }
        _exit(0);
    }
    waitpid(child, NULL, 0);
}

static void kill_from_outside(pid_t target, int signal) {
    kill_from_outside_times(target, signal, 1);
}

static atomic_int group_calls;
static atomic_int group_in_main;
static pid_t group_main_tid;
static atomic_int group_stop;

static void on_group(int signal) {
    (void)signal;
    atomic_fetch_add(&group_calls, 1);
    if (gettid() == group_main_tid)
        atomic_fetch_add(&group_in_main, 1);
}

static atomic_int group_tids[3];

static void *group_sleeper(void *slot) {
    atomic_store(&group_tids[(long)slot], gettid());
    struct timespec step = {0, 1000000};
    while (!atomic_load(&group_stop))
        nanosleep(&step, NULL);
    return NULL;
}

/* Waits up to `ms` milliseconds for *count to reach `want`, then 100 ms more for a count
 * past it; returns the count. */
static int settle(atomic_int *count, int want, int ms) {
    struct timespec step = {0, 1000000};
    for (int i = 0; i < ms && atomic_load(count) < want; i++)
        nanosleep(&step, NULL);
    for (int i = 0; i < 100; i++)
        nanosleep(&step, NULL);
    return atomic_load(count);
}

static void groupsignal(void) {
    if (setpgid(0, 0) != 0)
        fail("groupsignal", "setpgid");
    group_main_tid = gettid();
    pthread_t threads[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&threads[i], NULL, group_sleeper, (void *)(long)i);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_group;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGINT, &action, NULL) != 0 || sigaction(SIGUSR1, &action, NULL) != 0)
        fail("groupsignal", "sigaction");
    /* A group signal from outside: once, in main. */
    kill_from_outside(-getpgid(0), SIGINT);
    if (settle(&group_calls, 1, 2000) != 1)
        fail("groupsignal", "a signal to the process group did not run the handler once");
    if (atomic_load(&group_in_main) != 1)
        fail("groupsignal", "the group signal's handler did not run in main");
    /* The program's own kill(0, ...): once. */
    kill(0, SIGINT);
    if (settle(&group_calls, 2, 2000) != 2)
        fail("groupsignal", "kill(0, SIGINT) did not run the handler once");
    if (atomic_load(&group_in_main) != 2)
        fail("groupsignal", "kill(0, SIGINT)'s handler did not run in main");
    /* Main blocks SIGUSR1: once, in a thread, and main does not run it when it unblocks. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    kill_from_outside(-getpgid(0), SIGUSR1);
    if (settle(&group_calls, 3, 2000) != 3)
        fail("groupsignal", "a group signal main blocks did not run the handler once");
    if (atomic_load(&group_in_main) != 2)
        fail("groupsignal", "a group signal main blocks ran in main");
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    if (settle(&group_calls, 4, 0) != 3)
        fail("groupsignal", "main ran the group signal again when it unblocked it");
    /* A thread's own signals still reach it: pthread_kill of each thread. */
    for (int i = 0; i < 3; i++)
        pthread_kill(threads[i], SIGINT);
    if (settle(&group_calls, 6, 2000) != 6)
        fail("groupsignal", "pthread_kill of each thread did not run the handler in each");
    if (atomic_load(&group_in_main) != 2)
        fail("groupsignal", "pthread_kill of a thread ran the handler in main");
    /* A signal from outside to a thread-process's own id names the program (a thread's id
     * is the process's under pthreads): once, in main. */
    kill_from_outside(atomic_load(&group_tids[1]), SIGINT);
    if (settle(&group_calls, 7, 2000) != 7 || atomic_load(&group_in_main) != 3)
        fail("groupsignal", "a signal from outside to a thread's id did not run once in main");
    /* Two group signals from one sender 50 ms apart (as two Ctrl-Cs): two calls. */
    kill_from_outside_times(-getpgid(0), SIGINT, 2);
    if (settle(&group_calls, 9, 2000) != 9 || atomic_load(&group_in_main) != 5)
        fail("groupsignal", "two group signals from one sender did not run the handler twice");
    atomic_store(&group_stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(threads[i], NULL);
}

static atomic_int term_waited;
static atomic_int term_code;
static atomic_int term_sender;

static void *wait_for_term(void *unused) {
    (void)unused;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    int got;
    if (sigwait(&set, &got) == 0 && got == SIGTERM)
        atomic_store(&term_waited, 1);
    siginfo_t info;
    if (sigwaitinfo(&set, &info) == SIGHUP) {
        atomic_store(&term_code, info.si_code);
        atomic_store(&term_sender, info.si_pid);
        atomic_store(&term_waited, 2);
    }
    return NULL;
}

static void pidsigwait(void) {
    /* The usual server: every thread blocks the signals, one waits for them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t waiter;
    pthread_create(&waiter, NULL, wait_for_term, NULL);
    struct timespec step = {0, 50000000};
    nanosleep(&step, NULL);
    kill_from_outside(getpid(), SIGTERM);
    for (int i = 0; i < 40 && atomic_load(&term_waited) != 1; i++)
        nanosleep(&step, NULL);
    if (atomic_load(&term_waited) != 1)
        fail("pidsigwait", "SIGTERM sent to the program's pid did not reach the thread in sigwait");
    pid_t child = fork();
    if (child == 0) {
        syscall(SYS_kill, getppid(), SIGHUP);
        _exit(0);
    }
    waitpid(child, NULL, 0);
    pthread_join(waiter, NULL);
    if (atomic_load(&term_waited) != 2)
        fail("pidsigwait", "SIGHUP sent to the program's pid did not reach the thread in sigwaitinfo");
    if (atomic_load(&term_code) != SI_USER || atomic_load(&term_sender) != child)
        fail("pidsigwait", "sigwaitinfo did not report the sender's code and pid");
}

static atomic_int oneshot_calls;

static void on_oneshot(int signal) {
    (void)signal;
    atomic_fetch_add(&oneshot_calls, 1);
}

static atomic_int reset_seen;

/* Waits until the one-shot handler ran (in another thread), then reads its action. */
static void *read_reset(void *unused) {
    (void)unused;
    struct timespec step = {0, 1000000};
    for (int i = 0; i < 2000 && atomic_load(&oneshot_calls) == 0; i++)
        nanosleep(&step, NULL);
    struct sigaction seen;
    if (sigaction(SIGUSR2, NULL, &seen) == 0 && seen.sa_handler == SIG_DFL)
        atomic_store(&reset_seen, 1);
    return NULL;
}

static void *take_oneshot(void *unused) {
    (void)unused;
    raise(SIGUSR2);
    return NULL;
}

static void oneshotall(void) {
    pthread_t reader;
    pthread_create(&reader, NULL, read_reset, NULL);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_oneshot;
    action.sa_flags = SA_RESETHAND;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGUSR2, &action, NULL) != 0)
        fail("oneshotall", "sigaction");
    pthread_t taker;
    pthread_create(&taker, NULL, take_oneshot, NULL);
    pthread_join(taker, NULL);
    pthread_join(reader, NULL);
    if (atomic_load(&oneshot_calls) != 1)
        fail("oneshotall", "the one-shot handler did not run once");
    struct sigaction seen;
    if (sigaction(SIGUSR2, NULL, &seen) != 0 || seen.sa_handler != SIG_DFL)
        fail("oneshotall", "main still has the one-shot handler another thread took");
    if (!atomic_load(&reset_seen))
        fail("oneshotall", "a third thread still has the one-shot handler");
    /* sysv_signal's one-shot handler, taken by main: reset in the other thread too. */
    atomic_store(&oneshot_calls, 0);
    atomic_store(&reset_seen, 0);
    pthread_create(&reader, NULL, read_reset, NULL);
    if (sysv_signal(SIGUSR2, on_oneshot) == SIG_ERR)
        fail("oneshotall", "sysv_signal");
    raise(SIGUSR2);
    pthread_join(reader, NULL);
    if (atomic_load(&oneshot_calls) != 1 || !atomic_load(&reset_seen))
        fail("oneshotall", "sysv_signal's handler taken by main was not reset in a thread");
}

static atomic_int tty_calls, tty_kernel, tty_in_main;

static void on_tty_int(int signal, siginfo_t *info, void *context) {
    (void)signal;
    (void)context;
    atomic_fetch_add(&tty_calls, 1);
    if (info->si_code == SI_KERNEL)
        atomic_fetch_add(&tty_kernel, 1);
    if (gettid() == group_main_tid)
        atomic_fetch_add(&tty_in_main, 1);
}

static void ttyint(void) {
    /* A session of its own whose controlling terminal is a new pseudo-terminal: a ^C
     * written to its master side is the terminal's SIGINT to the foreground group. */
    if (setsid() < 0)
        fail("ttyint", "setsid");
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0)
        fail("ttyint", "posix_openpt");
    int terminal = open(ptsname(master), O_RDWR);
    if (terminal < 0)
        fail("ttyint", "open the terminal");
    group_main_tid = gettid();
    pthread_t threads[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&threads[i], NULL, group_sleeper, (void *)(long)i);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_tty_int;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGINT, &action, NULL) != 0)
        fail("ttyint", "sigaction");
    struct timespec pause = {0, 100000000};
    for (int i = 1; i <= 3; i++) {
        if (write(master, "\x03", 1) != 1)
            fail("ttyint", "write ^C");
        if (settle(&tty_calls, i, 2000) != i)
            fail("ttyint", "a ^C did not run the handler once");
        nanosleep(&pause, NULL);
    }
    if (atomic_load(&tty_kernel) != 3 || atomic_load(&tty_in_main) != 3)
        fail("ttyint", "the terminal's SIGINT did not run in main with SI_KERNEL");
    atomic_store(&group_stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(threads[i], NULL);
    /* Closing the master hangs the terminal up: SIGHUP to its foreground group. */
    signal(SIGHUP, SIG_IGN);
    close(terminal);
    close(master);
}

static atomic_int held_calls, held_in_thread, held_ready;
static pid_t held_thread_tid;

static void on_held(int signal) {
    (void)signal;
    atomic_fetch_add(&held_calls, 1);
    if (gettid() == held_thread_tid)
        atomic_fetch_add(&held_in_thread, 1);
}

/* Leaves SIGUSR2 unblocked (main blocks it) and sleeps until its handler ran, 3 s at most. */
static void *take_held(void *unused) {
    (void)unused;
    held_thread_tid = gettid();
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);
    atomic_store(&held_ready, 1);
    struct timespec step = {0, 1000000};
    for (int i = 0; i < 3000 && atomic_load(&held_calls) == 0; i++)
        nanosleep(&step, NULL);
    return NULL;
}

static void heldhandler(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_held;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGUSR2, &action, NULL) != 0)
        fail("heldhandler", "sigaction");
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t taker;
    pthread_create(&taker, NULL, take_held, NULL);
    struct timespec step = {0, 1000000};
    while (!atomic_load(&held_ready))
        nanosleep(&step, NULL);
    kill_from_outside(getpid(), SIGUSR2);
    pthread_join(taker, NULL);
    if (atomic_load(&held_calls) != 1 || atomic_load(&held_in_thread) != 1)
        fail("heldhandler", "SIGUSR2 to the program's pid, blocked by main, did not run once in the thread");
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGUSR2))
        fail("heldhandler", "SIGUSR2 is still pending in main");
}

static atomic_int sfd_signal, sfd_sender, sfd_ready;

/* Reads one signal from a signalfd for SIGTERM (blocked in every thread). */
static void *read_signalfd(void *unused) {
    (void)unused;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    int fd = signalfd(-1, &set, 0);
    if (fd < 0)
        return NULL;
    atomic_store(&sfd_ready, 1);
    struct signalfd_siginfo info;
    if (read(fd, &info, sizeof info) == (ssize_t)sizeof info) {
        atomic_store(&sfd_signal, (int)info.ssi_signo);
        atomic_store(&sfd_sender, (int)info.ssi_pid);
    }
    close(fd);
    return NULL;
}

static void signalfdthread(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t reader;
    pthread_create(&reader, NULL, read_signalfd, NULL);
    struct timespec step = {0, 1000000};
    while (!atomic_load(&sfd_ready))
        nanosleep(&step, NULL);
    pid_t child = fork();
    if (child == 0) {
        setpgid(0, 0);
        syscall(SYS_kill, getppid(), SIGTERM);
        _exit(0);
    }
    waitpid(child, NULL, 0);
    pthread_join(reader, NULL);
    if (atomic_load(&sfd_signal) != SIGTERM || atomic_load(&sfd_sender) != child)
        fail("signalfdthread", "SIGTERM to the program's pid did not reach the thread's signalfd");
}

static void on_nothing(int signal) {
    (void)signal;
}

static long long monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

static volatile sig_atomic_t prof_calls;
static atomic_llong prof_slowest_ns;
/* The time spent in the handler's sigaction calls, in all. */
static atomic_llong prof_total_ns;
/* The loop's own slowest sigaction, the handler calls that interrupted it left out (as slow
 * under load as a handler's, when both wait for main's acknowledgement). */
static long long loop_slowest_ns;

/* SIGPROF: installs SIGUSR1's (unchanged) action again, timing the call. */
static void on_prof(int signal) {
    (void)signal;
    int saved = errno;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_nothing;
    sigemptyset(&action.sa_mask);
    long long started = monotonic_ns();
    sigaction(SIGUSR1, &action, NULL);
    long long took = monotonic_ns() - started;
    if (took > atomic_load(&prof_slowest_ns))
        atomic_store(&prof_slowest_ns, took);
    atomic_fetch_add(&prof_total_ns, took);
    prof_calls++;
    errno = saved;
}

static void *publish_in_a_loop(void *unused) {
    (void)unused;
    struct sigaction prof;
    memset(&prof, 0, sizeof prof);
    prof.sa_handler = on_prof;
    prof.sa_flags = SA_RESTART;
    sigemptyset(&prof.sa_mask);
    if (sigaction(SIGPROF, &prof, NULL) != 0)
        fail("handleraction", "sigaction(SIGPROF)");
    /* A POSIX timer of this thread's process (its own signal, SI_TIMER), every 500 us of
     * wall-clock time: most land between the loop's sigaction calls, some inside one. */
    struct sigevent event;
    memset(&event, 0, sizeof event);
    event.sigev_notify = SIGEV_SIGNAL;
    event.sigev_signo = SIGPROF;
    timer_t timer;
    if (timer_create(CLOCK_MONOTONIC, &event, &timer) != 0)
        fail("handleraction", "timer_create");
    struct itimerspec every = {{0, 500000}, {0, 500000}};
    if (timer_settime(timer, 0, &every, NULL) != 0)
        fail("handleraction", "timer_settime");
    struct sigaction other;
    memset(&other, 0, sizeof other);
    other.sa_handler = on_nothing;
    sigemptyset(&other.sa_mask);
    long long deadline = monotonic_ns() + 250000000LL;
    while (monotonic_ns() < deadline) {
        long long in_handlers = atomic_load(&prof_total_ns);
        long long started = monotonic_ns();
        sigaction(SIGUSR2, &other, NULL);
        long long took = monotonic_ns() - started - (atomic_load(&prof_total_ns) - in_handlers);
        if (took > loop_slowest_ns)
            loop_slowest_ns = took;
    }
    timer_delete(timer);
    return NULL;
}

static void handleraction(void) {
    pthread_t thread;
    pthread_create(&thread, NULL, publish_in_a_loop, NULL);
    pthread_join(thread, NULL);
    /* The thread's globals are in the persistent heap: main sees them after the join. */
    long long slowest = atomic_load(&prof_slowest_ns);
    fprintf(stderr,
            "handleraction: %d handler calls, slowest sigaction %lld ns (loop: %lld ns)\n",
            (int)prof_calls, slowest, loop_slowest_ns);
    if (prof_calls < 20) {
        printf("handleraction: %d handler calls\n", (int)prof_calls);
        fail("handleraction", "too few SIGPROF handler calls to tell");
    }
    if (slowest >= 40000000LL && slowest > 3 * loop_slowest_ns) {
        printf("handleraction: slowest sigaction in the handler %lld ns (%d calls)\n", slowest,
               (int)prof_calls);
        fail("handleraction", "a handler's sigaction stalled on the table lock its thread held");
    }
}

static volatile sig_atomic_t torn_calls;
static volatile sig_atomic_t torn_seen;

static int usr2_blocked(void) {
    sigset_t now;
    sigprocmask(SIG_BLOCK, NULL, &now);
    return sigismember(&now, SIGUSR2);
}

/* Installed with SIGUSR2 in its mask. */
static void with_usr2_blocked(int signal) {
    (void)signal;
    int saved = errno;
    torn_calls++;
    if (!usr2_blocked())
        torn_seen++;
    errno = saved;
}

/* Installed with an empty mask. */
static void with_usr2_open(int signal) {
    (void)signal;
    int saved = errno;
    torn_calls++;
    if (usr2_blocked())
        torn_seen++;
    errno = saved;
}

static void tornaction(void) {
    struct sigaction blocking, open;
    memset(&blocking, 0, sizeof blocking);
    blocking.sa_handler = with_usr2_blocked;
    sigemptyset(&blocking.sa_mask);
    sigaddset(&blocking.sa_mask, SIGUSR2);
    memset(&open, 0, sizeof open);
    open.sa_handler = with_usr2_open;
    sigemptyset(&open.sa_mask);
    if (sigaction(SIGUSR1, &open, NULL) != 0)
        fail("tornaction", "sigaction");
    struct sigevent event;
    memset(&event, 0, sizeof event);
    event.sigev_notify = SIGEV_SIGNAL;
    event.sigev_signo = SIGUSR1;
    timer_t timer;
    if (timer_create(CLOCK_MONOTONIC, &event, &timer) != 0)
        fail("tornaction", "timer_create");
    struct itimerspec every = {{0, 20000}, {0, 20000}};
    if (timer_settime(timer, 0, &every, NULL) != 0)
        fail("tornaction", "timer_settime");
    long long deadline = monotonic_ns() + 250000000LL;
    long switches = 0;
    while (monotonic_ns() < deadline) {
        sigaction(SIGUSR1, switches % 2 ? &open : &blocking, NULL);
        switches++;
    }
    timer_delete(timer);
    fprintf(stderr, "tornaction: %ld switches, %d handler calls, %d under the other's mask\n",
            switches, (int)torn_calls, (int)torn_seen);
    if (torn_calls < 100)
        fail("tornaction", "too few handler calls to tell");
    if (torn_seen != 0)
        fail("tornaction", "a handler ran under the other action's mask");
}

#define HW_PAGES 96
#define HW_WORDS (4096 / sizeof(long))

static long *hw_array;
static volatile sig_atomic_t hw_calls;
static pthread_mutex_t hw_lock = PTHREAD_MUTEX_INITIALIZER;

static void hw_handler(int signal) {
    (void)signal;
    int n = hw_calls;
    hw_array[(size_t)(n % HW_PAGES) * HW_WORDS + 1] += 1;
    hw_calls = n + 1;
}

static void *hw_thread(void *unused) {
    (void)unused;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = hw_handler;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGUSR1, &action, NULL) != 0)
        fail("handlerwrites", "sigaction");
    struct sigevent event;
    memset(&event, 0, sizeof event);
    /* To this thread only, as natively a process's timer signal may go to main. */
    event.sigev_notify = SIGEV_THREAD_ID;
    event.sigev_signo = SIGUSR1;
    event._sigev_un._tid = gettid();
    timer_t timer;
    if (timer_create(CLOCK_MONOTONIC, &event, &timer) != 0)
        fail("handlerwrites", "timer_create");
    struct itimerspec every = {{0, 20000}, {0, 20000}};
    if (timer_settime(timer, 0, &every, NULL) != 0)
        fail("handlerwrites", "timer_settime");
    long long deadline = monotonic_ns() + 250000000LL;
    for (long round = 1; monotonic_ns() < deadline; round++) {
        pthread_mutex_lock(&hw_lock);
        for (int page = 0; page < HW_PAGES; page++)
            hw_array[(size_t)page * HW_WORDS] = round;
        pthread_mutex_unlock(&hw_lock);
    }
    timer_delete(timer);
    /* A handler call after the last unlock: the join merges it. */
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    long *calls = &hw_array[(size_t)HW_PAGES * HW_WORDS];
    *calls = hw_calls;
    return NULL;
}

static void handlerwrites(void) {
    hw_array = nvmalloc((HW_PAGES + 1) * 4096, "handlerwrites");
    if (hw_array == NULL)
        fail("handlerwrites", "nvmalloc");
    memset(hw_array, 0, (HW_PAGES + 1) * 4096);
    pthread_t thread;
    pthread_create(&thread, NULL, hw_thread, NULL);
    pthread_join(thread, NULL);
    long calls = hw_array[(size_t)HW_PAGES * HW_WORDS];
    long sum = 0;
    for (int page = 0; page < HW_PAGES; page++)
        sum += hw_array[(size_t)page * HW_WORDS + 1];
    fprintf(stderr, "handlerwrites: %ld handler calls, %ld of their additions seen\n", calls, sum);
    if (calls < 100)
        fail("handlerwrites", "too few handler calls to tell");
    if (sum != calls)
        fail("handlerwrites", "a handler's write to the persistent heap was lost");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: signals MODE\n");
        return 2;
    }
    alarm(10);
    const char *mode = argv[1];
    if (strcmp(mode, "blockedjoins") == 0)
        blockedjoins();
    else if (strcmp(mode, "segvhandler") == 0)
        segvhandler();
    else if (strcmp(mode, "lateaction") == 0)
        lateaction();
    else if (strcmp(mode, "oneshot") == 0)
        oneshot();
    else if (strcmp(mode, "endedthread") == 0)
        endedthread();
    else if (strcmp(mode, "pids") == 0)
        pids();
    else if (strcmp(mode, "processkill") == 0)
        processkill();
    else if (strcmp(mode, "stopcont") == 0)
        stopcont();
    else if (strcmp(mode, "sysvchld") == 0)
        sysvchld();
    else if (strcmp(mode, "sysvsegv") == 0)
        sysvsegv();
    else if (strcmp(mode, "altstack") == 0)
        altstack();
    else if (strcmp(mode, "groupsignal") == 0)
        groupsignal();
    else if (strcmp(mode, "pidsigwait") == 0)
        pidsigwait();
    else if (strcmp(mode, "oneshotall") == 0)
        oneshotall();
    else if (strcmp(mode, "ttyint") == 0)
        ttyint();
    else if (strcmp(mode, "heldhandler") == 0)
        heldhandler();
    else if (strcmp(mode, "signalfdthread") == 0)
        signalfdthread();
    else if (strcmp(mode, "handleraction") == 0)
        handleraction();
    else if (strcmp(mode, "tornaction") == 0)
        tornaction();
    else if (strcmp(mode, "handlerwrites") == 0)
        handlerwrites();
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("%s ok\n", mode);
    return 0;
}
