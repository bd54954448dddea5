/*
 * The condition-variable dependence case (NVthreads paper, Fig. 3):
 *   T1: lock m1; lock m2; x = r; ready = r; while (flag != r) cond_wait(c, m2); unlock m2;
 *       round = r; unlock m1
 *   T2: lock m2; while (ready != r) cond_wait(c2, m2); y = x; flag = r; signal c; unlock m2
 * T2's section observed T1's open section (x = r), so it may become durable only with it.
 *
 * Usage: condvar crash   -> one round; T1 kills the process group before unlocking m1
 *        condvar commit  -> one round; T1 unlocks m1; both sections become durable
 *        condvar check   -> prints the recovered "XY x=.. y=.. flag=.. busy=.." and exits
 *        condvar loop ROUNDS [check]
 *                        -> ROUNDS rounds, T1 acknowledging each round on ACK_FD once
 *                           nvt_durable_epoch() covers it, while a third thread runs
 *                           sections of its own (which end while T1's is open, so they
 *                           commit only with it). At start it prints
 *                             STATE run=R seq=ROUND crashed=C ok=1
 *                           with ok=0 if x, y, flag and ready are not all equal to round
 *                           (a torn or lost dependent section) or the bystander's two
 *                           counters differ.
 *        condvar pairs ROUNDS
 *                        -> two independent copies of the loop (T1, T2 on m1, m2, c, c2;
 *                           T1', T2' on m4, m5, c4, c5), whose open sections overlap all
 *                           the time, and a bystander on m3: sections never wait for
 *                           unrelated ones to become durable. Each T1 checks that its round
 *                           is durable when its outer unlock returns, the bystander that each
 *                           of its sections is durable when its unlock returns (exit 4 if
 *                           not), and each T2, whose sections depend on its T1's open one,
 *                           that they become durable by the time that T1 ends its round
 *                           (within 10 s; exit 5 if not). Prints PAIRS ok.
 * The one-round modes also record whether T2's pthread_mutex_trylock(m1) saw EBUSY while T1
 * held m1.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nvthreads.h"

struct shared {
    uint64_t x;
    uint64_t y;
    uint64_t flag;
    uint64_t busy;
    uint64_t ready; /* set by T1 inside its open section, just before it waits */
    uint64_t run;
    uint64_t round;
    uint64_t others_a;
    char pad[4096];
    uint64_t others_b;
};

static struct shared *s;
static pthread_mutex_t m1 = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t m2 = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t m3 = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static pthread_cond_t c2 = PTHREAD_COND_INITIALIZER;
static int crash_mode;
static uint64_t first_round, last_round;
static int ack_fd = -1;
static volatile int t1_done;

static void *t1(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m1);
    pthread_mutex_lock(&m2);
    s->x = 42;
    s->ready = 1;
    while (!s->flag) {
        pthread_cond_wait(&c, &m2);
    }
    pthread_mutex_unlock(&m2);
    if (crash_mode) {
        kill(0, SIGKILL);
    }
    pthread_mutex_unlock(&m1);
    return NULL;
}

static void *t2(void *arg) {
    (void)arg;
    /* Wait until T1 is inside its open section and waiting, so that this section reads
     * T1's uncommitted x (the dependence under test) on every run. */
    for (;;) {
        pthread_mutex_lock(&m2);
        if (s->ready) {
            break;
        }
        pthread_mutex_unlock(&m2);
        usleep(1000);
    }
    s->busy = pthread_mutex_trylock(&m1) == EBUSY;
    s->y = s->x;
    s->flag = 1;
    pthread_cond_signal(&c);
    pthread_mutex_unlock(&m2);
    return NULL;
}

static void ack(uint64_t value) {
    if (ack_fd >= 0 && write(ack_fd, &value, sizeof value) != (ssize_t)sizeof value) {
        _exit(3);
    }
}

