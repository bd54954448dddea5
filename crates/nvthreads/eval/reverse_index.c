/*
 * reverse_index (Phoenix): for SIZE × 1 Ki HTML-like documents, the list of documents that
 * link to each URL. Each thread parses its documents for <a href="..."> links and inserts
 * every (link, document) pair into a shared index under a lock, one short critical section
 * per link with a malloc'd node each (the pattern that makes Phoenix's reverse_index the
 * slowest kernel under NVthreads).
 */
#include "common.h"

#define BUCKETS 16384
#define LINKS 5000

struct doc_node {
    long doc;
    struct doc_node *next;
};

struct link {
    uint64_t id;
    long docs;
    struct doc_node *list;
    struct link *next;
};

static char **documents;
static long document_count;
static int thread_count;
static struct link **index_table; /* shared */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void insert(uint64_t id, long doc) {
    pthread_mutex_lock(&lock);
    struct link **head = &index_table[id % BUCKETS], *l = *head;
    while (l != NULL && l->id != id) {
        l = l->next;
    }
    if (l == NULL) {
        l = checked_malloc(sizeof *l);
        l->id = id;
        l->docs = 0;
        l->list = NULL;
        l->next = *head;
        *head = l;
    }
    struct doc_node *n = checked_malloc(sizeof *n);
    n->doc = doc;
    n->next = l->list;
    l->list = n;
    l->docs++;
    pthread_mutex_unlock(&lock);
}

static void *parse(void *arg) {
    long t = (long)arg;
    for (long d = t; d < document_count; d += thread_count) {
        const char *at = documents[d];
        while ((at = strstr(at, "<a href=\"http://site/")) != NULL) {
            at += strlen("<a href=\"http://site/");
            uint64_t id = strtoull(at, NULL, 10);
            insert(id, d);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    long size;
    parse_args(argc, argv, &thread_count, &size);
    document_count = size << 10;
    documents = checked_malloc((size_t)document_count * sizeof *documents);
    uint64_t seed = 0x1d3;
    char buf[256];
    for (long d = 0; d < document_count; d++) {
        long links = 1 + (long)(next_random(&seed) % 12);
        size_t cap = 64 + (size_t)links * 200, len = 0;
        char *doc = checked_malloc(cap);
        len += (size_t)snprintf(doc + len, cap - len, "<html><body><p>document %ld</p>", d);
        for (long k = 0; k < links; k++) {
            uint64_t r = next_random(&seed);
            uint64_t link = (r % LINKS) * ((r >> 24) % LINKS) / LINKS;
            int n = snprintf(buf, sizeof buf, "<p>text %" PRIu64 "</p><a href=\"http://site/%" PRIu64 "\">link</a>", r % 1000, link);
            memcpy(doc + len, buf, (size_t)n);
            len += (size_t)n;
        }
        memcpy(doc + len, "</body></html>", 15);
        documents[d] = doc;
    }
    index_table = calloc(BUCKETS, sizeof *index_table);
    double seconds = run_threads(thread_count, parse);
    uint64_t digest = 0, pairs = 0, distinct = 0;
    for (long b = 0; b < BUCKETS; b++) {
        for (struct link *l = index_table[b]; l != NULL; l = l->next) {
            uint64_t doc_sum = 0, doc_xor = 0;
            for (struct doc_node *n = l->list; n != NULL; n = n->next) {
                doc_sum += (uint64_t)n->doc;
                doc_xor ^= (uint64_t)n->doc * 0x9e3779b97f4a7c15ull;
            }
            distinct++;
            pairs += (uint64_t)l->docs;
            digest ^= mix(mix(l->id, doc_sum), doc_xor);
        }
    }
    digest = mix(mix(digest, distinct), pairs);
    report("reverse_index", digest, seconds);
    return 0;
}
