/* Checkpoint snapshots: model and optimizer state copied from one placement to another
 * in chunks, as a checkpointer stages a snapshot before training goes on; or only the
 * dirty rows of an embedding table, gathered and packed (a differential snapshot). Each
 * chunk may then be written back to memory with clwb and fenced (the persistence path of
 * memory that survives a crash), and written to a file, fsync'd once at the end (the path
 * to storage). The copy loops are small per-ISA functions from one macro, so the variants
 * cannot drift apart. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "internal.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Scalar stays scalar ("isa=scalar" means it), and its word loop must not become a call
 * to libc's memcpy, which picks its own instructions and store kind. */
#if defined(__GNUC__) && !defined(__clang__)
#define SCALAR_ATTR __attribute__((optimize("no-tree-vectorize", \
                                             "no-tree-loop-distribute-patterns")))
#else
#define SCALAR_ATTR
#endif

#define S_LD(p) (*(p))
#define S_ST(p, v) (*(p) = (v))
#if defined(__x86_64__)
#define S_NT(p, v) _mm_stream_si64((long long *)(p), (long long)(v))        /* movnti */
#define A2_LD(p) _mm256_load_si256(p)
#define A2_ST(p, v) _mm256_store_si256((p), (v))
#define A2_NT(p, v) _mm256_stream_si256((p), (v))
#define A5_LD(p) _mm512_load_si512((const void *)(p))
#define A5_ST(p, v) _mm512_store_si512((void *)(p), (v))
#define A5_NT(p, v) _mm512_stream_si512((void *)(p), (v))
#endif

/* copy: bytes (whole 64-byte lines, both sides line-aligned) from s to d, four lines an
 * iteration: a gathered row. gather: rows[i] of s to row i of d, the row `ahead` rows on
 * prefetched line by line (rows are sorted but far apart, so the hardware prefetcher
 * loses the stream at each jump); rows past src_rows are skipped and counted. A whole
 * snapshot's chunks go through the bandwidth kernels' walked copies (bandwidth.c). */
#define COPY(SUF, ATTR, VEC, LD, ST)                                                   \
    ATTR static inline void copy_##SUF(char *restrict d, const char *restrict s,       \
                                       size_t bytes)                                   \
    {                                                                                  \
        enum { PER_LINE = CXB_LINE / sizeof(VEC) };                                    \
        size_t o = 0;                                                                  \
        for (; o + 4 * CXB_LINE <= bytes; o += 4 * CXB_LINE) {                         \
            _Pragma("GCC unroll 32")                                                   \
            for (int v = 0; v < 4 * PER_LINE; v++)                                     \
                ST((VEC *)(d + o) + v, LD((const VEC *)(s + o) + v));                  \
        }                                                                              \
        for (; o < bytes; o += CXB_LINE) {                                             \
            _Pragma("GCC unroll 8")                                                    \
            for (int v = 0; v < PER_LINE; v++)                                         \
                ST((VEC *)(d + o) + v, LD((const VEC *)(s + o) + v));                  \
        }                                                                              \
    }
#define GATHER(SUF, ATTR)                                                              \
    ATTR static uint64_t gather_##SUF(char *restrict d, const char *restrict s,        \
                                      const int64_t *rows, uint64_t n, uint64_t rb,    \
                                      uint64_t src_rows, uint32_t ahead)               \
    {                                                                                  \
        uint64_t bad = 0;                                                              \
        for (uint64_t i = 0; i < n; i++) {                                             \
            if (ahead && i + ahead < n && (uint64_t)rows[i + ahead] < src_rows)        \
                for (uint64_t off = 0; off < rb; off += CXB_LINE)                      \
                    __builtin_prefetch(s + (uint64_t)rows[i + ahead] * rb + off, 0, 0); \
            uint64_t r = (uint64_t)rows[i];                                            \
            if (r >= src_rows) {                                                       \
                bad++;                                                                 \
                continue;                                                              \
            }                                                                          \
            copy_##SUF(d + i * rb, s + r * rb, rb);                                    \
        }                                                                              \
        return bad;                                                                    \
    }
#define VARIANT(SUF, ATTR, VEC, LD, ST) COPY(SUF, ATTR, VEC, LD, ST) GATHER(SUF, ATTR)

