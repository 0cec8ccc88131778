/* Embedding-bag lookups (what DLRM's EmbeddingBag and FBGEMM's table-batched embedding
 * do in the forward pass): each bag sums, or averages, the table rows its indices name.
 * Several tables are one buffer of stacked rows, their indices already offset, as FBGEMM
 * keeps them. Bags are split between the threads in contiguous ranges; every row is
 * accumulated in fp32 in index order, so numpy pools the same bags to the same bits
 * (fp32, fp16, bf16) or within rounding (int8, where a fused multiply-add may round once
 * instead of twice). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

struct emb {
    struct cxb_embedding_args *a;
    int nthreads;
    uint64_t *t0, *t1, *bad;
};

static inline float bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

#if defined(__FLT16_MAX__)
typedef _Float16 half;
static inline float half_to_float(half h) { return (float)h; }
#else       /* no _Float16: IEEE binary16 by hand */
typedef uint16_t half;
static inline float half_to_float(half h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f)
        bits = sign | 0x7f800000u | (man << 13);
    else if (exp)
        bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man)
        bits = sign;
    else {                  /* subnormal: normalise */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
#endif

#if defined(__x86_64__)
#include <immintrin.h>
/* The compiler does not vectorise _Float16 -> float: eight at a time by vcvtph2ps. */
__attribute__((target("avx2,f16c"))) static inline void add_f16c(float *restrict o,
                                                                 const uint16_t *restrict r,
                                                                 uint32_t dim)
{
    uint32_t d = 0;
    for (; d + 8 <= dim; d += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + d)));
        _mm256_storeu_ps(o + d, _mm256_add_ps(_mm256_loadu_ps(o + d), x));
    }
    for (; d < dim; d++)
        o[d] += _cvtsh_ss(r[d]);
}
#endif

/* out[d0..dim) += the row's columns d0..dim, in fp32. Inlined into each ISA's bag loop,
 * whose target attribute the compiler vectorises it for; `wide` (a constant there) picks
 * F16C for fp16. */
static inline __attribute__((always_inline)) void add_cols(float *restrict o,
                                                            const char *restrict row,
                                                            uint32_t d0, uint32_t dim,
                                                            int dtype, int wide)
{
#if defined(__x86_64__)
    if (wide && dtype == CXB_EMB_FP16) {
        add_f16c(o + d0, (const uint16_t *)row + d0, dim - d0);
        return;
    }
#else
    (void)wide;
#endif
    switch (dtype) {
    case CXB_EMB_FP32: {
        const float *r = (const float *)row;
        for (uint32_t d = d0; d < dim; d++)
            o[d] += r[d];
        break;
    }
    case CXB_EMB_FP16: {
        const half *r = (const half *)row;
        for (uint32_t d = d0; d < dim; d++)
            o[d] += half_to_float(r[d]);
        break;
    }
    case CXB_EMB_BF16: {
        const uint16_t *r = (const uint16_t *)row;
        for (uint32_t d = d0; d < dim; d++)
            o[d] += bf16_to_float(r[d]);
        break;
    }
    default: {              /* CXB_EMB_INT8: dim bytes, then the row's fp32 scale and bias */
        const uint8_t *r = (const uint8_t *)row;
        float scale, bias;
        memcpy(&scale, row + dim, sizeof scale);
        memcpy(&bias, row + dim + 4, sizeof bias);
        for (uint32_t d = d0; d < dim; d++)
            o[d] += (float)r[d] * scale + bias;
    }
    }
}

/* Eight fp32 lanes as GCC's vector extension: one ymm register under AVX2 and AVX-512;
 * sixteen, one zmm register, under AVX-512 only (under AVX2 they would be two ymm, which
 * GCC lowers through the stack: 8 M lookups/s instead of 30). Loads go through memcpy:
 * rows need not be aligned. */
typedef float v8f __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef uint8_t v8b __attribute__((vector_size(8)));
typedef float v16f __attribute__((vector_size(64)));
typedef uint8_t v16b __attribute__((vector_size(16)));

