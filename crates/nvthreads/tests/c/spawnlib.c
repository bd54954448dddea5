/*
 * A library with worker threads of its own (as liblzma, which strace loads): it imports
 * pthread_create. A wrapper linked with it must not take the program's pool.
 */
#include <pthread.h>

static void *work(void *arg) { return arg; }

int spawnlib_ready(void) { return 1; }

int spawnlib_run(void) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, work, NULL) != 0)
        return -1;
    return pthread_join(thread, NULL);
}
