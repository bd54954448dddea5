/*
 * The floor under a lock-heavy kernel's section on this machine: what the steps that no
 * runtime change can remove cost, each measured alone (docs/nvthreads.md §10).
 *   handoff:  one wake-up and one sleep between two processes (threads of the runtime are
 *             processes) and between two threads of one process: a futex ping-pong on a
 *             word of shared memory, per one-way handoff (what a condition variable's
 *             signal and wait cost the work queue);
 *   fence:    writing a 192-byte record to a file on /dev/shm mapped MAP_SHARED, `clwb`
 *             of its 3 lines and `sfence` (one log append's persistence);
 *   diff:     `memcmp` of 13 private pages with their twins, all equal (a merge's check of
 *             a worker's hot pages when the section wrote none of them);
 *   detect:   the alternative to diffs, write detection by the kernel: 16 private pages of
 *             a 64 MiB file mapping registered with userfaultfd for asynchronous
 *             write-protection (Linux 6.7), then per round W of them written and one
 *             PAGEMAP_SCAN ioctl that reports and write-protects again the pages written
 *             since the last scan; per round, for W = 0, 1 and 3 (skipped, with a message,
 *             where the kernel lacks the features).
 * Each is timed over ROUNDS repetitions, 5 times; the median is printed in ns.
 * Usage: floor ROUNDS   (x86-64 with clwb; build: cc -O2 floor.c -o floor -lpthread)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <immintrin.h>
#include <linux/futex.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUNS 5
#define PAGE 4096
#define HOT_PAGES 13
#define RECORD 192
#define DETECT_PAGES 16
#define DETECT_SPAN (64UL << 20)

/* Linux 6.7 interfaces, absent from older headers (values from the kernel's uapi). */
#define WP_ASYNC (1ULL << 15)       /* UFFD_FEATURE_WP_ASYNC */
#define WP_UNPOPULATED (1ULL << 13) /* UFFD_FEATURE_WP_UNPOPULATED */
struct scan_arg {                   /* struct pm_scan_arg */
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
struct scan_region {                /* struct page_region */
    uint64_t start, end, categories;
};
#define SCAN _IOWR('f', 16, struct scan_arg) /* PAGEMAP_SCAN */
#define SCAN_WP_MATCHING (1 << 0)
#define SCAN_CHECK_WPASYNC (1 << 1)
#define PAGE_WRITTEN (1 << 1)

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int compare(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *runs) {
    qsort(runs, RUNS, sizeof *runs, compare);
    return runs[RUNS / 2];
}

static void futex_wait(uint32_t *word, uint32_t value, int shared) {
    syscall(SYS_futex, word, shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
}

static void futex_wake(uint32_t *word, int shared) {
    syscall(SYS_futex, word, shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* The turn word: even for the first side, odd for the second; each side waits for its
 * turn, then passes it on and wakes the other. */
struct pingpong {
    uint32_t turn;
    long rounds;
    int shared;
};

static void play(struct pingpong *game, uint32_t side) {
    for (long i = 0; i < game->rounds; i++) {
        uint32_t mine = (uint32_t)(2 * i) + side;
        uint32_t seen;
        while ((seen = __atomic_load_n(&game->turn, __ATOMIC_ACQUIRE)) != mine) {
            futex_wait(&game->turn, seen, game->shared);
        }
        __atomic_store_n(&game->turn, mine + 1, __ATOMIC_RELEASE);
        futex_wake(&game->turn, game->shared);
    }
}

static void *second_thread(void *arg) {
    play(arg, 1);
    return NULL;
}

/* ns per one-way handoff between two processes (shared) or two threads. */
static double handoff(long rounds, int processes) {
    struct pingpong *game = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
                                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    game->turn = 0;
    game->rounds = rounds;
    game->shared = processes;
    double start = now_ns();
    if (processes) {
        pid_t child = fork();
        if (child == 0) {
            play(game, 1);
            _exit(0);
        }
        play(game, 0);
        waitpid(child, NULL, 0);
    } else {
        pthread_t other;
        pthread_create(&other, NULL, second_thread, game);
        play(game, 0);
        pthread_join(other, NULL);
    }
    double elapsed = now_ns() - start;
    munmap(game, PAGE);
    return elapsed / (2.0 * rounds);
}

__attribute__((target("clwb"))) static double fence(long rounds) {
    char path[] = "/dev/shm/nvt-floor-XXXXXX";
    int fd = mkstemp(path);
    size_t len = 1 << 20;
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        perror("pool file");
        exit(1);
    }
    unlink(path);
    char *pool = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    char record[RECORD];
    memset(record, 0x5a, sizeof record);
    memset(pool, 0, len);
    double start = now_ns();
    for (long i = 0; i < rounds; i++) {
        char *at = pool + (size_t)(i * RECORD) % (len - RECORD) / 64 * 64;
        record[0] = (char)i;
        memcpy(at, record, RECORD);
        for (int line = 0; line < RECORD; line += 64) {
            _mm_clwb(at + line);
        }
        _mm_sfence();
    }
    double elapsed = now_ns() - start;
    munmap(pool, len);
    close(fd);
    return elapsed / (double)rounds;
}

static double diff(long rounds) {
    char *pages = malloc(HOT_PAGES * PAGE), *twins = malloc(HOT_PAGES * PAGE);
    memset(pages, 7, HOT_PAGES * PAGE);
    memcpy(twins, pages, HOT_PAGES * PAGE);
    volatile long equal = 0;
    double start = now_ns();
    for (long i = 0; i < rounds; i++) {
        for (int p = 0; p < HOT_PAGES; p++) {
            equal += memcmp(pages + p * PAGE, twins + p * PAGE, PAGE) == 0;
        }
    }
    double elapsed = now_ns() - start;
    free(pages);
    free(twins);
    return elapsed / (double)rounds;
}

/* A file mapped shared and private (as the heap's two views), the private view
 * registered for asynchronous write-protection. */
struct detection {
    char *shared, *region;
    int file, uffd, pagemap;
};

static void release(struct detection *d) {
    munmap(d->region, DETECT_SPAN);
    munmap(d->shared, DETECT_SPAN);
    close(d->uffd);
    close(d->file);
    if (d->pagemap >= 0) {
        close(d->pagemap);
    }
}

/* The detection region: DETECT_PAGES private copies in a registered 64 MiB file mapping,
 * write-protected asynchronously. Returns 0, or -1 (after a message) without the
 * features. */
static int detection_region(struct detection *d) {
    d->pagemap = -1;
    d->file = memfd_create("nvt-floor", 0);
    if (d->file < 0 || ftruncate(d->file, (off_t)DETECT_SPAN) != 0) {
        perror("memfd");
        exit(1);
    }
    d->shared = mmap(NULL, DETECT_SPAN, PROT_READ | PROT_WRITE, MAP_SHARED, d->file, 0);
    memset(d->shared, 1, DETECT_PAGES * PAGE);
    char *region = mmap(NULL, DETECT_SPAN, PROT_READ | PROT_WRITE, MAP_PRIVATE, d->file, 0);
    d->region = region;
    for (int p = 0; p < DETECT_PAGES; p++) {
        region[p * PAGE] = 2; /* this process's private copy, as a dirty page has */
    }
    int uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    d->uffd = uffd;
    struct uffdio_api api = {.api = UFFD_API, .features = WP_ASYNC | WP_UNPOPULATED};
    struct uffdio_register reg = {
        .range = {(uint64_t)region, DETECT_SPAN}, .mode = UFFDIO_REGISTER_MODE_WP};
    struct uffdio_writeprotect protect = {
        .range = {(uint64_t)region, DETECT_SPAN}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
    if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) != 0 ||
        ioctl(uffd, UFFDIO_REGISTER, &reg) != 0 ||
        ioctl(uffd, UFFDIO_WRITEPROTECT, &protect) != 0) {
        perror("userfaultfd asynchronous write-protection");
        release(d);
        return -1;
    }
    d->pagemap = open("/proc/self/pagemap", O_RDONLY);
    return 0;
}

/* ns per round of writing `written` of the pages and one scan; -1 without the features. */
static double detect(long rounds, int written) {
    struct detection d;
    if (detection_region(&d) != 0) {
        return -1;
    }
    char *region = d.region;
    struct scan_region found[DETECT_PAGES];
    struct scan_arg scan = {
        .size = sizeof scan,
        .flags = SCAN_WP_MATCHING | SCAN_CHECK_WPASYNC,
        .start = (uint64_t)region,
        .end = (uint64_t)region + DETECT_PAGES * PAGE,
        .vec = (uint64_t)found,
        .vec_len = DETECT_PAGES,
        .category_mask = PAGE_WRITTEN,
        .return_mask = PAGE_WRITTEN,
    };
    double start = now_ns();
    for (long i = 0; i < rounds; i++) {
        for (int w = 0; w < written; w++) {
            region[((i * 7 + w * 5) % DETECT_PAGES) * PAGE + 8] = (char)i;
        }
        scan.walk_end = 0;
        if (ioctl(d.pagemap, SCAN, &scan) < 0) {
            perror("PAGEMAP_SCAN");
            release(&d);
            return -1;
        }
    }
    double elapsed = now_ns() - start;
    release(&d);
    return elapsed / (double)rounds;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 20000;
    if (rounds <= 0) {
        fprintf(stderr, "usage: floor ROUNDS\n");
        return 2;
    }
    static const int WRITTEN[] = {0, 1, 3};
    double processes[RUNS], threads[RUNS], fences[RUNS], diffs[RUNS], detects[3][RUNS];
    for (int run = 0; run < RUNS; run++) {
        processes[run] = handoff(rounds, 1);
        threads[run] = handoff(rounds, 0);
        fences[run] = fence(rounds);
        diffs[run] = diff(rounds);
        for (int w = 0; w < 3; w++) {
            detects[w][run] = detect(rounds, WRITTEN[w]);
        }
    }
    printf("handoff between processes: %.0f ns\n", median(processes));
    printf("handoff between threads: %.0f ns\n", median(threads));
    printf("record write + clwb x3 + sfence: %.0f ns\n", median(fences));
    printf("memcmp of %d equal hot pages: %.0f ns\n", HOT_PAGES, median(diffs));
    for (int w = 0; w < 3; w++) {
        if (median(detects[w]) >= 0) {
            printf("write detection, %d of %d pages written: %.0f ns\n", WRITTEN[w],
                   DETECT_PAGES, median(detects[w]));
        }
    }
    return 0;
}
