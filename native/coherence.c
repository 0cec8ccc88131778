/* Coherence: a cache line bounced between two threads (ping-pong), and atomics on shared,
 * private and falsely shared lines. The line's memory is placed by the caller, so its
 * home node (CPU-less nodes included) is a parameter of the measurement. */
#include <errno.h>
#include <stdlib.h>
#include "internal.h"

struct team_state {
    struct cxb_coherence_args *a;
    uint64_t *start, *end;
};

/* Ping-pong: thread 0 owns odd turns, thread 1 even ones. Each waits for its turn, then
 * hands over by a plain store or by compare-and-swap. The counter ends at
 * 2 * iterations, one increment per one-way transfer. */
static int pingpong_thread(void *p, int t)
{
    struct team_state *s = p;
    struct cxb_coherence_args *a = s->a;
    volatile uint64_t *line = a->line;
    uint64_t total = 2 * a->iterations;
    s->start[t] = cxb_now_ns();
    for (uint64_t turn = (uint64_t)t; turn < total; turn += 2) {
        if (a->mode == CXB_PINGPONG_STORE) {
            while (__atomic_load_n(line, __ATOMIC_ACQUIRE) != turn)
                ;
            __atomic_store_n(line, turn + 1, __ATOMIC_RELEASE);
        } else {
            uint64_t want = turn;
            while (!__atomic_compare_exchange_n(line, &want, turn + 1, 0, __ATOMIC_ACQ_REL,
                                                __ATOMIC_ACQUIRE))
                want = turn;
        }
    }
    s->end[t] = cxb_now_ns();
    return 0;
}

/* Atomics, `iterations` per thread (CXB_ATOMIC_*): fetch-and-add or CAS increments of one
 * shared word; fetch-and-add on a line of each thread's own, or on adjacent words of one
 * line (false sharing). */
static int atomics_thread(void *p, int t)
{
    struct team_state *s = p;
    struct cxb_coherence_args *a = s->a;
    uint64_t *base = a->line;
    uint64_t *word = a->mode == CXB_ATOMIC_PRIVATE ? base + (size_t)t * (CXB_LINE / 8)
                   : a->mode == CXB_ATOMIC_FALSE_SHARING ? base + t % (CXB_LINE / 8) : base;
    s->start[t] = cxb_now_ns();
    for (uint64_t i = 0; i < a->iterations; i++) {
        if (a->mode == CXB_ATOMIC_CAS) {
            uint64_t v = __atomic_load_n(word, __ATOMIC_RELAXED);
            while (!__atomic_compare_exchange_n(word, &v, v + 1, 1, __ATOMIC_ACQ_REL,
                                                __ATOMIC_RELAXED))
                ;
        } else {
            __atomic_fetch_add(word, 1, __ATOMIC_ACQ_REL);
        }
    }
    s->end[t] = cxb_now_ns();
    return 0;
}

/* Any thread count cxb_parallel can start (lab machines have hundreds of CPUs);
 * CXB_ATOMIC_PRIVATE needs the caller's buffer to hold a line per thread. */
static int run_team(struct cxb_coherence_args *a, cxb_thread_fn fn, int need_threads)
{
    if (!a || !a->line || ((uintptr_t)a->line % CXB_LINE) || a->threads < need_threads ||
        (need_threads == 2 && a->threads != 2))
        return cxb_fail(EINVAL, "bad coherence arguments (a 64-byte aligned line, %s threads)",
                        need_threads == 2 ? "2" : "1 or more");
    if (a->mode == CXB_ATOMIC_FALSE_SHARING && a->threads > CXB_LINE / 8)
        return cxb_fail(EINVAL, "false sharing fits %d threads in a line", CXB_LINE / 8);
    uint64_t *start = calloc((size_t)a->threads, sizeof *start);
    uint64_t *end = calloc((size_t)a->threads, sizeof *end);
    struct team_state s = {a, start, end};
    int rc = start && end ? cxb_parallel(fn, &s, a->cpus, a->threads)
                          : cxb_fail(ENOMEM, "cannot allocate %d thread slots", a->threads);
    if (rc == 0) {
        uint64_t first = start[0], last = end[0];
        for (int t = 0; t < a->threads; t++) {
            first = start[t] < first ? start[t] : first;
            last = end[t] > last ? end[t] : last;
            if (a->thread_ns)
                a->thread_ns[t] = end[t] - start[t];
        }
        a->ns = last - first;
    }
    free(start);
    free(end);
    return rc;
}

int cxb_pingpong(struct cxb_coherence_args *a)
{
    if (a && a->mode != CXB_PINGPONG_STORE && a->mode != CXB_PINGPONG_CAS)
        return cxb_fail(EINVAL, "ping-pong mode %d is neither store nor CAS", a->mode);
    return run_team(a, pingpong_thread, 2);
}

int cxb_atomics(struct cxb_coherence_args *a)
{
    if (a && (a->mode < CXB_ATOMIC_FAA || a->mode > CXB_ATOMIC_FALSE_SHARING))
        return cxb_fail(EINVAL, "atomics mode %d is not a CXB_ATOMIC_*", a->mode);
    return run_team(a, atomics_thread, 1);
}
