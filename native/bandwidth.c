/* Bandwidth kernels, one function per instruction set. Each read kernel sums the buffer
 * as uint64 lanes: a filled buffer's sum is known in closed form, which proves every byte
 * was loaded and that the compiler kept the loop. */
#include <errno.h>
#include "internal.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The scalar variant stays scalar so "isa=scalar" means what it says. */
#if defined(__GNUC__) && !defined(__clang__)
#define SCALAR_ONLY __attribute__((optimize("no-tree-vectorize")))
#else
#define SCALAR_ONLY
#endif

SCALAR_ONLY int cxb_read_scalar(struct cxb_kargs *a)
{
    const uint64_t *p = a->buf[0];
    size_t n = a->bytes / 8;
    uint64_t total = 0;
    for (uint64_t pass = 0; pass < a->count; pass++) {
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            s0 += p[i]; s1 += p[i + 1]; s2 += p[i + 2]; s3 += p[i + 3];
            s4 += p[i + 4]; s5 += p[i + 5]; s6 += p[i + 6]; s7 += p[i + 7];
        }
        for (; i < n; i++)
            s0 += p[i];
        total += s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
    }
    a->checksum = total;
    return 0;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) int cxb_read_avx2(struct cxb_kargs *a)
{
    const char *p = a->buf[0];
    size_t blocks = a->bytes / 256, tail = a->bytes % 256 / 8;
    uint64_t total = 0;
    for (uint64_t pass = 0; pass < a->count; pass++) {
        __m256i s[8];
        for (int k = 0; k < 8; k++)
            s[k] = _mm256_setzero_si256();
        for (size_t b = 0; b < blocks; b++) {
            const __m256i *q = (const __m256i *)(p + b * 256);
            for (int k = 0; k < 8; k++)
                s[k] = _mm256_add_epi64(s[k], _mm256_load_si256(q + k));
        }
        for (int k = 1; k < 8; k++)
            s[0] = _mm256_add_epi64(s[0], s[k]);
        uint64_t lanes[4];
        _mm256_storeu_si256((__m256i *)lanes, s[0]);
        total += lanes[0] + lanes[1] + lanes[2] + lanes[3];
        const uint64_t *t = (const uint64_t *)(p + blocks * 256);
        for (size_t i = 0; i < tail; i++)
            total += t[i];
    }
    a->checksum = total;
    return 0;
}

__attribute__((target("avx512f"))) int cxb_read_avx512(struct cxb_kargs *a)
{
    const char *p = a->buf[0];
    size_t blocks = a->bytes / 512, tail = a->bytes % 512 / 8;
    uint64_t total = 0;
    for (uint64_t pass = 0; pass < a->count; pass++) {
        __m512i s[8];
        for (int k = 0; k < 8; k++)
            s[k] = _mm512_setzero_si512();
        for (size_t b = 0; b < blocks; b++) {
            const __m512i *q = (const __m512i *)(p + b * 512);
            for (int k = 0; k < 8; k++)
                s[k] = _mm512_add_epi64(s[k], _mm512_load_si512(q + k));
        }
        for (int k = 1; k < 8; k++)
            s[0] = _mm512_add_epi64(s[0], s[k]);
        total += (uint64_t)_mm512_reduce_add_epi64(s[0]);
        const uint64_t *t = (const uint64_t *)(p + blocks * 512);
        for (size_t i = 0; i < tail; i++)
            total += t[i];
    }
    a->checksum = total;
    return 0;
}
#endif

struct fill {
    uint64_t *p;
    size_t n;
    int threads;
};

static int fill_slice(void *arg, int t)
{
    struct fill *f = arg;
    size_t lo = f->n * (size_t)t / (size_t)f->threads, hi = f->n * (size_t)(t + 1) / (size_t)f->threads;
    for (size_t i = lo; i < hi; i++)
        f->p[i] = i;
    return 0;
}

int cxb_fill_index(void *buf, size_t bytes, const int *cpus, int ncpus)
{
    if (!buf || bytes % 8)
        return cxb_fail(EINVAL, "fill needs a buffer of whole uint64s");
    struct fill f = {buf, bytes / 8, ncpus > 0 ? ncpus : 1};
    return cxb_parallel(fill_slice, &f, ncpus > 0 ? cpus : NULL, f.threads);
}
