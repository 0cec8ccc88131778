/* The kernel table: one row per kernel, one fixed signature, a variant per ISA. Adding a
 * kernel is one function, one row (its check kind says how Python checks what it did)
 * and one test; Python reads the rest from here. The drivers' table below lists the entry
 * points with argument structs of their own in rows of the same shape. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include "internal.h"

/* bandwidth.c: each kernel in three variants, suffixes _S (scalar), _A2, _A5 */
#define DECLARE3(name) \
    int cxb_##name##_S(struct cxb_kargs *); \
    int cxb_##name##_A2(struct cxb_kargs *); \
    int cxb_##name##_A5(struct cxb_kargs *);
DECLARE3(read) DECLARE3(write) DECLARE3(write_nt) DECLARE3(copy) DECLARE3(copy_nt)
DECLARE3(triad) DECLARE3(triad_nt) DECLARE3(rw_3_1) DECLARE3(rw_2_1) DECLARE3(rw_1_1)
DECLARE3(random_64) DECLARE3(random_256) DECLARE3(random_4096)
int cxb_copy_libc(struct cxb_kargs *kargs);
int cxb_copy_rep(struct cxb_kargs *kargs);
int cxb_write_rep(struct cxb_kargs *kargs);
int cxb_write_libc(struct cxb_kargs *kargs);
int cxb_chase_kernel(struct cxb_kargs *kargs);
int cxb_chase_mlp_kernel(struct cxb_kargs *kargs);
int cxb_chase_dist_kernel(struct cxb_kargs *kargs);

/* Test-only: dies the way a broken kernel would, so the runner's isolation is testable. */
static int crash_kernel(struct cxb_kargs *kargs)
{
    (void)kargs;
    raise(SIGSEGV);
    return 0;
}

#if defined(__x86_64__)
#define X86(f) f
#else
#define X86(f) NULL
#endif

struct row {
    struct cxb_kernel_info info;
    cxb_kernel_fn fn[CXB_ISA_COUNT];    /* scalar, avx2, avx512 */
};

