/*
 * linear_regression (Phoenix): least-squares fit of SIZE × 64 Ki points (x, y), one byte
 * each. Each thread sums x, y, x², y² and xy over its slice; the sums are combined under a
 * lock and the slope and intercept computed from them.
 */
#include "common.h"

struct sums {
    int64_t n, sx, sy, sxx, syy, sxy;
};

static unsigned char *points; /* x0 y0 x1 y1 ... */
static long point_count;
static int thread_count;
static struct sums *total; /* shared */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *fit(void *arg) {
    long t = (long)arg;
    long first = point_count * t / thread_count, last = point_count * (t + 1) / thread_count;
    struct sums local = {0, 0, 0, 0, 0, 0};
    for (long i = first; i < last; i++) {
        int64_t x = points[2 * i], y = points[2 * i + 1];
        local.n++;
        local.sx += x;
        local.sy += y;
        local.sxx += x * x;
        local.syy += y * y;
        local.sxy += x * y;
    }
    pthread_mutex_lock(&lock);
    total->n += local.n;
    total->sx += local.sx;
    total->sy += local.sy;
    total->sxx += local.sxx;
    total->syy += local.syy;
    total->sxy += local.sxy;
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    long size;
    parse_args(argc, argv, &thread_count, &size);
    point_count = size << 16;
    points = checked_malloc((size_t)point_count * 2);
    uint64_t seed = 0xfeed;
    for (long i = 0; i < point_count; i++) {
        uint64_t r = next_random(&seed);
        unsigned x = (unsigned)(r & 0xff);
        unsigned noise = (unsigned)((r >> 8) & 0x1f);
        points[2 * i] = (unsigned char)x;
        points[2 * i + 1] = (unsigned char)((x / 2 + noise + 40) & 0xff);
    }
    total = calloc(1, sizeof *total);
    double seconds = run_threads(thread_count, fit);
    double n = (double)total->n;
    double slope = (n * (double)total->sxy - (double)total->sx * (double)total->sy) /
                   (n * (double)total->sxx - (double)total->sx * (double)total->sx);
    double intercept = ((double)total->sy - slope * (double)total->sx) / n;
    uint64_t digest = mix(mix(mix(0, (uint64_t)total->sxy), (uint64_t)total->syy),
                          (uint64_t)(slope * 1e6) ^ ((uint64_t)(intercept * 1e6) << 1));
    report("linear_regression", digest, seconds);
    return 0;
}
