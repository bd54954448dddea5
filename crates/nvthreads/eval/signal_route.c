/*
 * What routing signals to the program costs (docs/nvthreads.md §3.1, "Signals to the
 * program"): with 3 threads sleeping,
 *   1. main raise()s SIGUSR1 100,000 times (a thread-directed signal: the handler runs
 *      behind the runtime's trampoline) and prints the time per raise;
 *   2. 200 times, a child outside the program's process group sends SIGINT to the group
 *      (the kill system call, as a terminal's Ctrl-C) and waits until the handler ran
 *      once; it prints the median time from the send to the handler, and the calls per
 *      group signal (1 with pthreads);
 *   3. every thread blocks SIGTERM, a thread waits for it in sigwait, and 100 times a child sends
 *      SIGTERM to the program's pid with the kill system call (as a shell's kill); it prints
 *      the median time until sigwait returned (with the runtime before 2026-11-28 the first
 *      one never arrives: run with a 10 s alarm), then the CPU time of one second's idle
 *      wait in sigwait.
 * Build and run:
 *   cc -O2 -Wall eval/signal_route.c -o signal_route -L target/release/examples \
 *      -Wl,-rpath,$PWD/target/release/examples -Wl,--no-as-needed -lnvthreads_rt
 *   NVT_POOL=/dev/shm/signal_route.pool ./signal_route
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop, calls, terms, waiting;
static atomic_llong idle_cpu_ns;

static long long thread_cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void on_signal(int signal) {
    (void)signal;
    atomic_fetch_add(&calls, 1);
}

static void *sleeper(void *unused) {
    (void)unused;
    struct timespec step = {0, 1000000};
    while (!atomic_load(&stop))
        nanosleep(&step, NULL);
    return NULL;
}

static void *term_waiter(void *unused) {
    (void)unused;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR2);
    for (;;) {
        int got;
        atomic_store(&waiting, 1);
        long long before = thread_cpu_ns();
        if (sigwait(&set, &got) != 0 || got == SIGUSR2) {
            atomic_store(&idle_cpu_ns, thread_cpu_ns() - before);
            return NULL;
        }
        atomic_fetch_add(&terms, 1);
    }
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void send_from_outside(pid_t target, int signal) {
    pid_t child = fork();
    if (child == 0) {
        setpgid(0, 0);
        syscall(SYS_kill, target, signal);
        _exit(0);
    }
    waitpid(child, NULL, 0);
}

int main(void) {
    alarm(60);
    setpgid(0, 0);
    /* The server pattern: SIGTERM (and SIGUSR2, which ends the waiter) blocked in every
     * thread, from before the first one is made. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t threads[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&threads[i], NULL, sleeper, NULL);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal;
    sigaction(SIGUSR1, &action, NULL);
    sigaction(SIGINT, &action, NULL);

    double start = now();
    for (int i = 0; i < 100000; i++)
        raise(SIGUSR1);
    printf("raise: %.2f us per signal\n", (now() - start) * 1e6 / 100000);

    static double samples[200];
    atomic_store(&calls, 0);
    for (int i = 0; i < 200; i++) {
        int before = atomic_load(&calls);
        double sent = now();
        send_from_outside(-getpgid(0), SIGINT);
        while (atomic_load(&calls) == before && now() - sent < 1)
            ;
        samples[i] = now() - sent;
    }
    usleep(300000);
    qsort(samples, 200, sizeof samples[0], by_value);
    printf("group SIGINT: median %.0f us to the handler, %.2f calls per signal\n",
           samples[100] * 1e6, atomic_load(&calls) / 200.0);

    pthread_t waiter;
    pthread_create(&waiter, NULL, term_waiter, NULL);
    while (!atomic_load(&waiting))
        usleep(1000);
    usleep(20000);
    for (int i = 0; i < 100; i++) {
        int before = atomic_load(&terms);
        double sent = now();
        send_from_outside(getpid(), SIGTERM);
        while (atomic_load(&terms) == before)
            ;
        samples[i] = now() - sent;
    }
    qsort(samples, 100, sizeof samples[0], by_value);
    printf("SIGTERM to the pid, sigwait in a thread: median %.0f us\n", samples[50] * 1e6);
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(threads[i], NULL);
    usleep(50000);
    sleep(1);
    pthread_kill(waiter, SIGUSR2);
    pthread_join(waiter, NULL);
    printf("a thread idle in sigwait for 1 s: %.2f ms CPU\n", atomic_load(&idle_cpu_ns) / 1e6);
    return 0;
}
