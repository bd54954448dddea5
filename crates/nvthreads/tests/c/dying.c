/*
 * dying: a thread-process dies (abort(), killed from outside, an injected failure in the
 * runtime) while others wait for it; the run must end, never hang, and the next run must
 * recover every section that was durable.
 *
 * State (nvmalloc "dying"): a and b, both incremented in every section (a == b always).
 * Every mode starts with a check line
 *   STATE a=A b=B ok=1
 * then main runs 20 sections, waits until they are durable and prints
 *   DURABLE a=A
 * then:
 *   abort-exit   a worker runs 10 sections and calls abort() instead of returning; main
 *                joins it.
 *   kill-mutex   worker 1 locks m, writes in its section, says so to main, prints
 *                "STALL pid=P" and pauses holding m; worker 2 and main then lock m.
 *   kill-cond    worker 1 prints "STALL pid=P" and pauses (it would set the flag); worker 2
 *                waits on a condition variable for the flag; main joins worker 2.
 *   kill-detached  a detached worker prints "STALL pid=P" and pauses; main calls
 *                pthread_exit, which waits for detached threads.
 *   work T N     T workers x N sections each (for NVT_FAIL_AT); main joins them.
 *   check        only the check line.
 * Prints DONE when main ends normally.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvthreads.h"

struct state {
    uint64_t a;
    uint64_t b;
};

static struct state *st;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int flag;
/* The holder says it holds m (so that the others wait for it). */
static pthread_mutex_t h = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hc = PTHREAD_COND_INITIALIZER;
static int held;
static int iters = 10;

static void section(void) {
    pthread_mutex_lock(&m);
    st->a += 1;
    st->b += 1;
    pthread_mutex_unlock(&m);
}

static void stall(void) {
    /* The thread-process's own id, for the test to kill this thread alone: gettid(), since
     * getpid() is the program's in every thread, as with pthreads. */
    printf("STALL pid=%d\n", (int)gettid());
    fflush(stdout);
    for (;;) {
        pause();
    }
}

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < iters; i++) {
        section();
    }
    return NULL;
}

static void *aborter(void *arg) {
    (void)arg;
    for (int i = 0; i < iters; i++) {
        section();
    }
    abort();
}

static void *holder(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    st->a += 1;
    st->b += 1;
    pthread_mutex_lock(&h);
    held = 1;
    pthread_cond_signal(&hc);
    pthread_mutex_unlock(&h);
    stall();
    return NULL;
}

static void wait_until_held(void) {
    pthread_mutex_lock(&h);
    while (!held) {
        pthread_cond_wait(&hc, &h);
    }
    pthread_mutex_unlock(&h);
}

static void *staller(void *arg) {
    (void)arg;
    stall();
    return NULL;
}

static void *cond_waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    while (!flag) {
        pthread_cond_wait(&c, &m);
    }
    pthread_mutex_unlock(&m);
    return NULL;
}

static void *locker(void *arg) {
    (void)arg;
    section();
    return NULL;
}

static void spawn(pthread_t *t, void *(*start)(void *)) {
    if (pthread_create(t, NULL, start, NULL) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        exit(2);
    }
}

static void join(pthread_t t) {
    if (pthread_join(t, NULL) != 0) {
        fprintf(stderr, "pthread_join failed\n");
        exit(2);
    }
}

static void durable_prefix(void) {
    for (int i = 0; i < 20; i++) {
        section();
    }
    for (int spins = 0; nvt_durable_epoch() < nvt_section_epoch(); spins++) {
        if (spins > 1000000) {
            fprintf(stderr, "sections not durable\n");
            exit(2);
        }
        sched_yield();
    }
    printf("DURABLE a=%" PRIu64 "\n", st->a);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: dying MODE [THREADS ITERS]\n");
        return 2;
    }
    st = nvmalloc(sizeof *st, "dying");
    if (st == NULL) {
        fprintf(stderr, "nvmalloc failed\n");
        return 2;
    }
    printf("STATE a=%" PRIu64 " b=%" PRIu64 " ok=%d\n", st->a, st->b, st->a == st->b);
    fflush(stdout);
    const char *mode = argv[1];
    if (strcmp(mode, "check") == 0) {
        return 0;
    }
    durable_prefix();
    pthread_t t1, t2;
    if (strcmp(mode, "abort-exit") == 0) {
        spawn(&t1, aborter);
        join(t1);
    } else if (strcmp(mode, "kill-mutex") == 0) {
        spawn(&t1, holder);
        wait_until_held();
        spawn(&t2, locker);
        section();
        join(t2);
    } else if (strcmp(mode, "kill-cond") == 0) {
        spawn(&t1, staller);
        spawn(&t2, cond_waiter);
        join(t2);
    } else if (strcmp(mode, "kill-detached") == 0) {
        spawn(&t1, staller);
        pthread_detach(t1);
        pthread_exit(NULL);
    } else if (strcmp(mode, "work") == 0 && argc == 4) {
        int threads = atoi(argv[2]);
        iters = atoi(argv[3]);
        pthread_t t[16];
        if (threads < 1 || threads > 16) {
            return 2;
        }
        for (int i = 0; i < threads; i++) {
            spawn(&t[i], worker);
        }
        for (int i = 0; i < threads; i++) {
            join(t[i]);
        }
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("DONE a=%" PRIu64 "\n", st->a);
    return 0;
}
