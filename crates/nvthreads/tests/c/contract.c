/*
 * nvmalloc's error contract, which holds the same with the runtime dormant (NVT_DISABLE=1).
 *   contract common   every refused request: NULL, the documented errno, nvt_error() says
 *                     why; prints "CONTRACT ok" or the first violation
 *   contract names    mallocs 16 bytes, then names objects until nvmalloc refuses; prints
 *                     "NAMES made=N errno=E error=MESSAGE"
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvthreads.h"

static int refused(size_t size, const char *name, int expected, const char *why) {
    errno = 0;
    void *at = nvmalloc(size, name);
    if (at != NULL || errno != expected || strstr(nvt_error(), why) == NULL) {
        printf("CONTRACT nvmalloc(%zu, %s): %p errno=%d (want %d) nvt_error=\"%s\" (want \"%s\")\n",
               size, name ? name : "NULL", at, errno, expected, nvt_error(), why);
        return 0;
    }
    return 1;
}

static int common(void) {
    char long_name[49];
    memset(long_name, 'a', 48);
    long_name[48] = 0;
    if (!refused(0, "zero", EINVAL, "size is 0") || !refused(0, NULL, EINVAL, "size is 0") ||
        !refused(16, long_name, ENAMETOOLONG, "at most 47") ||
        !refused(16, "", EINVAL, "is empty"))
        return 1;
    char *small = nvmalloc(16, "small");
    if (small == NULL) {
        printf("CONTRACT nvmalloc(16, small) failed: %s\n", nvt_error());
        return 1;
    }
    if (!refused(0, "small", EINVAL, "size is 0") ||
        !refused(32, "small", EEXIST, "fewer than the 32"))
        return 1;
    if (nvmalloc(8, "small") != small) {
        printf("CONTRACT nvmalloc(8, small) is not the object\n");
        return 1;
    }
    printf("CONTRACT ok\n");
    return 0;
}

static int names(void) {
    char *block = malloc(16);
    if (block == NULL)
        return 1;
    int made = 0;
    char name[32];
    for (;;) {
        snprintf(name, sizeof name, "n%03d", made);
        errno = 0;
        if (nvmalloc(8, name) == NULL)
            break;
        made += 1;
    }
    printf("NAMES made=%d errno=%d error=%s\n", made, errno, nvt_error());
    free(block);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "common") == 0)
        return common();
    if (argc == 2 && strcmp(argv[1], "names") == 0)
        return names();
    fprintf(stderr, "usage: contract common|names\n");
    return 2;
}
