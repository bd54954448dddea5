/*
 * Read-write locks as pthreads define them: readers share the lock, a writer holds it alone.
 * Each mode prints "MODE ok" or its first failure; every mode also passes on plain pthreads
 * (NVT_DISABLE=1), which is how the test itself is checked.
 *   shared        two threads hold the read lock at the same time (each waits, up to 2 s,
 *                 for the other to be inside too); meanwhile main's trywrlock is EBUSY, its
 *                 timedwrlock and clockwrlock (CLOCK_MONOTONIC) time out, its tryrdlock,
 *                 timedrdlock and clockrdlock succeed at once; after they leave, a writer
 *                 gets it
 *   kinds         read locks are recursive; a writer asking again gets EDEADLK and its
 *                 trylock EBUSY; with PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP (by
 *                 attribute and by static initialiser) a new reader waits while a writer
 *                 waits (tryrdlock EBUSY), with the default kind it enters
 *   persistent    a writer's update of a persistent pair under the write lock is seen whole
 *                 by readers under the read lock, who also write (each to its own
 *                 persistent slot) under it; the totals are checked at the end
 * Usage: rwlock MODE
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nvthreads.h"

static const char *mode;
static int failed;

static void fail(const char *what, long value) {
    if (!failed) {
        printf("%s %s (%ld)\n", mode, what, value);
        fflush(stdout);
    }
    failed = 1;
}

static struct timespec in_ms(clockid_t clock, long ms) {
    struct timespec at;
    clock_gettime(clock, &at);
    at.tv_sec += ms / 1000;
    at.tv_nsec += (ms % 1000) * 1000000L;
    if (at.tv_nsec >= 1000000000L) {
        at.tv_sec += 1;
        at.tv_nsec -= 1000000000L;
    }
    return at;
}

/* Globals are shared between threads and written in place: atomics work across them. */
static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static int inside;     /* readers inside the read lock */
static int leave;      /* main tells the readers to leave */
static int both_seen;  /* readers that saw the other inside */

static void *reader(void *arg) {
    (void)arg;
    int rc = pthread_rwlock_rdlock(&lock);
    if (rc != 0) {
        fail("rdlock", rc);
        return NULL;
    }
    __atomic_add_fetch(&inside, 1, __ATOMIC_SEQ_CST);
    for (int i = 0; i < 2000 && __atomic_load_n(&inside, __ATOMIC_SEQ_CST) < 2; i++) {
        usleep(1000);
    }
    if (__atomic_load_n(&inside, __ATOMIC_SEQ_CST) >= 2) {
        __atomic_add_fetch(&both_seen, 1, __ATOMIC_SEQ_CST);
    }
    for (int i = 0; i < 5000 && !__atomic_load_n(&leave, __ATOMIC_SEQ_CST); i++) {
        usleep(1000);
    }
    pthread_rwlock_unlock(&lock);
    return NULL;
}

static void shared_mode(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        pthread_create(&t[i], NULL, reader, NULL);
    }
    for (int i = 0; i < 3000 && __atomic_load_n(&both_seen, __ATOMIC_SEQ_CST) < 2; i++) {
        usleep(1000);
    }
    if (__atomic_load_n(&both_seen, __ATOMIC_SEQ_CST) != 2) {
        fail("readers did not hold the lock together", __atomic_load_n(&both_seen, __ATOMIC_SEQ_CST));
    }
    if (__atomic_load_n(&inside, __ATOMIC_SEQ_CST) == 2) {
        int rc = pthread_rwlock_trywrlock(&lock);
        if (rc != EBUSY) {
            fail("trywrlock while read-locked", rc);
        }
        struct timespec at = in_ms(CLOCK_REALTIME, 50);
        rc = pthread_rwlock_timedwrlock(&lock, &at);
        if (rc != ETIMEDOUT) {
            fail("timedwrlock while read-locked", rc);
        }
        at = in_ms(CLOCK_MONOTONIC, 50);
        rc = pthread_rwlock_clockwrlock(&lock, CLOCK_MONOTONIC, &at);
        if (rc != ETIMEDOUT) {
            fail("clockwrlock while read-locked", rc);
        }
        rc = pthread_rwlock_tryrdlock(&lock);
        if (rc != 0) {
            fail("tryrdlock while read-locked", rc);
        } else {
            pthread_rwlock_unlock(&lock);
        }
        at = in_ms(CLOCK_REALTIME, 50);
        rc = pthread_rwlock_timedrdlock(&lock, &at);
        if (rc != 0) {
            fail("timedrdlock while read-locked", rc);
        } else {
            pthread_rwlock_unlock(&lock);
        }
        at = in_ms(CLOCK_MONOTONIC, 50);
        rc = pthread_rwlock_clockrdlock(&lock, CLOCK_MONOTONIC, &at);
        if (rc != 0) {
            fail("clockrdlock while read-locked", rc);
        } else {
            pthread_rwlock_unlock(&lock);
        }
    }
    __atomic_store_n(&leave, 1, __ATOMIC_SEQ_CST);
    struct timespec at = in_ms(CLOCK_REALTIME, 5000);
    int rc = pthread_rwlock_timedwrlock(&lock, &at);
    if (rc != 0) {
        fail("timedwrlock after the readers left", rc);
    } else {
        pthread_rwlock_unlock(&lock);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
    }
}

static pthread_rwlock_t static_writer = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static pthread_rwlock_t *contended;
static int writer_in;

static void *writer(void *arg) {
    (void)arg;
    int rc = pthread_rwlock_wrlock(contended);
    if (rc != 0) {
        fail("waiting writer's wrlock", rc);
        return NULL;
    }
    __atomic_store_n(&writer_in, 1, __ATOMIC_SEQ_CST);
    pthread_rwlock_unlock(contended);
    return NULL;
}