/* A stream kernel takes any number of threads; a chase kernel one, and no streams. */
#define STREAM(key, bench, desc, check, elem, rd, wr, streams, names, wa) \
    {{key, bench, desc, CXB_CHECK_##check, NULL, 1, 0, 0, NULL}, elem, rd, wr, streams, names, \
     wa, 0}
#define CHASE(key, desc) \
    {{key, "chase", desc, CXB_CHECK_CHAIN_END, NULL, 1, 1, 0, NULL}, 8, 8, 0, 0, NULL, 0, 0}
#define VARIANTS(name) {cxb_##name##_S, X86(cxb_##name##_A2), X86(cxb_##name##_A5)}
#define SCALAR_ONLY(fn) {fn, NULL, NULL}

static const struct row table[] = {
    /* key, benchmark, description, check, bytes per step, read, written, streams, their
     * names (what mem.<name> places), write-allocate */
    {STREAM("read", "bandwidth", "sequential read: src is summed as uint64 lanes", INDEX_SUM,
            8, 8, 0, 1, "src", 0), VARIANTS(read)},
    {STREAM("write", "bandwidth", "dst[i] = s", FILL, 8, 0, 8, 1, "dst", 1), VARIANTS(write)},
    {STREAM("write_nt", "bandwidth", "dst[i] = s, non-temporal stores", FILL, 8, 0, 8, 1,
            "dst", 0), VARIANTS(write_nt)},
    {STREAM("copy", "bandwidth", "dst[i] = src[i]", COPY, 8, 8, 8, 2, "dst,src", 1),
     VARIANTS(copy)},
    {STREAM("copy_nt", "bandwidth", "dst[i] = src[i], non-temporal stores", COPY, 8, 8, 8, 2,
            "dst,src", 0), VARIANTS(copy_nt)},
    {STREAM("triad", "bandwidth", "a[i] = b[i] + s * c[i]", TRIAD, 8, 16, 8, 3, "a,b,c", 1),
     VARIANTS(triad)},
    {STREAM("triad_nt", "bandwidth", "a[i] = b[i] + s * c[i], non-temporal stores", TRIAD,
            8, 16, 8, 3, "a,b,c", 0), VARIANTS(triad_nt)},
    {STREAM("rw_3_1", "bandwidth", "of every 4 lines read 3, write 1 (MLC's 3:1)", INDEX_SUM,
            256, 192, 64, 1, "data", 1), VARIANTS(rw_3_1)},
    {STREAM("rw_2_1", "bandwidth", "of every 3 lines read 2, write 1 (MLC's 2:1)", INDEX_SUM,
            192, 128, 64, 1, "data", 1), VARIANTS(rw_2_1)},
    {STREAM("rw_1_1", "bandwidth", "of every 2 lines read 1, write 1 (MLC's 1:1)", INDEX_SUM,
            128, 64, 64, 1, "data", 1), VARIANTS(rw_1_1)},
    {STREAM("random_64", "random_bw", "64 B blocks read in a random order, each once a pass",
            INDEX_SUM, 64, 64, 0, 1, "src", 0), VARIANTS(random_64)},
    {STREAM("random_256", "random_bw", "256 B blocks read in a random order, each once a "
            "pass", INDEX_SUM, 256, 256, 0, 1, "src", 0), VARIANTS(random_256)},
    {STREAM("random_4096", "random_bw", "4 KiB blocks read in a random order, each once a "
            "pass", INDEX_SUM, 4096, 4096, 0, 1, "src", 0), VARIANTS(random_4096)},
    /* libc may store non-temporally past a size of its own: write-allocate not claimed */
    {STREAM("copy_libc", "bandwidth", "memcpy(dst, src): libc's own instructions and stores, "
            "picked at run time (its one variant is named scalar)", COPY, 8, 8, 8, 2,
            "dst,src", 0),
     SCALAR_ONLY(cxb_copy_libc)},
    {STREAM("write_libc", "bandwidth", "memset(dst, s): s's low byte in every byte, libc's "
            "own instructions and stores (its one variant is named scalar)", FILL, 8, 0, 8, 1,
            "dst", 0),
     SCALAR_ONLY(cxb_write_libc)},
    /* rep movsb / rep stosb: the CPU's microcode picks width and store kind (x86-64
     * only: elsewhere no variant, and the kernel is refused naming what it needs) */
    {{{"copy_rep", "bandwidth", "rep movsb from src to dst: the CPU's string microcode "
       "(its one variant is named scalar)", CXB_CHECK_COPY, NULL, 1, 0, 0,
       "x86-64 (rep movsb)"}, 8, 8, 8, 2, "dst,src", 0, 0}, {X86(cxb_copy_rep), NULL, NULL}},
    {{{"write_rep", "bandwidth", "rep stosb of s's low byte over dst: the CPU's string "
       "microcode (its one variant is named scalar)", CXB_CHECK_FILL, NULL, 1, 0, 0,
       "x86-64 (rep stosb)"}, 8, 0, 8, 1, "dst", 0, 0}, {X86(cxb_write_rep), NULL, NULL}},
    {CHASE("chase", "dependent loads around a random cycle, one pointer per line"),
     SCALAR_ONLY(cxb_chase_kernel)},
    {CHASE("chase_mlp", "independent chains walked in lockstep by one thread"),
     SCALAR_ONLY(cxb_chase_mlp_kernel)},
    {CHASE("chase_dist", "batches of dependent loads, each timed with rdtscp"),
     SCALAR_ONLY(cxb_chase_dist_kernel)},
    {{{"crash", "selftest", "raises SIGSEGV (test-only)", CXB_CHECK_NONE, "it never returns",
       1, 1, 0, NULL}, 8, 0, 0, 0, NULL, 0, 1}, SCALAR_ONLY(crash_kernel)},
};
enum { ROWS = sizeof table / sizeof table[0] };

int cxb_kernel_count(void) { return ROWS; }

int cxb_kernel_get(int index, struct cxb_kernel_info *out)
{
    if (index < 0 || index >= ROWS || !out)
        return cxb_fail(EINVAL, "no kernel at index %d", index);
    *out = table[index].info;
    out->entry.isa_mask = 0;
    for (int i = 0; i < CXB_ISA_COUNT; i++)
        if (table[index].fn[i])
            out->entry.isa_mask |= 1 << i;
    return 0;
}

struct timed {
    cxb_kernel_fn fn;
    struct cxb_kargs *args;
    uint64_t *t0, *t1;
};

static int timed_slice(void *p, int t)
{
    struct timed *w = p;
    w->t0[t] = cxb_now_ns();
    int rc = w->fn(&w->args[t]);
    w->t1[t] = cxb_now_ns();
    return rc;
}

int cxb_run(int index, int isa, struct cxb_kargs *a, const int *cpus, int nthreads,
            uint64_t *ns)
{
    enum { MAXT = 4096 };
    if (index < 0 || index >= ROWS || !a || !ns)
        return cxb_fail(EINVAL, "no kernel at index %d", index);
    const struct row *row = &table[index];
    const char *key = row->info.entry.key;
    if (isa < 0 || isa >= CXB_ISA_COUNT || !row->fn[isa])
        return cxb_fail(EINVAL, "kernel %s has no variant for ISA %d", key, isa);
    if (!cxb_isa_supported(isa))
        return cxb_fail(ENOTSUP, "this CPU cannot run ISA %d", isa);
    int most = row->info.entry.max_threads ? row->info.entry.max_threads : MAXT;
    if (nthreads < row->info.entry.min_threads || nthreads > most)
        return cxb_fail(EINVAL, "kernel %s cannot run on %d threads", key, nthreads);
    struct cxb_stream_args *s = &a->stream;
    for (int i = 0; i < row->info.streams; i++)
        if (!s->buf[i] || ((uintptr_t)s->buf[i] % CXB_LINE))
            return cxb_fail(EINVAL, "stream %d is missing or not 64-byte aligned", i);
    struct cxb_kargs *args = calloc((size_t)nthreads, sizeof *args);
    uint64_t *t0 = calloc((size_t)nthreads, sizeof *t0), *t1 = calloc((size_t)nthreads, sizeof *t1);
    if (!args || !t0 || !t1) {
        free(args);
        free(t0);
        free(t1);
        return cxb_fail(ENOMEM, "cannot allocate %d thread slots", nthreads);
    }
    /* Slices are whole steps (at least a line), so a kernel's pattern over the buffer
     * does not depend on the thread count; the last thread takes the remainder. */
    size_t unit = row->info.elem_bytes > CXB_LINE ? row->info.elem_bytes : CXB_LINE;
    size_t steps = s->bytes / unit, off = 0;
    for (int t = 0; t < nthreads; t++) {
        size_t n = steps * (size_t)(t + 1) / (size_t)nthreads - steps * (size_t)t / (size_t)nthreads;
        args[t] = *a;
        args[t].stream.bytes = t == nthreads - 1 ? s->bytes - off : n * unit;
        args[t].stream.sum = 0;
        for (int i = 0; i < row->info.streams; i++)
            args[t].stream.buf[i] = (char *)s->buf[i] + off;
        off += args[t].stream.bytes;
    }
    struct timed w = {row->fn[isa], args, t0, t1};
    int rc = cxb_parallel(timed_slice, &w, cpus, nthreads);
    if (rc == 0) {
        uint64_t sum = 0;
        for (int t = 0; t < nthreads; t++)
            sum += args[t].stream.sum;
        *ns = cxb_span_ns(t0, t1, nthreads);
        s->sum = sum;
        a->chase.end = args[0].chase.end;
    }
    free(args);
    free(t0);
    free(t1);
    return rc;
}

/* ---- drivers ----------------------------------------------------------------------- */
#define SCALAR (1 << CXB_ISA_SCALAR)
#if defined(__x86_64__)
#define WIDE ((1 << CXB_ISA_AVX2) | (1 << CXB_ISA_AVX512))     /* compiled in on x86-64 */
#else
#define WIDE 0
#endif
static const struct cxb_entry drivers[] = {
    /* key (cxb_<key> is the function), benchmark, description, check, why not checked,
     * min and max threads, ISAs, needs */
    {"loaded_latency", "loaded_latency", "thread 0 chases pointers while the others stream "
     "over their slices of a second buffer, a pause after every 8 lines", CXB_CHECK_LINES,
     NULL, 1, 0, SCALAR, NULL},
    {"pingpong", "pingpong", "one line handed back and forth between two threads by a store "
     "or a compare-and-swap", CXB_CHECK_COUNTERS, NULL, 2, 2, SCALAR, NULL},
    {"atomics", "atomics", "fetch-and-add or CAS on one shared word, on a line of each "
     "thread's own, or on neighbouring words of one line", CXB_CHECK_COUNTERS, NULL, 1, 0,
     SCALAR, "false sharing: at most 8 threads, a line's words"},
    {"flush", "flush", "clflush, clflushopt or clwb of clean or dirty lines, non-temporal "
     "stores, or write then flush, ended by sfence", CXB_CHECK_LINES, NULL, 1, 1, SCALAR,
     "x86-64 and the kind's instruction (cxb_flush_supported)"},
    {"embedding_bag", "embedding", "each bag sums or averages the table rows its indices "
     "name (fp32, fp16, bf16, int8 with row-wise scale and bias), bags split between the "
     "threads", CXB_CHECK_POOLED, NULL, 1, 0, SCALAR | WIDE,
     "avx2 and avx512: FMA and F16C too, avx512 also AVX512VL (cxb_embedding_isa_supported)"},
    {"embedding_update", "embedding", "training's step on the rows a batch looked up: each "
     "row's gradient summed from its bags, then SGD or row-wise Adagrad, rows split between "
     "the threads", CXB_CHECK_UPDATED, NULL, 1, 0, SCALAR, NULL},
    {"adam", "optimizer", "one fused Adam or AdamW step over parameters, gradients and both "
     "moments (fp32, or bf16 with an fp32 master copy), slices of whole lines per thread",
     CXB_CHECK_STEPPED, NULL, 1, 0, SCALAR | WIDE, NULL},
    {"checkpoint", "checkpoint", "a snapshot copied in chunks with regular or non-temporal "
     "stores, whole or the dirty rows of a table gathered; per chunk clwb and sfence, a "
     "pwrite to a file (fsync at the end)", CXB_CHECK_SNAPSHOT, NULL, 1, 0, SCALAR | WIDE,
     "persist with regular stores: clwb (cxb_flush_supported)"},
    {"kvcache", "kvcache", "paged KV-cache: decode steps (append a token to each sequence, "
     "read all its scattered blocks, every layer, K and V), prefill writes, and runs of "
     "blocks copied between pools (swaps, prefix restores), threads split each step",
     CXB_CHECK_BLOCKS, NULL, 1, 0, SCALAR | WIDE, NULL},
    {"xh_pingpong", "shared_pingpong", "a flag handed back and forth between two hosts on "
     "one shared region, with or without the flush protocol", CXB_CHECK_COUNTERS, NULL, 2, 2,
     SCALAR, "x86-64: clflush (the protocol's flush: cxb_flush_supported)"},
    {"xh_ring", "shared_ring", "messages from host 0 to host 1 through a single-producer "
     "single-consumer ring on one shared region", CXB_CHECK_MESSAGES, NULL, 2, 2, SCALAR,
     "x86-64: clflush (the protocol's flush: cxb_flush_supported)"},
    {"xh_atomic", "shared_atomic", "both hosts add to one counter on a shared region (lock "
     "xadd, a compare-and-swap loop, or a plain load and store), the total read back",
     CXB_CHECK_COUNTERS, NULL, 2, 2, SCALAR,
     "x86-64: clflush (the protocol's flush: cxb_flush_supported)"},
    {"migrate_touch", "migrate_touch", "one thread moves a buffer's pages (move_pages or "
     "mbind) while a second touches them one line at a time, every touch timed",
     CXB_CHECK_PAGES, NULL, 2, 2, SCALAR, "x86-64: the buffer is flushed before and after"},
};
enum { DRIVERS = sizeof drivers / sizeof drivers[0] };

int cxb_driver_count(void) { return DRIVERS; }

int cxb_driver_get(int index, struct cxb_entry *out)
{
    if (index < 0 || index >= DRIVERS || !out)
        return cxb_fail(EINVAL, "no driver at index %d", index);
    *out = drivers[index];
    return 0;
}