#if defined(__x86_64__)
/* fp16 by F16C's vcvtph2ps (the wide variants have it). */
__attribute__((target("avx2,f16c"))) static inline void add8_f16c(v8f *acc, const char *row)
{
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)row));
    *acc += (v8f)x;
}
/* bf16 by one vpmovzxwd from memory and a shift: GCC lowers the vector extension's
 * conversion through two xmm halves and an insert (five instructions a vector, and bf16
 * bags at half fp16's rate). */
__attribute__((target("avx2"))) static inline void add8_bf16(v8f *acc, const char *row)
{
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)row));
    *acc += (v8f)_mm256_slli_epi32(u, 16);
}
__attribute__((target("avx512f"))) static inline void add16_f16c(v16f *acc, const char *row)
{
    *acc += (v16f)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)row));
}
__attribute__((target("avx512f"))) static inline void add16_bf16(v16f *acc, const char *row)
{
    __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)row));
    *acc += (v16f)_mm512_slli_epi32(u, 16);
}
/* int8 by one vpmovzxbd from memory, a vcvtdq2ps and a multiply-add: GCC lowers the
 * vector extension's byte-to-float conversion lane by lane (int8 bags at 15 M lookups/s
 * against fp32's 316 at dim 256 here, AMD EPYC, AVX-512). */
__attribute__((target("avx2,fma"))) static inline void add8_u8(v8f *acc, const char *row,
                                                              float scale)
{
    __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)row)));
    *acc = (v8f)_mm256_fmadd_ps(x, _mm256_set1_ps(scale), (__m256)*acc);
}
__attribute__((target("avx512f"))) static inline void add16_u8(v16f *acc, const char *row,
                                                               float scale)
{
    __m512 x = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)row)));
    *acc = (v16f)_mm512_fmadd_ps(x, _mm512_set1_ps(scale), (__m512)*acc);
}
#endif

static inline __attribute__((always_inline)) size_t elem_bytes(int dtype)
{
    return dtype == CXB_EMB_FP32 ? 4 : dtype == CXB_EMB_INT8 ? 1 : 2;
}

/* *acc += the 8 elements at p as fp32 (fp32, fp16, bf16, or int8 with its row's scale
 * and bias). Vectors go by pointer: by value they would cross an ABI the scalar build
 * does not have. */
static inline __attribute__((always_inline)) void add8(v8f *acc, const char *p, int dtype,
                                                       float scale, float bias)
{
    v8f x;
#if defined(__x86_64__)
    if (dtype == CXB_EMB_FP16) {
        add8_f16c(acc, p);
        return;
    }
    if (dtype == CXB_EMB_BF16) {
        add8_bf16(acc, p);
        return;
    }
    if (dtype == CXB_EMB_INT8 && bias == 0.0f) {
        add8_u8(acc, p, scale);
        return;
    }
#endif
    if (dtype == CXB_EMB_FP32) {
        memcpy(&x, p, sizeof x);
    } else if (dtype == CXB_EMB_BF16) {
        v8h h;
        memcpy(&h, p, sizeof h);
        v8u u = __builtin_convertvector(h, v8u) << 16;
        memcpy(&x, &u, sizeof x);
    } else {
        v8b q;
        memcpy(&q, p, sizeof q);
        x = __builtin_convertvector(q, v8f) * scale + bias;
    }
    *acc += x;
}

/* The same sixteen at a time (AVX-512 only). */
static inline __attribute__((always_inline)) void add16(v16f *acc, const char *p, int dtype,
                                                        float scale, float bias)
{
#if defined(__x86_64__)
    if (dtype == CXB_EMB_FP16) {
        add16_f16c(acc, p);
        return;
    }
    if (dtype == CXB_EMB_BF16) {
        add16_bf16(acc, p);
        return;
    }
    if (dtype == CXB_EMB_INT8 && bias == 0.0f) {
        add16_u8(acc, p, scale);
        return;
    }
#endif
    v16f x;
    if (dtype == CXB_EMB_FP32) {
        memcpy(&x, p, sizeof x);
    } else {        /* int8 (bf16 and fp16 are x86's, as this variant is) */
        v16b q;
        memcpy(&q, p, sizeof q);
        x = __builtin_convertvector(q, v16f) * scale + bias;
    }
    *acc += x;
}

