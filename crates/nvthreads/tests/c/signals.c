/*
 * Signals as a pthreads program uses them (docs/nvthreads.md §3.1). Usage: signals MODE,
 * printing "MODE ok" or the first failure:
 *   blockedjoins  a SIGCHLD handler (SA_SIGINFO) is installed, SIGCHLD blocked, 100
 *                 threads made and joined one after the other, SIGCHLD unblocked: the
 *                 handler is not called (the pending signal reports the first thread's
 *                 end); then a child of the program exits and the handler is called once,
 *                 naming it.
 * Every mode ends itself with alarm(10) if it hangs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void fail(const char *mode, const char *what) {
    printf("%s FAILED: %s\n", mode, what);
    exit(1);
}

static volatile sig_atomic_t chld_calls;
static volatile sig_atomic_t chld_pid;

static void on_chld(int signal, siginfo_t *info, void *context) {
    (void)signal;
    (void)context;
    chld_calls++;
    chld_pid = info->si_pid;
}

static void *nothing(void *arg) {
    return arg;
}

/* Sleeps up to `ms` milliseconds, returning early once *flag is nonzero. */
static void wait_for(volatile sig_atomic_t *flag, int ms) {
    struct timespec step = {0, 1000000};
    for (int i = 0; i < ms && !*flag; i++)
        nanosleep(&step, NULL);
}

static void blockedjoins(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_chld;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGCHLD, &action, NULL) != 0)
        fail("blockedjoins", "sigaction");
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &chld, NULL);
    for (int i = 0; i < 100; i++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, nothing, NULL) != 0 ||
            pthread_join(thread, NULL) != 0)
            fail("blockedjoins", "create or join");
    }
    pthread_sigmask(SIG_UNBLOCK, &chld, NULL);
    wait_for(&chld_calls, 50);
    if (chld_calls != 0)
        fail("blockedjoins", "the SIGCHLD handler was called for a thread's end");
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    wait_for(&chld_calls, 2000);
    if (chld_calls != 1 || chld_pid != child)
        fail("blockedjoins", "the handler was not called once for the program's child");
    int status;
    if (waitpid(child, &status, 0) != child)
        fail("blockedjoins", "waitpid of the child");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: signals MODE\n");
        return 2;
    }
    alarm(10);
    const char *mode = argv[1];
    if (strcmp(mode, "blockedjoins") == 0)
        blockedjoins();
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("%s ok\n", mode);
    return 0;
}
