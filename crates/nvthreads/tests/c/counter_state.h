/*
 * The counter's persistent state and its check, shared by counter.c (pthreads) and c11.c
 * (C11 <threads.h>): a, b and seq count the sections, and log[s] names the (run, thread,
 * iteration) of section s.
 */
#ifndef COUNTER_STATE_H
#define COUNTER_STATE_H

#include <stdint.h>
#include <string.h>

#define MAX_LOG 400000
#define MAX_RUNS 1024
#define MAX_THREADS 16

/* a, b and the log sit on different pages, so every section dirties at least three pages
 * and a torn section shows up as a != b or a missing log entry. */
struct state {
    uint64_t run;
    uint64_t seq;
    uint64_t a;
    char pad_a[4096];
    uint64_t b;
    char pad_b[4096];
    uint64_t log[MAX_LOG];
};

static struct state *st;

static uint64_t entry(uint64_t run, uint64_t tid, uint64_t iter) {
    return (run << 40) | (tid << 32) | iter;
}

/* Whether the recovered state is consistent: a == b == seq, and every log entry is the next
 * iteration of its (run, thread). Sets *why when not. */
static int check(const char **why) {
    static uint64_t next[MAX_RUNS][MAX_THREADS];
    memset(next, 0, sizeof next);
    if (st->a != st->seq || st->b != st->seq) {
        *why = "a, b and seq differ";
        return 0;
    }
    if (st->seq > MAX_LOG) {
        *why = "seq out of range";
        return 0;
    }
    for (uint64_t i = 0; i < st->seq; i++) {
        uint64_t run = st->log[i] >> 40;
        uint64_t tid = (st->log[i] >> 32) & 0xff;
        uint64_t iter = st->log[i] & 0xffffffffu;
        if (run == 0 || run > st->run || run >= MAX_RUNS || tid >= MAX_THREADS) {
            *why = "log entry names no run or thread";
            return 0;
        }
        if (iter != next[run][tid]) {
            *why = "log entry is not the next iteration of its thread";
            return 0;
        }
        next[run][tid] = iter + 1;
    }
    return 1;
}

#endif
