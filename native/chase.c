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

int cxb_chase_build(void *buf, size_t bytes, size_t group_bytes, uint64_t seed, uint32_t *order)
{
    size_t lines = bytes / CXB_LINE;
    if (!buf || !order || lines < 2 || lines > UINT32_MAX)
        return cxb_fail(EINVAL, "chase needs 2 to 2^32 lines, got %zu", lines);
    if (group_bytes < CXB_LINE || group_bytes % CXB_LINE)
        return cxb_fail(EINVAL, "chase group of %zu bytes is not a whole number of lines", group_bytes);
    size_t per = group_bytes / CXB_LINE, groups = (lines + per - 1) / per;
    uint32_t *g = malloc(groups * sizeof *g), *l = malloc(per * sizeof *l);
    if (!g || !l) {
        free(g);
        free(l);
        return cxb_fail(ENOMEM, "cannot allocate the shuffle arrays");
    }
    for (size_t i = 0; i < groups; i++)
        g[i] = (uint32_t)i;
    shuffle(g, groups, &seed);
    size_t k = 0;
    for (size_t gi = 0; gi < groups; gi++) {
        size_t first = (size_t)g[gi] * per, n = lines - first < per ? lines - first : per;
        for (size_t i = 0; i < n; i++)
            l[i] = (uint32_t)i;
        shuffle(l, n, &seed);
        for (size_t i = 0; i < n; i++)
            order[k++] = (uint32_t)(first + l[i]);
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
