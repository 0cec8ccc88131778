/* Paged KV-cache traffic, as paged-attention engines (vLLM) move it: a decode step appends
 * one token to each sequence and then streams over every block of it, layer by layer, K
 * and V, the blocks scattered over the pool by the block table; prefill writes a prompt's
 * blocks; swaps and prefix restores copy runs of blocks between the cache and an offload
 * space. What is written is a known hash per token (cxlbench.h), and the decode scan
 * sums the uint64 words it reads per block, so numpy can tell every block read or
 * written from what it should hold. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef uint64_t (*scan_fn)(const char *p, size_t bytes);
typedef void (*put_fn)(uint64_t *w, uint64_t words, uint64_t ntok, uint64_t key, uint64_t gen);

struct kv {
    struct cxb_kvcache_args *a;
    int n;
    uint64_t bb;            /* block bytes */
    uint64_t words;         /* uint64 words per token */
    uint64_t entries;       /* DECODE, WRITE: seqs x width */
    scan_fn scan;
    put_fn put;
    unsigned arrived, phase;    /* the barrier between steps */
    uint64_t *bad;          /* per thread */
    uint64_t ns;            /* the steps' times added (thread 0's) */
    int cold;               /* DECODE: evict before each step (and this CPU can) */
};

/* The token's first word: splitmix64's finaliser over (gen, layer, kv, seq, position).
 * numpy computes the same; every other word of the token is base + its index. */
