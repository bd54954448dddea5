/*
 * kmeans (Phoenix): SIZE × 4 Ki points in 3 dimensions (integers), K = 16 clusters, until no
 * centroid moves (integer centroids, so every runtime follows the same iterations). The
 * threads live for the whole run: each iteration they assign their slice of points to the
 * nearest centroid (a shared assignment array), add their per-cluster sums under a lock,
 * and meet at a barrier; the barrier's serial thread computes the new centroids in a
 * section; a second barrier starts the next iteration.
 *
 * Built with -DNVTHREADS it is the crash-tolerant version (the paper's "4 lines changed"):
 * the centroids and the iteration number live in an nvmalloc'd object, so a restart after a
 * crash continues from the last completed iteration instead of from scratch. It prints
 * "ITER n" after each iteration (for the crash experiment), and "RESUME n" when it starts
 * from a recovered iteration.
 */
#include "common.h"
#ifdef NVTHREADS
#include "nvthreads.h"
#endif
#include <unistd.h>

#define DIM 3
#define K 16
#define MAX_ITERATIONS 1000

struct state {
    int64_t centroid[K][DIM];
    int64_t iteration;
    int64_t converged;
};

static int32_t *points;
static int32_t *assignment; /* shared */
static long point_count;
static int thread_count;
static struct state *state; /* shared (persistent with -DNVTHREADS) */
static int64_t sums[K][DIM + 1];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t assigned, advanced;
static int verbose;

static void update_centroids(void) {
    int moved = 0;
    for (int c = 0; c < K; c++) {
        if (sums[c][DIM] == 0) {
            continue;
        }
        for (int d = 0; d < DIM; d++) {
            int64_t next = sums[c][d] / sums[c][DIM];
            moved |= next != state->centroid[c][d];
            state->centroid[c][d] = next;
        }
    }
    memset(sums, 0, sizeof sums);
    state->iteration += 1;
    state->converged = !moved || state->iteration >= MAX_ITERATIONS;
}

static void *cluster(void *arg) {
    long t = (long)arg;
    long first = point_count * t / thread_count, last = point_count * (t + 1) / thread_count;
    while (!state->converged) {
        int64_t local[K][DIM + 1];
        memset(local, 0, sizeof local);
        for (long i = first; i < last; i++) {
            const int32_t *p = points + i * DIM;
            int best = 0;
            int64_t best_distance = INT64_MAX;
            for (int c = 0; c < K; c++) {
                int64_t distance = 0;
                for (int d = 0; d < DIM; d++) {
                    int64_t delta = p[d] - state->centroid[c][d];
                    distance += delta * delta;
                }
                if (distance < best_distance) {
                    best_distance = distance;
                    best = c;
                }
            }
            assignment[i] = best;
            for (int d = 0; d < DIM; d++) {
                local[best][d] += p[d];
            }
            local[best][DIM]++;
        }
        pthread_mutex_lock(&lock);
        for (int c = 0; c < K; c++) {
            for (int d = 0; d <= DIM; d++) {
                sums[c][d] += local[c][d];
            }
        }
        pthread_mutex_unlock(&lock);
        if (pthread_barrier_wait(&assigned) == PTHREAD_BARRIER_SERIAL_THREAD) {
            pthread_mutex_lock(&lock);
            update_centroids();
            pthread_mutex_unlock(&lock);
            if (verbose) {
                printf("ITER %" PRId64 "\n", state->iteration);
                fflush(stdout);
            }
        }
        pthread_barrier_wait(&advanced);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long size;
    parse_args(argc, argv, &thread_count, &size);
    verbose = argc > 3 && strcmp(argv[3], "verbose") == 0;
    point_count = size << 12;
    points = checked_malloc((size_t)point_count * DIM * sizeof *points);
    assignment = checked_malloc((size_t)point_count * sizeof *assignment);
    uint64_t seed = 0x6b6d;
    for (long i = 0; i < point_count; i++) {
        /* Points around 16 hidden centres, so the clustering converges. */
        uint64_t centre = next_random(&seed) % K;
        for (int d = 0; d < DIM; d++) {
            int64_t offset = (int64_t)(next_random(&seed) % 2001) - 1000;
            points[i * DIM + d] = (int32_t)(centre * 700 * (d + 1) % 10007 + offset);
        }
    }
#ifdef NVTHREADS
    state = nvmalloc(sizeof *state, "kmeans");
    if (crashed() && state->iteration > 0) {
        printf("RESUME %" PRId64 "\n", state->iteration);
    } else {
        memset(state, 0, sizeof *state);
#else
    state = calloc(1, sizeof *state);
    {
#endif
        for (int c = 0; c < K; c++) {
            for (int d = 0; d < DIM; d++) {
                state->centroid[c][d] = points[c * 97 * DIM + d];
            }
        }
    }
    pthread_barrier_init(&assigned, NULL, (unsigned)thread_count);
    pthread_barrier_init(&advanced, NULL, (unsigned)thread_count);
    double seconds = run_threads(thread_count, cluster);
    uint64_t digest = 0;
    for (int c = 0; c < K; c++) {
        for (int d = 0; d < DIM; d++) {
            digest = mix(digest, (uint64_t)state->centroid[c][d]);
        }
    }
    printf("ITERATIONS %" PRId64 "\n", state->iteration);
    report("kmeans", digest, seconds);
    return 0;
}
