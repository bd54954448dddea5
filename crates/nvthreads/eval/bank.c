/*
 * A lock-heavy kernel of short critical sections, the kind of program a server, a ledger
 * or a work queue is: a producer thread fills a bounded work queue (one mutex, two
 * condition variables) with transfer requests; THREADS worker threads take them one at a
 * time and apply each under the locks of the two accounts' stripes (64 mutexes taken in
 * order, so a transfer between stripes is a nested section), appending an entry to their
 * own journal ring in the same section.
 *
 * The ledger (balances and journal rings) is what a crash-consistent version keeps: it is
 * nvmalloc'd when the program runs on the NVthreads runtime (so every transfer is logged
 * and durable when its outermost unlock returns) and calloc'd under plain pthreads (the
 * weak reference to nvmalloc is then NULL). The queue is ordinary malloc'd memory.
 *
 * Transfers are unconditional (a balance may go negative), so the final balances do not
 * depend on the order in which workers apply them: the digest is the same under every
 * runtime and every interleaving.
 *
 * Usage: bank THREADS SIZE   (THREADS workers plus the producer; SIZE Ki transfers)
 */
#include "common.h"

#define ACCOUNTS 4096
#define STRIPES 64
#define QUEUE 256
#define RING 1024

void *nvmalloc(size_t size, const char *name) __attribute__((weak));

struct request {
    uint32_t from, to;
    int64_t amount;
};

struct entry {
    uint32_t from, to;
    int64_t amount;
};

struct journal {
    uint64_t count;
    struct entry ring[RING];
    char pad[4096 - 8]; /* each worker's journal starts on its own page */
};

struct ledger {
    int64_t balance[ACCOUNTS];
    struct journal journal[MAX_THREADS];
};

struct queue {
    struct request items[QUEUE];
    long head, tail;
    int done;
};

static struct ledger *ledger;
static struct queue *queue;
static long transfers;
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t stripes[STRIPES];

static void *produce(void *arg) {
    (void)arg;
    uint64_t seed = 0xba9c;
    for (long i = 0; i < transfers; i++) {
        uint64_t r = next_random(&seed);
        struct request req = {
            .from = (uint32_t)(r % ACCOUNTS),
            .to = (uint32_t)((r >> 16) % ACCOUNTS),
            .amount = (int64_t)((r >> 32) % 1000) + 1,
        };
        pthread_mutex_lock(&queue_lock);
        while (queue->tail - queue->head == QUEUE) {
            pthread_cond_wait(&not_full, &queue_lock);
        }
        queue->items[queue->tail % QUEUE] = req;
        queue->tail++;
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&queue_lock);
    }
    pthread_mutex_lock(&queue_lock);
    queue->done = 1;
    pthread_cond_broadcast(&not_empty);
    pthread_mutex_unlock(&queue_lock);
    return NULL;
}

/* Takes the next request; returns 0 when the queue is drained and closed. */
static int take(struct request *req) {
    pthread_mutex_lock(&queue_lock);
    while (queue->tail == queue->head && !queue->done) {
        pthread_cond_wait(&not_empty, &queue_lock);
    }
    if (queue->tail == queue->head) {
        pthread_mutex_unlock(&queue_lock);
        return 0;
    }
    *req = queue->items[queue->head % QUEUE];
    queue->head++;
    pthread_cond_signal(&not_full);
    pthread_mutex_unlock(&queue_lock);
    return 1;
}

static void transfer(long worker, const struct request *req) {
    unsigned a = req->from % STRIPES, b = req->to % STRIPES;
    unsigned first = a < b ? a : b, second = a < b ? b : a;
    pthread_mutex_lock(&stripes[first]);
    if (second != first) {
        pthread_mutex_lock(&stripes[second]);
    }
    ledger->balance[req->from] -= req->amount;
    ledger->balance[req->to] += req->amount;
    struct journal *j = &ledger->journal[worker];
    j->ring[j->count % RING] = (struct entry){req->from, req->to, req->amount};
    j->count++;
    if (second != first) {
        pthread_mutex_unlock(&stripes[second]);
    }
    pthread_mutex_unlock(&stripes[first]);
}

static void *work(void *arg) {
    long worker = (long)arg;
    struct request req;
    while (take(&req)) {
        transfer(worker, &req);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads;
    long size;
    parse_args(argc, argv, &threads, &size);
    if (threads >= MAX_THREADS) {
        return 2;
    }
    transfers = size << 10;
    ledger = nvmalloc != NULL ? nvmalloc(sizeof *ledger, "bank") : calloc(1, sizeof *ledger);
    queue = checked_malloc(sizeof *queue);
    if (ledger == NULL) {
        fprintf(stderr, "no ledger\n");
        return 1;
    }
    memset(queue, 0, sizeof *queue);
    memset(ledger, 0, sizeof *ledger);
    for (int s = 0; s < STRIPES; s++) {
        pthread_mutex_init(&stripes[s], NULL);
    }
    pthread_t producer, workers[MAX_THREADS];
    double start = now_seconds();
    pthread_create(&producer, NULL, produce, NULL);
    for (long t = 0; t < threads; t++) {
        pthread_create(&workers[t], NULL, work, (void *)t);
    }
    pthread_join(producer, NULL);
    for (int t = 0; t < threads; t++) {
        pthread_join(workers[t], NULL);
    }
    double seconds = now_seconds() - start;
    uint64_t digest = 0, applied = 0;
    int64_t sum = 0;
    for (int i = 0; i < ACCOUNTS; i++) {
        digest = mix(digest, (uint64_t)ledger->balance[i]);
        sum += ledger->balance[i];
    }
    for (int t = 0; t < threads; t++) {
        applied += ledger->journal[t].count;
    }
    if (sum != 0 || applied != (uint64_t)transfers) {
        fprintf(stderr, "ledger broken: sum %" PRId64 ", %" PRIu64 " of %ld transfers\n", sum,
                applied, transfers);
        return 1;
    }
    digest = mix(digest, applied);
    report("bank", digest, seconds);
    return 0;
}
