/*
 * What a sigaction costs while threads run (docs/nvthreads.md §3.1, "Signal actions"): N
 * threads sleep in 2 ms usleep loops; main sets SIGUSR2's action 20 times (a handler and
 * SIG_DFL in turn) and prints the mean time per call and how many of the threads' sleeps
 * were cut short (EINTR). Build and run:
 *   cc -O2 -Wall eval/sigaction_cost.c -o sigaction_cost -L target/release/examples \
 *      -Wl,-rpath,$PWD/target/release/examples -Wl,--no-as-needed -lnvthreads_rt
 *   NVT_POOL=/dev/shm/sigaction_cost.pool ./sigaction_cost 8
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <stdatomic.h>
static atomic_int stop, eintr;
static void h(int s) { (void)s; }
static void *w(void *a) { (void)a; while (!atomic_load(&stop)) { if (usleep(2000) != 0) atomic_fetch_add(&eintr, 1); } return NULL; }
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    pthread_t t[16]; for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, w, NULL);
    usleep(20000);
    struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < 20; i++) { struct sigaction sa; memset(&sa, 0, sizeof sa); sa.sa_handler = (i & 1) ? h : SIG_DFL; sigaction(SIGUSR2, &sa, NULL); }
    clock_gettime(CLOCK_MONOTONIC, &b);
    atomic_store(&stop, 1);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    printf("threads %d: %.1f us per sigaction, eintr %d\n", n, ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 20 / 1e3, eintr);
    (void)argc; return 0;
}