VARIANT(S, SCALAR_ATTR, uint64_t, S_LD, S_ST)
#if defined(__x86_64__)
VARIANT(S_nt, SCALAR_ATTR, uint64_t, S_LD, S_NT)
VARIANT(A2, __attribute__((target("avx2"))), __m256i, A2_LD, A2_ST)
VARIANT(A2_nt, __attribute__((target("avx2"))), __m256i, A2_LD, A2_NT)
VARIANT(A5, __attribute__((target("avx512f"))), __m512i, A5_LD, A5_ST)
VARIANT(A5_nt, __attribute__((target("avx512f"))), __m512i, A5_LD, A5_NT)
/* rep movsb, one instruction a chunk or a row: the CPU's microcode picks the stores */
static inline void copy_rep(char *d, const char *s, size_t bytes) { cxb_rep_movsb(d, s, bytes); }
GATHER(rep, )
static void walk_rep(char *restrict d, const char *restrict s, size_t bytes, uint32_t ahead,
                     uint32_t ways)
{
    (void)ahead, (void)ways;
    cxb_rep_movsb(d, s, bytes);
}
__attribute__((target("clwb"))) static void writeback(char *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += CXB_LINE)
        _mm_clwb(p + o);
}
#define FENCE() _mm_sfence()
#else
#define FENCE() __sync_synchronize()
#endif

struct variant {
    void (*whole)(char *restrict d, const char *restrict s, size_t bytes, uint32_t ahead,
                  uint32_t ways);
    uint64_t (*gather)(char *restrict d, const char *restrict s, const int64_t *rows,
                       uint64_t n, uint64_t rb, uint64_t src_rows, uint32_t ahead);
};
/* [isa][store]: regular, non-temporal, rep movsb (the same for every ISA) */
#if defined(__x86_64__)
#define V(isa, suf) {cxb_copy_walk_##isa, gather_##suf}
#define V_NT(isa, suf) {cxb_copy_walk_##isa##_nt, gather_##suf##_nt}
#define V_REP {walk_rep, gather_rep}
static const struct variant variants[CXB_ISA_COUNT][3] = {
    {V(S, S), V_NT(S, S), V_REP}, {V(A2, A2), V_NT(A2, A2), V_REP},
    {V(A5, A5), V_NT(A5, A5), V_REP}};
#else
static const struct variant variants[CXB_ISA_COUNT][3] = {
    {{cxb_copy_walk_S, gather_S}, {NULL, NULL}, {NULL, NULL}}};
#endif

struct snap {
    struct cxb_checkpoint_args *a;
    const struct variant *v;
    int nthreads;
    uint64_t chunks, rows_per_chunk;
    uint64_t *t0, *t1, *bad;
};

/* The whole of [p, p + len) to fd at offset off, across short writes and signals. */
static int write_all(int fd, const char *p, uint64_t len, uint64_t off)
{
    while (len) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return cxb_fail(n < 0 ? errno : EIO, "checkpoint: writing %llu bytes at offset "
                            "%llu of the file failed", (unsigned long long)len,
                            (unsigned long long)off);
        p += n, off += (uint64_t)n, len -= (uint64_t)n;
    }
    return 0;
}

static int snap_thread(void *p, int t)
{
    struct snap *S = p;
    struct cxb_checkpoint_args *a = S->a;
    char *dst = a->dst;
    const char *src = a->src;
    uint64_t lo = S->chunks * (uint64_t)t / (uint64_t)S->nthreads;
    uint64_t hi = S->chunks * (uint64_t)(t + 1) / (uint64_t)S->nthreads, bad = 0;
    int rc = 0;
    S->t0[t] = cxb_now_ns();
    for (uint64_t c = lo; c < hi && rc == 0; c++) {
        uint64_t off, len;
        if (a->rows) {
            uint64_t r0 = c * S->rows_per_chunk;
            uint64_t r1 = r0 + S->rows_per_chunk < a->nrows ? r0 + S->rows_per_chunk : a->nrows;
            off = r0 * a->row_bytes, len = (r1 - r0) * a->row_bytes;
            bad += S->v->gather(dst + off, src, a->rows + r0, r1 - r0, a->row_bytes,
                                a->src_rows, a->prefetch);
        } else {
            off = c * a->chunk, len = a->bytes - off < a->chunk ? a->bytes - off : a->chunk;
            S->v->whole(dst + off, src + off, len, a->lines_ahead, a->ways);
        }
        if (a->persist) {
#if defined(__x86_64__)
            if (a->store != CXB_CKPT_NT)        /* NT stores left no line in the cache */
                writeback(dst + off, len);
#endif
            FENCE();
        }
        if (a->fd >= 0)
            rc = write_all(a->fd, dst + off, len, off);
    }
    if (a->store != CXB_CKPT_REGULAR)   /* weakly ordered stores (NT, fast strings): */
        FENCE();                        /* the snapshot visible before the clock */
    S->t1[t] = cxb_now_ns();
    S->bad[t] = bad;
    return rc;
}

