/*
 * A program whose only thread is created by a library (spawnlib), as C++ std::thread's are
 * by libstdc++: it imports neither pthread_create nor the persistence API itself.
 * Prints "SPAWNED <spawnlib_run's result>".
 */
#include <stdio.h>

int spawnlib_run(void);

int main(void) {
    int result = spawnlib_run();
    printf("SPAWNED %d\n", result);
    return result != 0;
}
