/* The optimizer step of training, as fused CPU optimizers (DeepSpeed's CPU Adam,
 * torch.optim.Adam(fused=True)) take it: one pass over the parameters, their gradients and
 * both moments, each element read and written once. Adam with L2 weight decay, or AdamW's
 * decoupled decay, in torch.optim's order of operations. fp32: 16 bytes read and 12
 * written per parameter. Mixed precision: bf16 gradients in, the fp32 master copy and
 * moments read and written, bf16 parameters written (rounded to nearest even). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

struct coef {
    float b1, b2, one_b1, one_b2, eps;
    float step;             /* lr / (1 - b1^t) */
    float inv_bc2;          /* 1 / sqrt(1 - b2^t) */
    float l2;               /* Adam: weight decay added to the gradient; AdamW: 0 */
    float shrink;           /* AdamW: 1 - lr * weight decay; Adam: 1 */
};

/* Through a union, not memcpy: GCC 12 vectorises these, not the memcpy form. */
union bits {
    float f;
    uint32_t u;
};

static inline float from_bf16(uint16_t h)
{
    union bits b = {.u = (uint32_t)h << 16};
    return b.f;
}

static inline uint16_t to_bf16(float f)       /* round to nearest even, as torch does */
{
    union bits b = {.f = f};
    return (uint16_t)((b.u + 0x7fffu + ((b.u >> 16) & 1)) >> 16);
}

static inline float adam_one(const struct coef *c, float p, float g, float *m, float *v)
{
    g += c->l2 * p;
    float mi = c->b1 * *m + c->one_b1 * g;
    float vi = c->b2 * *v + c->one_b2 * g * g;
    *m = mi;
    *v = vi;
    return p * c->shrink - c->step * mi / (__builtin_sqrtf(vi) * c->inv_bc2 + c->eps);
}

/* Elements [lo, hi); inlined into each ISA's variant, whose target the loops take. */
static inline __attribute__((always_inline)) void span(const struct cxb_adam_args *a,
                                                       const struct coef *coef, uint64_t lo,
                                                       uint64_t hi)
{
    const struct coef k = *coef, *c = &k;     /* a local: no store can alias it */
    float *restrict m = a->m, *restrict v = a->v;
    if (a->precision == CXB_PRECISION_FP32) {
        float *restrict p = a->params;
        const float *restrict g = a->grads;
        for (uint64_t i = lo; i < hi; i++)
            p[i] = adam_one(c, p[i], g[i], &m[i], &v[i]);
    } else {
        uint16_t *restrict p = a->params;
        const uint16_t *restrict g = a->grads;
        float *restrict w = a->master;
        for (uint64_t i = lo; i < hi; i++) {
            w[i] = adam_one(c, w[i], from_bf16(g[i]), &m[i], &v[i]);
            p[i] = to_bf16(w[i]);
        }
    }
}

/* sqrt vectorises to vsqrtps: build.py compiles without math errno. -O2's very cheap
 * cost model leaves the bf16 loop scalar (its conversions need more than it allows). */
#define VECTOR "tree-vectorize", "vect-cost-model=dynamic"
__attribute__((optimize(VECTOR))) static void span_S(const struct cxb_adam_args *a,
                                                     const struct coef *c, uint64_t lo,
                                                     uint64_t hi)
{
    span(a, c, lo, hi);
}
#if defined(__x86_64__)
__attribute__((target("avx2"), optimize(VECTOR)))
static void span_A2(const struct cxb_adam_args *a, const struct coef *c, uint64_t lo,
                    uint64_t hi)
{
    span(a, c, lo, hi);
}
__attribute__((target("avx512f,avx2"), optimize(VECTOR)))
static void span_A5(const struct cxb_adam_args *a, const struct coef *c, uint64_t lo,
                    uint64_t hi)
{
    span(a, c, lo, hi);
}
#endif

#if defined(__x86_64__)
#include <immintrin.h>
/* Mixed precision sixteen at a time, by hand: GCC vectorises span's bf16 loop in ymm
 * halves with its constants spilled to the stack, and ran it at 60 % of the fp32 loop's
 * rate a thread here. The same operations in the same order as adam_one and to_bf16. */
