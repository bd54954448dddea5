/*
 * The counter with C11 <threads.h> instead of pthreads: T threads x N iterations of one
 * durable section each, under a recursive timed mutex taken twice (nested):
 *   mtx_lock m; mtx_lock m; s = seq; log[s] = (run, tid, iter); a += 1; b += 1;
 *   seq = s + 1; mtx_unlock m; mtx_unlock m;
 * then an acknowledgement "seq" (8 bytes) on file descriptor ACK_FD (if set). Threads keep
 * their ids in a tss key made by main (a key made after a thread exists is unknown to that
 * thread-process), count a call_once, and end with thrd_exit (their iteration count, which
 * thrd_join checks).
 *
 * At start it prints the recovered state as
 *   STATE run=R seq=S a=A b=B crashed=C ok=1
 * then runs one more generation and prints DONE.
 * Usage: c11 THREADS ITERS [check] | c11 codes  (the C11 result codes; prints "CODES ok")
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "counter_state.h"
#include "nvthreads.h"

static mtx_t m;
static once_flag once = ONCE_FLAG_INIT;
static tss_t thread_id;
static int once_runs;
static int iters;
static int ack_fd = -1;
static uint64_t run_id;

static void count_once(void) { once_runs += 1; }

static int worker(void *arg) {
    call_once(&once, count_once);
    if (tss_set(thread_id, arg) != thrd_success)
        _exit(4);
    int done = 0;
    for (int i = 0; i < iters; i++) {
        uint64_t tid = (uint64_t)(uintptr_t)tss_get(thread_id);
        if (mtx_lock(&m) != thrd_success || mtx_lock(&m) != thrd_success)
            _exit(4);
        uint64_t s = st->seq;
        if (s >= MAX_LOG) {
            mtx_unlock(&m);
            mtx_unlock(&m);
            break;
        }
        st->log[s] = entry(run_id, tid, (uint64_t)i);
        st->a += 1;
        st->b += 1;
        st->seq = s + 1;
        mtx_unlock(&m);
        mtx_unlock(&m);
        done += 1;
        if (ack_fd >= 0) {
            uint64_t acked = s + 1;
            if (write(ack_fd, &acked, sizeof acked) != (ssize_t)sizeof acked)
                _exit(3);
        }
    }
    thrd_exit(done);
}

#define EXPECT(what)                                                                   \
    do {                                                                               \
        if (!(what)) {                                                                 \
            printf("CODES failed: %s (line %d)\n", #what, __LINE__);                  \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

static mtx_t busy;
static cnd_t cond;
static int flag;

static int hold_busy(void *arg) {
    (void)arg;
    mtx_lock(&busy);
    flag = 1;
    cnd_signal(&cond);
    while (flag != 2)
        cnd_wait(&cond, &busy);
    mtx_unlock(&busy);
    return 42;
}

static mtx_t gate;
static int held, release;

/* Holds busy until told to release it (through gate and cond). */
static int hold_locked(void *arg) {
    (void)arg;
    mtx_lock(&busy);
    mtx_lock(&gate);
    held = 1;
    cnd_broadcast(&cond);
    while (!release)
        cnd_wait(&cond, &gate);
    mtx_unlock(&gate);
    mtx_unlock(&busy);
    thrd_exit(43);
}

static int short_lived(void *arg) { return (int)(intptr_t)arg; }

static struct timespec soon(long ms) {
    struct timespec at;
    timespec_get(&at, TIME_UTC);
    at.tv_nsec += ms * 1000000L;
    at.tv_sec += at.tv_nsec / 1000000000L;
    at.tv_nsec %= 1000000000L;
    return at;
}

