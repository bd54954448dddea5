/*
 * Globals shared between threads (not persistent): a counter in .bss incremented under a
 * lock, a results array in .bss written by each thread outside any lock and read by main
 * after join, an initialised value in .data, and a string written by one thread and read by
 * another under the lock. Prints "GLOBALS ok" or the first mismatch.
 * Usage: globals THREADS ITERS
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvthreads.h"

#define MAX_THREADS 8

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long counter;
static long results[MAX_THREADS];
static int base = 7;
static char message[64];
static int iters;

static void *worker(void *arg) {
    long t = (long)arg;
    for (int i = 0; i < iters; i++) {
        pthread_mutex_lock(&m);
        counter++;
        if (t == 0 && i == 0) {
            strcpy(message, "hello from thread 0");
        }
        pthread_mutex_unlock(&m);
    }
    results[t] = t * 100 + base;
    return NULL;
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
    base = 9; /* before any thread: every thread sees it */
    pthread_t handles[MAX_THREADS];
    for (long t = 0; t < threads; t++) {
        pthread_create(&handles[t], NULL, worker, (void *)t);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(handles[t], NULL);
    }
    if (counter != (long)threads * iters) {
        printf("GLOBALS counter %ld, expected %ld\n", counter, (long)threads * iters);
        return 1;
    }
    for (long t = 0; t < threads; t++) {
        if (results[t] != t * 100 + 9) {
            printf("GLOBALS results[%ld] = %ld\n", t, results[t]);
            return 1;
        }
    }
    pthread_mutex_lock(&m);
    int same = strcmp(message, "hello from thread 0") == 0;
    pthread_mutex_unlock(&m);
    if (!same) {
        printf("GLOBALS message \"%s\"\n", message);
        return 1;
    }
    printf("GLOBALS ok\n");
    return 0;
}