/* NAME: columns [d0, d0 + W nvec) of one bag in nvec registers of VEC (W fp32 lanes),
 * added by ADD and stored once, as FBGEMM's generated kernels do: summing into `out`
 * instead puts a load and a store of it beside every row's load, and the stores waiting
 * on a missing row fill the store buffer long before the misses fill the memory pipeline
 * (lookups/s 26 -> 35 M here). The bag's first pass (lead) prefetches the row `ahead`
 * lookups on, whole, and counts lookups naming no row. The lines this pass reads are
 * prefetched unrolled among its loads, as FBGEMM's generated code has them (a loop of
 * prefetches ahead of the loads cost a third of the rate here); a wider row's other
 * lines follow. `p` is made opaque to the compiler: it then addresses the vectors as p
 * plus constants, not as the row plus a register of its own per vector (spilled, past 16
 * of them). */
#define POOL_REGS(NAME, VEC, W, ADD)                                                     \
    static inline __attribute__((always_inline)) uint64_t NAME(                          \
        const struct cxb_embedding_args *a, float *o, int64_t first, int64_t end,        \
        int64_t last, uint32_t d0, int nvec, int dtype, int lead)                        \
    {                                                                                    \
        const char *table = a->table;                                                    \
        const uint64_t stride = a->row_bytes, rows = a->rows;                            \
        const uint64_t pass = ((uint64_t)nvec * W * elem_bytes(dtype) + CXB_LINE - 1) /  \
                              CXB_LINE * CXB_LINE;                                       \
        const uint32_t ahead = a->prefetch;                                              \
        VEC acc[16] = {{0}};                                                             \
        float sb[2] = {0, 0}, biases = 0;                                                \
        uint64_t bad = 0;                                                                \
        for (int64_t i = first; i < end; i++) {                                          \
            if (lead && ahead && i + ahead < last) {                                     \
                uint64_t next = (uint64_t)a->indices[i + ahead];                         \
                if (next < rows) {                                                       \
                    const char *q = table + next * stride;                               \
                    _Pragma("GCC unroll 16")                                             \
                    for (uint64_t off = 0; off < pass; off += CXB_LINE)                  \
                        __builtin_prefetch(q + off, 0, 3);                               \
                    for (uint64_t off = pass; off < stride; off += CXB_LINE)             \
                        __builtin_prefetch(q + off, 0, 3);                               \
                }                                                                        \
            }                                                                            \
            uint64_t r = (uint64_t)a->indices[i];                                        \
            if (r >= rows) {                                                             \
                bad += (uint64_t)lead;                                                   \
                continue;                                                                \
            }                                                                            \
            const char *row = table + r * stride, *p = row + d0 * elem_bytes(dtype);     \
            __asm__("" : "+r"(p));                                                       \
            if (dtype == CXB_EMB_INT8) {  /* the biases summed apart: one chain a vector */ \
                memcpy(sb, row + a->dim, sizeof sb);                                     \
                biases += sb[1];                                                         \
            }                                                                            \
            _Pragma("GCC unroll 16")                                                     \
            for (int v = 0; v < nvec; v++)                                               \
                ADD(&acc[v], p + W * elem_bytes(dtype) * (size_t)v, dtype, sb[0], 0.0f);  \
        }                                                                                \
        _Pragma("GCC unroll 16")                                                         \
        for (int v = 0; v < nvec; v++) {                                                 \
            acc[v] += biases;                                                            \
            memcpy(o + d0 + W * v, &acc[v], sizeof acc[v]);                              \
        }                                                                                \
        return bad;                                                                      \
    }
POOL_REGS(pool_regs8, v8f, 8, add8)
POOL_REGS(pool_regs16, v16f, 16, add16)

/* Passes of FN over N registers of W lanes while the columns last (N a constant, so the
 * accumulators stay in registers), where a->regs (0: any) allows N of them. */
#define PASSES(FN, W, N)                                                                 \
    for (; (!a->regs || (N) <= a->regs) && d + (W) * (N) <= dim; d += (W) * (N), lead = 0) \
        *bad += FN(a, o, first, end, last, d, N, dtype, lead)

