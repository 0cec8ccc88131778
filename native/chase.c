/* Pointer chase: one pointer per 64-byte line linked into one random cycle. The buffer
 * is cut into locality windows visited in random order, each walked to its end before
 * the next: the window, not the page size, sets how far apart consecutive loads land
 * (multichase's TLB locality), so prefetchers and DRAM row hits are kept out of an idle
 * latency. The TLB-reach knob visits a few lines of each page of a window per round. */
#include <errno.h>
#include <stdlib.h>
#include "internal.h"

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void shuffle(uint32_t *v, size_t n, uint64_t *seed)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(splitmix(seed) % i);
        uint32_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

/* 0, 1, ..., n-1 in random order */
static void permutation(uint32_t *v, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (uint32_t)i;
    shuffle(v, n, seed);
}

/* The lines of one window (first, n lines) into out[0..n): pages in random order and
 * lines within each page in random order, then run_lines lines of every page per round.
 * page and tmp have room for the window's pages and lines; tmp holds page p's lines
 * at p * per. */
static void window_by_pages(uint32_t *out, size_t first, size_t n, size_t per,
                            size_t run_lines, uint32_t *page, uint32_t *tmp, uint64_t *seed)
{
    size_t pages = (n + per - 1) / per, k = 0;
    permutation(page, pages, seed);
    for (size_t pi = 0; pi < pages; pi++) {
        size_t m = n - (size_t)page[pi] * per < per ? n - (size_t)page[pi] * per : per;
        permutation(tmp + (size_t)page[pi] * per, m, seed);
    }
    for (size_t round = 0; round * run_lines < per; round++)
        for (size_t pi = 0; pi < pages; pi++) {
            size_t m = n - (size_t)page[pi] * per < per ? n - (size_t)page[pi] * per : per;
            for (size_t i = round * run_lines; i < m && i < (round + 1) * run_lines; i++)
                out[k++] = (uint32_t)(first + (size_t)page[pi] * per + tmp[(size_t)page[pi] * per + i]);
        }
}

int cxb_chase_build(void *buf, size_t bytes, size_t window_bytes, size_t page_bytes,
                    size_t run_lines, uint64_t seed, uint32_t *order)
{
    size_t lines = bytes / CXB_LINE;
    if (!buf || !order || lines < 2 || lines > UINT32_MAX)
        return cxb_fail(EINVAL, "chase needs 2 to 2^32 lines, got %zu", lines);
    if (window_bytes % CXB_LINE || page_bytes < CXB_LINE || page_bytes % CXB_LINE)
        return cxb_fail(EINVAL, "chase window (%zu) and page (%zu) must be whole lines",
                        window_bytes, page_bytes);
    size_t win = window_bytes ? window_bytes / CXB_LINE : lines, per = page_bytes / CXB_LINE;
    if (win > lines)
        win = lines;
    if (run_lines && (win % per && win != lines))
        return cxb_fail(EINVAL, "with lines per page, the window (%zu) must be whole pages "
                        "(%zu)", window_bytes, page_bytes);
    if (run_lines > per)
        run_lines = per;            /* a whole page per visit: one round, page by page */
    size_t windows = (lines + win - 1) / win;
    /* Without the TLB knob a window is permuted in place in order[]; only the knob's
     * rounds need room for a window's lines and pages. */
    uint32_t *w = malloc(windows * sizeof *w);
    uint32_t *tmp = run_lines ? malloc(win * sizeof *tmp) : NULL;
    uint32_t *page = run_lines ? malloc(((win + per - 1) / per) * sizeof *page) : NULL;
    if (!w || (run_lines && (!tmp || !page))) {
        free(w);
        free(tmp);
        free(page);
        return cxb_fail(ENOMEM, "cannot allocate the shuffle arrays");
    }
    permutation(w, windows, &seed);
    size_t k = 0;
    for (size_t wi = 0; wi < windows; wi++) {
        size_t first = (size_t)w[wi] * win, n = lines - first < win ? lines - first : win;
        if (run_lines) {
            window_by_pages(order + k, first, n, per, run_lines, page, tmp, &seed);
        } else {
            permutation(order + k, n, &seed);
            for (size_t i = 0; i < n; i++)
                order[k + i] += (uint32_t)first;
        }
        k += n;
    }
    free(w);
    free(tmp);
    free(page);
    char *base = buf;
    for (size_t i = 0; i < lines; i++)
        *(void **)(base + (size_t)order[i] * CXB_LINE) =
            base + (size_t)order[(i + 1) % lines] * CXB_LINE;
    return 0;
}

