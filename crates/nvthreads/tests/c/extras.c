/*
 * The rest of the pthread API a program may use, each checked against its POSIX behaviour:
 * timed condition waits (timeout with the mutex held again, and a wake-up before the
 * deadline), a timed mutex lock, recursive and error-checking mutexes (static initialisers
 * and attributes), pthread_once across threads, read-write and spin locks, detached threads
 * (by attribute and by pthread_detach), pthread_kill(t, 0), tryjoin/timedjoin, thread names.
 * Prints "EXTRAS ok" or the first failure. Usage: extras
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failures;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_spinlock_t spin;
static int once_runs;
static int signalled;
static long rw_counter, spin_counter;
static volatile int detached_done;
/* Threads tell main where they are through pipes: a thread's writes inside a section are not
 * visible to others before the section ends. */
static int holding[2], release_sleeper[2];

static void check(int ok, const char *what) {
    if (!ok && failures++ == 0) {
        printf("EXTRAS %s\n", what);
    }
}

static struct timespec in_ms(clockid_t clock, long ms) {
    struct timespec at;
    clock_gettime(clock, &at);
    at.tv_nsec += (ms % 1000) * 1000000;
    at.tv_sec += ms / 1000 + at.tv_nsec / 1000000000;
    at.tv_nsec %= 1000000000;
    return at;
}

static void init_once(void) {
    once_runs++;
    usleep(2000);
}

static void *signaller(void *arg) {
    (void)arg;
    usleep(20000);
    pthread_mutex_lock(&m);
    signalled = 1;
    pthread_cond_signal(&c);
    pthread_mutex_unlock(&m);
    return NULL;
}

static void *once_and_locks(void *arg) {
    (void)arg;
    pthread_once(&once, init_once);
    for (int i = 0; i < 200; i++) {
        pthread_rwlock_wrlock(&rw);
        rw_counter++;
        pthread_rwlock_unlock(&rw);
        pthread_spin_lock(&spin);
        spin_counter++;
        pthread_spin_unlock(&spin);
        pthread_rwlock_rdlock(&rw);
        pthread_rwlock_rdlock(&rw); /* read locks are recursive */
        pthread_rwlock_unlock(&rw);
        pthread_rwlock_unlock(&rw);
    }
    return (void *)7;
}

static void *detached(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    detached_done++;
    pthread_mutex_unlock(&m);
    return NULL;
}

static void *sleeper(void *arg) {
    (void)arg;
    char byte;
    if (read(release_sleeper[0], &byte, 1) != 1) {
        return NULL;
    }
    return (void *)9;
}

static void timed_waits(void) {
    pthread_mutex_lock(&m);
    struct timespec soon = in_ms(CLOCK_REALTIME, 30);
    int rc = pthread_cond_timedwait(&c, &m, &soon);
    check(rc == ETIMEDOUT, "cond_timedwait did not time out");
    check(pthread_mutex_trylock(&m) == EBUSY, "mutex not held after a timed-out wait");
    pthread_mutex_unlock(&m);

    pthread_condattr_t attr;
    pthread_cond_t mono;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&mono, &attr);
    pthread_mutex_lock(&m);
    struct timespec later = in_ms(CLOCK_MONOTONIC, 20);
    check(pthread_cond_timedwait(&mono, &m, &later) == ETIMEDOUT, "monotonic timedwait");
    pthread_mutex_unlock(&m);
    pthread_cond_destroy(&mono);

    pthread_t t;
    pthread_create(&t, NULL, signaller, NULL);
    pthread_mutex_lock(&m);
    struct timespec far = in_ms(CLOCK_REALTIME, 5000);
    rc = 0;
    while (!signalled && rc == 0) {
        rc = pthread_cond_timedwait(&c, &m, &far);
    }
    check(rc == 0 && signalled, "timedwait woken by a signal");
    pthread_mutex_unlock(&m);
    pthread_join(t, NULL);

    pthread_mutex_lock(&m);
    struct timespec bad = {0, 2000000000};
    check(pthread_cond_timedwait(&c, &m, &bad) == EINVAL, "invalid timespec accepted");
    pthread_mutex_unlock(&m);
}

static void *hold_m(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    if (write(holding[1], "h", 1) != 1) {
        return NULL;
    }
    usleep(80000);
    pthread_mutex_unlock(&m);
    return NULL;
}

