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
 *                 dies (the handler runs, in every thread: at least once), and a thread's
 *                 write to a pipe without a reader fails with EPIPE instead of killing it.
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
 * Every mode ends itself with alarm(10) if it hangs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("%s ok\n", mode);
    return 0;
}
