/*
 * NVthreads threads writing files through PMFS's preload (crates/pmfs-preload), both
 * libraries in LD_PRELOAD (docs/nvthreads.md §9, "PMFS's preload"). Usage:
 *   pmfs_threads PREFIX THREADS WRITES [main-first]
 * With main-first, main writes PREFIX/main before it makes the threads (the preload opens
 * the pool in main); without, the threads are the first to use the pool. Each thread creates PREFIX/fileN and writes WRITES lines of its own to it, one write
 * call each, opening and closing the file around every 16th; then main reads every file
 * back and checks its lines. Prints "pmfs_threads ok", or what went wrong; a hang is
 * ended by alarm(20) (killed by SIGALRM).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *prefix;
static int writes;

static void *writer(void *arg) {
    long id = (long)arg;
    char path[256], line[64];
    snprintf(path, sizeof path, "%s/file%ld", prefix, id);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0)
        return (void *)1;
    for (int k = 0; k < writes; k++) {
        int n = snprintf(line, sizeof line, "thread %ld line %d\n", id, k);
        if (write(fd, line, n) != n)
            return (void *)2;
        if (k % 16 == 15) {
            if (close(fd) != 0)
                return (void *)3;
            fd = open(path, O_WRONLY | O_APPEND);
            if (fd < 0)
                return (void *)4;
        }
    }
    return close(fd) == 0 ? NULL : (void *)5;
}

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "main-first") == 0)) {
        fprintf(stderr, "usage: pmfs_threads PREFIX THREADS WRITES [main-first]\n");
        return 2;
    }
    alarm(20);
    prefix = argv[1];
    int threads = atoi(argv[2]);
    writes = atoi(argv[3]);
    pthread_t handles[64];
    if (threads < 1 || threads > 64 || writes < 1)
        return 2;
    if (argc == 5) {
        char path[256];
        snprintf(path, sizeof path, "%s/main", prefix);
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0 || write(fd, "main\n", 5) != 5 || close(fd) != 0) {
            printf("pmfs_threads FAILED: main's file\n");
            return 1;
        }
    }
    for (long i = 0; i < threads; i++)
        pthread_create(&handles[i], NULL, writer, (void *)i);
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        void *result;
        pthread_join(handles[i], &result);
        if (result != NULL) {
            printf("pmfs_threads FAILED: thread %d: step %ld\n", i, (long)result);
            failed = 1;
        }
    }
    for (long i = 0; i < threads && !failed; i++) {
        char path[256], want[64], got[64];
        snprintf(path, sizeof path, "%s/file%ld", prefix, i);
        FILE *file = fopen(path, "r");
        if (file == NULL) {
            printf("pmfs_threads FAILED: %s missing\n", path);
            return 1;
        }
        for (int k = 0; k < writes; k++) {
            snprintf(want, sizeof want, "thread %ld line %d\n", i, k);
            if (fgets(got, sizeof got, file) == NULL || strcmp(got, want) != 0) {
                printf("pmfs_threads FAILED: %s line %d\n", path, k);
                return 1;
            }
        }
        fclose(file);
    }
    if (failed)
        return 1;
    printf("pmfs_threads ok\n");
    return 0;
}
