/*
 * What a pthreads program takes for granted and a thread made by fork would otherwise
 * change (docs/nvthreads.md §2, §3.6, §3.7). Usage: surprises MODE, printing "MODE ok" or
 * the first failure:
 *   errno      pthread calls that wait (a contended mutex, rwlock, spin lock, a condition
 *              variable, a barrier, a join) leave errno as it was;
 *   tsd        a new thread starts with errno 0 and no thread-specific data (null for every
 *              key), whatever its creator had;
 *   allocs     strings libc allocates for a thread (asprintf, vasprintf, getline, getdelim,
 *              realpath, canonicalize_file_name, getcwd, get_current_dir_name) are read and
 *              freed by main;
 *   lists      lists and buffers libc allocates for a thread (scandir, scandirat,
 *              getaddrinfo, open_memstream) are read and freed by main;
 *   joinself   pthread_join of the calling thread is EDEADLK, in main and in a thread;
 *   buffering  an unbuffered stdout chosen by the program stays unbuffered once threads run;
 *   wait       wait() returns the program's own child, not a thread's process, and fails
 *              with ECHILD, instead of blocking, when only threads are left;
 *   orphan     main -> thread -> thread that sleeps; the last prints "PID <its gettid()>" and
 *              all block (the test kills main and checks that the grandchild dies with it);
 *   wakeups    every condition signal reaches a waiter at once: 400 rounds hand tokens to
 *              three waiting threads, one pthread_cond_signal per token (with the mutex
 *              held in even rounds, after releasing it in odd ones) and, every eighth
 *              round, three tokens and a broadcast; main waits for each round's tokens to
 *              be taken on a second condition variable. A lost wake-up leaves a token until
 *              the runtime's watchdog period (200 ms) ends the waiter's sleep: the mode
 *              fails if a round takes 100 ms or more;
 *   timedhandoff  a timed lock woken by an unlock as its deadline passes, while another
 *              thread took the mutex meanwhile, passes the wake-up on: a thread asleep
 *              behind it gets the mutex at the next unlock. Main holds the mutex; a thread
 *              T (SCHED_IDLE, on main's CPU, so it cannot run while main does) sleeps in
 *              pthread_mutex_timedlock, then a thread W in pthread_mutex_lock; main unlocks
 *              (waking T, queued first), stops T (SIGSTOP) before it runs, locks again,
 *              lets T go on once its deadline has passed, T times out, main unlocks. W must
 *              have the mutex within 50 ms (a lost wake-up leaves it to the watchdog
 *              period, about 100 ms later);
 *   sigchld    a SIGCHLD handler (sigaction with SA_SIGINFO, then signal) runs for the
 *              program's own child and never for a thread's end: 8 threads made and joined
 *              raise nothing; a child that exits raises one call naming it; with SIGCHLD
 *              blocked, a thread's end and then a child's exit merge into one pending
 *              signal, delivered once, naming the child; sigaction and signal report the
 *              program's own handler as the old action;
 *   pasttimes  deadlines before the clock's epoch (tv_sec -1) have passed:
 *              pthread_cond_timedwait, pthread_cond_clockwait, pthread_mutex_timedlock of
 *              a held mutex and pthread_timedjoin_np of a running thread return ETIMEDOUT
 *              at once (the kernel refuses such times; a hang is ended by alarm()).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond, what)                                                                  \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            printf("FAIL %s (errno %d)\n", what, errno);                                   \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t rwlock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_spinlock_t spin;
static pthread_barrier_t barrier;
static int turn;

/* Four threads take every lock in turn many times, so many calls wait for another. */
static void *contend(void *arg) {
    long me = (long)arg;
    for (int i = 0; i < 2000; i++) {
        errno = 1000 + (int)me;
        pthread_mutex_lock(&mutex);
        CHECK(errno == 1000 + me, "errno after a contended pthread_mutex_lock");
        turn++;
        pthread_mutex_unlock(&mutex);
        CHECK(errno == 1000 + me, "errno after pthread_mutex_unlock");
        pthread_rwlock_wrlock(&rwlock);
        pthread_rwlock_unlock(&rwlock);
        CHECK(errno == 1000 + me, "errno after a pthread_rwlock");
        pthread_spin_lock(&spin);
        pthread_spin_unlock(&spin);
        CHECK(errno == 1000 + me, "errno after a pthread_spin_lock");
    }
    pthread_mutex_lock(&mutex);
    while (turn < 8000)
        pthread_cond_wait(&cond, &mutex);
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&mutex);
    CHECK(errno == 1000 + me, "errno after pthread_cond_wait");
    pthread_barrier_wait(&barrier);
    CHECK(errno == 1000 + me, "errno after pthread_barrier_wait");
    return NULL;
}

