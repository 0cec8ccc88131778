/* What a thread sees when it touches pages while they migrate: one thread moves the
 * pages (cxb_move, memory.c) while another times its touches of them. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>
#include "internal.h"

#define PAGE 4096

#if defined(__x86_64__)
#include <immintrin.h>
/* Keeps the access between the two clock reads: the load can neither start before the
 * first nor finish after the second. */
static inline void touch_fence(void) { _mm_lfence(); }
static void evict_line(char *p) { _mm_clflush(p); }
static void evict_done(void) { _mm_mfence(); }
#elif defined(__aarch64__)
static inline void touch_fence(void) { __asm__ volatile("dsb ish" ::: "memory"); }
static void evict_line(char *p) { __asm__ volatile("dc civac, %0" ::"r"(p) : "memory"); }
static void evict_done(void) { __asm__ volatile("dsb ish" ::: "memory"); }
#else       /* no line flush: cxb_migrate_touch refuses to run */
static inline void touch_fence(void) { __asm__ volatile("" ::: "memory"); }
static void evict_line(char *p) { (void)p; }
static void evict_done(void) {}
#endif

struct touch_state {
    struct cxb_touch_args *a;
    uint64_t t0;            /* the toucher's start: sample times count from here */
    int moving, moved;      /* the mover's flags, seen by the toucher */
};

/* One timed access (0: none, the timer's own cost; 1: a load; 2: a load and a store of
 * the same value, a store fault with the data unchanged). Returns ns taken. */
