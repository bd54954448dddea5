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
 *             a worker's hot pages when the section wrote none of them).
 * Each is timed over ROUNDS repetitions, 5 times; the median is printed in ns.
 * Usage: floor ROUNDS   (x86-64 with clwb; build: cc -O2 floor.c -o floor -lpthread)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <immintrin.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUNS 5
#define PAGE 4096
#define HOT_PAGES 13
#define RECORD 192

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

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 20000;
    if (rounds <= 0) {
        fprintf(stderr, "usage: floor ROUNDS\n");
        return 2;
    }
    double processes[RUNS], threads[RUNS], fences[RUNS], diffs[RUNS];
    for (int run = 0; run < RUNS; run++) {
        processes[run] = handoff(rounds, 1);
        threads[run] = handoff(rounds, 0);
        fences[run] = fence(rounds);
        diffs[run] = diff(rounds);
    }
    printf("handoff between processes: %.0f ns\n", median(processes));
    printf("handoff between threads: %.0f ns\n", median(threads));
    printf("record write + clwb x3 + sfence: %.0f ns\n", median(fences));
    printf("memcmp of %d equal hot pages: %.0f ns\n", HOT_PAGES, median(diffs));
    return 0;
}
