/*
 * bank: K accounts, each with its own mutex inside the persistent heap. A transfer takes the
 * two account locks in address order and then the journal lock (three nested locks, one
 * durable section), moves an amount and appends the transfer to a journal.
 * At start the program checks the recovered state and prints
 *   STATE run=R seq=N crashed=C ok=1
 * where seq is the number of journaled transfers; ok=0 if the balances do not sum to the
 * initial total or do not equal the journal replayed from the initial balances. Then it runs
 * THREADS x ITERS transfers, acknowledging each (the new seq) on ACK_FD.
 * Usage: bank THREADS ITERS [check]
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
#define MAX_JOURNAL 300000

struct account {
    pthread_mutex_t lock;
    int64_t balance;
};

struct transfer {
    uint32_t from;
    uint32_t to;
    int64_t amount;
};

struct bank {
    uint64_t run;
    uint64_t count;
    pthread_mutex_t journal_lock;
    struct account accounts[ACCOUNTS];
    struct transfer journal[MAX_JOURNAL];
};

static struct bank *bank;
static int iters;
static int ack_fd = -1;

static uint64_t next_random(uint64_t *state) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

static void *worker(void *arg) {
    uint64_t rng = 0x9e3779b97f4a7c15ull * ((uint64_t)(uintptr_t)arg + 1) + bank->run;
    for (int i = 0; i < iters; i++) {
        uint32_t a = next_random(&rng) % ACCOUNTS;
        uint32_t b = next_random(&rng) % ACCOUNTS;
        if (a == b) {
            b = (a + 1) % ACCOUNTS;
        }
        int64_t amount = (int64_t)(next_random(&rng) % 50) + 1;
        struct account *first = &bank->accounts[a < b ? a : b];
        struct account *second = &bank->accounts[a < b ? b : a];
        pthread_mutex_lock(&first->lock);
        pthread_mutex_lock(&second->lock);
        pthread_mutex_lock(&bank->journal_lock);
        uint64_t n = bank->count;
        if (n >= MAX_JOURNAL) {
            pthread_mutex_unlock(&bank->journal_lock);
            pthread_mutex_unlock(&second->lock);
            pthread_mutex_unlock(&first->lock);
            break;
        }
        bank->journal[n].from = a;
        bank->journal[n].to = b;
        bank->journal[n].amount = amount;
        bank->count = n + 1;
        pthread_mutex_unlock(&bank->journal_lock);
        bank->accounts[a].balance -= amount;
        bank->accounts[b].balance += amount;
        pthread_mutex_unlock(&second->lock);
        pthread_mutex_unlock(&first->lock);
        if (ack_fd >= 0) {
            uint64_t acked = n + 1;
            if (write(ack_fd, &acked, sizeof acked) != (ssize_t)sizeof acked) {
                _exit(3);
            }
        }
    }
    return NULL;
}

static int check(const char **why) {
    static int64_t replay[ACCOUNTS];
    int64_t sum = 0;
    for (int i = 0; i < ACCOUNTS; i++) {
        replay[i] = INITIAL;
        sum += bank->accounts[i].balance;
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
        if (replay[i] != bank->accounts[i].balance) {
            *why = "balances differ from the journal";
            return 0;
        }
    }
    return 1;
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
    bank = nvmalloc(sizeof *bank, "bank");
    if (bank == NULL) {
        return 1;
    }
    if (bank->run == 0) {
        /* First run: open the accounts in one section (balances and run together). */
        pthread_mutex_lock(&bank->journal_lock);
        for (int i = 0; i < ACCOUNTS; i++) {
            bank->accounts[i].balance = INITIAL;
        }
        bank->run = 1;
        pthread_mutex_unlock(&bank->journal_lock);
    }
    const char *why = "";
    int ok = check(&why);
    printf("STATE run=%" PRIu64 " seq=%" PRIu64 " crashed=%d ok=%d %s\n", bank->run, bank->count,
           was_crashed, ok, ok ? "" : why);
    fflush(stdout);
    if (!ok || (argc > 3 && strcmp(argv[3], "check") == 0)) {
        return ok ? 0 : 1;
    }
    pthread_mutex_lock(&bank->journal_lock);
    bank->run += 1;
    pthread_mutex_unlock(&bank->journal_lock);
    pthread_t handles[16];
    for (int t = 0; t < threads && t < 16; t++) {
        pthread_create(&handles[t], NULL, worker, (void *)(uintptr_t)t);
    }
    for (int t = 0; t < threads && t < 16; t++) {
        pthread_join(handles[t], NULL);
    }
    printf("DONE seq=%" PRIu64 "\n", bank->count);
    int64_t weighted = 0;
    for (int i = 0; i < ACCOUNTS; i++) {
        weighted += bank->accounts[i].balance * (i + 1);
    }
    printf("RESULT count=%" PRIu64 " weighted=%" PRId64 "\n", bank->count, weighted);
    return 0;
}