/* A bag's columns in passes of as many registers as there are to spare (ymm: 8 of the
 * 16, or 12 or 16 where a->regs asks; zmm: 16 of the 32, a 256-wide fp32 row in one
 * pass) or as a->regs allows, then of
 * half as many, down to one, and a last ymm pass of eight. A narrower pass reads each
 * row in more visits but keeps fewer lines of it in flight: which is faster is the
 * CPU's to say (the benchmark's probe asks it). Returns where the columns left to the
 * row loop start. */
static inline __attribute__((always_inline)) uint32_t
pool_wide(const struct cxb_embedding_args *a, float *o, int64_t first, int64_t end,
          int64_t last, int zmm, int dtype, uint64_t *bad)
{
    uint32_t d = 0, dim = a->dim;
    int lead = 1;
    if (zmm) {
        PASSES(pool_regs16, 16, 16);
        PASSES(pool_regs16, 16, 8);
        PASSES(pool_regs16, 16, 4);
        PASSES(pool_regs16, 16, 2);
        PASSES(pool_regs16, 16, 1);
    } else {
        /* all 16 ymm, or 12 of them, only where asked: a 16-bit row's conversions need
         * registers of their own (FBGEMM's AVX2 code sums fp32 rows in up to 16) */
        if (a->regs >= 16)
            PASSES(pool_regs8, 8, 16);
        if (a->regs >= 12)
            PASSES(pool_regs8, 8, 12);
        PASSES(pool_regs8, 8, 8);
        PASSES(pool_regs8, 8, 4);
        PASSES(pool_regs8, 8, 2);
    }
    PASSES(pool_regs8, 8, 1);
    return d;
}

/* Bags [lo, hi): pooled into out, every sample_every-th timed alone. Returns the lookups
 * skipped for naming no row of the table (Python fails the case on any). `wide` (1: AVX2's
 * ymm, 2: AVX-512's zmm; 0, the scalar variant): bags accumulate in registers; the
 * columns left over (and every column of the scalar variant) are added into out row by
 * row. */
static inline __attribute__((always_inline)) uint64_t bags(struct cxb_embedding_args *a,
                                                            uint64_t lo, uint64_t hi, int wide)
{
    const char *table = a->table;
    const uint64_t stride = a->row_bytes, rows = a->rows;
    const uint32_t dim = a->dim, ahead = a->prefetch;
    const int64_t *idx = a->indices;
    const int64_t last = a->offsets[hi];     /* prefetches run on into the next bags */
    const int dtype = a->dtype;
    uint64_t bad = 0;
    for (uint64_t b = lo; b < hi; b++) {
        int timed = a->sample_every && b % a->sample_every == 0;
        uint64_t t = timed ? cxb_now_ns() : 0;
        float *o = a->out + b * dim;
        int64_t first = a->offsets[b], end = a->offsets[b + 1];
        uint32_t done = 0;
        if (wide) {         /* dtype a constant in each call, so each inlines its own loop */
            if (dtype == CXB_EMB_FP32)
                done = pool_wide(a, o, first, end, last, wide == 2, CXB_EMB_FP32, &bad);
            else if (dtype == CXB_EMB_FP16)
                done = pool_wide(a, o, first, end, last, wide == 2, CXB_EMB_FP16, &bad);
            else if (dtype == CXB_EMB_BF16)
                done = pool_wide(a, o, first, end, last, wide == 2, CXB_EMB_BF16, &bad);
            else
                done = pool_wide(a, o, first, end, last, wide == 2, CXB_EMB_INT8, &bad);
        }
        if (done < dim) {
            memset(o + done, 0, (dim - done) * sizeof *o);
            for (int64_t i = first; i < end; i++) {
                if (!done && ahead && i + ahead < last) {
                    uint64_t next = (uint64_t)idx[i + ahead];
                    if (next < rows)
                        for (uint64_t off = 0; off < stride; off += CXB_LINE)
                            __builtin_prefetch(table + next * stride + off, 0, 3);
                }
                uint64_t r = (uint64_t)idx[i];
                if (r >= rows) {
                    bad += !done;
                    continue;
                }
                add_cols(o, table + r * stride, done, dim, dtype, wide);
            }
        }
        if (a->pool == CXB_POOL_MEAN && end > first)
            for (uint32_t d = 0; d < dim; d++)
                o[d] /= (float)(end - first);
        if (timed)
            a->bag_ns[b / a->sample_every] = cxb_now_ns() - t;
    }
    return bad;
}

