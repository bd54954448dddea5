/*
 * Shared by the evaluation programs (Phoenix-style kernels and the page micro-benchmark):
 * argument parsing, a deterministic input generator, timing and the output format.
 *
 * Every kernel is an ordinary pthreads program: main makes its input in malloc'd memory,
 * starts THREADS threads, joins them and prints
 *   RESULT <kernel> <digest>     (a checksum of the output: equal under every runtime)
 *   TIME <seconds>               (from the first pthread_create to the last join)
 * The same source is built against plain pthreads and against libnvthreads_rt.
 * Usage of every kernel: <kernel> THREADS SIZE   (SIZE scales the input; see each kernel)
 */
#ifndef NVT_EVAL_COMMON_H
#define NVT_EVAL_COMMON_H

#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 64

static inline double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* xorshift64*: the same input in every run and under every runtime. */
static inline uint64_t next_random(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static inline uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

static inline void parse_args(int argc, char **argv, int *threads, long *size) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s THREADS SIZE\n", argv[0]);
        exit(2);
    }
    *threads = atoi(argv[1]);
    *size = atol(argv[2]);
    if (*threads < 1 || *threads > MAX_THREADS || *size < 1) {
        fprintf(stderr, "bad arguments\n");
        exit(2);
    }
}

static inline void *checked_malloc(size_t bytes) {
    void *p = malloc(bytes);
    if (p == NULL) {
        fprintf(stderr, "malloc(%zu) failed\n", bytes);
        exit(1);
    }
    return p;
}

/* Runs `body(i)` on `threads` threads (i = 0..threads-1) and returns the elapsed seconds. */
static inline double run_threads(int threads, void *(*body)(void *)) {
    pthread_t handles[MAX_THREADS];
    double start = now_seconds();
    for (long t = 0; t < threads; t++) {
        if (pthread_create(&handles[t], NULL, body, (void *)t) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(handles[t], NULL);
    }
    return now_seconds() - start;
}

static inline void report(const char *kernel, uint64_t digest, double seconds) {
    printf("RESULT %s %016" PRIx64 "\n", kernel, digest);
    printf("TIME %.6f\n", seconds);
}

#endif
