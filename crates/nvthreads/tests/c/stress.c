/*
 * liveness stress (NVthreads issue #4): THREADS threads that each sleep a different time, then
 * lock / increment / unlock, ITERS times. Must finish (the test runs it under a timeout) with
 * the exact count. Prints "COUNT n".
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "nvthreads.h"

static uint64_t *count;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int iters;

static void *worker(void *arg) {
    unsigned t = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < iters; i++) {
        usleep((t * 37u + (unsigned)i * 11u) % 700u);
        pthread_mutex_lock(&m);
        *count += 1;
        pthread_mutex_unlock(&m);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        return 2;
    }
    int threads = atoi(argv[1]);
    iters = atoi(argv[2]);
    count = nvmalloc(sizeof *count, "count");
    if (count == NULL || threads < 1 || threads > 64) {
        return 1;
    }
    pthread_t handles[64];
    for (int t = 0; t < threads; t++) {
        pthread_create(&handles[t], NULL, worker, (void *)(uintptr_t)t);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(handles[t], NULL);
    }
    printf("COUNT %" PRIu64 "\n", *count);
    return 0;
}