static void mutex_kinds(void) {
    check(pthread_mutex_lock(&recursive) == 0 && pthread_mutex_lock(&recursive) == 0,
          "recursive relock (static initialiser)");
    check(pthread_mutex_unlock(&recursive) == 0 && pthread_mutex_unlock(&recursive) == 0,
          "recursive unlock");
    check(pthread_mutex_unlock(&recursive) == EPERM, "unlock of a free mutex");

    pthread_mutexattr_t attr;
    pthread_mutex_t checking;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&checking, &attr);
    check(pthread_mutex_lock(&checking) == 0, "errorcheck lock");
    check(pthread_mutex_lock(&checking) == EDEADLK, "errorcheck relock");
    check(pthread_mutex_unlock(&checking) == 0, "errorcheck unlock");
    check(pthread_mutex_destroy(&checking) == 0, "errorcheck destroy");

    /* As glibc: an invalid deadline is an error only for a call that has to wait. */
    struct timespec never_checked = {0, -1};
    check(pthread_mutex_timedlock(&m, &never_checked) == 0, "timedlock, invalid time, free");
    check(pthread_mutex_unlock(&m) == 0, "unlock after timedlock");

    pthread_t t;
    pthread_create(&t, NULL, hold_m, NULL);
    char byte;
    check(read(holding[0], &byte, 1) == 1, "holder started");
    struct timespec invalid = {0, 2000000000};
    check(pthread_mutex_timedlock(&m, &invalid) == EINVAL, "timedlock, invalid time, held");
    struct timespec soon = in_ms(CLOCK_REALTIME, 10);
    check(pthread_mutex_timedlock(&m, &soon) == ETIMEDOUT, "timedlock timeout");
    struct timespec far = in_ms(CLOCK_REALTIME, 5000);
    check(pthread_mutex_timedlock(&m, &far) == 0, "timedlock after release");
    pthread_mutex_unlock(&m);
    pthread_join(t, NULL);
}

static void threads(void) {
    pthread_spin_init(&spin, PTHREAD_PROCESS_PRIVATE);
    pthread_t workers[3];
    for (int i = 0; i < 3; i++) {
        pthread_create(&workers[i], NULL, once_and_locks, NULL);
    }
    for (int i = 0; i < 3; i++) {
        void *ret = NULL;
        pthread_join(workers[i], &ret);
        check(ret == (void *)7, "return value through join");
    }
    check(once_runs == 1, "pthread_once ran more than once");
    check(rw_counter == 3 * 200 && spin_counter == 3 * 200, "rwlock/spinlock counters");
    pthread_spin_destroy(&spin);

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t d1, d2;
    pthread_create(&d1, &attr, detached, NULL);
    pthread_create(&d2, NULL, detached, NULL);
    check(pthread_detach(d2) == 0, "pthread_detach");
    check(pthread_join(d1, NULL) == EINVAL || pthread_join(d1, NULL) == ESRCH,
          "join of a detached thread");
    for (int i = 0; i < 5000; i++) {
        pthread_mutex_lock(&m);
        int done = detached_done;
        pthread_mutex_unlock(&m);
        if (done == 2) {
            break;
        }
        usleep(2000);
    }
    check(detached_done == 2, "detached threads ran");

    pthread_t s;
    pthread_create(&s, NULL, sleeper, NULL);
    check(pthread_kill(s, 0) == 0, "pthread_kill(t, 0) of a live thread");
    check(pthread_setname_np(s, "sleepy") == 0, "setname");
    char name[16];
    check(pthread_getname_np(s, name, sizeof name) == 0 && strcmp(name, "sleepy") == 0,
          "getname");
    check(pthread_tryjoin_np(s, NULL) == EBUSY, "tryjoin of a running thread");
    struct timespec soon = in_ms(CLOCK_REALTIME, 5);
    check(pthread_timedjoin_np(s, NULL, &soon) == ETIMEDOUT, "timedjoin timeout");
    check(write(release_sleeper[1], "r", 1) == 1, "releasing the sleeper");
    struct timespec far = in_ms(CLOCK_REALTIME, 10000);
    void *ret = NULL;
    check(pthread_timedjoin_np(s, &ret, &far) == 0 && ret == (void *)9, "timedjoin");
}

int main(void) {
    if (pipe(holding) != 0 || pipe(release_sleeper) != 0) {
        return 1;
    }
    timed_waits();
    mutex_kinds();
    threads();
    if (failures == 0) {
        printf("EXTRAS ok\n");
    }
    return failures != 0;
}
