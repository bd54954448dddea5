/*
 * ledger: concurrent sections under different locks. T threads × N transfers between 64
 * persistent accounts guarded by 8 striped mutexes, taken two at a time in order (a nested
 * section); every fourth transfer of a thread also takes the audit mutex (a third, shared
 * lock) and counts itself there. Threads whose transfers touch different stripes commit at
 * the same time, each in its own log lane.
 *
 * After each transfer a thread acknowledges on ACK_FD (if set) the 8-byte value
 *   (thread << 56) | transfers done by that thread (over all runs)
 * once nvt_durable_epoch() >= nvt_section_epoch() (it must be: a section that depends on
 * no open section is durable when its outermost unlock returns; exit code 4 if not).
 *
 * At start the program checks the recovered state and prints one line
 *   STATE run=R seq=S crashed=C ok=1 t0=D0 t1=D1 ...
 * where S is the sum of the Dt (transfers done by thread t); ok=0 and a reason if the
 * balances do not sum to zero, a thread's audits are not exactly one per four of its
 * transfers, or a thread's last transfer stamp does not match its count (a torn or lost
 * section). Then it runs one more generation and prints DONE seq=S.
 * Usage: ledger THREADS ITERS [check]
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvthreads.h"

#define ACCOUNTS 64
#define STRIPES 8
#define MAX_THREADS 8

/* Balances and audits on pages of their own, each thread's counters on its own page: a
 * transfer dirties at least two pages, so a torn section shows. */
struct ledger {
    uint64_t run;
    int64_t balance[ACCOUNTS];
    char pad0[4096];
    uint64_t audits[MAX_THREADS];
    uint64_t audit_total;
    char pad1[4096];
    struct {
        uint64_t done;
        uint64_t last; /* (run << 40) | (thread << 32) | iteration of the last transfer */
        char pad[4096 - 16];
    } thread[MAX_THREADS];
};

static struct ledger *led;
static pthread_mutex_t stripes[STRIPES] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
};
static pthread_mutex_t audit = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static int iters;
static int ack_fd = -1;
static uint64_t run_id;

static uint64_t next_random(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void ack(uint64_t t, uint64_t done) {
    if (nvt_durable_epoch() < nvt_section_epoch()) {
        fprintf(stderr, "thread %" PRIu64 ": transfer %" PRIu64 " not durable after unlock\n", t,
                done);
        _exit(4);
    }
    uint64_t value = (t << 56) | done;
    if (ack_fd >= 0 && write(ack_fd, &value, sizeof value) != (ssize_t)sizeof value) {
        _exit(3);
    }
}

static void *worker(void *arg) {
    uint64_t t = (uint64_t)(uintptr_t)arg;
    uint64_t seed = (run_id << 8) ^ (t + 1) * 0x9e3779b97f4a7c15ull;
    /* Threads start together, so their sections overlap. */
    pthread_mutex_lock(&start_lock);
    pthread_mutex_unlock(&start_lock);
    for (int i = 0; i < iters; i++) {
        uint64_t r = next_random(&seed);
        unsigned from = (unsigned)(r % ACCOUNTS), to = (unsigned)((r >> 8) % ACCOUNTS);
        unsigned a = from % STRIPES, b = to % STRIPES;
        unsigned first = a < b ? a : b, second = a < b ? b : a;
        int64_t amount = (int64_t)((r >> 32) % 100) + 1;
        pthread_mutex_lock(&stripes[first]);
        if (second != first) {
            pthread_mutex_lock(&stripes[second]);
        }
        led->balance[from] -= amount;
        led->balance[to] += amount;
        uint64_t done = led->thread[t].done + 1;
        if (done % 4 == 0) {
            pthread_mutex_lock(&audit);
            led->audits[t] += 1;
            led->audit_total += 1;
            pthread_mutex_unlock(&audit);
        }
        led->thread[t].done = done;
        led->thread[t].last = (run_id << 40) | (t << 32) | (uint64_t)i;
        if (second != first) {
            pthread_mutex_unlock(&stripes[second]);
        }
        pthread_mutex_unlock(&stripes[first]);
        ack(t, done);
    }
    return NULL;
}

static int check(const char **why) {
    int64_t sum = 0;
    for (int i = 0; i < ACCOUNTS; i++) {
        sum += led->balance[i];
    }
    if (sum != 0) {
        *why = "balances do not sum to zero";
        return 0;
    }
    uint64_t audits = 0;
    for (int t = 0; t < MAX_THREADS; t++) {
        uint64_t done = led->thread[t].done, last = led->thread[t].last;
        if (led->audits[t] != done / 4) {
            *why = "a thread's audits do not match its transfers";
            return 0;
        }
        audits += led->audits[t];
        if (done != 0 && ((last >> 32) & 0xff) != (uint64_t)t) {
            *why = "a thread's last transfer names another thread";
            return 0;
        }
        if ((last >> 40) > led->run) {
            *why = "a transfer of a run that never started";
            return 0;
        }
    }
    if (audits != led->audit_total) {
        *why = "the audit total differs from the threads' audits";
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ledger THREADS ITERS [check]\n");
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
    led = nvmalloc(sizeof *led, "ledger");
    if (led == NULL) {
        fprintf(stderr, "nvmalloc failed\n");
        return 1;
    }
    const char *why = "";
    int ok = check(&why);
    uint64_t seq = 0;
    for (int t = 0; t < MAX_THREADS; t++) {
        seq += led->thread[t].done;
    }
    printf("STATE run=%" PRIu64 " seq=%" PRIu64 " crashed=%d ok=%d", led->run, seq, was_crashed, ok);
    for (int t = 0; t < MAX_THREADS; t++) {
        printf(" t%d=%" PRIu64, t, led->thread[t].done);
    }
    printf(" %s\n", ok ? "" : why);
    fflush(stdout);
    if (!ok || (argc > 3 && strcmp(argv[3], "check") == 0)) {
        return ok ? 0 : 1;
    }
    pthread_mutex_lock(&audit);
    led->run += 1;
    run_id = led->run;
    pthread_mutex_unlock(&audit);
    pthread_t handles[MAX_THREADS];
    pthread_mutex_lock(&start_lock);
    for (int t = 0; t < threads; t++) {
        if (pthread_create(&handles[t], NULL, worker, (void *)(uintptr_t)t) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
    }
    pthread_mutex_unlock(&start_lock);
    for (int t = 0; t < threads; t++) {
        pthread_join(handles[t], NULL);
    }
    seq = 0;
    for (int t = 0; t < MAX_THREADS; t++) {
        seq += led->thread[t].done;
    }
    printf("DONE seq=%" PRIu64 "\n", seq);
    int64_t digest = 0;
    for (int i = 0; i < ACCOUNTS; i++) {
        digest = digest * 31 + led->balance[i];
    }
    printf("RESULT seq=%" PRIu64 " digest=%" PRId64 "\n", seq, digest);
    return 0;
}
