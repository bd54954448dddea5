/*
 * The malloc family shared between threads (an unmodified pthreads program):
 *   - an array malloc'd by main before the threads, filled by the threads outside any lock
 *     and read by main after join;
 *   - a list of malloc'd nodes appended under a lock by every thread and walked by main;
 *   - blocks malloc'd by one thread and freed by another (handed over under a lock);
 *   - realloc growing a shared buffer, calloc'd memory reading as zero after reuse,
 *     posix_memalign / aligned_alloc / memalign alignment, strdup'd strings;
 *   - stdio inside threads (fopen + fgets + fclose: libc's own buffers, filled by the
 *     kernel) after synchronisation points;
 *   - a mutex inside each malloc'd node, initialised and destroyed many more times than the
 *     runtime has mutex slots;
 *   - churn: blocks written and freed within one interval while other threads are handed
 *     the same blocks, and blocks that must keep their contents across synchronisation
 *     points meanwhile (a freed block's late merge, or a stale copy of a reused block's
 *     page, would overwrite them).
 * Prints "MALLOC ok" or the first mismatch. Usage: malloc THREADS ITERS SCRATCH_FILE
 */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_THREADS 8
#define ARRAY 100000

struct node {
    struct node *next;
    pthread_mutex_t lock;
    long value;
    char *label;
};

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long *array;
static struct node *head;
static long nodes;
static void *handoff[64];
static int handoff_count;
static char *buffer;
static size_t buffer_len;
static int threads, iters;
static const char *scratch;
static int failures;

static void fail(const char *what) {
    pthread_mutex_lock(&m);
    if (failures++ == 0) {
        printf("MALLOC %s\n", what);
    }
    pthread_mutex_unlock(&m);
}

static void check_alignment(void) {
    void *p = NULL;
    if (posix_memalign(&p, 256, 1000) != 0 || ((uintptr_t)p & 255) != 0) {
        fail("posix_memalign");
    }
    free(p);
    p = aligned_alloc(4096, 8192);
    if (p == NULL || ((uintptr_t)p & 4095) != 0) {
        fail("aligned_alloc");
    }
    free(p);
    p = memalign(128 * 1024, 10);
    if (p == NULL || ((uintptr_t)p & (128 * 1024 - 1)) != 0) {
        fail("memalign");
    }
    free(p);
}

static void check_calloc(void) {
    for (int round = 0; round < 4; round++) {
        unsigned char *dirty = malloc(3000);
        memset(dirty, 0xa5, 3000);
        free(dirty);
        unsigned char *zero = calloc(1, 3000);
        for (int i = 0; i < 3000; i++) {
            if (zero[i] != 0) {
                fail("calloc returned dirty memory");
                break;
            }
        }
        free(zero);
    }
    volatile size_t huge = (size_t)-1;
    if (calloc(huge, 16) != NULL) {
        fail("calloc overflow not refused");
    }
}

static void check_stdio(long t) {
    FILE *f = fopen(scratch, "r");
    if (f == NULL) {
        fail("fopen");
        return;
    }
    char line[128];
    long count = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "line ", 5) != 0) {
            fail("fgets content");
            break;
        }
        count++;
    }
    fclose(f);
    if (count != 1000) {
        fail("fgets count");
    }
    (void)t;
}

static void churn(long t) {
    for (int i = 0; i < 400; i++) {
        unsigned char *scratch = malloc(48);
        memset(scratch, (int)(0x40 + t), 48);
        free(scratch);
        long *kept = malloc(48);
        for (int k = 0; k < 6; k++) {
            kept[k] = t * 1000003 + i * 7 + k;
        }
        pthread_mutex_lock(&m);
        pthread_mutex_unlock(&m);
        for (int k = 0; k < 6; k++) {
            if (kept[k] != t * 1000003 + i * 7 + k) {
                fail("a block lost its contents across a synchronisation point");
                break;
            }
        }
        free(kept);
    }
}

