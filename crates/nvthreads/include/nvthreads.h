/*
 * nvthreads.h - Ferrite NVthreads: crash-consistent pthreads on persistent memory.
 *
 * Link an unmodified pthreads program with -lnvthreads_rt (libnvthreads_rt.so, placed before
 * libc on the link line, which is the default), or run it with LD_PRELOAD=libnvthreads_rt.so.
 * The library replaces pthread_create/join/exit/self, pthread_mutex_*, pthread_cond_* and
 * pthread_barrier_*, and adds the persistence API below. Design: docs/nvthreads.md.
 *
 * Guarantee. Persistent data is what nvmalloc returns. After a crash (the whole program
 * killed, or power lost with the pool on real PM) and a restart, persistent data is as if the
 * program had stopped at a moment when no thread held a lock:
 *   - a durable code section runs from the lock that takes a thread from holding no mutex to
 *     holding one, to the unlock that returns it to holding none (nested and chained locks
 *     form one section); it is all or nothing;
 *   - writes made outside sections are committed at the thread's next synchronisation
 *     operation (lock, trylock, unlock to depth 0, cond wait/signal/broadcast, barrier wait,
 *     create, join, thread exit, nvmalloc, nvrecover, nvcheckpoint);
 *   - a section that ran while another thread had a section open (blocked in cond_wait with
 *     locks still held) becomes durable only together with that section;
 *   - when pthread_mutex_unlock returns 0 at depth 0 and no other section was open, the
 *     section is durable (nvt_durable_epoch() has advanced).
 *
 * Model and limits (first version). Threads are processes: the persistent heap, the
 * program's own globals (.data/.bss of the executable; shared, not persistent) and the
 * runtime's locks are shared, but stacks, malloc'd memory and other libraries' globals are
 * private to each thread after pthread_create (a child sees the parent's memory as it was at
 * creation). Share data between threads through nvmalloc'd memory or globals. Mutex
 * attributes are ignored (all mutexes are normal mutexes). read, pread and fread into the
 * heap or globals are wrapped to work; other system calls that write into such memory (recv,
 * readv, ...) fail with EFAULT unless the thread wrote to those pages since its last
 * synchronisation. Only one process may run the program on a pool at a time. NVT_GLOBALS=0
 * leaves globals private.
 *
 * Environment: NVT_POOL (pool file; default /dev/shm/nvthreads-<program>-<uid>.pool),
 * NVT_HEAP_MB (heap size of a new pool, default 64), NVT_LOG_MB (log size, default 16),
 * NVT_CRASH_AT=n (kill the process group after the n-th fence of the log protocol, recovery
 * included; for tests),
 * FERRITE_PERSIST_MODE / FERRITE_FLUSH (see Ferrite's README).
 */
#ifndef FERRITE_NVTHREADS_H
#define FERRITE_NVTHREADS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Programs built without -lnvthreads_rt, to be run with LD_PRELOAD, define NVT_WEAK_API
 * before including this header: the API becomes weak references, which the dynamic linker
 * binds to the preloaded library (and which are NULL without it).
 */
#ifdef NVT_WEAK_API
#define NVT_API __attribute__((weak))
#else
#define NVT_API
#endif

/*
 * Returns the persistent object called `name`, or allocates `size` zeroed bytes, records the
 * name and returns them. The heap sits at the same virtual address in every run, so pointers
 * stored in persistent objects stay valid after recovery. `name` may be NULL (an anonymous
 * allocation, reachable only through pointers stored in named objects); names have at most
 * 47 bytes and at most 63 exist. Returns NULL if the heap or the name table is full, or if
 * an existing object `name` is smaller than `size`. Outside a section the allocation is
 * durable on return; inside one it commits with the section. Objects are never freed.
 */
NVT_API void *nvmalloc(size_t size, const char *name);

/*
 * Copies min(size, object size) bytes of the recovered object `name` into `dest` and returns
 * the number of bytes copied (0 if no such object). With the fixed-address heap this is
 * rarely needed: nvmalloc(size, name) already returns the recovered object in place.
 */
NVT_API size_t nvrecover(void *dest, size_t size, const char *name);

/* 1 if the previous run of this program on this pool did not exit cleanly, else 0. */
NVT_API int crashed(void);
/* The original NVthreads name of crashed(). */
NVT_API int isCrashed(void);

/* Commits the calling thread's writes made outside critical sections. */
NVT_API void nvcheckpoint(void);

/* The last committed epoch: one more per global commit point. */
NVT_API uint64_t nvt_durable_epoch(void);

/* Starts the runtime now (it otherwise starts on first use). */
NVT_API void nvt_init(void);

#ifdef __cplusplus
}
#endif

#endif /* FERRITE_NVTHREADS_H */