static void errno_mode(void) {
    pthread_t threads[4];
    pthread_spin_init(&spin, PTHREAD_PROCESS_PRIVATE);
    pthread_barrier_init(&barrier, NULL, 4);
    for (long i = 0; i < 4; i++)
        pthread_create(&threads[i], NULL, contend, (void *)i);
    for (;;) {
        pthread_mutex_lock(&mutex);
        int done = turn >= 8000;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&mutex);
        if (done)
            break;
        usleep(1000);
    }
    errno = 77;
    for (int i = 0; i < 4; i++)
        pthread_join(threads[i], NULL);
    CHECK(errno == 77, "errno after pthread_join");
}

static pthread_key_t key;
static void *fresh_thread(void *arg) {
    (void)arg;
    CHECK(errno == 0, "a new thread's errno");
    CHECK(pthread_getspecific(key) == NULL, "a new thread's thread-specific data");
    CHECK(pthread_setspecific(key, &key) == 0, "pthread_setspecific in a thread");
    return NULL;
}

static void tsd_mode(void) {
    pthread_t thread;
    CHECK(pthread_key_create(&key, NULL) == 0, "pthread_key_create");
    CHECK(pthread_setspecific(key, &thread) == 0, "pthread_setspecific");
    errno = 33;
    CHECK(pthread_create(&thread, NULL, fresh_thread, NULL) == 0, "pthread_create");
    CHECK(pthread_join(thread, NULL) == 0, "pthread_join");
    CHECK(pthread_getspecific(key) == &thread, "main's own thread-specific data");
}

static int printed(char **out, const char *format, ...) {
    va_list args;
    va_start(args, format);
    int len = vasprintf(out, format, args);
    va_end(args);
    return len;
}

#define STRINGS 9
static void *allocate(void *arg) {
    char **strings = arg;
    CHECK(asprintf(&strings[0], "%s %d %.1f", "asprintf", 42, 0.5) == 15, "asprintf");
    CHECK(printed(&strings[1], "vasprintf %ld", 7L) == 11, "vasprintf");
    FILE *file = fopen("/proc/self/cmdline", "r");
    CHECK(file != NULL, "fopen");
    size_t capacity = 0;
    CHECK(getline(&strings[2], &capacity, file) > 0, "getline");
    rewind(file);
    capacity = 0;
    CHECK(getdelim(&strings[3], &capacity, 0, file) > 0, "getdelim");
    fclose(file);
    strings[4] = realpath("/", NULL);
    strings[5] = canonicalize_file_name("/");
    strings[6] = getcwd(NULL, 0);
    strings[7] = getcwd(NULL, PATH_MAX);
    strings[8] = get_current_dir_name();
    for (int i = 4; i < STRINGS; i++)
        CHECK(strings[i] != NULL, "a path");
    return NULL;
}

static void allocs_mode(void) {
    char **strings = calloc(STRINGS, sizeof *strings); /* a stack is each thread's own */
    char cwd[PATH_MAX];
    CHECK(getcwd(cwd, sizeof cwd) != NULL, "getcwd");
    pthread_t thread;
    pthread_create(&thread, NULL, allocate, strings);
    pthread_join(thread, NULL);
    CHECK(strcmp(strings[0], "asprintf 42 0.5") == 0, "asprintf's string in main");
    CHECK(strcmp(strings[1], "vasprintf 7") == 0, "vasprintf's string in main");
    CHECK(strstr(strings[2], "surprises") != NULL, "getline's line in main");
    CHECK(strstr(strings[3], "surprises") != NULL, "getdelim's line in main");
    CHECK(strcmp(strings[4], "/") == 0 && strcmp(strings[5], "/") == 0, "realpath in main");
    for (int i = 6; i < STRINGS; i++)
        CHECK(strcmp(strings[i], cwd) == 0, "the working directory in main");
    for (int i = 0; i < STRINGS; i++)
        free(strings[i]);
    free(strings);
}

