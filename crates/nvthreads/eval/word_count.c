/*
 * word_count (Phoenix): the number of occurrences of every word in a text of SIZE × 64 Ki
 * words drawn from a skewed vocabulary. Each thread counts its slice (cut at word
 * boundaries) into a private hash table of malloc'd entries (the map phase), then merges it
 * into the shared table under one lock (the reduce phase); main then ranks the ten most
 * frequent words.
 */
#include "common.h"

#define BUCKETS 65536

struct entry {
    const char *word; /* into the shared text */
    long len;
    uint64_t count;
    struct entry *next;
};

static char *text;
static long text_len;
static int thread_count;
static struct entry **table; /* shared, BUCKETS heads */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t hash(const char *word, long len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (long i = 0; i < len; i++) {
        h = (h ^ (unsigned char)word[i]) * 0x100000001b3ull;
    }
    return h;
}

static struct entry *find(struct entry **heads, const char *word, long len, uint64_t h) {
    for (struct entry *e = heads[h % BUCKETS]; e != NULL; e = e->next) {
        if (e->len == len && memcmp(e->word, word, (size_t)len) == 0) {
            return e;
        }
    }
    return NULL;
}

static void add(struct entry **heads, const char *word, long len, uint64_t count) {
    uint64_t h = hash(word, len);
    struct entry *e = find(heads, word, len, h);
    if (e == NULL) {
        e = checked_malloc(sizeof *e);
        e->word = word;
        e->len = len;
        e->count = 0;
        e->next = heads[h % BUCKETS];
        heads[h % BUCKETS] = e;
    }
    e->count += count;
}

static long word_start(long at) {
    while (at > 0 && at < text_len && text[at - 1] != ' ') {
        at++;
    }
    return at;
}

static void *count(void *arg) {
    long t = (long)arg;
    long first = word_start(text_len * t / thread_count);
    long last = word_start(text_len * (t + 1) / thread_count);
    struct entry **local = calloc(BUCKETS, sizeof *local);
    for (long i = first; i < last;) {
        long end = i;
        while (end < text_len && text[end] != ' ') {
            end++;
        }
        add(local, text + i, end - i, 1);
        i = end + 1;
    }
    pthread_mutex_lock(&lock);
    for (long b = 0; b < BUCKETS; b++) {
        for (struct entry *e = local[b], *next; e != NULL; e = next) {
            next = e->next;
            add(table, e->word, e->len, e->count);
            free(e);
        }
    }
    pthread_mutex_unlock(&lock);
    free(local);
    return NULL;
}

int main(int argc, char **argv) {
    long size;
    parse_args(argc, argv, &thread_count, &size);
    long words = size << 16;
    text = checked_malloc((size_t)words * 10 + 1);
    uint64_t seed = 0x3c3c;
    long at = 0;
    for (long w = 0; w < words; w++) {
        /* A skewed vocabulary of 20000 words: small ids are frequent. */
        uint64_t r = next_random(&seed);
        uint64_t id = (r % 20000) * ((r >> 20) % 20000) / 20000;
        int len = 2 + (int)(id % 7);
        for (int i = 0; i < len; i++) {
            text[at++] = (char)('a' + (id >> (3 * i) ^ (uint64_t)i * 7) % 26);
        }
        text[at++] = ' ';
    }
    text_len = at;
    table = calloc(BUCKETS, sizeof *table);
    double seconds = run_threads(thread_count, count);
    uint64_t distinct = 0, total = 0, top[10] = {0};
    for (long b = 0; b < BUCKETS; b++) {
        for (struct entry *e = table[b]; e != NULL; e = e->next) {
            distinct++;
            total += e->count;
            for (int k = 0; k < 10; k++) {
                if (e->count > top[k]) {
                    memmove(top + k + 1, top + k, (size_t)(9 - k) * sizeof top[0]);
                    top[k] = e->count;
                    break;
                }
            }
        }
    }
    uint64_t digest = mix(mix(0, distinct), total);
    for (int k = 0; k < 10; k++) {
        digest = mix(digest, top[k]);
    }
    report("word_count", digest, seconds);
    return 0;
}
