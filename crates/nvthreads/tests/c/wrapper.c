/*
 * A wrapper (as timeout, env or strace): runs argv[1..] with exec. Linked with spawnlib,
 * which imports pthread_create; the wrapper itself creates no threads.
 * Usage: wrapper PROGRAM [ARGS...]
 */
#include <stdio.h>
#include <unistd.h>

int spawnlib_ready(void);

int main(int argc, char **argv) {
    if (argc < 2 || !spawnlib_ready()) {
        fprintf(stderr, "usage: wrapper PROGRAM [ARGS...]\n");
        return 2;
    }
    execvp(argv[1], argv + 1);
    perror("wrapper: execvp");
    return 127;
}