struct lists {
    struct dirent **entries, **at_entries;
    int count, at_count;
    struct addrinfo *addresses;
    char *text;
    size_t text_len;
};

static int not_dot(const struct dirent *entry) { return entry->d_name[0] != '.'; }

static void *list_things(void *arg) {
    struct lists *lists = arg;
    lists->count = scandir("/proc/self", &lists->entries, not_dot, alphasort);
    CHECK(lists->count > 10, "scandir");
    int proc = open("/proc", O_RDONLY | O_DIRECTORY);
    CHECK(proc >= 0, "open /proc");
    lists->at_count = scandirat(proc, "self", &lists->at_entries, NULL, NULL);
    CHECK(lists->at_count > lists->count, "scandirat");
    close(proc);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_CANONNAME};
    CHECK(getaddrinfo("127.0.0.1", "8080", &hints, &lists->addresses) == 0, "getaddrinfo");
    char *early = NULL;
    size_t early_len = 99;
    FILE *empty = open_memstream(&early, &early_len);
    CHECK(empty != NULL && fflush(empty) == 0, "open_memstream, fflush");
    CHECK(early != NULL && early_len == 0 && early[0] == 0, "a memory stream flushed empty");
    CHECK(fputs("ok", empty) >= 0 && fclose(empty) == 0, "fclose of a memory stream");
    CHECK(early_len == 2 && strcmp(early, "ok") == 0, "a memory stream closed");
    free(early);
    FILE *stream = open_memstream(&lists->text, &lists->text_len);
    CHECK(stream != NULL, "open_memstream");
    for (int i = 0; i < 1000; i++)
        fprintf(stream, "%d,", i);
    CHECK(fclose(stream) == 0, "fclose of a memory stream");
    return NULL;
}

static void lists_mode(void) {
    struct lists *lists = calloc(1, sizeof *lists); /* a stack is each thread's own */
    pthread_t thread;
    pthread_create(&thread, NULL, list_things, lists);
    pthread_join(thread, NULL);
    int status = 0;
    for (int i = 0; i < lists->count; i++) {
        if (strcmp(lists->entries[i]->d_name, "status") == 0)
            status++;
        if (i > 0)
            CHECK(strcmp(lists->entries[i - 1]->d_name, lists->entries[i]->d_name) < 0,
                  "scandir's order in main");
        free(lists->entries[i]);
    }
    free(lists->entries);
    CHECK(status == 1, "scandir's names in main");
    for (int i = 0; i < lists->at_count; i++)
        free(lists->at_entries[i]);
    free(lists->at_entries);
    const struct addrinfo *address = lists->addresses;
    CHECK(address != NULL && address->ai_family == AF_INET, "getaddrinfo's list in main");
    const struct sockaddr_in *in = (const struct sockaddr_in *)address->ai_addr;
    CHECK(ntohs(in->sin_port) == 8080 && ntohl(in->sin_addr.s_addr) == INADDR_LOOPBACK,
          "getaddrinfo's address in main");
    CHECK(address->ai_canonname != NULL && strcmp(address->ai_canonname, "127.0.0.1") == 0,
          "getaddrinfo's canonical name in main");
    freeaddrinfo(lists->addresses);
    CHECK(lists->text_len == 3890 && strlen(lists->text) == 3890, "open_memstream's size in main");
    CHECK(strncmp(lists->text, "0,1,2,", 6) == 0 && strcmp(lists->text + 3886, "999,") == 0,
          "open_memstream's text in main");
    free(lists->text);
    free(lists);
}

static void *join_itself(void *arg) {
    (void)arg;
    return (void *)(long)pthread_join(pthread_self(), NULL);
}

static void joinself_mode(void) {
    CHECK(pthread_join(pthread_self(), NULL) == EDEADLK, "main joining itself");
    pthread_t thread;
    void *result;
    pthread_create(&thread, NULL, join_itself, NULL);
    pthread_join(thread, &result);
    CHECK((long)result == EDEADLK, "a thread joining itself");
}

static void *nothing(void *arg) { return arg; }