static inline uint64_t token_base(uint64_t gen, uint64_t key)
{
    uint64_t x = gen * 0x9E3779B97F4A7C15ull + key;
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* layer < 2^15, seq < 2^16 and position < 2^32 (checked): one word names a token. */
static inline uint64_t token_key(uint64_t layer, uint64_t kv, uint64_t seq)
{
    return ((layer << 1 | kv) << 16 | seq) << 32;
}

static inline char *block_at(const struct cxb_kv_pool *p, uint64_t bb, uint64_t b,
                             uint64_t layer, uint64_t kv)
{
    return (char *)p->base + (b / p->group) * p->group_bytes + (b % p->group) * bb +
           layer * p->layer_bytes + kv * p->kv_bytes;
}

/* ntok tokens from position key's low word on, each its base + word index. */
static inline __attribute__((always_inline)) void put_body(uint64_t *restrict w,
                                                            uint64_t words, uint64_t ntok,
                                                            uint64_t key, uint64_t gen)
{
    for (uint64_t t = 0; t < ntok; t++, w += words) {
        uint64_t base = token_base(gen, key + t);
        for (uint64_t j = 0; j < words; j++)
            w[j] = base + j;
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#define SCALAR_ATTR __attribute__((optimize("no-tree-vectorize")))
#else
#define SCALAR_ATTR
#endif

SCALAR_ATTR static void put_S(uint64_t *w, uint64_t words, uint64_t ntok, uint64_t key,
                              uint64_t gen)
{
    put_body(w, words, ntok, key, gen);
}

SCALAR_ATTR static uint64_t scan_S(const char *p, size_t bytes)
{
    const uint64_t *w = (const uint64_t *)p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t n = bytes / 8, i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += w[i];
        s1 += w[i + 1];
        s2 += w[i + 2];
        s3 += w[i + 3];
    }
    for (; i < n; i++)
        s0 += w[i];
    return s0 + s1 + s2 + s3;
}

#if defined(__x86_64__)
__attribute__((target("avx2"), optimize("tree-vectorize")))
static void put_A2(uint64_t *w, uint64_t words, uint64_t ntok, uint64_t key, uint64_t gen)
{
    put_body(w, words, ntok, key, gen);
}

__attribute__((target("avx512f,avx2"), optimize("tree-vectorize")))
static void put_A5(uint64_t *w, uint64_t words, uint64_t ntok, uint64_t key, uint64_t gen)
{
    put_body(w, words, ntok, key, gen);
}

/* Four named accumulators, as the read kernel has (bandwidth.c): four add chains in
 * registers. Blocks are 64-byte aligned where block bytes are a multiple of 64, not
 * always: unaligned loads, which cost nothing on aligned data. */
__attribute__((target("avx2"))) static uint64_t scan_A2(const char *p, size_t bytes)
{
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 128 <= bytes; i += 128) {
        s0 = _mm256_add_epi64(s0, _mm256_loadu_si256((const __m256i *)(p + i)));
        s1 = _mm256_add_epi64(s1, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
        s2 = _mm256_add_epi64(s2, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
        s3 = _mm256_add_epi64(s3, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
    }
    s0 = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    uint64_t lanes[4], s;
    _mm256_storeu_si256((__m256i *)lanes, s0);
    s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    for (; i < bytes; i += 8)
        s += *(const uint64_t *)(p + i);
    return s;
}

__attribute__((target("avx512f,avx2"))) static uint64_t scan_A5(const char *p, size_t bytes)
{
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 256 <= bytes; i += 256) {
        s0 = _mm512_add_epi64(s0, _mm512_loadu_si512((const void *)(p + i)));
        s1 = _mm512_add_epi64(s1, _mm512_loadu_si512((const void *)(p + i + 64)));
        s2 = _mm512_add_epi64(s2, _mm512_loadu_si512((const void *)(p + i + 128)));
        s3 = _mm512_add_epi64(s3, _mm512_loadu_si512((const void *)(p + i + 192)));
    }
    uint64_t s = (uint64_t)_mm512_reduce_add_epi64(
        _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
    for (; i < bytes; i += 8)
        s += *(const uint64_t *)(p + i);
    return s;
}
#define RELAX() _mm_pause()
#else
#define RELAX() ((void)0)
#endif

/* Spinning: a step can be microseconds, a futex wake-up tens of them. */
static void barrier(struct kv *K)
{
    if (K->n == 1)
        return;
    unsigned phase = __atomic_load_n(&K->phase, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&K->arrived, 1, __ATOMIC_ACQ_REL) == (unsigned)K->n) {
        __atomic_store_n(&K->arrived, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&K->phase, phase + 1, __ATOMIC_RELEASE);
    } else {
        while (__atomic_load_n(&K->phase, __ATOMIC_ACQUIRE) == phase)
            RELAX();
    }
}

/* The physical block of table entry e, or NULL (counted bad) outside the pool. */
static inline char *entry_block(struct kv *K, uint64_t e, uint64_t layer, uint64_t kv,
                                uint64_t *bad)
{
    int64_t b = K->a->table[e];
    if (b < 0 || (uint64_t)b >= K->a->pool.blocks) {
        (*bad)++;
        return NULL;
    }
    return block_at(&K->a->pool, K->bb, (uint64_t)b, layer, kv);
}

/* Decode step `step` over entries [lo, hi): layer by layer as attention goes, K then V. */
static uint64_t decode_step(struct kv *K, uint64_t step, uint64_t lo, uint64_t hi)
{
    struct cxb_kvcache_args *a = K->a;
    const uint64_t cur = a->tokens + step, block = a->block, tb = a->token_bytes;
    uint64_t bad = 0;
    for (uint64_t l = 0; l < a->layers; l++)
        for (uint64_t kv = 0; kv < 2; kv++) {
            uint64_t *sums = a->sums + (l * 2 + kv) * K->entries;
            for (uint64_t e = lo; e < hi; e++) {
                uint64_t seq = e / a->width, first = e % a->width * block;
                if (first > cur)
                    continue;           /* beyond the sequence yet */
                char *p = entry_block(K, e, l, kv, &bad);
                if (!p)
                    continue;
                /* The blocks are scattered: the hardware's streams stop at each one's end,
                 * so the next one's first lines are asked for ahead of it. */
                if (a->prefetch && e + 1 < hi) {
                    int64_t nb = a->table[e + 1];
                    if (nb >= 0 && (uint64_t)nb < a->pool.blocks) {
                        const char *q = block_at(&a->pool, K->bb, (uint64_t)nb, l, kv);
                        for (uint64_t o = 0; o < (uint64_t)a->prefetch * CXB_LINE && o < K->bb;
                             o += CXB_LINE)
                            __builtin_prefetch(q + o, 0, 3);
                    }
                }
                /* The new token's K or V lands in this block: written before it is read,
                 * by the one thread that reads it. */
                if (cur - first < block)
                    K->put((uint64_t *)(p + (cur - first) * tb), K->words, 1,
                           token_key(l, kv, seq) | cur, a->gen);
                uint64_t ntok = cur + 1 - first < block ? cur + 1 - first : block;
                sums[e] += K->scan(p, ntok * tb);
            }
        }
    return bad;
}

/* Untimed, before decode step `step`: drop from every cache the blocks entries [lo, hi)
 * will read in it (each whole, every layer, K and V), so the step reads memory as a
 * server's does once the model's weights have streamed through the caches since the
 * last step. Entries outside the pool are left to decode_step to count. */
static void evict_step(struct kv *K, uint64_t step, uint64_t lo, uint64_t hi)
{
    struct cxb_kvcache_args *a = K->a;
    const uint64_t cur = a->tokens + step;
    for (uint64_t l = 0; l < a->layers; l++)
        for (uint64_t kv = 0; kv < 2; kv++)
            for (uint64_t e = lo; e < hi; e++) {
                int64_t b = a->table[e];
                if (e % a->width * a->block > cur || b < 0 || (uint64_t)b >= a->pool.blocks)
                    continue;
                cxb_evict(block_at(&a->pool, K->bb, (uint64_t)b, l, kv), K->bb);
            }
}

static uint64_t write_tokens(struct kv *K, uint64_t lo, uint64_t hi)
{
    struct cxb_kvcache_args *a = K->a;
    uint64_t bad = 0;
    for (uint64_t l = 0; l < a->layers; l++)
        for (uint64_t kv = 0; kv < 2; kv++)
            for (uint64_t e = lo; e < hi; e++) {
                uint64_t seq = e / a->width, first = e % a->width * a->block;
                if (first >= a->tokens)
                    continue;
                char *p = entry_block(K, e, l, kv, &bad);
                if (!p)
                    continue;
                uint64_t ntok = a->tokens - first < a->block ? a->tokens - first : a->block;
                K->put((uint64_t *)p, K->words, ntok, token_key(l, kv, seq) | first, a->gen);
            }
    return bad;
}

static int run_ok(const struct cxb_kv_pool *p, int64_t b, int64_t n)
{
    return b >= 0 && n > 0 && (uint64_t)(b + n) <= p->blocks &&
           (uint64_t)b % p->group + (uint64_t)n <= p->group;
}

/* Group g's copies, all layers and K/V, as one stream of bytes; this thread copies its
 * share [lo, hi) of it. */
static uint64_t copy_group(struct kv *K, uint64_t g, int t)
{
    struct cxb_kvcache_args *a = K->a;
    const int64_t *r0 = a->runs + 3 * a->groups[g], *r1 = a->runs + 3 * a->groups[g + 1];
    uint64_t total = 0, bad = 0;
    for (const int64_t *r = r0; r < r1; r += 3)
        if (run_ok(&a->pool, r[0], r[2]) && run_ok(&a->dst, r[1], r[2]))
            total += (uint64_t)r[2] * K->bb;
        else
            bad++;
    total *= 2 * (uint64_t)a->layers;
    uint64_t lo = total * (uint64_t)t / (uint64_t)K->n;
    uint64_t hi = total * (uint64_t)(t + 1) / (uint64_t)K->n, at = 0;
    for (uint64_t l = 0; l < a->layers && at < hi; l++)
        for (uint64_t kv = 0; kv < 2 && at < hi; kv++)
            for (const int64_t *r = r0; r < r1 && at < hi; r += 3) {
                if (!run_ok(&a->pool, r[0], r[2]) || !run_ok(&a->dst, r[1], r[2]))
                    continue;
                uint64_t len = (uint64_t)r[2] * K->bb, from = lo > at ? lo - at : 0;
                uint64_t to = hi - at < len ? hi - at : len;
                if (from < to)
                    memcpy(block_at(&a->dst, K->bb, (uint64_t)r[1], l, kv) + from,
                           block_at(&a->pool, K->bb, (uint64_t)r[0], l, kv) + from,
                           to - from);
                at += len;
            }
    return t == 0 ? bad : 0;    /* every thread saw the same bad runs */
}

static int kv_thread(void *p, int t)
{
    struct kv *K = p;
    struct cxb_kvcache_args *a = K->a;
    uint64_t lo = K->entries * (uint64_t)t / (uint64_t)K->n;
    uint64_t hi = K->entries * (uint64_t)(t + 1) / (uint64_t)K->n;
    uint64_t steps = a->op == CXB_KVOP_WRITE ? 1 : a->steps, bad = 0, start = 0;
    for (uint64_t i = 0; i < steps; i++) {
        /* Cold: every thread evicts what it will read, and the clock starts once all
         * have; warm, the steps follow each other and the clock runs on. Either way a
         * step's time is barrier to barrier, and ns their sum: evictions are not in it. */
        if (K->cold)
            evict_step(K, i, lo, hi);
        if (K->cold || i == 0) {
            barrier(K);
            if (t == 0)
                start = cxb_now_ns();
        }
        if (a->op == CXB_KVOP_DECODE)
            bad += decode_step(K, i, lo, hi);
        else if (a->op == CXB_KVOP_WRITE)
            bad += write_tokens(K, lo, hi);
        else
            bad += copy_group(K, i, t);
        barrier(K);
        if (t == 0) {
            uint64_t now = cxb_now_ns();
            if (a->step_ns)
                a->step_ns[i] = now - start;
            K->ns += now - start;
            start = now;
        }
    }
    K->bad[t] = bad;
    return 0;
}

int cxb_kvcache(struct cxb_kvcache_args *a, const int *cpus, int nthreads)
{
    if (!a || nthreads < 1 || a->op < CXB_KVOP_DECODE || a->op > CXB_KVOP_COPY)
        return cxb_fail(EINVAL, "kvcache: no arguments, no threads or no such operation");
    if (!a->layers || a->layers >= 1u << 15 || !a->block || !a->token_bytes ||
        a->token_bytes % 8)
        return cxb_fail(EINVAL, "kvcache: %u layers, blocks of %u tokens of %llu bytes (a "
                        "multiple of 8)", a->layers, a->block,
                        (unsigned long long)a->token_bytes);
    const uint64_t decoded = a->op == CXB_KVOP_DECODE ? a->steps : 0;  /* tokens appended */
    const struct cxb_kv_pool *pools[2] = {&a->pool, &a->dst};
    for (int i = 0; i < (a->op == CXB_KVOP_COPY ? 2 : 1); i++)
        if (!pools[i]->base || !pools[i]->blocks || !pools[i]->group)
            return cxb_fail(EINVAL, "kvcache: a pool without memory, blocks or groups");
    if (a->op == CXB_KVOP_COPY) {
        if (!a->runs || !a->groups || !a->steps)
            return cxb_fail(EINVAL, "kvcache: a copy without runs or groups");
    } else if (!a->table || !a->seqs || a->seqs > 1u << 16 || !a->width ||
               (uint64_t)a->width * a->block < a->tokens + decoded ||
               a->tokens + decoded >= 1ull << 32 ||
               (a->op == CXB_KVOP_DECODE && (!a->sums || !a->steps))) {
        return cxb_fail(EINVAL, "kvcache: %u sequences of %u blocks cannot hold %llu tokens "
                        "(or no table, or no sums)", a->seqs, a->width,
                        (unsigned long long)(a->tokens + decoded));
    }
    if (a->isa < 0 || a->isa >= CXB_ISA_COUNT || !cxb_isa_supported(a->isa))
        return cxb_fail(ENOTSUP, "kvcache: this CPU cannot run ISA %d", a->isa);
    struct kv K = {a, nthreads, (uint64_t)a->block * a->token_bytes, a->token_bytes / 8,
                   (uint64_t)a->seqs * a->width, scan_S, put_S, 0, 0,
                   calloc((size_t)nthreads, 8), 0, 0};
    /* Off x86-64 nothing can evict: cold decodes run warm (the caller can tell, as
     * cxb_evict says so to it too). */
    K.cold = a->op == CXB_KVOP_DECODE && a->cold && cxb_evict(K.bad, 0) == 0;
#if defined(__x86_64__)
    if (a->isa == CXB_ISA_AVX512)
        K.scan = scan_A5, K.put = put_A5;
    else if (a->isa == CXB_ISA_AVX2)
        K.scan = scan_A2, K.put = put_A2;
#endif
    if (!K.bad)
        return cxb_fail(ENOMEM, "kvcache: cannot allocate %d thread slots", nthreads);
    int rc = cxb_parallel(kv_thread, &K, cpus, nthreads);
    if (rc == 0) {
        a->ns = K.ns;
        a->bad = 0;
        for (int t = 0; t < nthreads; t++)
            a->bad += K.bad[t];
    }
    free(K.bad);
    return rc;
}
