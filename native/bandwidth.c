/* Bandwidth kernels. One template, instantiated per instruction set, defines every
 * streaming kernel from a handful of vector primitives, so the variants cannot drift
 * apart. Each leaves what its row's check kind (kernels.c) says: read, rw_* and random_*
 * sum the uint64 words they load, write* and rw_* store the word `value`, copy* and
 * triad* compute what numpy recomputes. */
#include <errno.h>
#include <string.h>
#include "internal.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The scalar variant stays scalar so "isa=scalar" means what it says. */
#if defined(__GNUC__) && !defined(__clang__)
#define SCALAR_ATTR __attribute__((optimize("no-tree-vectorize")))
#else
#define SCALAR_ATTR
#endif

/* ---- primitives ------------------------------------------------------------------ */
/* scalar: one double or uint64 per "vector" */
#define S_VD double
#define S_VI uint64_t
#define S_N 8
#define S_LD(p) (*(const double *)(p))
#define S_ST(p, v) (*(double *)(p) = (v))
#define S_SET1(x) (x)
#define S_FMA(b, s, c) ((b) + (s) * (c))
#define S_LDI(p) (*(const uint64_t *)(p))
#define S_STI(p, v) (*(uint64_t *)(p) = (v))
#define S_ADDI(a, b) ((a) + (b))
#define S_ZEROI() ((uint64_t)0)
#define S_SETI(x) ((uint64_t)(x))
#define S_SUMI(v) (v)
#if defined(__x86_64__)
static inline void s_stream(void *p, double v)
{
    long long bits;
    memcpy(&bits, &v, sizeof bits);
    _mm_stream_si64((long long *)p, bits);          /* movnti */
}
static inline void s_streami(void *p, uint64_t v) { _mm_stream_si64((long long *)p, (long long)v); }
#define S_FENCE() _mm_sfence()
#else
static inline void s_stream(void *p, double v) { *(double *)p = v; }
static inline void s_streami(void *p, uint64_t v) { *(uint64_t *)p = v; }
#define S_FENCE() __sync_synchronize()
#endif
#define S_NT(p, v) s_stream((p), (v))
#define S_NTI(p, v) s_streami((p), (v))

#if defined(__x86_64__)
#define A2_VD __m256d
#define A2_VI __m256i
#define A2_N 32
#define A2_LD(p) _mm256_load_pd((const double *)(p))
#define A2_ST(p, v) _mm256_store_pd((double *)(p), (v))
#define A2_NT(p, v) _mm256_stream_pd((double *)(p), (v))
#define A2_SET1(x) _mm256_set1_pd(x)
#define A2_FMA(b, s, c) _mm256_add_pd((b), _mm256_mul_pd((s), (c)))
#define A2_LDI(p) _mm256_load_si256((const __m256i *)(p))
#define A2_STI(p, v) _mm256_store_si256((__m256i *)(p), (v))
#define A2_NTI(p, v) _mm256_stream_si256((__m256i *)(p), (v))
#define A2_ADDI(a, b) _mm256_add_epi64((a), (b))
#define A2_ZEROI() _mm256_setzero_si256()
#define A2_SETI(x) _mm256_set1_epi64x((long long)(x))
#define A2_FENCE() _mm_sfence()
__attribute__((target("avx2"))) static inline uint64_t a2_sum(__m256i v)
{
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, v);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#define A2_SUMI(v) a2_sum(v)

#define A5_VD __m512d
#define A5_VI __m512i
#define A5_N 64
#define A5_LD(p) _mm512_load_pd((const double *)(p))
#define A5_ST(p, v) _mm512_store_pd((double *)(p), (v))
#define A5_NT(p, v) _mm512_stream_pd((double *)(p), (v))
#define A5_SET1(x) _mm512_set1_pd(x)
#define A5_FMA(b, s, c) _mm512_add_pd((b), _mm512_mul_pd((s), (c)))
#define A5_LDI(p) _mm512_load_si512((const void *)(p))
#define A5_STI(p, v) _mm512_store_si512((void *)(p), (v))
#define A5_NTI(p, v) _mm512_stream_si512((void *)(p), (v))
#define A5_ADDI(a, b) _mm512_add_epi64((a), (b))
#define A5_ZEROI() _mm512_setzero_si512()
#define A5_SETI(x) _mm512_set1_epi64((long long)(x))
#define A5_SUMI(v) ((uint64_t)_mm512_reduce_add_epi64(v))
#define A5_FENCE() _mm_sfence()
#endif

/* ---- the template ---------------------------------------------------------------- */
/* Four vectors per unrolled step, written out rather than left to a loop the compiler
 * may keep rolled (or, for an accumulator array, keep on the stack: a load and a store
 * around every add, which halved the read kernel in L1). Every slice is a whole number
 * of 64-byte lines, and a line is a whole number of vectors, so no partial vector is
 * ever left. */