static void buffering_mode(void) {
    CHECK(setvbuf(stdout, NULL, _IONBF, 0) == 0, "setvbuf");
    pthread_t thread;
    pthread_create(&thread, NULL, nothing, NULL);
    pthread_join(thread, NULL);
    /* glibc's _IO_UNBUFFERED flag */
    CHECK(stdout->_flags & 0x0002, "stdout still unbuffered");
}

static int released;
static void *short_thread(void *arg) {
    usleep(50000);
    return arg;
}

static void *held_thread(void *arg) {
    pthread_mutex_lock(&mutex);
    while (!released)
        pthread_cond_wait(&cond, &mutex);
    pthread_mutex_unlock(&mutex);
    return arg;
}

static pthread_mutex_t wk_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wk_tokens_cond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t wk_taken_cond = PTHREAD_COND_INITIALIZER;
static int wk_tokens, wk_taken, wk_stop;

static void *wk_waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&wk_mutex);
    for (;;) {
        while (wk_tokens == 0 && !wk_stop)
            pthread_cond_wait(&wk_tokens_cond, &wk_mutex);
        if (wk_tokens == 0)
            break;
        wk_tokens--;
        wk_taken++;
        pthread_cond_signal(&wk_taken_cond);
    }
    pthread_mutex_unlock(&wk_mutex);
    return NULL;
}

static double wk_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void wakeups_mode(void) {
    pthread_t waiters[3];
    for (int i = 0; i < 3; i++)
        CHECK(pthread_create(&waiters[i], NULL, wk_waiter, NULL) == 0, "create");
    int expected = 0;
    double worst = 0;
    for (int round = 0; round < 400; round++) {
        int tokens = round % 8 == 7 ? 3 : 1;
        int signal_unlocked = tokens == 1 && round % 2 == 1;
        double start = wk_now();
        pthread_mutex_lock(&wk_mutex);
        wk_tokens += tokens;
        expected += tokens;
        if (tokens == 3)
            pthread_cond_broadcast(&wk_tokens_cond);
        else if (!signal_unlocked)
            pthread_cond_signal(&wk_tokens_cond);
        pthread_mutex_unlock(&wk_mutex);
        if (signal_unlocked)
            pthread_cond_signal(&wk_tokens_cond);
        pthread_mutex_lock(&wk_mutex);
        while (wk_taken < expected)
            pthread_cond_wait(&wk_taken_cond, &wk_mutex);
        pthread_mutex_unlock(&wk_mutex);
        double took = wk_now() - start;
        if (took > worst)
            worst = took;
    }
    pthread_mutex_lock(&wk_mutex);
    wk_stop = 1;
    pthread_cond_broadcast(&wk_tokens_cond);
    pthread_mutex_unlock(&wk_mutex);
    for (int i = 0; i < 3; i++)
        CHECK(pthread_join(waiters[i], NULL) == 0, "join");
    if (worst >= 0.1) {
        printf("FAIL a round took %.0f ms (a lost wake-up?)\n", worst * 1e3);
        exit(1);
    }
}

static pthread_mutex_t th_mutex = PTHREAD_MUTEX_INITIALIZER;
/* T -> main: T's pid, then its pthread_mutex_timedlock's result; W -> main: when W had the
 * mutex. */
static int th_timed_pipe[2], th_blocking_pipe[2];
static struct timespec th_deadline;

static void pin_to(int cpu, pid_t pid) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    CHECK(sched_setaffinity(pid, sizeof set, &set) == 0, "sched_setaffinity");
}

static void *th_timed(void *arg) {
    (void)arg;
    struct sched_param param = {0};
    CHECK(sched_setscheduler(0, SCHED_IDLE, &param) == 0, "SCHED_IDLE");
    pid_t me = (pid_t)syscall(SYS_gettid); /* this thread's own process */
    CHECK(write(th_timed_pipe[1], &me, sizeof me) == sizeof me, "write T's pid");
    int rc = pthread_mutex_timedlock(&th_mutex, &th_deadline);
    if (rc == 0)
        pthread_mutex_unlock(&th_mutex);
    CHECK(write(th_timed_pipe[1], &rc, sizeof rc) == sizeof rc, "write T's result");
    return NULL;
}

