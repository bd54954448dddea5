/*
 * One descriptor table for all threads, as with pthreads (docs/nvthreads.md §3.1): a
 * descriptor opened or closed by one thread is open or closed in every thread, existing
 * ones included. Usage: fdtable MODE, printing "MODE ok" or the first failure:
 *   eof      a thread reads a pipe to its end while main writes a line and closes the
 *            write end: the thread sees end-of-file (with a table per thread-process, its
 *            own copy of the write end kept the pipe open: the read blocked for ever);
 *   epipe    main closes the read end of a pipe after creating a thread; the thread's
 *            write fails with EPIPE (SIGPIPE ignored from the start), not succeeds into a
 *            pipe only the thread still reads;
 *   opened   descriptors a thread opens (a pipe) are used by main after the join, and
 *            one main opens after creating a thread is used by that thread;
 *   closed   a descriptor closed by a thread is closed for main too (fcntl: EBADF), and
 *            a dup2 onto a number by a thread is seen by main;
 *   cwd      the working directory and umask are the process's too: a thread's chdir and
 *            umask are seen by main (pthreads share them as they share the table).
 * Every mode ends itself with alarm(5) if it hangs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void fail(const char *mode, const char *what) {
    printf("%s FAILED: %s (errno %d)\n", mode, what, errno);
    exit(1);
}

static int pipe_fds[2];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int stage;

/* Waits until main has moved `stage` to at least `at`. */
static void wait_stage(int at) {
    pthread_mutex_lock(&lock);
    while (stage < at)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
}

static void set_stage(int at) {
    pthread_mutex_lock(&lock);
    stage = at;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

static void *read_to_end(void *unused) {
    (void)unused;
    char buffer[64];
    size_t total = 0;
    ssize_t n;
    while ((n = read(pipe_fds[0], buffer + total, sizeof buffer - 1 - total)) > 0)
        total += (size_t)n;
    buffer[total] = '\0';
    return (void *)(long)(n == 0 && strcmp(buffer, "a line\n") == 0);
}

static void eof(void) {
    if (pipe(pipe_fds) != 0)
        fail("eof", "pipe");
    pthread_t reader;
    pthread_create(&reader, NULL, read_to_end, NULL);
    if (write(pipe_fds[1], "a line\n", 7) != 7)
        fail("eof", "write");
    close(pipe_fds[1]);
    void *whole;
    pthread_join(reader, &whole);
    if (!whole)
        fail("eof", "the reader did not read the line and then end-of-file");
}

static void *write_after_close(void *unused) {
    (void)unused;
    wait_stage(1);
    ssize_t n = write(pipe_fds[1], "x", 1);
    return (void *)(long)(n < 0 ? errno : 0);
}

static void epipe(void) {
    signal(SIGPIPE, SIG_IGN);
    if (pipe(pipe_fds) != 0)
        fail("epipe", "pipe");
    pthread_t writer;
    pthread_create(&writer, NULL, write_after_close, NULL);
    close(pipe_fds[0]);
    set_stage(1);
    void *error;
    pthread_join(writer, &error);
    if ((long)error != EPIPE)
        fail("epipe", "a write to a pipe whose only reader main closed did not fail with EPIPE");
}

static int later_fds[2];

static void *open_pipe(void *unused) {
    (void)unused;
    return (void *)(long)pipe(pipe_fds);
}

static void *use_later_pipe(void *unused) {
    (void)unused;
    wait_stage(1);
    return (void *)(long)(write(later_fds[1], "t", 1) == 1);
}

static void opened(void) {
    pthread_t opener;
    void *result;
    pthread_create(&opener, NULL, open_pipe, NULL);
    pthread_join(opener, &result);
    if (result != NULL)
        fail("opened", "pipe in a thread");
    char byte = 0;
    if (write(pipe_fds[1], "m", 1) != 1 || read(pipe_fds[0], &byte, 1) != 1 || byte != 'm')
        fail("opened", "main cannot use a pipe a joined thread opened");
    pthread_t user;
    pthread_create(&user, NULL, use_later_pipe, NULL);
    if (pipe(later_fds) != 0)
        fail("opened", "pipe in main");
    set_stage(1);
    pthread_join(user, &result);
    if (!result || read(later_fds[0], &byte, 1) != 1 || byte != 't')
        fail("opened", "a thread cannot use a pipe main opened after creating it");
}

static int victim, target;

static void *close_and_dup(void *unused) {
    (void)unused;
    int closed = close(victim);
    int duplicated = dup2(pipe_fds[1], target);
    return (void *)(long)(closed == 0 && duplicated == target);
}

static void closed(void) {
    if (pipe(pipe_fds) != 0)
        fail("closed", "pipe");
    victim = dup(pipe_fds[0]);
    target = dup(pipe_fds[0]);
    if (victim < 0 || target < 0)
        fail("closed", "dup");
    pthread_t closer;
    void *result;
    pthread_create(&closer, NULL, close_and_dup, NULL);
    pthread_join(closer, &result);
    if (!result)
        fail("closed", "close or dup2 in the thread");
    errno = 0;
    if (fcntl(victim, F_GETFD) != -1 || errno != EBADF)
        fail("closed", "a descriptor the thread closed is still open in main");
    char byte = 0;
    if (write(target, "d", 1) != 1 || read(pipe_fds[0], &byte, 1) != 1 || byte != 'd')
        fail("closed", "the thread's dup2 onto a number is not seen by main");
}

static void *move_and_mask(void *unused) {
    (void)unused;
    return (void *)(long)(chdir("/tmp") == 0 && umask(027) == 022);
}

static void cwd(void) {
    if (chdir("/") != 0)
        fail("cwd", "chdir in main");
    umask(022);
    pthread_t mover;
    void *result;
    pthread_create(&mover, NULL, move_and_mask, NULL);
    pthread_join(mover, &result);
    if (!result)
        fail("cwd", "chdir or umask in the thread");
    char here[64];
    if (getcwd(here, sizeof here) == NULL || strcmp(here, "/tmp") != 0)
        fail("cwd", "main is not where the thread moved");
    if (umask(022) != 027)
        fail("cwd", "main's umask is not the one the thread set");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fdtable eof|epipe|opened|closed|cwd\n");
        return 2;
    }
    alarm(5);
    const char *mode = argv[1];
    if (strcmp(mode, "eof") == 0)
        eof();
    else if (strcmp(mode, "epipe") == 0)
        epipe();
    else if (strcmp(mode, "opened") == 0)
        opened();
    else if (strcmp(mode, "closed") == 0)
        closed();
    else if (strcmp(mode, "cwd") == 0)
        cwd();
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("%s ok\n", mode);
    return 0;
}
