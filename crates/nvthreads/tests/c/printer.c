/*
 * printer: T threads each print N lines with printf to standard output, which the test
 * reads through a pipe. Every line must come out whole: "P <thread> <line> <payload>"
 * with the payload intact (under glibc, threads share one stdio buffer and lines never
 * tear; thread-processes must not tear them either).
 * Usage: printer THREADS LINES
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int lines;

static void *print(void *arg) {
    long t = (long)arg;
    for (int i = 0; i < lines; i++) {
        printf("P %ld %d abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz\n", t, i);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        return 2;
    }
    int threads = atoi(argv[1]);
    lines = atoi(argv[2]);
    pthread_t handles[64];
    if (threads < 1 || threads > 64) {
        return 2;
    }
    for (long t = 0; t < threads; t++) {
        pthread_create(&handles[t], NULL, print, (void *)t);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(handles[t], NULL);
    }
    return 0;
}