/* The timed loop: dependent loads, unrolled; the returned pointer keeps it alive. */
int cxb_chase_kernel(struct cxb_kargs *kargs)
{
    struct cxb_chase_args *a = &kargs->chase;
    void **p = a->start;
    uint64_t n = a->loads;
    if (!p)
        return cxb_fail(EINVAL, "chase needs a start pointer");
    for (; n >= 16; n -= 16) {
#define HOP p = (void **)*p;
        HOP HOP HOP HOP HOP HOP HOP HOP HOP HOP HOP HOP HOP HOP HOP HOP
    }
    for (; n; n--)
        HOP
#undef HOP
    a->end = p;
    return 0;
}

/* Memory-level parallelism: `chains` chains (1..16) walked in lockstep by one thread,
 * each from its pointer in starts[], which is replaced by where the chain stopped. */
#define MLP(N)                                                                       \
    static void walk_##N(void **start, uint64_t n)                                   \
    {                                                                                \
        void **p[N];                                                                 \
        for (int c = 0; c < N; c++)                                                  \
            p[c] = start[c];                                                         \
        for (; n; n--)                                                               \
            for (int c = 0; c < N; c++)                                              \
                p[c] = (void **)*p[c];                                               \
        for (int c = 0; c < N; c++)                                                  \
            start[c] = p[c];                                                         \
    }
MLP(1) MLP(2) MLP(3) MLP(4) MLP(5) MLP(6) MLP(7) MLP(8)
MLP(9) MLP(10) MLP(11) MLP(12) MLP(13) MLP(14) MLP(15) MLP(16)

int cxb_chase_mlp_kernel(struct cxb_kargs *kargs)
{
    static void (*const walk[17])(void **, uint64_t) = {
        NULL, walk_1, walk_2, walk_3, walk_4, walk_5, walk_6, walk_7, walk_8,
        walk_9, walk_10, walk_11, walk_12, walk_13, walk_14, walk_15, walk_16};
    struct cxb_chase_args *a = &kargs->chase;
    if (a->chains < 1 || a->chains > 16 || !a->starts)
        return cxb_fail(EINVAL, "chase_mlp needs 1 to 16 chains' starts, got %u", a->chains);
    walk[a->chains](a->starts, a->loads);
    a->end = a->starts[0];
    return 0;
}

/* Latency distribution: `loads` dependent loads in batches of `batch`, each timed with
 * rdtscp (or the monotonic clock where there is no invariant TSC: the same decision
 * Python scales the ticks by) into ticks[], one per batch. */
int cxb_chase_dist_kernel(struct cxb_kargs *kargs)
{
    struct cxb_chase_args *a = &kargs->chase;
    void **p = a->start;
    uint64_t *ticks = a->ticks, batch = a->batch;
    if (!p || !ticks || !batch || a->loads % batch)
        return cxb_fail(EINVAL, "chase_dist needs a start, ticks and whole batches of 1 or "
                        "more loads");
    a->end = cxb_chase_timed(p, a->loads / batch, batch, ticks);
    return 0;
}

/* The timed walk itself, also the loaded-latency kernel's (loaded.c). */
void **cxb_chase_timed(void **p, uint64_t batches, uint64_t batch, uint64_t *ticks)
{
    int tsc = cxb_tsc_usable();
    for (uint64_t b = 0; b < batches; b++) {
        uint64_t t0 = tsc ? cxb_rdtscp() : cxb_now_ns();
        for (uint64_t i = 0; i < batch; i++)
            p = (void **)*p;
        uint64_t t1 = tsc ? cxb_rdtscp() : cxb_now_ns();
        ticks[b] = t1 - t0;
    }
    return p;
}
