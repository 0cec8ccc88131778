/* Pointer chase: one pointer per 64-byte line linked into one random cycle. Groups
 * (pages) are visited in random order and the lines of each group in random order, so
 * the group size sets how many lines are visited per TLB entry. */
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

int cxb_chase_build(void *buf, size_t bytes, size_t group_bytes, size_t run_lines,
                    uint64_t seed, uint32_t *order)
{
    size_t lines = bytes / CXB_LINE;
    if (!buf || !order || lines < 2 || lines > UINT32_MAX)
        return cxb_fail(EINVAL, "chase needs 2 to 2^32 lines, got %zu", lines);
    if (group_bytes < CXB_LINE || group_bytes % CXB_LINE)
        return cxb_fail(EINVAL, "chase group of %zu bytes is not a whole number of lines", group_bytes);
    size_t per = group_bytes / CXB_LINE, groups = (lines + per - 1) / per;
    if (run_lines == 0 || run_lines > per)
        run_lines = per;
    uint32_t *g = malloc(groups * sizeof *g), *l = malloc(per * sizeof *l);
    uint32_t *tmp = run_lines < per ? malloc(lines * sizeof *tmp) : order;
    if (!g || !l || !tmp) {
        free(g);
        free(l);
        if (tmp != order)
            free(tmp);
        return cxb_fail(ENOMEM, "cannot allocate the shuffle arrays");
    }
    for (size_t i = 0; i < groups; i++)
        g[i] = (uint32_t)i;
    shuffle(g, groups, &seed);
    /* tmp: the groups in random order, each group's lines in random order */
    size_t k = 0;
    for (size_t gi = 0; gi < groups; gi++) {
        size_t first = (size_t)g[gi] * per, n = lines - first < per ? lines - first : per;
        for (size_t i = 0; i < n; i++)
            l[i] = (uint32_t)i;
        shuffle(l, n, &seed);
        for (size_t i = 0; i < n; i++)
            tmp[k++] = (uint32_t)(first + l[i]);
    }
    if (tmp != order) {
        /* Visit run_lines lines of a group, then move on to the next group: the TLB knob.
         * Group gi's lines sit at tmp[start(gi) ...]; only the last group may be short. */
        size_t out = 0;
        for (size_t round = 0; round * run_lines < per; round++) {
            size_t start = 0;
            for (size_t gi = 0; gi < groups; gi++) {
                size_t first = (size_t)g[gi] * per, n = lines - first < per ? lines - first : per;
                for (size_t i = round * run_lines; i < n && i < (round + 1) * run_lines; i++)
                    order[out++] = tmp[start + i];
                start += n;
            }
        }
        free(tmp);
    }
    free(g);
    free(l);
    char *base = buf;
    for (size_t i = 0; i < lines; i++)
        *(void **)(base + (size_t)order[i] * CXB_LINE) =
            base + (size_t)order[(i + 1) % lines] * CXB_LINE;
    return 0;
}

/* The timed loop: dependent loads, unrolled; the returned pointer keeps it alive. */
int cxb_chase_kernel(struct cxb_kargs *a)
{
    void **p = a->buf[0];
    uint64_t n = a->count;
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

/* Memory-level parallelism: `value` chains (1..16) walked in lockstep by one thread.
 * buf[0] is an array of the chains' start pointers; their end pointers replace them. */
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

int cxb_chase_mlp_kernel(struct cxb_kargs *a)
{
    static void (*const walk[17])(void **, uint64_t) = {
        NULL, walk_1, walk_2, walk_3, walk_4, walk_5, walk_6, walk_7, walk_8,
        walk_9, walk_10, walk_11, walk_12, walk_13, walk_14, walk_15, walk_16};
    if (a->value < 1 || a->value > 16)
        return cxb_fail(EINVAL, "chains must be 1 to 16, got %llu", (unsigned long long)a->value);
    walk[a->value](a->buf[0], a->count);
    a->end = ((void **)a->buf[0])[0];
    return 0;
}

/* Latency distribution: `count` batches of `value` dependent loads, each timed with
 * rdtscp (or the monotonic clock where there is no TSC) into buf[1] as uint64 ticks. */
int cxb_chase_dist_kernel(struct cxb_kargs *a)
{
    void **p = a->buf[0];
    uint64_t *ticks = a->buf[1], batch = a->value;
    int tsc = cxb_rdtscp() != 0;
    for (uint64_t b = 0; b < a->count; b++) {
        uint64_t t0 = tsc ? cxb_rdtscp() : cxb_now_ns();
        for (uint64_t i = 0; i < batch; i++)
            p = (void **)*p;
        uint64_t t1 = tsc ? cxb_rdtscp() : cxb_now_ns();
        ticks[b] = t1 - t0;
    }
    a->end = p;
    return 0;
}
