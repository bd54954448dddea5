/*
 * list (NVthreads paper, Fig. 1): a doubly-linked list in the persistent heap, appended to
 * under one lock. Nodes are anonymous nvmalloc allocations made inside the section and linked
 * by plain pointers, which stay valid after recovery because the heap has a fixed address.
 * At start the program walks the recovered list both ways and prints
 *   STATE run=R seq=N crashed=C ok=1
 * (seq = the list's length; ok=0 if the walks disagree with each other or with the stored
 * length, or if a thread's values are not consecutive). Usage: list THREADS ITERS [check]
 * With LIST_NODES=malloc in the environment the nodes come from plain malloc (persistent
 * only when the runtime runs with NVT_MALLOC=persistent).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvthreads.h"

#define MAX_RUNS 1024
#define MAX_THREADS 16

struct node {
    struct node *next;
    struct node *prev;
    uint64_t value; /* run << 40 | thread << 32 | iteration */
};

struct list {
    uint64_t run;
    uint64_t length;
    struct node *head;
    struct node *tail;
};

static struct list *list;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int iters;
static int ack_fd = -1;
static uint64_t run_id;
static int nodes_from_malloc;

static struct node *new_node(void) {
    if (nodes_from_malloc) {
        return malloc(sizeof(struct node));
    }
    return nvmalloc(sizeof(struct node), NULL);
}

static void *worker(void *arg) {
    uint64_t tid = (uint64_t)(uintptr_t)arg;
    for (int i = 0; i < iters; i++) {
        pthread_mutex_lock(&m);
        struct node *e = new_node();
        if (e == NULL) {
            pthread_mutex_unlock(&m);
            break;
        }
        e->value = (run_id << 40) | (tid << 32) | (uint64_t)i;
        e->next = NULL;
        e->prev = list->tail;
        if (list->tail != NULL) {
            list->tail->next = e;
        } else {
            list->head = e;
        }
        list->tail = e;
        uint64_t length = ++list->length;
        pthread_mutex_unlock(&m);
        if (ack_fd >= 0 && write(ack_fd, &length, sizeof length) != (ssize_t)sizeof length) {
            _exit(3);
        }
    }
    return NULL;
}

static int check(const char **why) {
    static uint64_t next[MAX_RUNS][MAX_THREADS];
    memset(next, 0, sizeof next);
    uint64_t forward = 0;
    struct node *last = NULL;
    for (struct node *e = list->head; e != NULL; e = e->next) {
        if (e->prev != last) {
            *why = "prev pointer disagrees with the forward walk";
            return 0;
        }
        uint64_t run = e->value >> 40, tid = (e->value >> 32) & 0xff, iter = e->value & 0xffffffffu;
        if (run == 0 || run >= MAX_RUNS || tid >= MAX_THREADS || iter != next[run][tid]) {
            *why = "node value is not its thread's next iteration";
            return 0;
        }
        next[run][tid] = iter + 1;
        last = e;
        if (++forward > list->length) {
            *why = "forward walk longer than the length";
            return 0;
        }
    }
    if (last != list->tail || forward != list->length) {
        *why = "forward walk disagrees with tail or length";
        return 0;
    }
    uint64_t backward = 0;
    for (struct node *e = list->tail; e != NULL && backward <= forward; e = e->prev) {
        backward++;
    }
    if (backward != forward) {
        *why = "backward walk disagrees";
        return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        return 2;
    }
    int threads = atoi(argv[1]);
    iters = atoi(argv[2]);
    const char *fd = getenv("ACK_FD");
    if (fd != NULL) {
        ack_fd = atoi(fd);
    }
    const char *nodes = getenv("LIST_NODES");
    nodes_from_malloc = nodes != NULL && strcmp(nodes, "malloc") == 0;
    int was_crashed = crashed();
    list = nvmalloc(sizeof *list, "list");
    if (list == NULL) {
        return 1;
    }
    const char *why = "";
    int ok = check(&why);
    printf("STATE run=%" PRIu64 " seq=%" PRIu64 " crashed=%d ok=%d %s\n", list->run, list->length,
           was_crashed, ok, ok ? "" : why);
    fflush(stdout);
    if (!ok || (argc > 3 && strcmp(argv[3], "check") == 0)) {
        return ok ? 0 : 1;
    }
    pthread_mutex_lock(&m);
    run_id = ++list->run;
    pthread_mutex_unlock(&m);
    if (run_id >= MAX_RUNS) {
        return 0;
    }
    pthread_t handles[MAX_THREADS];
    for (int t = 0; t < threads && t < MAX_THREADS; t++) {
        pthread_create(&handles[t], NULL, worker, (void *)(uintptr_t)t);
    }
    for (int t = 0; t < threads && t < MAX_THREADS; t++) {
        pthread_join(handles[t], NULL);
    }
    printf("DONE seq=%" PRIu64 "\n", list->length);
    uint64_t sum = 0;
    for (struct node *e = list->head; e != NULL; e = e->next) {
        sum += e->value & 0xffffffffffu;
    }
    printf("RESULT length=%" PRIu64 " sum=%" PRIu64 "\n", list->length, sum);
    return 0;
}