static void *loop_t1(void *arg) {
    (void)arg;
    for (uint64_t r = first_round; r <= last_round; r++) {
        pthread_mutex_lock(&m1);
        pthread_mutex_lock(&m2);
        s->x = r;
        s->ready = r;
        pthread_cond_signal(&c2);
        while (s->flag != r) {
            pthread_cond_wait(&c, &m2);
        }
        pthread_mutex_unlock(&m2);
        s->round = r;
        pthread_mutex_unlock(&m1);
        /* Nothing else holds a lock across a wait, so the unlock committed the round. */
        if (nvt_durable_epoch() < nvt_section_epoch()) {
            fprintf(stderr, "round %" PRIu64 " not durable after its outer unlock\n", r);
            _exit(4);
        }
        ack(r);
    }
    t1_done = 1;
    return NULL;
}

static void *loop_t2(void *arg) {
    (void)arg;
    for (uint64_t r = first_round; r <= last_round; r++) {
        pthread_mutex_lock(&m2);
        while (s->ready != r) {
            pthread_cond_wait(&c2, &m2);
        }
        s->y = s->x;
        s->flag = r;
        pthread_cond_signal(&c);
        pthread_mutex_unlock(&m2);
    }
    return NULL;
}

static void *bystander(void *arg) {
    (void)arg;
    while (!t1_done) {
        pthread_mutex_lock(&m3);
        s->others_a += 1;
        s->others_b += 1;
        pthread_mutex_unlock(&m3);
        usleep(200);
    }
    return NULL;
}

/* One Fig. 3 pair of the `pairs` mode, on its own mutexes, condition variables and words. */
struct pair {
    pthread_mutex_t outer, inner;
    pthread_cond_t wake_t1, wake_t2;
    uint64_t *x, *y, *flag, *ready, *round;
    uint64_t rounds;
    volatile int t1_done;
};

static struct pair pairs[2] = {
    {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
     PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, 0, 0},
    {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
     PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, 0, 0},
};

static void must_be_durable(const char *who, uint64_t r) {
    if (nvt_durable_epoch() < nvt_section_epoch()) {
        fprintf(stderr, "%s: round %" PRIu64 " not durable after its unlock\n", who, r);
        _exit(4);
    }
}

static void *pair_t1(void *arg) {
    struct pair *p = arg;
    for (uint64_t r = 1; r <= p->rounds; r++) {
        pthread_mutex_lock(&p->outer);
        pthread_mutex_lock(&p->inner);
        *p->x = r;
        *p->ready = r;
        pthread_cond_signal(&p->wake_t2);
        while (*p->flag != r) {
            pthread_cond_wait(&p->wake_t1, &p->inner);
        }
        pthread_mutex_unlock(&p->inner);
        *p->round = r;
        pthread_mutex_unlock(&p->outer);
        must_be_durable("T1", r);
    }
    p->t1_done = 1;
    return NULL;
}

static void *pair_t2(void *arg) {
    struct pair *p = arg;
    for (uint64_t r = 1; r <= p->rounds; r++) {
        pthread_mutex_lock(&p->inner);
        while (*p->ready != r) {
            pthread_cond_wait(&p->wake_t2, &p->inner);
        }
        *p->y = *p->x;
        *p->flag = r;
        pthread_cond_signal(&p->wake_t1);
        pthread_mutex_unlock(&p->inner);
        /* Depends on T1's open section: durable once T1 ends round r. */
        double deadline = 0;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        deadline = (double)now.tv_sec + 10.0;
        while (nvt_durable_epoch() < nvt_section_epoch()) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((double)now.tv_sec > deadline) {
                fprintf(stderr, "T2: round %" PRIu64 " not durable 10 s after T1's end\n", r);
                _exit(5);
            }
            usleep(100);
        }
    }
    return NULL;
}

static void *pairs_bystander(void *arg) {
    (void)arg;
    uint64_t n = 0;
    while (!pairs[0].t1_done || !pairs[1].t1_done) {
        pthread_mutex_lock(&m3);
        s->others_a += 1;
        s->others_b += 1;
        pthread_mutex_unlock(&m3);
        must_be_durable("bystander", ++n);
    }
    return NULL;
}