/* Every C11 result code the functions can return, with a second thread holding a lock. */
static int codes(void) {
    EXPECT(mtx_init(&busy, mtx_timed) == thrd_success);
    EXPECT(cnd_init(&cond) == thrd_success);
    thrd_t holder;
    EXPECT(thrd_create(&holder, hold_busy, NULL) == thrd_success);
    EXPECT(!thrd_equal(holder, thrd_current()));
    EXPECT(thrd_equal(thrd_current(), thrd_current()));
    mtx_t local;
    EXPECT(mtx_init(&local, mtx_plain) == thrd_success);
    EXPECT(mtx_lock(&local) == thrd_success);
    struct timespec at = soon(50);
    cnd_t idle; /* signalled by no one */
    EXPECT(cnd_init(&idle) == thrd_success);
    EXPECT(cnd_timedwait(&idle, &local, &at) == thrd_timedout);
    cnd_destroy(&idle);
    EXPECT(mtx_unlock(&local) == thrd_success);
    mtx_destroy(&local);
    for (;;) {
        EXPECT(mtx_lock(&busy) == thrd_success);
        int seen = flag;
        mtx_unlock(&busy);
        if (seen == 1)
            break;
        thrd_yield();
    }
    /* The holder waits in cnd_wait, which released busy: take it, then let it go on. */
    EXPECT(mtx_trylock(&busy) == thrd_success);
    flag = 2;
    EXPECT(cnd_broadcast(&cond) == thrd_success);
    EXPECT(mtx_unlock(&busy) == thrd_success);
    int result = 0;
    EXPECT(thrd_join(holder, &result) == thrd_success);
    EXPECT(result == 42);
    /* A lock held by another thread: busy for trylock, timed out for timedlock. */
    EXPECT(mtx_init(&gate, mtx_plain) == thrd_success);
    EXPECT(thrd_create(&holder, hold_locked, NULL) == thrd_success);
    EXPECT(mtx_lock(&gate) == thrd_success);
    while (!held)
        EXPECT(cnd_wait(&cond, &gate) == thrd_success);
    EXPECT(mtx_unlock(&gate) == thrd_success);
    EXPECT(mtx_trylock(&busy) == thrd_busy);
    at = soon(50);
    EXPECT(mtx_timedlock(&busy, &at) == thrd_timedout);
    EXPECT(mtx_lock(&gate) == thrd_success);
    release = 1;
    EXPECT(cnd_broadcast(&cond) == thrd_success);
    EXPECT(mtx_unlock(&gate) == thrd_success);
    EXPECT(thrd_join(holder, &result) == thrd_success && result == 43);
    at = soon(5000);
    EXPECT(mtx_timedlock(&busy, &at) == thrd_success);
    EXPECT(mtx_unlock(&busy) == thrd_success);
    mtx_destroy(&gate);
    thrd_t detached;
    EXPECT(thrd_create(&detached, short_lived, (void *)7) == thrd_success);
    EXPECT(thrd_detach(detached) == thrd_success);
    thrd_t joined;
    EXPECT(thrd_create(&joined, short_lived, (void *)-5) == thrd_success);
    EXPECT(thrd_join(joined, &result) == thrd_success && result == -5);
    struct timespec nap = {0, 1000000L};
    EXPECT(thrd_sleep(&nap, NULL) == 0);
    tss_t key;
    EXPECT(tss_create(&key, NULL) == thrd_success);
    EXPECT(tss_get(key) == NULL);
    EXPECT(tss_set(key, &key) == thrd_success && tss_get(key) == &key);
    tss_delete(key);
    cnd_destroy(&cond);
    mtx_destroy(&busy);
    printf("CODES ok\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "codes") == 0)
        return codes();
    if (argc < 3) {
        fprintf(stderr, "usage: c11 THREADS ITERS [check] | c11 codes\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    iters = atoi(argv[2]);
    if (threads < 1 || threads > MAX_THREADS)
        return 2;
    const char *fd = getenv("ACK_FD");
    if (fd != NULL)
        ack_fd = atoi(fd);
    int was_crashed = crashed();
    st = nvmalloc(sizeof *st, "state");
    if (st == NULL) {
        fprintf(stderr, "nvmalloc failed\n");
        return 1;
    }
    const char *why = "";
    int ok = check(&why);
    printf("STATE run=%" PRIu64 " seq=%" PRIu64 " a=%" PRIu64 " b=%" PRIu64 " crashed=%d ok=%d %s\n",
           st->run, st->seq, st->a, st->b, was_crashed, ok, ok ? "" : why);
    fflush(stdout);
    if (!ok || (argc > 3 && strcmp(argv[3], "check") == 0))
        return ok ? 0 : 1;
    if (mtx_init(&m, mtx_recursive | mtx_timed) != thrd_success)
        return 1;
    if (tss_create(&thread_id, NULL) != thrd_success)
        return 1;
    mtx_lock(&m);
    st->run += 1;
    run_id = st->run;
    mtx_unlock(&m);
    if (run_id >= MAX_RUNS)
        return 0;
    thrd_t handles[MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        if (thrd_create(&handles[t], worker, (void *)(uintptr_t)t) != thrd_success) {
            fprintf(stderr, "thrd_create failed\n");
            return 1;
        }
    }
    for (int t = 0; t < threads; t++) {
        int done = -1;
        if (thrd_join(handles[t], &done) != thrd_success || done < 0 || done > iters) {
            fprintf(stderr, "thrd_join: bad result %d\n", done);
            return 1;
        }
    }
    printf("DONE run=%" PRIu64 " seq=%" PRIu64 " once=%d\n", run_id, st->seq, once_runs);
    mtx_destroy(&m);
    return 0;
}
