/*
 * barrier phases (K-means-like): each thread fills its partition (four pages) with the next
 * phase number outside any lock, then waits at a barrier; the barrier's serial thread
 * advances the phase counter in a section; a second barrier starts the next phase.
 * At start the program prints
 *   STATE run=R seq=PHASE crashed=C ok=1
 * ok=0 if a partition is torn (entries differ) or is not at PHASE or PHASE + 1 (a thread's
 * writes commit at its barrier, the counter in the serial thread's section after it).
 * Usage: phases THREADS PHASES [check]
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvthreads.h"

#define MAX_THREADS 8
#define PART 2048

struct phases {
    uint64_t run;
    uint64_t phase;
    uint64_t threads; /* of the last run, for the check */
    uint64_t part[MAX_THREADS][PART];
};

static struct phases *st;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t filled, advanced;
static int rounds;
static int ack_fd = -1;

static void *worker(void *arg) {
    uint64_t t = (uint64_t)(uintptr_t)arg;
    for (int i = 0; i < rounds; i++) {
        uint64_t q = st->phase;
        for (int k = 0; k < PART; k++) {
            st->part[t][k] = q + 1;
        }
        if (pthread_barrier_wait(&filled) == PTHREAD_BARRIER_SERIAL_THREAD) {
            pthread_mutex_lock(&m);
            st->phase = q + 1;
            pthread_mutex_unlock(&m);
            uint64_t acked = q + 1;
            if (ack_fd >= 0 && write(ack_fd, &acked, sizeof acked) != (ssize_t)sizeof acked) {
                _exit(3);
            }
        }
        pthread_barrier_wait(&advanced);
    }
    return NULL;
}

static int check(const char **why) {
    if (st->threads > MAX_THREADS) {
        *why = "thread count out of range";
        return 0;
    }
    for (int t = 0; t < (int)st->threads; t++) {
        uint64_t v = st->part[t][0];
        if (v != st->phase && v != st->phase + 1) {
            *why = "partition not at the phase or the next";
            return 0;
        }
        for (int k = 1; k < PART; k++) {
            if (st->part[t][k] != v) {
                *why = "torn partition";
                return 0;
            }
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        return 2;
    }
    int threads = atoi(argv[1]);
    rounds = atoi(argv[2]);
    if (threads < 1 || threads > MAX_THREADS) {
        return 2;
    }
    const char *fd = getenv("ACK_FD");
    if (fd != NULL) {
        ack_fd = atoi(fd);
    }
    int was_crashed = crashed();
    st = nvmalloc(sizeof *st, "phases");
    if (st == NULL) {
        return 1;
    }
    const char *why = "";
    int ok = check(&why);
    printf("STATE run=%" PRIu64 " seq=%" PRIu64 " crashed=%d ok=%d %s\n", st->run, st->phase,
           was_crashed, ok, ok ? "" : why);
    fflush(stdout);
    if (!ok || (argc > 3 && strcmp(argv[3], "check") == 0)) {
        return ok ? 0 : 1;
    }
    pthread_mutex_lock(&m);
    st->run += 1;
    if (st->threads != (uint64_t)threads) {
        /* Partitions of a different thread count start over at the current phase. */
        for (int t = 0; t < MAX_THREADS; t++) {
            for (int k = 0; k < PART; k++) {
                st->part[t][k] = t < threads ? st->phase : 0;
            }
        }
        st->threads = (uint64_t)threads;
    }
    pthread_mutex_unlock(&m);
    pthread_barrier_init(&filled, NULL, (unsigned)threads);
    pthread_barrier_init(&advanced, NULL, (unsigned)threads);
    pthread_t handles[MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        pthread_create(&handles[t], NULL, worker, (void *)(uintptr_t)t);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(handles[t], NULL);
    }
    printf("DONE seq=%" PRIu64 "\n", st->phase);
    uint64_t sum = 0;
    for (int t = 0; t < threads; t++) {
        for (int k = 0; k < PART; k++) {
            sum += st->part[t][k];
        }
    }
    printf("RESULT phase=%" PRIu64 " sum=%" PRIu64 "\n", st->phase, sum);
    return 0;
}
