/*
 * Kernel writes into tracked memory: after a synchronisation point (so the pages are
 * write-protected again), read(2), pread(2) and a large fread(3) fill a global buffer and a
 * persistent one. Without the runtime's wrappers these would fail with EFAULT.
 * Prints "KERNELIO ok". Usage: kernelio FILE (a scratch file it writes first)
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nvthreads.h"

#define SIZE 20000

static char global_buf[SIZE];
static char pattern[SIZE];
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

static void sync_point(void) {
    pthread_mutex_lock(&m);
    pthread_mutex_unlock(&m);
}

static int check(const char *what, const char *buf) {
    if (memcmp(buf, pattern, SIZE) != 0) {
        printf("KERNELIO %s mismatch\n", what);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        return 2;
    }
    for (int i = 0; i < SIZE; i++) {
        pattern[i] = (char)('a' + i % 23);
    }
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, pattern, SIZE) != SIZE) {
        return 1;
    }
    char *heap_buf = nvmalloc(SIZE, "buffer");
    memset(global_buf, 0, SIZE);
    memset(heap_buf, 0, SIZE);
    sync_point();
    lseek(fd, 0, SEEK_SET);
    if (read(fd, global_buf, SIZE) != SIZE || !check("read global", global_buf)) {
        return 1;
    }
    sync_point();
    if (pread(fd, heap_buf, SIZE, 0) != SIZE || !check("pread heap", heap_buf)) {
        return 1;
    }
    memset(global_buf, 0, SIZE);
    sync_point();
    FILE *f = fdopen(fd, "r");
    rewind(f);
    if (f == NULL || fread(global_buf, 1, SIZE, f) != SIZE || !check("fread global", global_buf)) {
        return 1;
    }
    printf("KERNELIO ok\n");
    return 0;
}
