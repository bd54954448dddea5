/*
 * The condition-variable dependence case (NVthreads paper, Fig. 3):
 *   T1: lock m1; lock m2; x = 42; while (!flag) cond_wait(c, m2); unlock m2; ... unlock m1
 *   T2: lock m2; y = x; flag = 1; signal c; unlock m2
 * T2's section observed T1's open section (x = 42), so it may become durable only with it.
 * Usage: condvar crash   -> T1 kills the process group before unlocking m1
 *        condvar commit  -> T1 unlocks m1; both sections become durable
 *        condvar check   -> prints the recovered "XY x=.. y=.. flag=.. busy=.." and exits
 * Also records whether T2's pthread_mutex_trylock(m1) saw EBUSY while T1 held m1.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nvthreads.h"

struct shared {
    uint64_t x;
    uint64_t y;
    uint64_t flag;
    uint64_t busy;
    uint64_t ready; /* set by T1 inside its open section, just before it waits */
};

static struct shared *s;
static pthread_mutex_t m1 = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t m2 = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int crash_mode;

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

int main(int argc, char **argv) {
    if (argc < 2) {
        return 2;
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
    return 0;
}
