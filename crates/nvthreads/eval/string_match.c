/*
 * string_match (Phoenix): a text of SIZE × 64 Ki words is scanned for four keys; every
 * word is "encrypted" (a hash, as Phoenix does) and compared with the encrypted keys. Each
 * thread scans a slice (cut at word boundaries) and adds its match counts under a lock.
 */
#include "common.h"

#define KEYS 4

static char *text;
static long text_len;
static int thread_count;
static uint64_t key_hash[KEYS];
static uint64_t *matches; /* shared, KEYS counters */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char *keys[KEYS] = {"helloworld", "howareyou", "ferrite", "nvthreads"};

static uint64_t encrypt(const char *word, long len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (long i = 0; i < len; i++) {
        h = (h ^ (unsigned char)word[i]) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}

static long word_start(long at) {
    while (at > 0 && at < text_len && text[at - 1] != ' ' && text[at - 1] != '\n') {
        at++;
    }
    return at;
}

static void *scan(void *arg) {
    long t = (long)arg;
    long first = word_start(text_len * t / thread_count);
    long last = word_start(text_len * (t + 1) / thread_count);
    uint64_t local[KEYS] = {0, 0, 0, 0};
    long i = first;
    while (i < last) {
        long end = i;
        while (end < text_len && text[end] != ' ' && text[end] != '\n') {
            end++;
        }
        uint64_t h = encrypt(text + i, end - i);
        for (int k = 0; k < KEYS; k++) {
            local[k] += h == key_hash[k];
        }
        i = end + 1;
    }
    pthread_mutex_lock(&lock);
    for (int k = 0; k < KEYS; k++) {
        matches[k] += local[k];
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    long size;
    parse_args(argc, argv, &thread_count, &size);
    long words = size << 16;
    text = checked_malloc((size_t)words * 12 + 1);
    uint64_t seed = 0x57a7;
    long at = 0;
    for (long w = 0; w < words; w++) {
        uint64_t r = next_random(&seed);
        if (r % 97 == 0) {
            const char *key = keys[(r >> 8) % KEYS];
            size_t len = strlen(key);
            memcpy(text + at, key, len);
            at += (long)len;
        } else {
            long len = 3 + (long)((r >> 8) % 8);
            for (long i = 0; i < len; i++) {
                text[at++] = (char)('a' + (r >> (12 + 2 * i)) % 26);
            }
        }
        text[at++] = (w % 16 == 15) ? '\n' : ' ';
    }
    text_len = at;
    for (int k = 0; k < KEYS; k++) {
        key_hash[k] = encrypt(keys[k], (long)strlen(keys[k]));
    }
    matches = calloc(KEYS, sizeof *matches);
    double seconds = run_threads(thread_count, scan);
    uint64_t digest = 0;
    for (int k = 0; k < KEYS; k++) {
        digest = mix(digest, matches[k]);
    }
    report("string_match", digest, seconds);
    return 0;
}
