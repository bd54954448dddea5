/*
 * counter + journal kept in the program's own globals, run with NVT_GLOBALS=persistent:
 * T threads x N sections of lock m; s = seq; journal[s] = (run, tid, iter); a += 1; b += 1;
 * seq = s + 1; unlock m; acknowledge seq on ACK_FD. The state lives in .bss and .data, not
 * in nvmalloc'd memory; nothing but globals persists.
 *
 * At start it checks the recovered globals and prints
 *   STATE run=R seq=S a=A b=B crashed=C ok=1
 * (ok=0 if a == b == seq fails, a journal entry is not its thread's next iteration, or a
 * global the dynamic loader relocates — a pointer to a string literal — came back from an
 * earlier run instead of this one's). Usage: gcounter THREADS ITERS [check]
 *
 * Every global persists, so per-run state (the acknowledgement descriptor, the iteration
 * count) is set afresh in main before anything uses it.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvthreads.h"

#define MAX_JOURNAL 400000
#define MAX_RUNS 1024
#define MAX_THREADS 16

/* a, b and the journal on different pages, so a torn section shows. */
static struct {
    uint64_t run_id;
    uint64_t seq;
    uint64_t a;
    char pad_a[4096];
    uint64_t b;
    char pad_b[4096];
    uint64_t journal[MAX_JOURNAL];
} g;
#define run_id g.run_id
#define seq g.seq
#define a g.a
#define b g.b
#define journal g.journal
static const char *label = "gcounter-label"; /* relocated at load time in a PIE */
static uint64_t initialised = 7;             /* .data: its initial value must persist */
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int iters;
static int ack_fd = -1;
static uint64_t this_run;

static uint64_t entry(uint64_t run, uint64_t tid, uint64_t iter) {
    return (run << 40) | (tid << 32) | iter;
}

static void *worker(void *arg) {
    uint64_t tid = (uint64_t)(uintptr_t)arg;
    for (int i = 0; i < iters; i++) {
        pthread_mutex_lock(&m);
        uint64_t s = seq;
        if (s >= MAX_JOURNAL) {
            pthread_mutex_unlock(&m);
            break;
        }
        journal[s] = entry(this_run, tid, (uint64_t)i);
        a += 1;
        b += 1;
        seq = s + 1;
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

static int check(const char **why) {
    static uint64_t next[MAX_RUNS][MAX_THREADS];
    memset(next, 0, sizeof next);
    if (strcmp(label, "gcounter-label") != 0) {
        *why = "relocated pointer restored from an earlier run";
        return 0;
    }
    if (initialised != 7 + run_id) {
        *why = "initialised global lost";
        return 0;
    }
    if (a != seq || b != seq || seq > MAX_JOURNAL) {
        *why = "a, b and seq differ";
        return 0;
    }
    for (uint64_t i = 0; i < seq; i++) {
        uint64_t run = journal[i] >> 40, tid = (journal[i] >> 32) & 0xff;
        uint64_t iter = journal[i] & 0xffffffffu;
        if (run == 0 || run > run_id || run >= MAX_RUNS || tid >= MAX_THREADS ||
            iter != next[run][tid]) {
            *why = "journal entry is not its thread's next iteration";
            return 0;
        }
        next[run][tid] = iter + 1;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        return 2;
    }
    int threads = atoi(argv[1]);
    iters = atoi(argv[2]);
    if (threads < 1 || threads > MAX_THREADS) {
        return 2;
    }
    ack_fd = -1;
    const char *fd = getenv("ACK_FD");
    if (fd != NULL) {
        ack_fd = atoi(fd);
        struct stat st;
        if (fstat(ack_fd, &st) != 0 || !S_ISFIFO(st.st_mode)) {
            fprintf(stderr, "gcounter: ACK_FD=%d is not a pipe\n", ack_fd);
            return 5;
        }
    }
    int was_crashed = crashed();
    const char *why = "";
    int ok = check(&why);
    printf("STATE run=%" PRIu64 " seq=%" PRIu64 " a=%" PRIu64 " b=%" PRIu64 " crashed=%d ok=%d %s\n",
           run_id, seq, a, b, was_crashed, ok, ok ? "" : why);
    fflush(stdout);
    if (!ok || (argc > 3 && strcmp(argv[3], "check") == 0)) {
        return ok ? 0 : 1;
    }
    pthread_mutex_lock(&m);
    run_id += 1;
    initialised += 1;
    this_run = run_id;
    pthread_mutex_unlock(&m);
    if (this_run >= MAX_RUNS) {
        return 0;
    }
    pthread_t handles[MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        pthread_create(&handles[t], NULL, worker, (void *)(uintptr_t)t);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(handles[t], NULL);
    }
    printf("DONE seq=%" PRIu64 "\n", seq);
    printf("RESULT seq=%" PRIu64 " a=%" PRIu64 " b=%" PRIu64 "\n", seq, a, b);
    return 0;
}
