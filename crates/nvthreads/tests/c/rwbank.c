/*
 * rwbank: K accounts and a journal behind one read-write lock. Each thread alternates: one
 * transfer in three under the write lock (move an amount, append it to the journal), the
 * others under the read lock: audit the balances (they must sum to the initial total and
 * equal the journal replayed) and count the audit in the thread's own persistent slot, so
 * that readers holding the lock together merge their own writes at the same time. A failed
 * audit is counted too.
 * At start the program checks the recovered state and prints
 *   STATE run=R seq=N crashed=C ok=1
 * where seq is the number of journaled transfers; ok=0 if the balances do not sum to the
 * initial total, differ from the journal replayed, or an audit ever failed. Then it runs
 * THREADS x ITERS operations, acknowledging each transfer (the new seq) on ACK_FD.
 * Usage: rwbank THREADS ITERS [check]
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvthreads.h"

#define ACCOUNTS 64
#define INITIAL 1000
#define MAX_JOURNAL 100000
#define MAX_THREADS 16

struct transfer {
    uint32_t from;
    uint32_t to;
    int64_t amount;
};

struct bank {
    uint64_t run;
    uint64_t count;
    uint64_t failed_audits;
    uint64_t audits[MAX_THREADS];
    int64_t balances[ACCOUNTS];
    struct transfer journal[MAX_JOURNAL];
};

static struct bank *bank;
static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static int iters;
static int ack_fd = -1;

static uint64_t next_random(uint64_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* Whether the balances are consistent with the journal. Sets *why when not. */
static int consistent(const char **why) {
    int64_t replay[ACCOUNTS];
    int64_t sum = 0;
    for (int i = 0; i < ACCOUNTS; i++) {
        replay[i] = INITIAL;
        sum += bank->balances[i];
    }
    if (sum != (int64_t)ACCOUNTS * INITIAL) {
        *why = "balances do not sum to the initial total";
        return 0;
    }
    if (bank->count > MAX_JOURNAL) {
        *why = "journal count out of range";
        return 0;
    }
    for (uint64_t n = 0; n < bank->count; n++) {
        struct transfer t = bank->journal[n];
        if (t.from >= ACCOUNTS || t.to >= ACCOUNTS || t.amount <= 0) {
            *why = "journal entry invalid";
            return 0;
        }
        replay[t.from] -= t.amount;
        replay[t.to] += t.amount;
    }
    for (int i = 0; i < ACCOUNTS; i++) {
        if (replay[i] != bank->balances[i]) {
            *why = "balances differ from the journal";
            return 0;
        }
    }
    return 1;
}

static void *worker(void *arg) {
    int me = (int)(uintptr_t)arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull * ((uint64_t)me + 1) + bank->run;
    for (int i = 0; i < iters; i++) {
        if (i % 3 != 0) {
            pthread_rwlock_rdlock(&lock);
            const char *why = "";
            if (!consistent(&why)) {
                __atomic_add_fetch(&bank->failed_audits, 1, __ATOMIC_RELAXED);
            }
            bank->audits[me] += 1;
            pthread_rwlock_unlock(&lock);
            continue;
        }
        uint32_t a = next_random(&rng) % ACCOUNTS;
        uint32_t b = next_random(&rng) % ACCOUNTS;
        if (a == b) {
            b = (a + 1) % ACCOUNTS;
        }
        int64_t amount = (int64_t)(next_random(&rng) % 50) + 1;
        pthread_rwlock_wrlock(&lock);
        uint64_t n = bank->count;
        if (n >= MAX_JOURNAL) {
            pthread_rwlock_unlock(&lock);
            break;
        }
        bank->journal[n].from = a;
        bank->journal[n].to = b;
        bank->journal[n].amount = amount;
        bank->balances[a] -= amount;
        bank->balances[b] += amount;
        bank->count = n + 1;
        pthread_rwlock_unlock(&lock);
        if (ack_fd >= 0) {
            uint64_t acked = n + 1;
            if (write(ack_fd, &acked, sizeof acked) != (ssize_t)sizeof acked) {
                _exit(3);
            }
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
    if (threads > MAX_THREADS) {
        threads = MAX_THREADS;
    }
    const char *fd = getenv("ACK_FD");
    if (fd != NULL) {
        ack_fd = atoi(fd);
    }
    int was_crashed = crashed();
    bank = nvmalloc(sizeof *bank, "rwbank");
    if (bank == NULL) {
        return 1;
    }
    if (bank->run == 0) {
        pthread_rwlock_wrlock(&lock);
        for (int i = 0; i < ACCOUNTS; i++) {
            bank->balances[i] = INITIAL;
        }
        bank->run = 1;
        pthread_rwlock_unlock(&lock);
    }
    const char *why = "";
    int ok = consistent(&why);
    if (ok && bank->failed_audits != 0) {
        ok = 0;
        why = "an audit under the read lock failed";
    }
    printf("STATE run=%" PRIu64 " seq=%" PRIu64 " crashed=%d ok=%d %s\n", bank->run, bank->count,
           was_crashed, ok, ok ? "" : why);
    fflush(stdout);
    if (!ok || (argc > 3 && strcmp(argv[3], "check") == 0)) {
        return ok ? 0 : 1;
    }
    pthread_rwlock_wrlock(&lock);
    bank->run += 1;
    pthread_rwlock_unlock(&lock);
    pthread_t handles[MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        pthread_create(&handles[t], NULL, worker, (void *)(uintptr_t)t);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(handles[t], NULL);
    }
    uint64_t audits = 0;
    for (int t = 0; t < threads; t++) {
        audits += bank->audits[t];
    }
    printf("DONE seq=%" PRIu64 "\n", bank->count);
    int64_t weighted = 0;
    for (int i = 0; i < ACCOUNTS; i++) {
        weighted += bank->balances[i] * (i + 1);
    }
    printf("RESULT count=%" PRIu64 " weighted=%" PRId64 " audits=%" PRIu64 " failed=%" PRIu64 "\n",
           bank->count, weighted, audits, bank->failed_audits);
    return 0;
}
