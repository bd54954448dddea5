/*
 * Destroying a condition variable or a barrier right after it woke its waiters, as POSIX
 * allows ("a condition variable can be destroyed immediately after all the threads that are
 * blocked on it are awakened"): the woken threads may not have run yet when the object goes,
 * and they must still return. 200 rounds, each on a fresh object (the first generation of
 * its slot, where a reset sequence used to fall back to the value the waiters slept on):
 *
 *   cond     two threads wait for a flag; main sets it, broadcasts, unlocks and destroys the
 *            condition variable at once, then joins them.
 *   barrier  three threads and main meet at a barrier of four; main destroys it as soon as
 *            its own wait returns, then joins them.
 *
 * Prints "<mode> ok"; a waiter that never returns hangs the program (the test's timeout).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROUNDS 200

typedef struct {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int flag;
} event_t;

static event_t *event;
static pthread_barrier_t *barrier;

static void pause_briefly(void) {
    struct timespec moment = {0, 500000};
    nanosleep(&moment, NULL);
}

static void *cond_waiter(void *arg) {
    (void)arg;
    event_t *e = event;
    pthread_mutex_lock(&e->mutex);
    while (!e->flag)
        pthread_cond_wait(&e->cond, &e->mutex);
    pthread_mutex_unlock(&e->mutex);
    return NULL;
}

static void cond_mode(void) {
    for (int round = 0; round < ROUNDS; round++) {
        event = calloc(1, sizeof *event);
        pthread_mutex_init(&event->mutex, NULL);
        pthread_cond_init(&event->cond, NULL);
        pthread_t waiters[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&waiters[i], NULL, cond_waiter, NULL);
        pause_briefly();
        pthread_mutex_lock(&event->mutex);
        event->flag = 1;
        pthread_cond_broadcast(&event->cond);
        pthread_mutex_unlock(&event->mutex);
        pthread_cond_destroy(&event->cond);
        for (int i = 0; i < 2; i++)
            pthread_join(waiters[i], NULL);
        pthread_mutex_destroy(&event->mutex);
        free(event);
    }
}

static void *barrier_waiter(void *arg) {
    (void)arg;
    pthread_barrier_wait(barrier);
    return NULL;
}

static void barrier_mode(void) {
    for (int round = 0; round < ROUNDS; round++) {
        barrier = malloc(sizeof *barrier);
        pthread_barrier_init(barrier, NULL, 4);
        pthread_t waiters[3];
        for (int i = 0; i < 3; i++)
            pthread_create(&waiters[i], NULL, barrier_waiter, NULL);
        pause_briefly();
        pthread_barrier_wait(barrier);
        pthread_barrier_destroy(barrier);
        for (int i = 0; i < 3; i++)
            pthread_join(waiters[i], NULL);
        free(barrier);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "cond") == 0)
        cond_mode();
    else if (strcmp(mode, "barrier") == 0)
        barrier_mode();
    else {
        fprintf(stderr, "usage: destroy cond|barrier\n");
        return 2;
    }
    printf("%s ok\n", mode);
    return 0;
}