/* main holds `l` for reading; a thread waits to write; a new reader (another thread: main
 * holds a read lock already) tries to read. Returns tryrdlock's result. */
static int reader_while_writer_waits(pthread_rwlock_t *l);

static int try_result;
static void *try_reader(void *arg) {
    pthread_rwlock_t *l = arg;
    try_result = pthread_rwlock_tryrdlock(l);
    if (try_result == 0) {
        pthread_rwlock_unlock(l);
    }
    return NULL;
}

static int reader_while_writer_waits(pthread_rwlock_t *l) {
    contended = l;
    __atomic_store_n(&writer_in, 0, __ATOMIC_SEQ_CST);
    pthread_rwlock_rdlock(l);
    pthread_t w;
    pthread_create(&w, NULL, writer, NULL);
    usleep(200000); /* the writer is waiting by now */
    pthread_t r;
    pthread_create(&r, NULL, try_reader, l);
    pthread_join(r, NULL);
    if (__atomic_load_n(&writer_in, __ATOMIC_SEQ_CST)) {
        fail("writer entered while a reader held the lock", 0);
    }
    pthread_rwlock_unlock(l);
    pthread_join(w, NULL);
    if (!__atomic_load_n(&writer_in, __ATOMIC_SEQ_CST)) {
        fail("waiting writer never entered", 0);
    }
    return try_result;
}

static void kinds_mode(void) {
    pthread_rwlock_t l;
    pthread_rwlock_init(&l, NULL);
    int rc = pthread_rwlock_rdlock(&l);
    rc |= pthread_rwlock_rdlock(&l);
    rc |= pthread_rwlock_tryrdlock(&l);
    if (rc != 0) {
        fail("recursive read locks", rc);
    }
    for (int i = 0; i < 3; i++) {
        pthread_rwlock_unlock(&l);
    }
    if ((rc = pthread_rwlock_wrlock(&l)) != 0) {
        fail("wrlock", rc);
    }
    if ((rc = pthread_rwlock_wrlock(&l)) != EDEADLK) {
        fail("wrlock by the writer", rc);
    }
    if ((rc = pthread_rwlock_rdlock(&l)) != EDEADLK) {
        fail("rdlock by the writer", rc);
    }
    if ((rc = pthread_rwlock_trywrlock(&l)) != EBUSY) {
        fail("trywrlock by the writer", rc);
    }
    pthread_rwlock_unlock(&l);
    if ((rc = pthread_rwlock_trywrlock(&l)) != 0) {
        fail("trywrlock of a free lock", rc);
    } else {
        pthread_rwlock_unlock(&l);
    }
    if ((rc = reader_while_writer_waits(&l)) != 0) {
        fail("default kind: a reader waited for a waiting writer", rc);
    }
    pthread_rwlock_destroy(&l);

    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&l, &attr);
    pthread_rwlockattr_destroy(&attr);
    if ((rc = reader_while_writer_waits(&l)) != EBUSY) {
        fail("writer-preferring (attribute): a reader entered past a waiting writer", rc);
    }
    pthread_rwlock_destroy(&l);
    if ((rc = reader_while_writer_waits(&static_writer)) != EBUSY) {
        fail("writer-preferring (initialiser): a reader entered past a waiting writer", rc);
    }
}

struct pstate {
    uint64_t a, b;        /* always equal under the lock */
    uint64_t reads[4];    /* each reader's count, written under the read lock */
};
static struct pstate *ps;
#define WRITES 200
#define READS 400

static void *p_writer(void *arg) {
    (void)arg;
    for (int i = 0; i < WRITES; i++) {
        pthread_rwlock_wrlock(&lock);
        ps->a += 1;
        ps->b += 1;
        pthread_rwlock_unlock(&lock);
    }
    return NULL;
}

static void *p_reader(void *arg) {
    int me = (int)(intptr_t)arg;
    for (int i = 0; i < READS; i++) {
        pthread_rwlock_rdlock(&lock);
        if (ps->a != ps->b) {
            fail("a reader saw a torn update", (long)(ps->a - ps->b));
        }
        ps->reads[me] += 1;
        pthread_rwlock_unlock(&lock);
    }
    return NULL;
}

static void persistent_mode(void) {
#ifdef NVT_WEAK_API
    /* Built for LD_PRELOAD and run without it: plain pthreads. */
    ps = nvmalloc ? nvmalloc(sizeof *ps, "rw") : calloc(1, sizeof *ps);
#else
    ps = nvmalloc(sizeof *ps, "rw");
#endif
    memset(ps, 0, sizeof *ps);
    pthread_t t[4];
    pthread_create(&t[0], NULL, p_writer, NULL);
    for (int i = 1; i < 4; i++) {
        pthread_create(&t[i], NULL, p_reader, (void *)(intptr_t)i);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
    }
    if (ps->a != WRITES || ps->b != WRITES) {
        fail("writes lost", (long)ps->a);
    }
    for (int i = 1; i < 4; i++) {
        if (ps->reads[i] != READS) {
            fail("a reader's own writes lost", (long)ps->reads[i]);
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        return 2;
    }
    mode = argv[1];
    if (strcmp(mode, "shared") == 0) {
        shared_mode();
    } else if (strcmp(mode, "kinds") == 0) {
        kinds_mode();
    } else if (strcmp(mode, "persistent") == 0) {
        persistent_mode();
    } else {
        return 2;
    }
    if (!failed) {
        printf("%s ok\n", mode);
    }
    return 0;
}
