/*
 * A read-mostly lookup table behind one read-write lock (docs/nvthreads.md §10, read-write
 * locks): THREADS threads each make OPS operations, 95 % lookups under the read lock
 * (LOOKUPS keys, default 1, looked up in an open-addressed table of 4,096 entries in the
 * persistent heap, their values summed; then, with WAIT_US > 0, a sleep of that many
 * microseconds still holding the read lock, as a server's lookup that waits for a disk or
 * a backend) and 5 % updates under the write lock (a value changed). Prints
 *   RESULT rwlock_lookup <digest>   (equal under every runtime: the updates commute)
 *   TIME <seconds>                  (from the first pthread_create to the last join)
 * Build (plain pthreads, or the runtime with LD_PRELOAD), then run:
 *   cc -O2 -Wall -DNVT_WEAK_API -pthread -I crates/nvthreads/include \
 *      crates/nvthreads/eval/rwlock_lookup.c -o rwlock_lookup
 *   ./rwlock_lookup 4 200000
 *   NVT_POOL=/dev/shm/rwlock_lookup.pool \
 *      LD_PRELOAD=target/release/examples/libnvthreads_rt.so ./rwlock_lookup 4 200000
 * Usage: rwlock_lookup THREADS OPS [LOOKUPS [WAIT_US]]
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nvthreads.h"

#define SLOTS 4096
#define KEYS 3000

struct entry {
    uint64_t key;
    uint64_t value;
};

static struct entry *table;
static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static long ops;
static int lookups = 1;
static long wait_us;
static uint64_t sums[64];

static uint64_t next_random(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static struct entry *find(uint64_t key) {
    uint64_t at = (key * 0x9e3779b97f4a7c15ull) >> 52;
    while (table[at].key != key && table[at].key != 0) {
        at = (at + 1) % SLOTS;
    }
    return &table[at];
}

static void *worker(void *arg) {
    int me = (int)(intptr_t)arg;
    uint64_t rng = 0x1234567ull * (uint64_t)(me + 1);
    uint64_t sum = 0;
    for (long i = 0; i < ops; i++) {
        uint64_t r = next_random(&rng);
        uint64_t key = r % KEYS + 1;
        if (r >> 32 < (uint64_t)(0.05 * 4294967296.0)) {
            pthread_rwlock_wrlock(&lock);
            find(key)->value += 1;
            pthread_rwlock_unlock(&lock);
        } else {
            pthread_rwlock_rdlock(&lock);
            for (int l = 0; l < lookups; l++) {
                sum += find((key + (uint64_t)l * 7919) % KEYS + 1)->value;
            }
            if (wait_us > 0) {
                struct timespec pause = {0, wait_us * 1000};
                nanosleep(&pause, NULL);
            }
            pthread_rwlock_unlock(&lock);
        }
    }
    sums[me] = sum;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        return 2;
    }
    int threads = atoi(argv[1]);
    ops = atol(argv[2]);
    if (argc > 3) {
        lookups = atoi(argv[3]);
    }
    if (argc > 4) {
        wait_us = atol(argv[4]);
    }
    if (threads < 1 || threads > 64) {
        return 2;
    }
#ifdef NVT_WEAK_API
    table = nvmalloc ? nvmalloc(SLOTS * sizeof *table, NULL) : calloc(SLOTS, sizeof *table);
#else
    table = nvmalloc(SLOTS * sizeof *table, NULL);
#endif
    pthread_rwlock_wrlock(&lock);
    for (uint64_t k = 1; k <= KEYS; k++) {
        struct entry *e = find(k);
        e->key = k;
        e->value = k;
    }
    pthread_rwlock_unlock(&lock);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pthread_t t[64];
    for (int i = 0; i < threads; i++) {
        pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    uint64_t digest = 0;
    for (uint64_t k = 1; k <= KEYS; k++) {
        digest = digest * 31 + find(k)->value;
    }
    printf("RESULT rwlock_lookup %" PRIu64 "\n", digest);
    printf("TIME %.3f\n", (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9);
    return 0;
}