static int pairs_main(uint64_t rounds) {
    uint64_t *words = nvmalloc(2 * 5 * sizeof(uint64_t) + 8192, "pairs");
    s = nvmalloc(sizeof *s, "xy");
    if (words == NULL || s == NULL) {
        return 1;
    }
    for (int i = 0; i < 2; i++) {
        uint64_t *w = words + i * (4096 / sizeof(uint64_t));
        pairs[i].x = w;
        pairs[i].y = w + 1;
        pairs[i].flag = w + 2;
        pairs[i].ready = w + 3;
        pairs[i].round = w + 4;
        pairs[i].rounds = rounds;
        *pairs[i].x = *pairs[i].y = *pairs[i].flag = *pairs[i].ready = *pairs[i].round = 0;
    }
    pthread_t threads[5];
    for (int i = 0; i < 2; i++) {
        pthread_create(&threads[2 * i], NULL, pair_t1, &pairs[i]);
        pthread_create(&threads[2 * i + 1], NULL, pair_t2, &pairs[i]);
    }
    pthread_create(&threads[4], NULL, pairs_bystander, NULL);
    for (int i = 0; i < 5; i++) {
        pthread_join(threads[i], NULL);
    }
    for (int i = 0; i < 2; i++) {
        if (*pairs[i].round != rounds || *pairs[i].y != rounds) {
            fprintf(stderr, "pair %d ended at round %" PRIu64 "\n", i, *pairs[i].round);
            return 1;
        }
    }
    printf("PAIRS ok\n");
    return 0;
}

static int loop_main(int argc, char **argv) {
    if (argc < 3) {
        return 2;
    }
    uint64_t rounds = strtoull(argv[2], NULL, 10);
    const char *fd = getenv("ACK_FD");
    if (fd != NULL) {
        ack_fd = atoi(fd);
    }
    int was_crashed = crashed();
    s = nvmalloc(sizeof *s, "xy");
    if (s == NULL) {
        return 1;
    }
    uint64_t r = s->round;
    int ok = s->x == r && s->y == r && s->flag == r && s->ready == r && s->others_a == s->others_b;
    printf("STATE run=%" PRIu64 " seq=%" PRIu64 " crashed=%d ok=%d x=%" PRIu64 " y=%" PRIu64
           " flag=%" PRIu64 " ready=%" PRIu64 "\n",
           s->run, r, was_crashed, ok, s->x, s->y, s->flag, s->ready);
    fflush(stdout);
    if (!ok || (argc > 3 && strcmp(argv[3], "check") == 0)) {
        return ok ? 0 : 1;
    }
    pthread_mutex_lock(&m1);
    s->run += 1;
    pthread_mutex_unlock(&m1);
    first_round = r + 1;
    last_round = r + rounds;
    pthread_t a, b, other;
    pthread_create(&a, NULL, loop_t1, NULL);
    pthread_create(&b, NULL, loop_t2, NULL);
    pthread_create(&other, NULL, bystander, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_join(other, NULL);
    printf("DONE seq=%" PRIu64 "\n", s->round);
    printf("RESULT round=%" PRIu64 " x=%" PRIu64 " y=%" PRIu64 "\n", s->round, s->x, s->y);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        return 2;
    }
    if (strcmp(argv[1], "loop") == 0) {
        return loop_main(argc, argv);
    }
    if (strcmp(argv[1], "pairs") == 0) {
        return argc < 3 ? 2 : pairs_main(strtoull(argv[2], NULL, 10));
    }
    s = nvmalloc(sizeof *s, "xy");
    if (s == NULL) {
        return 1;
    }
    if (strcmp(argv[1], "check") == 0) {
        printf("XY x=%" PRIu64 " y=%" PRIu64 " flag=%" PRIu64 " busy=%" PRIu64 " ready=%" PRIu64
               " crashed=%d\n",
               s->x, s->y, s->flag, s->busy, s->ready, crashed());
        return 0;
    }
    crash_mode = strcmp(argv[1], "crash") == 0;
    pthread_t a, b;
    pthread_create(&a, NULL, t1, NULL);
    pthread_create(&b, NULL, t2, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("DONE epoch=%" PRIu64 "\n", nvt_durable_epoch());
    printf("RESULT x=%" PRIu64 " y=%" PRIu64 " flag=%" PRIu64 " busy=%" PRIu64 "\n", s->x, s->y,
           s->flag, s->busy);
    return 0;
}
