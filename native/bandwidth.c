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

/* Whole lines as the fastest copies walk memory: a software prefetch `prefetch` lines
 * ahead of the loads (0: none), and `ways` pages side by side, a run of four lines of
 * each in turn (0 or 1: straight through; glibc's large copies walk 2 or 4 pages so),
 * which keeps that many DRAM pages open at once; a tail short of a whole walk goes
 * straight. Copies (LINE reads s) and fills alike. */
enum { WALK_RUN = 4 * CXB_LINE };
#define WALK_LINES(P, LINE, STORE)                                                   \
    size_t o = 0;                                                                    \
    const size_t ahead = (size_t)prefetch * CXB_LINE;                                \
    if (ways > 1)                                                                    \
        for (const size_t block = (size_t)ways * CXB_WALK_PAGE; o + block <= bytes;  \
             o += block)                                                             \
            for (size_t l = 0; l < CXB_WALK_PAGE; l += WALK_RUN)                     \
                for (uint32_t w = 0; w < ways; w++) {                                \
                    const size_t at = o + w * CXB_WALK_PAGE + l;                     \
                    _Pragma("GCC unroll 4")                                          \
                    for (size_t r = at; r < at + WALK_RUN; r += CXB_LINE) {          \
                        if (ahead)                                                   \
                            __builtin_prefetch(s + r + ahead, 0, 3);                 \
                        LINE(P, STORE, r);                                           \
                    }                                                                \
                }                                                                    \
    _Pragma("GCC unroll 4")                                                          \
    for (; o < bytes; o += CXB_LINE) {                                               \
        if (ahead)                                                                   \
            __builtin_prefetch(s + o + ahead, 0, 3);                                 \
        LINE(P, STORE, o);                                                           \
    }

/* The walked copy and fill of every ISA and store kind: cxb_copy_walk_<P>[_nt] and
 * cxb_fill_walk_<P>[_nt] (internal.h), which the checkpoint's snapshot uses too. */
#define WALKERS(P, ATTR, SUFFIX, STORE, STOREI)                                      \
    ATTR void cxb_copy_walk_##P##SUFFIX(char *restrict d, const char *restrict s,      \
                                        size_t bytes, uint32_t prefetch, uint32_t ways) \
    {                                                                                \
        WALK_LINES(P, COPY_LINE, STORE)                                              \
    }                                                                                \
    ATTR void cxb_fill_walk_##P##SUFFIX(char *restrict d, uint64_t value, size_t bytes, \
                                        uint32_t ways)                               \
    {                                                                                \
        const P##_VI v = P##_SETI(value);                                            \
        const char *s = d;                                                           \
        const uint32_t prefetch = 0;                                                 \
        WALK_LINES(P, FILL_LINE, STOREI)                                             \
    }
#define COPY_LINE(P, STORE, at) _Pragma("GCC unroll 8")                             \
    for (int k = 0; k < CXB_LINE; k += P##_N) STORE(d + (at) + k, P##_LD(s + (at) + k))
#define FILL_LINE(P, STORE, at) _Pragma("GCC unroll 8")                             \
    for (int k = 0; k < CXB_LINE; k += P##_N) STORE(d + (at) + k, v)

/* write, copy and triad, with the stores given: temporal (_ST, _STI) or non-temporal
 * (_NT, _NTI, then a fence so the data is globally visible before the timer stops).
 * write stores the word `value` (FILL); copy and triad move doubles. write and copy take
 * the walk's prefetch and pages; without them they run the plain loop, what a naive
 * program gets. */
#define STORE_KERNELS(P, ATTR, SUFFIX, STORE, STOREI, END)                           \
    ATTR int cxb_write##SUFFIX##_##P(struct cxb_kargs *kargs)                          \
    {                                                                                \
        struct cxb_stream_args *a = &kargs->stream;                                  \
        char *p = a->buf[0];                                                         \
        size_t bytes = a->bytes;                                                     \
        const P##_VI v = P##_SETI(a->value);                                         \
        for (uint64_t pass = 0; pass < a->passes; pass++) {                          \
            if (a->ways > 1)                                                         \
                cxb_fill_walk_##P##SUFFIX(p, a->value, bytes, a->ways);              \
            else {                                                                   \
                ALL_VECTORS(P, P##_N, STOREI(p + o, v))                              \
            }                                                                        \
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
            if (a->prefetch || a->ways > 1)                                          \
                cxb_copy_walk_##P##SUFFIX(d, s, bytes, a->prefetch, a->ways);        \
            else {                                                                   \
                ALL_VECTORS(P, P##_N, STORE(d + o, P##_LD(s + o)))                   \
            }                                                                        \
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

WALKERS(S, SCALAR_ATTR, , S_ST, S_STI)
WALKERS(S, SCALAR_ATTR, _nt, S_NT, S_NTI)
STREAM_KERNELS(S, SCALAR_ATTR)
#if defined(__x86_64__)
WALKERS(A2, __attribute__((target("avx2"))), , A2_ST, A2_STI)
WALKERS(A2, __attribute__((target("avx2"))), _nt, A2_NT, A2_NTI)
STREAM_KERNELS(A2, __attribute__((target("avx2"))))
WALKERS(A5, __attribute__((target("avx512f"))), , A5_ST, A5_STI)
WALKERS(A5, __attribute__((target("avx512f"))), _nt, A5_NT, A5_NTI)
STREAM_KERNELS(A5, __attribute__((target("avx512f"))))
#endif

/* ---- string instructions (x86-64) -------------------------------------------------- */
/* rep movsb and rep stosb: the CPU's microcode picks the width and store kind (fast
 * strings: ERMS, FSRM), which glibc uses for mid-sized copies. */
#if defined(__x86_64__)
void cxb_rep_movsb(char *d, const char *s, size_t bytes)
{
    __asm__ __volatile__("rep movsb" : "+D"(d), "+S"(s), "+c"(bytes) : : "memory");
}

static void rep_stosb(char *d, uint8_t byte, size_t bytes)
{
    __asm__ __volatile__("rep stosb" : "+D"(d), "+c"(bytes) : "a"(byte) : "memory");
}

int cxb_copy_rep(struct cxb_kargs *kargs)
{
    struct cxb_stream_args *a = &kargs->stream;
    for (uint64_t pass = 0; pass < a->passes; pass++)
        cxb_rep_movsb(a->buf[0], a->buf[1], a->bytes);
    return 0;
}

/* FILL: Python passes a value whose bytes are all its low byte. */
int cxb_write_rep(struct cxb_kargs *kargs)
{
    struct cxb_stream_args *a = &kargs->stream;
    for (uint64_t pass = 0; pass < a->passes; pass++)
        rep_stosb(a->buf[0], (uint8_t)(a->value & 0xFF), a->bytes);
    return 0;
}
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