/* The first two CPUs this process may run on (the second -1 if there is one only). */
static int th_cpus[2] = {-1, -1};

static void *th_blocking(void *arg) {
    (void)arg;
    if (th_cpus[1] >= 0)
        pin_to(th_cpus[1], 0);
    pthread_mutex_lock(&th_mutex);
    double at = wk_now();
    pthread_mutex_unlock(&th_mutex);
    CHECK(write(th_blocking_pipe[1], &at, sizeof at) == sizeof at, "write W's time");
    return NULL;
}

static void ms_sleep(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

static void timedhandoff_mode(void) {
    cpu_set_t allowed;
    CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0, "sched_getaffinity");
    for (int cpu = 0, found = 0; cpu < CPU_SETSIZE && found < 2; cpu++)
        if (CPU_ISSET(cpu, &allowed))
            th_cpus[found++] = cpu;
    CHECK(pipe(th_timed_pipe) == 0 && pipe(th_blocking_pipe) == 0, "pipe");
    pin_to(th_cpus[0], 0);
    clock_gettime(CLOCK_REALTIME, &th_deadline);
    /* 120 ms: room for the two thread creations and 30 ms of sleeps on a loaded machine
     * (the check below refuses a setup that overran it), while T's time-out and main's
     * unlock still come before W's first watchdog wake-up (200 ms into its sleep), which
     * would mark the mutex for it and hide the lost wake-up. */
    th_deadline.tv_nsec += 120 * 1000000L;
    if (th_deadline.tv_nsec >= 1000000000L) {
        th_deadline.tv_sec++;
        th_deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&th_mutex);
    pthread_t timed, blocking;
    CHECK(pthread_create(&timed, NULL, th_timed, NULL) == 0, "create T");
    pid_t timed_pid;
    CHECK(read(th_timed_pipe[0], &timed_pid, sizeof timed_pid) == sizeof timed_pid, "T's pid");
    ms_sleep(15); /* T asleep in its timed lock */
    CHECK(pthread_create(&blocking, NULL, th_blocking, NULL) == 0, "create W");
    ms_sleep(15); /* W asleep behind T */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double deadline = (double)th_deadline.tv_sec + (double)th_deadline.tv_nsec / 1e9;
    double late = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
    CHECK(late < deadline - 0.01, "setting up within T's deadline (the machine too slow?)");
    /* Wakes T, which cannot run while main does, and stops it before it can: it stops on
     * its way out of the kernel, its wait ended by the wake-up. Main takes the mutex back
     * without having waited, and lets T go on once its deadline has passed. */
    pthread_mutex_unlock(&th_mutex);
    CHECK(kill(timed_pid, SIGSTOP) == 0, "stop T");
    pthread_mutex_lock(&th_mutex);
    for (;;) {
        clock_gettime(CLOCK_REALTIME, &now);
        double left = deadline - ((double)now.tv_sec + (double)now.tv_nsec / 1e9);
        if (left < -0.005)
            break;
        ms_sleep(left > 0 ? (long)(left * 1e3) + 6 : 1);
    }
    if (th_cpus[1] >= 0)
        pin_to(th_cpus[1], timed_pid); /* T may run beside main */
    CHECK(kill(timed_pid, SIGCONT) == 0, "continue T");
    int rc;
    CHECK(read(th_timed_pipe[0], &rc, sizeof rc) == sizeof rc, "T's result");
    CHECK(rc == ETIMEDOUT, "T's timed lock timing out");
    double released = wk_now();
    pthread_mutex_unlock(&th_mutex);
    double acquired;
    CHECK(read(th_blocking_pipe[0], &acquired, sizeof acquired) == sizeof acquired,
          "W's time");
    CHECK(pthread_join(timed, NULL) == 0 && pthread_join(blocking, NULL) == 0, "join");
    if (acquired - released >= 0.05) {
        printf("FAIL W had the mutex %.0f ms after its unlock (a lost wake-up)\n",
               (acquired - released) * 1e3);
        exit(1);
    }
}

static pthread_mutex_t pt_held = PTHREAD_MUTEX_INITIALIZER;
static int pt_held_pipe[2], pt_release[2];

