/*
 * histogram (Phoenix): the red, green and blue histograms of an image of SIZE × 64 Ki
 * pixels (3 bytes each). Each thread counts its slice into local histograms, then adds them
 * to the shared result under one lock.
 */
#include "common.h"

static unsigned char *pixels;
static long pixel_count;
static int thread_count;
static uint64_t *histogram; /* 3 × 256, shared */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *count(void *arg) {
    long t = (long)arg;
    long first = pixel_count * t / thread_count, last = pixel_count * (t + 1) / thread_count;
    uint64_t local[3][256];
    memset(local, 0, sizeof local);
    for (long i = first; i < last; i++) {
        local[0][pixels[3 * i]]++;
        local[1][pixels[3 * i + 1]]++;
        local[2][pixels[3 * i + 2]]++;
    }
    pthread_mutex_lock(&lock);
    for (int c = 0; c < 3; c++) {
        for (int v = 0; v < 256; v++) {
            histogram[c * 256 + v] += local[c][v];
        }
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    long size;
    parse_args(argc, argv, &thread_count, &size);
    pixel_count = size << 16;
    pixels = checked_malloc((size_t)pixel_count * 3);
    uint64_t seed = 0x1234;
    for (long i = 0; i < pixel_count * 3; i += 8) {
        uint64_t r = next_random(&seed);
        /* Skewed channels, like a photograph rather than noise. */
        for (int k = 0; k < 8 && i + k < pixel_count * 3; k++) {
            unsigned v = (unsigned)(r >> (8 * k)) & 0xff;
            pixels[i + k] = (unsigned char)((v * v) >> 8);
        }
    }
    histogram = calloc(3 * 256, sizeof *histogram);
    double seconds = run_threads(thread_count, count);
    uint64_t digest = 0;
    for (int i = 0; i < 3 * 256; i++) {
        digest = mix(digest, histogram[i]);
    }
    report("histogram", digest, seconds);
    return 0;
}
