/*
 * exit() called by a thread other than main ends the program with that status, as with
 * pthreads (docs/nvthreads.md §3.7). Usage: exits STATUS [nested]: main starts a thread
 * that sleeps and a thread that calls exit(STATUS) while main waits in pthread_join (with
 * "nested", a thread that makes that thread and joins it: the thread calling exit is not
 * main's child); an atexit handler prints "atexit"; nothing after the join is reached. The program must end with
 * STATUS, after printing "atexit" (before, every process was killed: status 137). Ends
 * itself with alarm(10) if it hangs.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void at_exit_says_so(void) {
    printf("atexit\n");
    fflush(stdout);
}

static void *sleep_long(void *unused) {
    (void)unused;
    struct timespec second = {1, 0};
    for (int i = 0; i < 10; i++)
        nanosleep(&second, NULL);
    return NULL;
}

static void *exit_with(void *status) {
    struct timespec moment = {0, 20000000};
    nanosleep(&moment, NULL);
    exit((int)(long)status);
}

static void *make_exiter(void *status) {
    pthread_t exiter;
    pthread_create(&exiter, NULL, exit_with, status);
    pthread_join(exiter, NULL);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: exits STATUS [nested]\n");
        return 2;
    }
    alarm(10);
    atexit(at_exit_says_so);
    pthread_t sleeper, exiter;
    pthread_create(&sleeper, NULL, sleep_long, NULL);
    pthread_create(&exiter, NULL, argc == 3 ? make_exiter : exit_with,
                   (void *)(long)atoi(argv[1]));
    pthread_join(exiter, NULL);
    printf("not reached\n");
    return 99;
}
