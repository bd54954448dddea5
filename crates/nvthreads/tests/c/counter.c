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

#include "counter_state.h"
#include "nvthreads.h"

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int iters;
static int ack_fd = -1;
static uint64_t run_id;

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
