/*
 * liveness stress (NVthreads issue #4): THREADS threads that each sleep a different time, then
 * lock / increment / unlock, ITERS times, acknowledging each increment (the new count) on
 * ACK_FD. Must finish (the test runs it under a timeout) with the exact count.
 * At start prints the recovered state
 *   STATE run=R seq=COUNT crashed=C ok=1
 * (ok=0 if the two copies of the count, on different pages, differ: a torn section); at the
 * end "COUNT n" (this run's increments) and "RESULT count=N".
 * Usage: stress THREADS ITERS [check]
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvthreads.h"

struct counts {
    uint64_t run;
    uint64_t count;
    char pad[4096];
    uint64_t mirror;
};

static struct counts *c;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int iters;
static int ack_fd = -1;

static void *worker(void *arg) {
    unsigned t = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < iters; i++) {
        usleep((t * 37u + (unsigned)i * 11u) % 700u);
        pthread_mutex_lock(&m);
        uint64_t now = ++c->count;
        c->mirror = now;
        pthread_mutex_unlock(&m);
        if (ack_fd >= 0 && write(ack_fd, &now, sizeof now) != (ssize_t)sizeof now) {
            _exit(3);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        return 2;
    }
    int threads = atoi(argv[1]);
    iters = atoi(argv[2]);
    const char *fd = getenv("ACK_FD");
    if (fd != NULL) {
        ack_fd = atoi(fd);
    }
    int was_crashed = crashed();
    c = nvmalloc(sizeof *c, "count");
    if (c == NULL || threads < 1 || threads > 64) {
        return 1;
    }
    int ok = c->count == c->mirror;
    printf("STATE run=%" PRIu64 " seq=%" PRIu64 " crashed=%d ok=%d %s\n", c->run, c->count,
           was_crashed, ok, ok ? "" : "count and mirror differ");
    fflush(stdout);
    if (!ok || (argc > 3 && strcmp(argv[3], "check") == 0)) {
        return ok ? 0 : 1;
    }
    pthread_mutex_lock(&m);
    c->run += 1;
    uint64_t before = c->count;
    pthread_mutex_unlock(&m);
    pthread_t handles[64];
    for (int t = 0; t < threads; t++) {
        pthread_create(&handles[t], NULL, worker, (void *)(uintptr_t)t);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(handles[t], NULL);
    }
    printf("COUNT %" PRIu64 "\n", c->count - before);
    printf("DONE seq=%" PRIu64 "\n", c->count);
    printf("RESULT count=%" PRIu64 "\n", c->count);
    return 0;
}
