/* Helpers shared by the native sources; not part of the API. */
#ifndef CXLBENCH_INTERNAL_H
#define CXLBENCH_INTERNAL_H
#include "cxlbench.h"

/* Record a message for cxb_last_error() and return -err (err is a positive errno). */
int cxb_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A kernel variant: the one fixed signature of the kernel table. */
typedef int (*cxb_kernel_fn)(struct cxb_kargs *a);

/* Run fn(arg_i) on n threads, thread i pinned to cpus[i] (cpus may be NULL: unpinned),
 * released together at a barrier. Returns the first thread's failure, if any. */
typedef int (*cxb_thread_fn)(void *arg, int thread);
int cxb_parallel(cxb_thread_fn fn, void *arg, const int *cpus, int n);

/* 1 when short regions are timed with rdtscp: an invariant TSC (timer.c). Python learns
 * the same answer from cxb_timer_calibrate's tsc_available. */
int cxb_tsc_usable(void);

/* Walk `batches` batches of `batch` dependent loads from p, each batch's rdtscp ticks (or
 * ns, where cxb_tsc_usable() says no) into ticks[]; returns where the walk ended
 * (chase.c: the chase's distribution and loaded latency's). */
void **cxb_chase_timed(void **p, uint64_t batches, uint64_t batch, uint64_t *ticks);

/* First start to last finish of n threads' timed regions [t0[i], t1[i]]. */
static inline uint64_t cxb_span_ns(const uint64_t *t0, const uint64_t *t1, int n)
{
    uint64_t first = t0[0], last = t1[0];
    for (int i = 1; i < n; i++) {
        first = t0[i] < first ? t0[i] : first;
        last = t1[i] > last ? t1[i] : last;
    }
    return last - first;
}

#define CXB_LINE 64
#define CXB_WALK_PAGE 4096      /* the page a walk keeps open side by side (bandwidth.c) */

/* Walked copies and fills of whole lines (bandwidth.c): prefetch lines ahead of the loads,
 * `ways` pages side by side; P is the ISA (S, A2, A5), _nt the non-temporal stores. */
#define CXB_WALKERS(P)                                                                \
    void cxb_copy_walk_##P(char *restrict d, const char *restrict s, size_t bytes,       \
                           uint32_t prefetch, uint32_t ways);                         \
    void cxb_copy_walk_##P##_nt(char *restrict d, const char *restrict s, size_t bytes,  \
                                uint32_t prefetch, uint32_t ways);                    \
    void cxb_fill_walk_##P(char *restrict d, uint64_t value, size_t bytes, uint32_t ways); \
    void cxb_fill_walk_##P##_nt(char *restrict d, uint64_t value, size_t bytes, uint32_t ways);
CXB_WALKERS(S)
#if defined(__x86_64__)
CXB_WALKERS(A2)
CXB_WALKERS(A5)
/* rep movsb: the CPU's string microcode copies (bandwidth.c). */
void cxb_rep_movsb(char *d, const char *s, size_t bytes);
#endif
#define CXB_ISA_COUNT (CXB_ISA_AVX512 + 1)
#endif