static inline uint64_t timed_touch(volatile uint64_t *w, int access, uint64_t *before)
{
    *before = cxb_now_ns();
    touch_fence();
    if (access) {
        uint64_t v = *w;
        if (access > 1)
            *w = v;
    }
    touch_fence();
    return cxb_now_ns() - *before;
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

/* The median of empty timed touches: what every sample carries on top of its access. */
static uint64_t timer_overhead(void)
{
    enum { N = 1001 };
    uint64_t t[N], before;
    for (int i = 0; i < N; i++)
        t[i] = timed_touch(NULL, 0, &before);
    qsort(t, N, sizeof *t, cmp_u64);
    return t[N / 2];
}

static void evict(char *buf, size_t bytes)
{
    for (size_t off = 0; off < bytes; off += CXB_LINE)
        evict_line(buf + off);
    evict_done();
}

static uint64_t involuntary_switches(uint64_t *voluntary)
{
    struct rusage r;
    getrusage(RUSAGE_THREAD, &r);
    if (voluntary)
        *voluntary = (uint64_t)r.ru_nvcsw;
    return (uint64_t)r.ru_nivcsw;
}

/* The toucher's walk: pages in a scattered order (an odd stride over a power of two,
 * skipping what is past the end), so it does not march in step with the mover; each sweep
 * over the pages takes the next line of every page, so pages * 64 touches in a row are
 * all of distinct lines. Lines go in bit-reversed order: lines close together (an
 * adjacent-line prefetch's pair) are visited as many sweeps apart as can be. */
struct walk {
    size_t pages, span, at, in_sweep;
    unsigned sweep, line;
};

static void walk_init(struct walk *w, size_t pages)
{
    *w = (struct walk){.pages = pages, .span = 1};
    while (w->span < pages)
        w->span <<= 1;
}

static unsigned rev6(unsigned s)
{
    unsigned r = 0;
    for (int b = 0; b < 6; b++)
        r |= (s >> b & 1) << (5 - b);
    return r;
}

/* The next touch's byte offset in the buffer. */
static inline size_t walk_next(struct walk *w)
{
    do
        w->at = (w->at + 0x9E3779B1u) & (w->span - 1);
    while (w->at >= w->pages);
    size_t off = w->at * PAGE + (w->line ^ (w->at & 63)) * CXB_LINE;
    if (++w->in_sweep == w->pages) {
        w->in_sweep = 0;
        w->line = rev6(++w->sweep & 63);
    }
    return off;
}

int cxb_touch_walk(size_t pages, uint64_t *offsets, size_t n)
{
    if (!pages || !offsets)
        return cxb_fail(EINVAL, "a touch walk needs pages and an output array");
    struct walk w;
    walk_init(&w, pages);
    for (size_t i = 0; i < n; i++)
        offsets[i] = walk_next(&w);
    return 0;
}

static int touch_thread(struct touch_state *s)
{
    struct cxb_touch_args *a = s->a;
    char *base = a->buf;
    struct walk walk;       /* after a flush, each touch of a sweep misses every cache */
    walk_init(&walk, a->bytes / PAGE);
    int access = a->write ? 2 : 1;
    a->timer_ns = timer_overhead();
    evict(base, a->bytes);
    uint64_t vol0, niv0 = involuntary_switches(&vol0), niv = niv0, skip = 0;
    uint64_t n = 0, before, tail_start = 0;
    s->t0 = cxb_now_ns();
    __atomic_store_n(&s->moving, 1, __ATOMIC_RELEASE);     /* the toucher is running */
    for (;;) {
        volatile uint64_t *w = (volatile uint64_t *)(base + walk_next(&walk));
        uint64_t took = timed_touch(w, access, &before), after = before + took;
        if (n < a->max_samples) {
            a->samples[2 * n] = before - s->t0;
            a->samples[2 * n + 1] = took;
        }
        n++;
        /* The toucher's involuntary switches, counted after every touch long enough to
         * hold one and every CXB_TOUCH_WINDOW touches: a slow touch's count is its own or
         * that of a long gap since the count before (Python tells which); those during
         * the flush below are no touch's. */
        if (took > CXB_TOUCH_CHECK_NS || n % CXB_TOUCH_WINDOW == 0) {
            uint64_t now = involuntary_switches(NULL), c = now - niv - skip;
            if (n <= a->max_samples)
                a->switches[n - 1] = c > 255 ? 255 : (uint8_t)c;
            niv = now;
            skip = 0;
        }
        if (!tail_start && __atomic_load_n(&s->moved, __ATOMIC_ACQUIRE)) {
            /* The move's copy left the new pages' lines in caches: the tail measures the
             * new node only once they are flushed. */
            uint64_t at_flush = involuntary_switches(NULL);
            evict(base, a->bytes);
            skip += involuntary_switches(NULL) - at_flush;
            after = cxb_now_ns();
            tail_start = after - s->t0;
        }
        if (tail_start && after - s->t0 - tail_start >= a->tail_ns)
            break;
    }
    uint64_t vol;
    a->involuntary = involuntary_switches(&vol) - niv0;
    a->voluntary = vol - vol0;
    a->touches = n;
    a->nsamples = n < a->max_samples ? n : a->max_samples;
    a->tail_start = tail_start;
    return 0;
}

static int mover_thread(struct touch_state *s)
{
    struct cxb_touch_args *a = s->a;
    while (!__atomic_load_n(&s->moving, __ATOMIC_ACQUIRE))
        ;
    while (cxb_now_ns() - s->t0 < a->lead_ns)      /* the toucher's baseline */
        ;
    int rc = 0;
    if (a->control_ns) {        /* a control run: the mover busy as long, nothing moves */
        a->move_start = cxb_now_ns() - s->t0;
        while (cxb_now_ns() - s->t0 - a->move_start < a->control_ns)
            ;
        a->move_end = cxb_now_ns() - s->t0;
    } else {
        struct cxb_move_args mv = {.addr = a->buf, .pages = a->bytes / PAGE, .page = PAGE,
                                   .node = a->node, .method = a->method, .batch = a->batch};
        rc = cxb_move(&mv);
        /* The move is its calls: not the arrays set up before nor the read-back after. */
        a->move_start = mv.t0 - s->t0;
        a->move_end = mv.t1 - s->t0;
        a->unmoved = mv.pages - mv.moved;
    }
    __atomic_store_n(&s->moved, 1, __ATOMIC_RELEASE);  /* even on failure: the toucher ends */
    return rc;
}

static int touch_role(void *p, int t)
{
    return t == 0 ? mover_thread(p) : touch_thread(p);
}

int cxb_migrate_touch(struct cxb_touch_args *a)
{
    if (!a || !a->buf || a->bytes < PAGE || (uintptr_t)a->buf % PAGE || !a->samples ||
        !a->switches || a->method < 0 || a->method > 1 || !a->cpus)
        return cxb_fail(EINVAL, "bad migrate-touch arguments (a page-aligned buffer of at "
                        "least one page, sample and switch arrays, method 0 or 1, two CPUs)");
#if !defined(__x86_64__) && !defined(__aarch64__)
    return cxb_fail(ENOTSUP, "migrate-touch flushes cache lines: x86-64 or AArch64 only");
#else
    a->unmoved = 0;
    struct touch_state s = {a, 0, 0, 0};
    return cxb_parallel(touch_role, &s, a->cpus, 2);
#endif
}