int cxb_checkpoint(struct cxb_checkpoint_args *a, const int *cpus, int nthreads)
{
    if (!a || !a->dst || !a->src || nthreads < 1 || a->chunk < CXB_LINE ||
        a->chunk % CXB_LINE || ((uintptr_t)a->dst | (uintptr_t)a->src) % CXB_LINE)
        return cxb_fail(EINVAL, "checkpoint: buffers missing or not 64-byte aligned, no "
                        "threads, or a chunk of %llu bytes (whole lines needed)",
                        (unsigned long long)(a ? a->chunk : 0));
    if (a->rows ? !a->row_bytes || a->row_bytes % CXB_LINE : a->bytes % CXB_LINE)
        return cxb_fail(EINVAL, "checkpoint: %llu bytes (rows of %llu): whole 64-byte lines "
                        "needed", (unsigned long long)a->bytes,
                        (unsigned long long)a->row_bytes);
    if (a->store < CXB_CKPT_REGULAR || a->store > CXB_CKPT_REP || a->isa < 0 ||
        a->isa >= CXB_ISA_COUNT || !variants[a->isa][a->store].whole)
        return cxb_fail(EINVAL, "checkpoint: no variant for store %d, ISA %d", a->store,
                        a->isa);
    if (!cxb_isa_supported(a->isa))
        return cxb_fail(ENOTSUP, "checkpoint: this CPU cannot run ISA %d", a->isa);
    if (a->persist && a->store != CXB_CKPT_NT && !cxb_flush_supported(CXB_FLUSH_CLWB))
        return cxb_fail(ENOTSUP, "checkpoint: persist with regular stores or rep movsb needs "
                        "clwb, which this CPU lacks");
    struct snap S = {a, &variants[a->isa][a->store], nthreads, 0, 0,
                     calloc((size_t)nthreads, 8), calloc((size_t)nthreads, 8),
                     calloc((size_t)nthreads, 8)};
    if (a->rows) {
        S.rows_per_chunk = a->chunk / a->row_bytes ? a->chunk / a->row_bytes : 1;
        S.chunks = (a->nrows + S.rows_per_chunk - 1) / S.rows_per_chunk;
    } else {
        S.chunks = (a->bytes + a->chunk - 1) / a->chunk;
    }
    int rc = -ENOMEM;
    if (S.t0 && S.t1 && S.bad)
        rc = cxb_parallel(snap_thread, &S, cpus, nthreads);
    else
        cxb_fail(ENOMEM, "checkpoint: cannot allocate %d thread slots", nthreads);
    if (rc == 0 && a->fd >= 0 && fsync(a->fd))
        rc = cxb_fail(errno, "checkpoint: fsync of the file failed");
    if (rc == 0) {
        uint64_t end = cxb_now_ns();
        a->t0 = S.t0[0], a->bad = 0;
        for (int t = 0; t < nthreads; t++) {
            a->t0 = S.t0[t] < a->t0 ? S.t0[t] : a->t0;
            a->bad += S.bad[t];
        }
        /* Without a file the last thread's end; with one, after the fsync. */
        a->t1 = a->fd >= 0 ? end : S.t1[0];
        for (int t = 0; a->fd < 0 && t < nthreads; t++)
            a->t1 = S.t1[t] > a->t1 ? S.t1[t] : a->t1;
        a->ns = a->t1 - a->t0;
    }
    free(S.t0);
    free(S.t1);
    free(S.bad);
    return rc;
}