static void *pt_holder(void *arg) {
    (void)arg;
    pthread_mutex_lock(&pt_held);
    char go;
    CHECK(write(pt_held_pipe[1], "h", 1) == 1, "write held");
    CHECK(read(pt_release[0], &go, 1) == 1, "read release");
    pthread_mutex_unlock(&pt_held);
    return NULL;
}

static void pasttimes_mode(void) {
    alarm(20);
    const struct timespec past = {-1, 0};
    pthread_mutex_lock(&mutex);
    CHECK(pthread_cond_timedwait(&cond, &mutex, &past) == ETIMEDOUT,
          "pthread_cond_timedwait before the epoch");
    CHECK(pthread_cond_clockwait(&cond, &mutex, CLOCK_MONOTONIC, &past) == ETIMEDOUT,
          "pthread_cond_clockwait before the epoch");
    pthread_mutex_unlock(&mutex);
    pthread_t holder;
    char held;
    CHECK(pipe(pt_held_pipe) == 0 && pipe(pt_release) == 0, "pipe");
    CHECK(pthread_create(&holder, NULL, pt_holder, NULL) == 0, "create");
    CHECK(read(pt_held_pipe[0], &held, 1) == 1, "read held");
    CHECK(pthread_mutex_timedlock(&pt_held, &past) == ETIMEDOUT,
          "pthread_mutex_timedlock before the epoch");
    CHECK(pthread_timedjoin_np(holder, NULL, &past) == ETIMEDOUT,
          "pthread_timedjoin_np before the epoch");
    CHECK(write(pt_release[1], "r", 1) == 1, "write release");
    CHECK(pthread_join(holder, NULL) == 0, "join");
    alarm(0);
}

static void wait_mode(void) {
    pthread_t quick, held;
    pthread_create(&quick, NULL, short_thread, NULL);
    pthread_create(&held, NULL, held_thread, NULL);
    pid_t child = fork();
    if (child == 0) {
        execlp("sh", "sh", "-c", "sleep 0.3; exit 5", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(wait(&status) == child, "wait() returning the program's child");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 5, "the child's status");
    CHECK(pthread_join(quick, NULL) == 0, "joining the thread that ended first");
    errno = 0;
    CHECK(wait(&status) == -1 && errno == ECHILD, "wait() with only threads left");
    CHECK(waitpid(-1, &status, WNOHANG) == -1 && errno == ECHILD, "waitpid(-1, WNOHANG)");
    pthread_mutex_lock(&mutex);
    released = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&mutex);
    CHECK(pthread_join(held, NULL) == 0, "joining the held thread");
}

static volatile sig_atomic_t sigchld_calls, sigchld_pid, sigchld_plain_calls;

static void on_sigchld_info(int signal, siginfo_t *info, void *context) {
    (void)signal;
    (void)context;
    sigchld_calls++;
    sigchld_pid = info->si_pid;
}

static void on_sigchld_plain(int signal) {
    (void)signal;
    sigchld_plain_calls++;
}

static void *quick_thread(void *arg) {
    return arg;
}

/* Waits up to 2 s for `*counter` to reach `want`. */
static int wait_for_calls(volatile sig_atomic_t *counter, int want) {
    for (int i = 0; i < 2000 && *counter < want; i++) {
        usleep(1000);
    }
    return *counter >= want;
}

static pid_t exiting_child(int code) {
    pid_t child = fork();
    if (child == 0) {
        char command[32];
        snprintf(command, sizeof command, "exit %d", code);
        execlp("sh", "sh", "-c", command, (char *)NULL);
        _exit(127);
    }
    return child;
}

