/*
 * errors: every way nvmalloc can fail returns NULL with a documented errno and a reason
 * nvt_error() returns: a name longer than 47 bytes (ENAMETOOLONG), an empty name (EINVAL),
 * an existing object smaller than asked (EEXIST), more than 63 names (ENOSPC), more than
 * the heap holds (ENOMEM); nvrecover into NULL (EINVAL). A successful call leaves errno alone. Prints "ERRORS ok", or the
 * first mismatch and exits 1.
 * Usage: errors
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "nvthreads.h"

static int failed;

static void expect_failure(void *p, int want, const char *what, const char *mention) {
    const char *why = nvt_error();
    if (p != NULL || errno != want || why == NULL || strstr(why, mention) == NULL) {
        printf("%s: got %p errno %d (want %d) reason \"%s\" (want it to mention \"%s\")\n", what,
               p, errno, want, why ? why : "(null)", mention);
        failed = 1;
    }
}

int main(void) {
    char name[64];
    errno = 0;
    if (nvmalloc(16, "first") == NULL || errno != 0) {
        printf("a good nvmalloc failed or set errno %d\n", errno);
        return 1;
    }
    expect_failure(nvmalloc(16, "a-name-that-is-longer-than-forty-seven-bytes-long"),
                   ENAMETOOLONG, "long name", "at most 47");
    expect_failure(nvmalloc(16, ""), EINVAL, "empty name", "empty");
    expect_failure(nvmalloc(1024, "first"), EEXIST, "smaller object", "fewer than");
    for (int i = 0; i < 62; i++) {
        snprintf(name, sizeof name, "name-%d", i);
        if (nvmalloc(8, name) == NULL) {
            printf("name %d failed: %s\n", i, nvt_error());
            return 1;
        }
    }
    expect_failure(nvmalloc(8, "one-too-many"), ENOSPC, "full directory", "names");
    expect_failure(nvmalloc((size_t)1 << 40, NULL), ENOMEM, "huge", "free bytes");
    /* nvrecover: a NULL destination of a nonzero size is refused (it crashed), of size 0
       copies nothing; a real destination gets the object's bytes. */
    errno = 0;
    if (nvrecover(NULL, 0, "first") != 0 || errno != 0) {
        printf("nvrecover(NULL, 0) copied something or set errno %d\n", errno);
        failed = 1;
    }
    if (nvrecover(NULL, 16, "first") != 0 || errno != EINVAL ||
        strstr(nvt_error(), "destination is NULL") == NULL) {
        printf("nvrecover(NULL, 16): errno %d reason \"%s\"\n", errno, nvt_error());
        failed = 1;
    }
    char copy[16];
    if (nvrecover(copy, sizeof copy, "first") != sizeof copy) {
        printf("nvrecover of \"first\" did not copy its 16 bytes\n");
        failed = 1;
    }
    if (!failed) {
        printf("ERRORS ok\n");
    }
    return failed;
}
