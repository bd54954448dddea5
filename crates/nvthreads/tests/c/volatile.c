/*
 * Volatile shared memory used as a pthreads program uses it (data-race free):
 *   - main produces items into a malloc'd ring (a work queue under one mutex and two
 *     condition variables); WORKERS threads consume them;
 *   - each worker writes its items' results into a malloc'd array outside any lock (each
 *     slot written by exactly one worker; main reads them after join) and adds them to a
 *     global array of sums under striped mutexes;
 *   - every worker counts its items with an atomic add on a counter in the malloc'd queue
 *     (C11 atomics on shared memory work across thread-processes only if it is written in
 *     place: merged copies would lose increments);
 *   - each worker fills a buffer it malloc'd with readv(2) — a system call the runtime does
 *     not wrap, so the kernel writes the memory itself — and checks the bytes.
 * Prints "RESULT items=… digest=… sums=…", "ATOMIC n" and "READV ok" or "READV failed errno=N".
 * Usage: volatile WORKERS ITEMS FILE (FILE: a scratch file it writes first)
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_WORKERS 16
#define RING 64
#define STRIPES 8
#define BUFFER (64 * 1024)

struct queue {
    pthread_mutex_t lock;
    pthread_cond_t nonempty;
    pthread_cond_t nonfull;
    long items[RING];
    long head;
    long count;
    int done;
    atomic_long taken;
};

static struct queue *queue;
static uint64_t *results;
static uint64_t sums[STRIPES];
static pthread_mutex_t stripes[STRIPES];
static pthread_mutex_t readv_lock = PTHREAD_MUTEX_INITIALIZER;
static int readv_errno;
static int readv_mismatch;
static const char *scratch;

static uint64_t work(long item) {
    uint64_t x = (uint64_t)item * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < 16; i++) {
        x ^= x >> 29;
        x *= 0xbf58476d1ce4e5b9ull;
    }
    return x;
}

static char pattern_byte(long i) {
    return (char)('A' + i % 26);
}

/* readv into freshly malloc'd memory: the kernel writes it. */
static void read_into_malloc(void) {
    char *buffer = malloc(BUFFER);
    int fd = open(scratch, O_RDONLY);
    struct iovec iov[2] = {{buffer, BUFFER / 2}, {buffer + BUFFER / 2, BUFFER / 2}};
    ssize_t got = fd < 0 ? -1 : readv(fd, iov, 2);
    int error = got < 0 ? errno : 0;
    int mismatch = 0;
    for (long i = 0; got == BUFFER && i < BUFFER; i++) {
        mismatch |= buffer[i] != pattern_byte(i);
    }
    if (fd >= 0) {
        close(fd);
    }
    free(buffer);
    pthread_mutex_lock(&readv_lock);
    if (error != 0) {
        readv_errno = error;
    } else if (got != BUFFER || mismatch) {
        readv_mismatch = 1;
    }
    pthread_mutex_unlock(&readv_lock);
}

static long take(void) {
    pthread_mutex_lock(&queue->lock);
    while (queue->count == 0 && !queue->done) {
        pthread_cond_wait(&queue->nonempty, &queue->lock);
    }
    long item = -1;
    if (queue->count > 0) {
        item = queue->items[queue->head];
        queue->head = (queue->head + 1) % RING;
        queue->count--;
        pthread_cond_signal(&queue->nonfull);
    }
    pthread_mutex_unlock(&queue->lock);
    return item;
}

static void put(long item) {
    pthread_mutex_lock(&queue->lock);
    while (queue->count == RING) {
        pthread_cond_wait(&queue->nonfull, &queue->lock);
    }
    queue->items[(queue->head + queue->count) % RING] = item;
    queue->count++;
    pthread_cond_signal(&queue->nonempty);
    pthread_mutex_unlock(&queue->lock);
}

static void *worker(void *arg) {
    (void)arg;
    read_into_malloc();
    for (long item = take(); item >= 0; item = take()) {
        atomic_fetch_add(&queue->taken, 1);
        uint64_t value = work(item);
        results[item] = value;
        pthread_mutex_lock(&stripes[item % STRIPES]);
        sums[item % STRIPES] += value;
        pthread_mutex_unlock(&stripes[item % STRIPES]);
    }
    return NULL;
}

static int write_scratch(void) {
    int fd = open(scratch, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        return 0;
    }
    static char bytes[BUFFER];
    for (long i = 0; i < BUFFER; i++) {
        bytes[i] = pattern_byte(i);
    }
    int ok = write(fd, bytes, BUFFER) == BUFFER;
    close(fd);
    return ok;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: volatile WORKERS ITEMS FILE\n");
        return 2;
    }
    int workers = atoi(argv[1]);
    long items = atol(argv[2]);
    scratch = argv[3];
    if (workers < 1 || workers > MAX_WORKERS || items < 1 || !write_scratch()) {
        return 2;
    }
    queue = calloc(1, sizeof *queue);
    results = malloc((size_t)items * sizeof *results);
    pthread_mutex_init(&queue->lock, NULL);
    pthread_cond_init(&queue->nonempty, NULL);
    pthread_cond_init(&queue->nonfull, NULL);
    for (int i = 0; i < STRIPES; i++) {
        pthread_mutex_init(&stripes[i], NULL);
    }
    pthread_t threads[MAX_WORKERS];
    for (int i = 0; i < workers; i++) {
        pthread_create(&threads[i], NULL, worker, NULL);
    }
    for (long item = 0; item < items; item++) {
        put(item);
    }
    pthread_mutex_lock(&queue->lock);
    queue->done = 1;
    pthread_cond_broadcast(&queue->nonempty);
    pthread_mutex_unlock(&queue->lock);
    for (int i = 0; i < workers; i++) {
        pthread_join(threads[i], NULL);
    }
    uint64_t digest = 0;
    int wrong = 0;
    for (long item = 0; item < items; item++) {
        wrong |= results[item] != work(item);
        digest = digest * 31 + results[item];
    }
    uint64_t total = 0;
    for (int i = 0; i < STRIPES; i++) {
        total += sums[i];
    }
    printf("RESULT items=%ld digest=%016llx sums=%016llx wrong=%d\n", items,
           (unsigned long long)digest, (unsigned long long)total, wrong);
    printf("ATOMIC %ld\n", atomic_load(&queue->taken));
    if (readv_errno != 0) {
        printf("READV failed errno=%d\n", readv_errno);
    } else {
        printf("READV %s\n", readv_mismatch ? "mismatch" : "ok");
    }
    free(results);
    free(queue);
    return 0;
}