#if defined(__GNUC__) && !defined(__clang__)
#define SCALAR_ATTR __attribute__((optimize("no-tree-vectorize")))
#else
#define SCALAR_ATTR
#endif
SCALAR_ATTR static uint64_t bags_S(struct cxb_embedding_args *a, uint64_t lo, uint64_t hi)
{
    return bags(a, lo, hi, 0);
}
#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"), optimize("tree-vectorize")))
static uint64_t bags_A2(struct cxb_embedding_args *a, uint64_t lo, uint64_t hi)
{
    return bags(a, lo, hi, 1);
}
/* avx512vl: the last pass's ymm accumulator may sit in ymm16-31, which only EVEX encodes */
__attribute__((target("avx512f,avx512vl,avx2,fma,f16c"), optimize("tree-vectorize")))
static uint64_t bags_A5(struct cxb_embedding_args *a, uint64_t lo, uint64_t hi)
{
    return bags(a, lo, hi, 2);
}
#endif

/* The first bag whose lookups start at or after `lookup`: threads split the lookups, not
 * the bags, since tables pool from 1 to 100 rows a bag (DLRM-DCNv2's do). */
static uint64_t bag_at(const struct cxb_embedding_args *a, uint64_t lookup)
{
    uint64_t lo = 0, hi = a->bags;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)a->offsets[mid] < lookup)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int emb_thread(void *p, int t)
{
    struct emb *E = p;
    struct cxb_embedding_args *a = E->a;
    uint64_t total = (uint64_t)a->offsets[a->bags], n = (uint64_t)E->nthreads;
    uint64_t lo = t == 0 ? 0 : bag_at(a, total * (uint64_t)t / n);
    uint64_t hi = t == E->nthreads - 1 ? a->bags : bag_at(a, total * (uint64_t)(t + 1) / n);
    E->t0[t] = cxb_now_ns();
#if defined(__x86_64__)
    if (a->isa == CXB_ISA_AVX512)
        E->bad[t] = bags_A5(a, lo, hi);
    else if (a->isa == CXB_ISA_AVX2)
        E->bad[t] = bags_A2(a, lo, hi);
    else
#endif
        E->bad[t] = bags_S(a, lo, hi);
    E->t1[t] = cxb_now_ns();
    return 0;
}

int cxb_embedding_isa_supported(int isa)
{
#if defined(__x86_64__)
    /* The wide variants convert fp16 with F16C and may fuse with FMA: both are asked;
     * the AVX-512 one also keeps ymm accumulators in ymm16-31 (AVX512VL). */
    __builtin_cpu_init();
    if (isa == CXB_ISA_AVX2 || isa == CXB_ISA_AVX512)
        return cxb_isa_supported(isa) && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c") &&
               (isa != CXB_ISA_AVX512 || __builtin_cpu_supports("avx512vl"));
#endif
    return cxb_isa_supported(isa);
}

int cxb_embedding_bag(struct cxb_embedding_args *a, const int *cpus, int nthreads)
{
    static const uint32_t elem[] = {4, 2, 2, 1};
    if (!a || !a->table || !a->indices || !a->offsets || !a->out || nthreads < 1 ||
        (a->sample_every && !a->bag_ns))
        return cxb_fail(EINVAL, "embedding_bag: missing buffers or no threads");
    if (a->dtype < CXB_EMB_FP32 || a->dtype > CXB_EMB_INT8 || !a->dim ||
        a->row_bytes < (uint64_t)a->dim * elem[a->dtype] + (a->dtype == CXB_EMB_INT8 ? 8 : 0))
        return cxb_fail(EINVAL, "embedding_bag: dtype %d, dim %u, row of %llu bytes",
                        a->dtype, a->dim, (unsigned long long)a->row_bytes);
    if (a->isa < 0 || a->isa >= CXB_ISA_COUNT || !cxb_embedding_isa_supported(a->isa))
        return cxb_fail(ENOTSUP, "embedding_bag: this CPU cannot run ISA %d", a->isa);
    struct emb E = {a, nthreads, calloc((size_t)nthreads, 8), calloc((size_t)nthreads, 8),
                    calloc((size_t)nthreads, 8)};
    int rc = -ENOMEM;
    if (E.t0 && E.t1 && E.bad)
        rc = cxb_parallel(emb_thread, &E, cpus, nthreads);
    else
        cxb_fail(ENOMEM, "embedding_bag: cannot allocate %d thread slots", nthreads);
    if (rc == 0) {
        a->ns = cxb_span_ns(E.t0, E.t1, nthreads);
        a->bad = 0;
        for (int t = 0; t < nthreads; t++)
            a->bad += E.bad[t];
    }
    free(E.t0);
    free(E.t1);
    free(E.bad);
    return rc;
}

