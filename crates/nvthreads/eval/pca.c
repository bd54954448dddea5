/*
 * pca (Phoenix): the mean of every row of a ROWS × COLS integer matrix (ROWS = SIZE, COLS =
 * 8 × SIZE), then the covariance matrix of the rows. Threads take rows in an interleaved
 * order for both steps (a barrier between them) and write the means and their rows of the
 * covariance matrix straight into the shared results.
 */
#include "common.h"

static int32_t *matrix;
static int64_t *mean; /* scaled by COLS, exact */
static int64_t *cov;  /* ROWS × ROWS, upper triangle */
static long rows, cols;
static int thread_count;
static pthread_barrier_t between;

static void *analyse(void *arg) {
    long t = (long)arg;
    for (long i = t; i < rows; i += thread_count) {
        int64_t sum = 0;
        for (long k = 0; k < cols; k++) {
            sum += matrix[i * cols + k];
        }
        mean[i] = sum;
    }
    pthread_barrier_wait(&between);
    for (long i = t; i < rows; i += thread_count) {
        for (long j = i; j < rows; j++) {
            int64_t acc = 0;
            for (long k = 0; k < cols; k++) {
                int64_t di = (int64_t)matrix[i * cols + k] * cols - mean[i];
                int64_t dj = (int64_t)matrix[j * cols + k] * cols - mean[j];
                acc += di * dj;
            }
            cov[i * rows + j] = acc / (cols - 1);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    parse_args(argc, argv, &thread_count, &rows);
    cols = rows * 8;
    matrix = checked_malloc((size_t)(rows * cols) * sizeof *matrix);
    mean = checked_malloc((size_t)rows * sizeof *mean);
    cov = calloc((size_t)(rows * rows), sizeof *cov);
    uint64_t seed = 0x5ca1e;
    for (long i = 0; i < rows * cols; i++) {
        matrix[i] = (int32_t)(next_random(&seed) % 256);
    }
    pthread_barrier_init(&between, NULL, (unsigned)thread_count);
    double seconds = run_threads(thread_count, analyse);
    uint64_t digest = 0;
    for (long i = 0; i < rows; i++) {
        for (long j = i; j < rows; j++) {
            digest = mix(digest, (uint64_t)cov[i * rows + j]);
        }
    }
    report("pca", digest, seconds);
    return 0;
}
