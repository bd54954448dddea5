/*
 * Long lines from several threads: 4 threads print N lines "T<t> L<i> <LEN x's> END" each
 * with one printf. Usage: longlines N LEN (LEN at most 100000).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LEN 100000

static char pad[MAX_LEN + 1];
static long lines;

static void *work(void *arg) {
    long id = (long)arg;
    for (long i = 0; i < lines; i++)
        printf("T%ld L%06ld %s END\n", id, i, pad);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    lines = atol(argv[1]);
    long len = atol(argv[2]);
    if (lines < 1 || len < 1 || len > MAX_LEN)
        return 2;
    memset(pad, 'x', (size_t)len);
    pthread_t threads[4];
    for (long t = 0; t < 4; t++)
        if (pthread_create(&threads[t], NULL, work, (void *)t) != 0)
            return 1;
    for (int t = 0; t < 4; t++)
        pthread_join(threads[t], NULL);
    return 0;
}
