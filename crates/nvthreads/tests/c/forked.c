/*
 * fork() outside pthread_create. At start prints "STATE cnt=N crashed=C", then by MODE:
 *   daemon  the parent exits 0 at once (a server daemonising); the child creates threads,
 *           which the runtime must refuse (exit status 70), so it never prints CHILD
 *   wait    the same child, but the parent waits for it and prints "CHILD status=S"
 *   exec    the child execs /bin/true; exit: the child calls exit(0) at once; in both the
 *           parent waits for it and prints "CHILD status=S"
 *   exit-kill  as exit, and the parent dies of SIGKILL after printing DONE
 * then (but in daemon mode) the parent runs 2 threads x 100 sections (cnt += 1) and prints
 * "DONE cnt=N".
 * Usage: forked MODE
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nvthreads.h"

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static long *cnt;

static void *work(void *arg) {
    for (int i = 0; i < 100; i++) {
        pthread_mutex_lock(&m);
        *cnt += 1;
        pthread_mutex_unlock(&m);
    }
    return arg;
}

static void run_threads(void) {
    pthread_t threads[2];
    for (int t = 0; t < 2; t++)
        if (pthread_create(&threads[t], NULL, work, NULL) != 0)
            exit(1);
    for (int t = 0; t < 2; t++)
        pthread_join(threads[t], NULL);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: forked daemon|wait|exec|exit\n");
        return 2;
    }
    const char *mode = argv[1];
    cnt = nvmalloc(sizeof *cnt, "cnt");
    if (cnt == NULL)
        return 1;
    printf("STATE cnt=%ld crashed=%d\n", *cnt, crashed());
    fflush(stdout);
    pid_t child = fork();
    if (child < 0)
        return 1;
    if (child == 0) {
        if (strcmp(mode, "exec") == 0) {
            execl("/bin/true", "true", (char *)NULL);
            _exit(127);
        }
        if (strcmp(mode, "exit") == 0 || strcmp(mode, "exit-kill") == 0)
            exit(0);
        if (strcmp(mode, "daemon") == 0)
            usleep(200 * 1000); /* the parent is gone by now */
        run_threads();
        printf("CHILD cnt=%ld\n", *cnt);
        return 0;
    }
    if (strcmp(mode, "daemon") == 0)
        exit(0);
    int status = 0;
    if (waitpid(child, &status, 0) != child)
        return 1;
    printf("CHILD status=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    fflush(stdout);
    run_threads();
    printf("DONE cnt=%ld\n", *cnt);
    fflush(stdout);
    if (strcmp(mode, "exit-kill") == 0)
        raise(SIGKILL); /* a crash after the child's exit: the next run must see it */
    return 0;
}
