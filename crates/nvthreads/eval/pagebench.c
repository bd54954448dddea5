/*
 * The NVthreads paper's page micro-benchmark: THREADS threads (4 in the paper) each own a
 * disjoint share of PAGES pages (1000) of one malloc'd region and, ROUNDS times, modify
 * PERCENT % of every page they own inside one critical section of their own mutex: a
 * contiguous run of 8-byte words starting at a pseudo-random offset of the page (wrapping
 * around). Run with NVT_MALLOC=persistent so the region is persistent.
 * Prints "RESULT pagebench <digest>" and "TIME <seconds>" (from the first thread's start of
 * its rounds to the last thread's end).
 * Usage: pagebench THREADS PAGES PERCENT ROUNDS
 */
#include "common.h"

#define PAGE 4096
#define WORDS (PAGE / 8)

static uint64_t *region;
static long pages, percent, rounds;
static int thread_count;
static pthread_mutex_t locks[MAX_THREADS];
static pthread_barrier_t go;
static double started[MAX_THREADS], finished[MAX_THREADS];

static void *modify(void *arg) {
    long t = (long)arg;
    long first = pages * t / thread_count, last = pages * (t + 1) / thread_count;
    long words = WORDS * percent / 100;
    uint64_t seed = 0x9a9e + (uint64_t)t;
    pthread_barrier_wait(&go);
    double start = now_seconds();
    for (long r = 0; r < rounds; r++) {
        pthread_mutex_lock(&locks[t]);
        for (long p = first; p < last; p++) {
            uint64_t *page = region + p * WORDS;
            long start = (long)(next_random(&seed) % WORDS);
            for (long w = 0; w < words; w++) {
                page[(start + w) % WORDS] += (uint64_t)(r + 1) * 0x100000001ull + (uint64_t)w;
            }
        }
        pthread_mutex_unlock(&locks[t]);
    }
    /* Each thread's own clock: main may not run when the barrier opens. */
    pthread_mutex_lock(&locks[t]);
    started[t] = start;
    finished[t] = now_seconds();
    pthread_mutex_unlock(&locks[t]);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: pagebench THREADS PAGES PERCENT ROUNDS\n");
        return 2;
    }
    thread_count = atoi(argv[1]);
    pages = atol(argv[2]);
    percent = atol(argv[3]);
    rounds = atol(argv[4]);
    if (thread_count < 1 || thread_count > MAX_THREADS || pages < thread_count ||
        percent < 1 || percent > 100 || rounds < 1) {
        return 2;
    }
    region = calloc((size_t)pages, PAGE);
    for (int t = 0; t < thread_count; t++) {
        pthread_mutex_init(&locks[t], NULL);
    }
    pthread_barrier_init(&go, NULL, (unsigned)thread_count + 1);
    pthread_t handles[MAX_THREADS];
    for (long t = 0; t < thread_count; t++) {
        pthread_create(&handles[t], NULL, modify, (void *)t);
    }
    pthread_barrier_wait(&go);
    for (int t = 0; t < thread_count; t++) {
        pthread_join(handles[t], NULL);
    }
    double first = started[0], last = finished[0];
    for (int t = 1; t < thread_count; t++) {
        first = started[t] < first ? started[t] : first;
        last = finished[t] > last ? finished[t] : last;
    }
    double seconds = last - first;
    uint64_t digest = 0;
    for (long i = 0; i < pages * WORDS; i++) {
        digest = mix(digest, region[i]);
    }
    report("pagebench", digest, seconds);
    return 0;
}