static void sigchld_mode(void) {
    alarm(20);
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_sigchld_info;
    act.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&act.sa_mask);
    CHECK(sigaction(SIGCHLD, &act, NULL) == 0, "sigaction");
    CHECK(sigaction(SIGCHLD, NULL, &old) == 0 && old.sa_sigaction == on_sigchld_info &&
              (old.sa_flags & SA_SIGINFO),
          "sigaction reporting the program's handler");
    for (int round = 0; round < 8; round++) {
        pthread_t thread;
        CHECK(pthread_create(&thread, NULL, quick_thread, NULL) == 0, "create");
        CHECK(pthread_join(thread, NULL) == 0, "join");
    }
    usleep(50000);
    CHECK(sigchld_calls == 0, "no SIGCHLD handler call for threads that ended");

    pid_t child = exiting_child(3);
    CHECK(wait_for_calls(&sigchld_calls, 1), "a handler call for the child's exit");
    CHECK(sigchld_pid == child, "the handler's si_pid naming the child");
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 3,
          "the child's status");

    /* A thread's end and a child's exit while SIGCHLD is blocked: one pending signal. */
    sigset_t block, before;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    CHECK(sigprocmask(SIG_BLOCK, &block, &before) == 0, "block SIGCHLD");
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, quick_thread, NULL) == 0, "create");
    CHECK(pthread_join(thread, NULL) == 0, "join");
    usleep(20000);
    child = exiting_child(4);
    siginfo_t ready;
    do {
        memset(&ready, 0, sizeof ready);
        usleep(1000);
    } while (waitid(P_PID, (id_t)child, &ready, WEXITED | WNOHANG | WNOWAIT) == 0 &&
             ready.si_pid == 0);
    int calls = sigchld_calls;
    CHECK(sigprocmask(SIG_SETMASK, &before, NULL) == 0, "unblock SIGCHLD");
    CHECK(wait_for_calls(&sigchld_calls, calls + 1), "one handler call for the merged signal");
    CHECK(sigchld_pid == child, "the merged signal's call naming the child");
    CHECK(waitpid(child, &status, 0) == child && WEXITSTATUS(status) == 4, "the child's status");

    /* signal() goes behind the same filter and reports the previous handler. */
    void (*previous)(int) = signal(SIGCHLD, on_sigchld_plain);
    CHECK((uintptr_t)previous == (uintptr_t)on_sigchld_info, "signal() returning the old handler");
    for (int round = 0; round < 4; round++) {
        CHECK(pthread_create(&thread, NULL, quick_thread, NULL) == 0, "create");
        CHECK(pthread_join(thread, NULL) == 0, "join");
    }
    usleep(50000);
    CHECK(sigchld_plain_calls == 0, "no signal() handler call for threads");
    child = exiting_child(5);
    CHECK(wait_for_calls(&sigchld_plain_calls, 1), "a signal() handler call for the child");
    CHECK(waitpid(child, &status, 0) == child && WEXITSTATUS(status) == 5, "the child's status");
    CHECK(signal(SIGCHLD, SIG_DFL) == on_sigchld_plain, "signal() back to SIG_DFL");
    alarm(0);
}

static void *sleeper(void *arg) {
    (void)arg;
    /* This thread-process's own id (getpid() is the program's in every thread). */
    printf("PID %d\n", (int)syscall(SYS_gettid));
    fflush(stdout);
    for (;;)
        pause();
    return NULL;
}

static void *middle(void *arg) {
    (void)arg;
    pthread_t thread;
    pthread_create(&thread, NULL, sleeper, NULL);
    pthread_join(thread, NULL);
    return NULL;
}

static void orphan_mode(void) {
    pthread_t thread;
    pthread_create(&thread, NULL, middle, NULL);
    pthread_join(thread, NULL);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "errno") == 0)
        errno_mode();
    else if (strcmp(mode, "tsd") == 0)
        tsd_mode();
    else if (strcmp(mode, "allocs") == 0)
        allocs_mode();
    else if (strcmp(mode, "lists") == 0)
        lists_mode();
    else if (strcmp(mode, "joinself") == 0)
        joinself_mode();
    else if (strcmp(mode, "buffering") == 0)
        buffering_mode();
    else if (strcmp(mode, "wait") == 0)
        wait_mode();
    else if (strcmp(mode, "orphan") == 0)
        orphan_mode();
    else if (strcmp(mode, "wakeups") == 0)
        wakeups_mode();
    else if (strcmp(mode, "timedhandoff") == 0)
        timedhandoff_mode();
    else if (strcmp(mode, "pasttimes") == 0)
        pasttimes_mode();
    else if (strcmp(mode, "sigchld") == 0)
        sigchld_mode();
    else {
        fprintf(stderr, "usage: surprises "
                        "errno|tsd|allocs|lists|joinself|buffering|wait|orphan|wakeups|"
                        "timedhandoff|pasttimes|sigchld\n");
        return 2;
    }
    printf("%s ok\n", mode);
    return 0;
}
