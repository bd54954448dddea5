/*
 * matrix_multiply (Phoenix): C = A × B for SIZE × SIZE matrices of 32-bit integers. Each
 * thread computes a band of rows of C, written straight into the shared result (no lock).
 */
#include "common.h"

static int32_t *a, *b, *c;
static long n;
static int thread_count;

static void *multiply(void *arg) {
    long t = (long)arg;
    long first = n * t / thread_count, last = n * (t + 1) / thread_count;
    for (long i = first; i < last; i++) {
        int32_t *row = c + i * n;
        for (long j = 0; j < n; j++) {
            row[j] = 0;
        }
        for (long k = 0; k < n; k++) {
            int32_t aik = a[i * n + k];
            const int32_t *brow = b + k * n;
            for (long j = 0; j < n; j++) {
                row[j] += aik * brow[j];
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    parse_args(argc, argv, &thread_count, &n);
    a = checked_malloc((size_t)(n * n) * sizeof *a);
    b = checked_malloc((size_t)(n * n) * sizeof *b);
    c = checked_malloc((size_t)(n * n) * sizeof *c);
    uint64_t seed = 0xabcd;
    for (long i = 0; i < n * n; i++) {
        a[i] = (int32_t)(next_random(&seed) % 100);
        b[i] = (int32_t)(next_random(&seed) % 100);
    }
    double seconds = run_threads(thread_count, multiply);
    uint64_t digest = 0;
    for (long i = 0; i < n * n; i++) {
        digest = mix(digest, (uint64_t)(uint32_t)c[i]);
    }
    report("matrix_multiply", digest, seconds);
    return 0;
}
