/*
 * counter + journal: T threads x N iterations of one durable section each:
 *   lock m; s = seq; log[s] = (run, tid, iter); a += 1; b += 1; seq = s + 1; unlock m;
 * then an acknowledgement "seq" (8 bytes) on file descriptor ACK_FD (if set).
 *
 * At start the program checks the recovered state and prints one line
 *   STATE run=R seq=S a=A b=B ok=1
 * (ok=0 and a reason if a == b == seq fails, or if any log entry is not the next iteration
 * of its (run, thread)), then runs one more generation of the workload and prints DONE.
 * Usage: counter THREADS ITERS
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvthreads.h"

#define MAX_LOG 400000
#define MAX_RUNS 1024
#define MAX_THREADS 16

/* a, b and the log sit on different pages, so every section dirties at least three pages
 * and a torn section shows up as a != b or a missing log entry. */
struct state {
    uint64_t run;
    uint64_t seq;
    uint64_t a;
    char pad_a[4096];
    uint64_t b;
    char pad_b[4096];
    uint64_t log[MAX_LOG];
};

static struct state *st;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int iters;
static int ack_fd = -1;
static uint64_t run_id;

static uint64_t entry(uint64_t run, uint64_t tid, uint64_t iter) {
    return (run << 40) | (tid << 32) | iter;
}

static void *worker(void *arg) {
    uint64_t tid = (uint64_t)(uintptr_t)arg;
    for (int i = 0; i < iters; i++) {
        pthread_mutex_lock(&m);
        uint64_t s = st->seq;
        if (s >= MAX_LOG) {
            pthread_mutex_unlock(&m);
            break;
        }
        st->log[s] = entry(run_id, tid, (uint64_t)i);
        st->a += 1;
        st->b += 1;
        st->seq = s + 1;
        pthread_mutex_unlock(&m);
        if (ack_fd >= 0) {
            uint64_t acked = s + 1;
            if (write(ack_fd, &acked, sizeof acked) != (ssize_t)sizeof acked) {
                _exit(3);
            }
        }
    }
    return NULL;
}

static int check(const char **why) {
    static uint64_t next[MAX_RUNS][MAX_THREADS];
    memset(next, 0, sizeof next);
    if (st->a != st->seq || st->b != st->seq) {
        *why = "a, b and seq differ";
        return 0;
    }
    if (st->seq > MAX_LOG) {
        *why = "seq out of range";
        return 0;
    }
    for (uint64_t i = 0; i < st->seq; i++) {
        uint64_t run = st->log[i] >> 40;
        uint64_t tid = (st->log[i] >> 32) & 0xff;
        uint64_t iter = st->log[i] & 0xffffffffu;
        if (run == 0 || run > st->run || run >= MAX_RUNS || tid >= MAX_THREADS) {
            *why = "log entry names no run or thread";
            return 0;
        }
        if (iter != next[run][tid]) {
            *why = "log entry is not the next iteration of its thread";
            return 0;
        }
        next[run][tid] = iter + 1;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: counter THREADS ITERS\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    iters = atoi(argv[2]);
    if (threads < 1 || threads > MAX_THREADS) {
        return 2;
    }
    const char *fd = getenv("ACK_FD");
    if (fd != NULL) {
        ack_fd = atoi(fd);
    }
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
    if (!ok || (argc > 3 && strcmp(argv[3], "check") == 0)) {
        return ok ? 0 : 1;
    }
    pthread_mutex_lock(&m);
    st->run += 1;
    run_id = st->run;
    pthread_mutex_unlock(&m);
    if (run_id >= MAX_RUNS) {
        return 0;
    }
    pthread_t handles[MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        if (pthread_create(&handles[t], NULL, worker, (void *)(uintptr_t)t) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(handles[t], NULL);
    }
    printf("DONE seq=%" PRIu64 " epoch=%" PRIu64 "\n", st->seq, nvt_durable_epoch());
    printf("RESULT seq=%" PRIu64 " a=%" PRIu64 " b=%" PRIu64 "\n", st->seq, st->a, st->b);
    return 0;
}