/* ---- training: one step for each row the batch touched ------------------------------ */
struct upd {
    struct cxb_embedding_update_args *a;
    int nthreads;
    uint64_t *t0, *t1;
    float **scratch;        /* a gradient row per thread */
};

static int upd_thread(void *p, int t)
{
    struct upd *U = p;
    struct cxb_embedding_update_args *a = U->a;
    const uint32_t dim = a->dim;
    float *g = U->scratch[t];
    uint64_t lo = a->nrows * (uint64_t)t / (uint64_t)U->nthreads;
    uint64_t hi = a->nrows * (uint64_t)(t + 1) / (uint64_t)U->nthreads;
    U->t0[t] = cxb_now_ns();
    for (uint64_t i = lo; i < hi; i++) {
        memset(g, 0, dim * sizeof *g);
        for (int64_t k = a->starts[i]; k < a->starts[i + 1]; k++) {
            int64_t b = a->bag_of[k];
            const float *o = a->out + (uint64_t)b * dim;
            if (a->pool == CXB_POOL_MEAN) {
                float n = (float)(a->offsets[b + 1] - a->offsets[b]);
                for (uint32_t d = 0; d < dim; d++)
                    g[d] += o[d] / n;
            } else {
                for (uint32_t d = 0; d < dim; d++)
                    g[d] += o[d];
            }
        }
        float *w = (float *)((char *)a->table + (uint64_t)a->rows[i] * a->row_bytes);
        float step = a->lr;
        if (a->optim == CXB_OPTIM_ADAGRAD) {
            float sq = 0;
            for (uint32_t d = 0; d < dim; d++)
                sq += g[d] * g[d];
            float *s = &a->state[a->rows[i]];
            *s += sq / (float)dim;
            step = a->lr / (sqrtf(*s) + a->eps);
        }
        for (uint32_t d = 0; d < dim; d++)
            w[d] -= step * g[d];
    }
    U->t1[t] = cxb_now_ns();
    return 0;
}

int cxb_embedding_update(struct cxb_embedding_update_args *a, const int *cpus, int nthreads)
{
    if (!a || !a->table || !a->rows || !a->starts || !a->bag_of || !a->offsets || !a->out ||
        !a->dim || nthreads < 1 || (a->optim == CXB_OPTIM_ADAGRAD && !a->state) ||
        a->row_bytes < (uint64_t)a->dim * sizeof(float))
        return cxb_fail(EINVAL, "embedding_update: missing buffers, rows or threads");
    struct upd U = {a, nthreads, calloc((size_t)nthreads, 8), calloc((size_t)nthreads, 8),
                    calloc((size_t)nthreads, sizeof(float *))};
    int rc = U.t0 && U.t1 && U.scratch ? 0 : -ENOMEM;
    for (int t = 0; rc == 0 && t < nthreads; t++)
        if (!(U.scratch[t] = malloc(a->dim * sizeof(float))))
            rc = -ENOMEM;
    if (rc == 0)
        rc = cxb_parallel(upd_thread, &U, cpus, nthreads);
    else
        cxb_fail(ENOMEM, "embedding_update: cannot allocate %d threads' rows", nthreads);
    if (rc == 0)
        a->ns = cxb_span_ns(U.t0, U.t1, nthreads);
    for (int t = 0; U.scratch && t < nthreads; t++)
        free(U.scratch[t]);
    free(U.scratch);
    free(U.t0);
    free(U.t1);
    return rc;
}