__attribute__((target("avx512f"))) static void mixed_A5(const struct cxb_adam_args *a,
                                                        const struct coef *c, uint64_t lo,
                                                        uint64_t hi)
{
    uint16_t *p = a->params;
    const uint16_t *g = a->grads;
    float *w = a->master, *m = a->m, *v = a->v;
    const __m512 b1 = _mm512_set1_ps(c->b1), b2 = _mm512_set1_ps(c->b2),
                 one_b1 = _mm512_set1_ps(c->one_b1), one_b2 = _mm512_set1_ps(c->one_b2),
                 eps = _mm512_set1_ps(c->eps), step = _mm512_set1_ps(c->step),
                 inv_bc2 = _mm512_set1_ps(c->inv_bc2), l2 = _mm512_set1_ps(c->l2),
                 shrink = _mm512_set1_ps(c->shrink);
    const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    uint64_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        __m512i gb = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(g + i)));
        __m512 wi = _mm512_loadu_ps(w + i);
        __m512 gi = _mm512_fmadd_ps(l2, wi, _mm512_castsi512_ps(_mm512_slli_epi32(gb, 16)));
        __m512 mi = _mm512_fmadd_ps(b1, _mm512_loadu_ps(m + i), _mm512_mul_ps(one_b1, gi));
        __m512 vi = _mm512_fmadd_ps(b2, _mm512_loadu_ps(v + i),
                                    _mm512_mul_ps(_mm512_mul_ps(one_b2, gi), gi));
        _mm512_storeu_ps(m + i, mi);
        _mm512_storeu_ps(v + i, vi);
        __m512 den = _mm512_fmadd_ps(_mm512_sqrt_ps(vi), inv_bc2, eps);
        wi = _mm512_fmsub_ps(wi, shrink, _mm512_div_ps(_mm512_mul_ps(step, mi), den));
        _mm512_storeu_ps(w + i, wi);
        __m512i u = _mm512_castps_si512(wi);        /* to bf16, to nearest even */
        u = _mm512_add_epi32(_mm512_add_epi32(u, half),
                             _mm512_and_si512(_mm512_srli_epi32(u, 16), one));
        _mm256_storeu_si256((__m256i *)(p + i), _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
    }
    for (; i < hi; i++) {
        w[i] = adam_one(c, w[i], from_bf16(g[i]), &m[i], &v[i]);
        p[i] = to_bf16(w[i]);
    }
}
#endif

struct job {
    const struct cxb_adam_args *a;
    struct coef c;
    int nthreads;
    uint64_t *t0, *t1;
};

static int adam_thread(void *p, int t)
{
    struct job *J = p;
    const struct cxb_adam_args *a = J->a;
    /* Slices of whole lines of the fp32 arrays (16 floats), so no two threads write one
     * of their lines (the bf16 arrays' slices are half lines). */
    uint64_t lines = (a->n + 15) / 16, T = (uint64_t)J->nthreads;
    uint64_t lo = lines * (uint64_t)t / T * 16, hi = lines * (uint64_t)(t + 1) / T * 16;
    hi = hi < a->n ? hi : a->n;
    lo = lo < hi ? lo : hi;
    J->t0[t] = cxb_now_ns();
#if defined(__x86_64__)
    if (a->isa == CXB_ISA_AVX512 && a->precision == CXB_PRECISION_MIXED)
        mixed_A5(a, &J->c, lo, hi);
    else if (a->isa == CXB_ISA_AVX512)
        span_A5(a, &J->c, lo, hi);
    else if (a->isa == CXB_ISA_AVX2)
        span_A2(a, &J->c, lo, hi);
    else
#endif
        span_S(a, &J->c, lo, hi);
    J->t1[t] = cxb_now_ns();
    return 0;
}

int cxb_adam(struct cxb_adam_args *a, const int *cpus, int nthreads)
{
    if (!a || !a->params || !a->grads || !a->m || !a->v || nthreads < 1 ||
        (a->precision == CXB_PRECISION_MIXED && !a->master))
        return cxb_fail(EINVAL, "adam: missing buffers or no threads");
    if (a->kind < CXB_ADAM_ADAM || a->kind > CXB_ADAM_ADAMW ||
        a->precision < CXB_PRECISION_FP32 || a->precision > CXB_PRECISION_MIXED || !a->step)
        return cxb_fail(EINVAL, "adam: kind %d, precision %d, step %llu", a->kind,
                        a->precision, (unsigned long long)a->step);
    if (a->isa < 0 || a->isa >= CXB_ISA_COUNT || !cxb_isa_supported(a->isa))
        return cxb_fail(ENOTSUP, "adam: this CPU cannot run ISA %d", a->isa);
    double t = (double)a->step;
    int adamw = a->kind == CXB_ADAM_ADAMW;
    struct job J = {a, {a->beta1, a->beta2, 1 - a->beta1, 1 - a->beta2, a->eps,
                        (float)(a->lr / (1 - pow(a->beta1, t))),
                        (float)(1 / sqrt(1 - pow(a->beta2, t))),
                        adamw ? 0.0f : a->weight_decay,
                        adamw ? 1 - a->lr * a->weight_decay : 1.0f},
                    nthreads, calloc((size_t)nthreads, 8), calloc((size_t)nthreads, 8)};
    int rc = -ENOMEM;
    if (J.t0 && J.t1)
        rc = cxb_parallel(adam_thread, &J, cpus, nthreads);
    else
        cxb_fail(ENOMEM, "adam: cannot allocate %d thread slots", nthreads);
    if (rc == 0)
        a->ns = cxb_span_ns(J.t0, J.t1, nthreads);
    free(J.t0);
    free(J.t1);
    return rc;
}
