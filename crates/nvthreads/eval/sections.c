/*
 * The fixed cost of a one-line critical section: THREADS threads each run SIZE Ki sections
 *   lock(own mutex); counter += 1 (one 8-byte word of persistent memory); unlock
 * on mutexes and pages of their own, so nothing is contended and every section does the
 * least a section can: one store. Two shapes:
 *   hot:  every section of a thread writes the same word (its page stays writable);
 *   cold: each section writes a word on another of 256 pages of its own, so a page comes
 *         back only after 255 other sections (a write fault and a twin each time).
 * The counters are nvmalloc'd on the NVthreads runtime and calloc'd under plain pthreads
 * (weak reference), so each section is also logged and durable when its unlock returns.
 *
 * Usage: sections THREADS SIZE hot|cold   (prints RESULT and TIME as the kernels do)
 */
#include "common.h"

#define PAGES 256
#define WORDS_PER_PAGE 512

void *nvmalloc(size_t size, const char *name) __attribute__((weak));

struct area {
    uint64_t words[PAGES][WORDS_PER_PAGE];
};

static struct area *areas;
static pthread_mutex_t locks[MAX_THREADS];
static long sections;
static int cold;

static void *run(void *arg) {
    long t = (long)arg;
    struct area *mine = &areas[t];
    for (long i = 0; i < sections; i++) {
        uint64_t *word = cold ? &mine->words[i % PAGES][0] : &mine->words[0][0];
        pthread_mutex_lock(&locks[t]);
        *word += 1;
        pthread_mutex_unlock(&locks[t]);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads;
    long size;
    parse_args(argc, argv, &threads, &size);
    if (argc < 4 || (strcmp(argv[3], "hot") != 0 && strcmp(argv[3], "cold") != 0)) {
        fprintf(stderr, "usage: sections THREADS SIZE hot|cold\n");
        return 2;
    }
    cold = strcmp(argv[3], "cold") == 0;
    sections = size << 10;
    size_t bytes = (size_t)threads * sizeof(struct area);
    areas = nvmalloc != NULL ? nvmalloc(bytes, "sections") : calloc(1, bytes);
    if (areas == NULL) {
        fprintf(stderr, "no memory\n");
        return 1;
    }
    memset(areas, 0, bytes);
    for (int t = 0; t < threads; t++) {
        pthread_mutex_init(&locks[t], NULL);
    }
    double seconds = run_threads(threads, run);
    uint64_t digest = 0;
    for (int t = 0; t < threads; t++) {
        for (int p = 0; p < PAGES; p++) {
            digest = mix(digest, areas[t].words[p][0]);
        }
    }
    report(cold ? "sections-cold" : "sections-hot", digest, seconds);
    return 0;
}