static void *worker(void *arg) {
    long t = (long)arg;
    long per = ARRAY / threads;
    for (long i = t * per; i < (t + 1) * per; i++) {
        array[i] = i * 3 + 1;
    }
    check_alignment();
    check_calloc();
    churn(t);
    for (int i = 0; i < iters; i++) {
        struct node *n = malloc(sizeof *n);
        pthread_mutex_init(&n->lock, NULL);
        n->value = t * 1000000 + i;
        char label[32];
        snprintf(label, sizeof label, "t%ld-%d", t, i);
        n->label = strdup(label);
        pthread_mutex_lock(&m);
        n->next = head;
        head = n;
        nodes++;
        /* hand a block to whoever comes next, and free the one handed to us */
        if (handoff_count > 0 && (i & 1)) {
            void *theirs = handoff[--handoff_count];
            pthread_mutex_unlock(&m);
            if (((long *)theirs)[0] != 0x5eed) {
                fail("handed-over block content");
            }
            free(theirs);
        } else {
            long *mine = malloc(200 + (size_t)i);
            mine[0] = 0x5eed;
            if (handoff_count < 64) {
                handoff[handoff_count++] = mine;
                pthread_mutex_unlock(&m);
            } else {
                pthread_mutex_unlock(&m);
                free(mine);
            }
        }
        pthread_mutex_lock(&m);
        size_t at = buffer_len;
        buffer_len += 8;
        buffer = realloc(buffer, buffer_len);
        memcpy(buffer + at, &n->value, 8);
        pthread_mutex_unlock(&m);
    }
    /* an unlocked sync point, then libc's own stdio buffers */
    pthread_mutex_lock(&m);
    pthread_mutex_unlock(&m);
    check_stdio(t);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        return 2;
    }
    threads = atoi(argv[1]);
    iters = atoi(argv[2]);
    scratch = argv[3];
    if (threads < 1 || threads > MAX_THREADS) {
        return 2;
    }
    FILE *f = fopen(scratch, "w");
    for (int i = 0; i < 1000; i++) {
        fprintf(f, "line %d\n", i);
    }
    fclose(f);
    array = malloc(ARRAY * sizeof *array);
    memset(array, 0, ARRAY * sizeof *array);
    pthread_t handles[MAX_THREADS];
    for (long t = 0; t < threads; t++) {
        pthread_create(&handles[t], NULL, worker, (void *)t);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(handles[t], NULL);
    }
    long per = ARRAY / threads;
    for (long i = 0; i < per * threads; i++) {
        if (array[i] != i * 3 + 1) {
            fail("array written by the threads");
            break;
        }
    }
    long walked = 0, sum = 0, expected_sum = 0;
    for (struct node *n = head; n != NULL;) {
        char label[32];
        snprintf(label, sizeof label, "t%ld-%ld", n->value / 1000000, n->value % 1000000);
        if (strcmp(label, n->label) != 0) {
            fail("strdup'd label");
            break;
        }
        pthread_mutex_lock(&n->lock);
        pthread_mutex_unlock(&n->lock);
        pthread_mutex_destroy(&n->lock);
        walked++;
        sum += n->value;
        struct node *next = n->next;
        free(n->label);
        free(n);
        n = next;
    }
    for (long t = 0; t < threads; t++) {
        for (long i = 0; i < iters; i++) {
            expected_sum += t * 1000000 + i;
        }
    }
    if (walked != nodes || walked != (long)threads * iters || sum != expected_sum) {
        fail("list of malloc'd nodes");
    }
    long buffer_sum = 0;
    for (size_t at = 0; at < buffer_len; at += 8) {
        long v;
        memcpy(&v, buffer + at, 8);
        buffer_sum += v;
    }
    if (buffer_len != (size_t)threads * iters * 8 || buffer_sum != expected_sum) {
        fail("realloc'd buffer");
    }
    free(buffer);
    for (int i = 0; i < handoff_count; i++) {
        free(handoff[i]);
    }
    free(array);
    /* More init/destroy cycles than the runtime has mutex slots: destroy frees them. */
    for (long i = 0; i < 70000; i++) {
        pthread_mutex_t *lock = malloc(sizeof *lock);
        if (pthread_mutex_init(lock, NULL) != 0 || pthread_mutex_lock(lock) != 0 ||
            pthread_mutex_unlock(lock) != 0 || pthread_mutex_destroy(lock) != 0) {
            fail("mutex init/destroy cycle");
            break;
        }
        free(lock);
    }
    if (failures == 0) {
        printf("MALLOC ok\n");
    }
    return failures != 0;
}