#define ALL_VECTORS(P, N, body)                                                      \
    for (size_t i = 0; i + 4 * (N) <= bytes; i += 4 * (N)) {                        \
        { size_t o = i; body; }                                                     \
        { size_t o = i + (N); body; }                                               \
        { size_t o = i + 2 * (N); body; }                                           \
        { size_t o = i + 3 * (N); body; }                                           \
    }                                                                               \
    for (size_t o = bytes / (4 * (N)) * (4 * (N)); o < bytes; o += (N)) { body; }

/* A read:write mix over one buffer: of every R+W lines, R are summed and W stored. */
#define RW_KERNEL(P, ATTR, R, W)                                                     \
    ATTR int cxb_rw_##R##_##W##_##P(struct cxb_kargs *kargs)                           \
    {                                                                                \
        struct cxb_stream_args *a = &kargs->stream;                                  \
        char *base = a->buf[0];                                                      \
        size_t lines = a->bytes / CXB_LINE;                                          \
        uint64_t total = 0;                                                          \
        const P##_VI v = P##_SETI(a->value);                                         \
        for (uint64_t pass = 0; pass < a->passes; pass++) {                          \
            P##_VI acc0 = P##_ZEROI(), acc1 = P##_ZEROI();                           \
            for (size_t l = 0; l < lines; l++) {                                     \
                char *line = base + l * CXB_LINE;                                    \
                if (l % ((R) + (W)) < (R)) {                                         \
                    for (int k = 0; k < CXB_LINE / P##_N; k += 2) {                  \
                        acc0 = P##_ADDI(acc0, P##_LDI(line + k * P##_N));            \
                        if (k + 1 < CXB_LINE / P##_N)                                \
                            acc1 = P##_ADDI(acc1, P##_LDI(line + (k + 1) * P##_N));  \
                    }                                                                \
                } else {                                                             \
                    for (int k = 0; k < CXB_LINE / P##_N; k++)                       \
                        P##_STI(line + k * P##_N, v);                                \
                }                                                                    \
            }                                                                        \
            total += P##_SUMI(acc0) + P##_SUMI(acc1);                                \
        }                                                                            \
        a->sum = total;                                                              \
        return 0;                                                                    \
    }

/* Random blocks of G bytes: every block once per pass, in an order from a bijective hash
 * of a counter over the next power of two (values past the end are skipped). The sum of
 * what was read is the same closed form as the sequential read's. */
#define RANDOM_KERNEL(P, ATTR, G)                                                    \
    ATTR int cxb_random_##G##_##P(struct cxb_kargs *kargs)                             \
    {                                                                                \
        struct cxb_stream_args *a = &kargs->stream;                                  \
        const char *base = a->buf[0];                                                \
        uint64_t nb = a->bytes / (G), mask = 0;                                      \
        unsigned k = 0;                                                              \
        while ((1ull << k) < nb)                                                     \
            k++;                                                                     \
        mask = (k >= 64) ? ~0ull : (1ull << k) - 1;                                  \
        uint64_t total = 0;                                                          \
        for (uint64_t pass = 0; pass < a->passes; pass++) {                          \
            P##_VI acc0 = P##_ZEROI(), acc1 = P##_ZEROI();                           \
            for (uint64_t i = 0; i <= mask; i++) {                                   \
                uint64_t y = (i * 0x9E3779B97F4A7C15ull) & mask;                     \
                y ^= y >> (k / 2 + 1);                                               \
                y = (y * 0xBF58476D1CE4E5B9ull) & mask;                              \
                y ^= y >> (k / 3 + 1);                                               \
                if (y >= nb)                                                         \
                    continue;                                                        \
                const char *blk = base + y * (G);                                    \
                for (int o = 0; o < (G); o += 2 * P##_N) {                           \
                    acc0 = P##_ADDI(acc0, P##_LDI(blk + o));                         \
                    if (o + P##_N < (G))                                             \
                        acc1 = P##_ADDI(acc1, P##_LDI(blk + o + P##_N));             \
                }                                                                    \
            }                                                                        \
            total += P##_SUMI(acc0) + P##_SUMI(acc1);                                \
        }                                                                            \
        a->sum = total;                                                              \
        return 0;                                                                    \
    }

/* write, copy and triad, with the stores given: temporal (_ST, _STI) or non-temporal
 * (_NT, _NTI, then a fence so the data is globally visible before the timer stops).
 * write stores the word `value` (FILL); copy and triad move doubles. */
#define STORE_KERNELS(P, ATTR, SUFFIX, STORE, STOREI, END)                           \
    ATTR int cxb_write##SUFFIX##_##P(struct cxb_kargs *kargs)                          \
    {                                                                                \
        struct cxb_stream_args *a = &kargs->stream;                                  \
        char *p = a->buf[0];                                                         \
        size_t bytes = a->bytes;                                                     \
        const P##_VI v = P##_SETI(a->value);                                         \
        for (uint64_t pass = 0; pass < a->passes; pass++) {                          \
            ALL_VECTORS(P, P##_N, STOREI(p + o, v))                                  \
        }                                                                            \
        END;                                                                         \
        return 0;                                                                    \
    }                                                                                \
    ATTR int cxb_copy##SUFFIX##_##P(struct cxb_kargs *kargs)                           \
    {                                                                                \
        struct cxb_stream_args *a = &kargs->stream;                                  \
        char *d = a->buf[0];                                                         \
        const char *s = a->buf[1];                                                   \
        size_t bytes = a->bytes;                                                     \
        for (uint64_t pass = 0; pass < a->passes; pass++) {                          \
            ALL_VECTORS(P, P##_N, STORE(d + o, P##_LD(s + o)))                       \
        }                                                                            \
        END;                                                                         \
        return 0;                                                                    \
    }                                                                                \
    ATTR int cxb_triad##SUFFIX##_##P(struct cxb_kargs *kargs)                          \
    {                                                                                \
        struct cxb_stream_args *a = &kargs->stream;                                  \
        char *d = a->buf[0];                                                         \
        const char *b = a->buf[1], *c = a->buf[2];                                   \
        size_t bytes = a->bytes;                                                     \
        const P##_VD s = P##_SET1((double)a->value);                                 \
        for (uint64_t pass = 0; pass < a->passes; pass++) {                          \
            ALL_VECTORS(P, P##_N, STORE(d + o, P##_FMA(P##_LD(b + o), s, P##_LD(c + o)))) \
        }                                                                            \
        END;                                                                         \
        return 0;                                                                    \
    }

#define STREAM_KERNELS(P, ATTR)                                                      \
    ATTR int cxb_read_##P(struct cxb_kargs *kargs)                                     \
    {                                                                                \
        struct cxb_stream_args *a = &kargs->stream;                                  \
        const char *p = a->buf[0];                                                   \
        size_t bytes = a->bytes;                                                     \
        uint64_t total = 0;                                                          \
        for (uint64_t pass = 0; pass < a->passes; pass++) {                          \
            /* four named accumulators: four independent add chains in registers */  \
            P##_VI s0 = P##_ZEROI(), s1 = P##_ZEROI(), s2 = P##_ZEROI(), s3 = P##_ZEROI(); \
            for (size_t i = 0; i + 4 * P##_N <= bytes; i += 4 * P##_N) {             \
                s0 = P##_ADDI(s0, P##_LDI(p + i));                                   \
                s1 = P##_ADDI(s1, P##_LDI(p + i + P##_N));                           \
                s2 = P##_ADDI(s2, P##_LDI(p + i + 2 * P##_N));                       \
                s3 = P##_ADDI(s3, P##_LDI(p + i + 3 * P##_N));                       \
            }                                                                        \
            for (size_t o = bytes / (4 * P##_N) * (4 * P##_N); o < bytes; o += P##_N) \
                s0 = P##_ADDI(s0, P##_LDI(p + o));                                   \
            total += P##_SUMI(s0) + P##_SUMI(s1) + P##_SUMI(s2) + P##_SUMI(s3);      \
        }                                                                            \
        a->sum = total;                                                              \
        return 0;                                                                    \
    }                                                                                \
    STORE_KERNELS(P, ATTR, , P##_ST, P##_STI, (void)0)                               \
    STORE_KERNELS(P, ATTR, _nt, P##_NT, P##_NTI, P##_FENCE())                        \
    RW_KERNEL(P, ATTR, 3, 1)                                                         \
    RW_KERNEL(P, ATTR, 2, 1)                                                         \
    RW_KERNEL(P, ATTR, 1, 1)                                                         \
    RANDOM_KERNEL(P, ATTR, 64)                                                       \
    RANDOM_KERNEL(P, ATTR, 256)                                                      \
    RANDOM_KERNEL(P, ATTR, 4096)

STREAM_KERNELS(S, SCALAR_ATTR)
#if defined(__x86_64__)
STREAM_KERNELS(A2, __attribute__((target("avx2"))))
STREAM_KERNELS(A5, __attribute__((target("avx512f"))))
#endif

/* ---- libc baselines ---------------------------------------------------------------- */
/* memcpy and memset, the copies people compare theirs against. libc picks instructions
 * and store kind at run time, so each has one variant (ours is only "scalar"). The empty
 * asm says every pass's stores are seen: GCC may not fold the passes into one. */
int cxb_copy_libc(struct cxb_kargs *kargs)
{
    struct cxb_stream_args *a = &kargs->stream;
    for (uint64_t pass = 0; pass < a->passes; pass++) {
        memcpy(a->buf[0], a->buf[1], a->bytes);
        __asm__ __volatile__("" ::: "memory");
    }
    return 0;
}

/* FILL: Python passes a value whose bytes are all its low byte. */
int cxb_write_libc(struct cxb_kargs *kargs)
{
    struct cxb_stream_args *a = &kargs->stream;
    for (uint64_t pass = 0; pass < a->passes; pass++) {
        memset(a->buf[0], (int)(a->value & 0xFF), a->bytes);
        __asm__ __volatile__("" ::: "memory");
    }
    return 0;
}

/* ---- fills (not timed) ----------------------------------------------------------- */
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
