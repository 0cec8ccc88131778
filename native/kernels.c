/* The kernel table: one row per kernel, one fixed signature, a variant per ISA.
 * Adding a kernel is one function plus one row; Python reads the rest from here. */
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
int cxb_chase_kernel(struct cxb_kargs *a);
int cxb_chase_mlp_kernel(struct cxb_kargs *a);
int cxb_chase_dist_kernel(struct cxb_kargs *a);

/* Test-only: dies the way a broken kernel would, so the runner's isolation is testable. */
static int crash_kernel(struct cxb_kargs *a)
{
    (void)a;
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

#define INFO(key, bench, desc, elem, rd, wr, streams, wa, test) \
    {key, bench, desc, elem, rd, wr, streams, wa, 0, test}
#define VARIANTS(name) {cxb_##name##_S, X86(cxb_##name##_A2), X86(cxb_##name##_A5)}
#define SCALAR_ONLY(fn) {fn, NULL, NULL}

static const struct row table[] = {
    /* key, benchmark, description, bytes per step, read, written, streams,
     * write-allocate, test-only */
    {INFO("read", "bandwidth", "sequential read: a is summed as uint64 lanes", 8, 8, 0, 1, 0, 0),
     VARIANTS(read)},
    {INFO("write", "bandwidth", "a[i] = s", 8, 0, 8, 1, 1, 0), VARIANTS(write)},
    {INFO("write_nt", "bandwidth", "a[i] = s, non-temporal stores", 8, 0, 8, 1, 0, 0),
     VARIANTS(write_nt)},
    {INFO("copy", "bandwidth", "a[i] = b[i]", 8, 8, 8, 2, 1, 0), VARIANTS(copy)},
    {INFO("copy_nt", "bandwidth", "a[i] = b[i], non-temporal stores", 8, 8, 8, 2, 0, 0),
     VARIANTS(copy_nt)},
    {INFO("triad", "bandwidth", "a[i] = b[i] + s * c[i]", 8, 16, 8, 3, 1, 0), VARIANTS(triad)},
    {INFO("triad_nt", "bandwidth", "a[i] = b[i] + s * c[i], non-temporal stores", 8, 16, 8, 3,
          0, 0), VARIANTS(triad_nt)},
    {INFO("rw_3_1", "bandwidth", "of every 4 lines read 3, write 1 (MLC's 3:1)", 256, 192, 64,
          1, 1, 0), VARIANTS(rw_3_1)},
    {INFO("rw_2_1", "bandwidth", "of every 3 lines read 2, write 1 (MLC's 2:1)", 192, 128, 64,
          1, 1, 0), VARIANTS(rw_2_1)},
    {INFO("rw_1_1", "bandwidth", "of every 2 lines read 1, write 1 (MLC's 1:1)", 128, 64, 64,
          1, 1, 0), VARIANTS(rw_1_1)},
    {INFO("random_64", "random_bw", "64 B blocks read in a random order, each once a pass",
          64, 64, 0, 1, 0, 0), VARIANTS(random_64)},
    {INFO("random_256", "random_bw", "256 B blocks read in a random order, each once a pass",
          256, 256, 0, 1, 0, 0), VARIANTS(random_256)},
    {INFO("random_4096", "random_bw", "4 KiB blocks read in a random order, each once a pass",
          4096, 4096, 0, 1, 0, 0), VARIANTS(random_4096)},
    {INFO("chase", "chase", "dependent loads around a random cycle, one pointer per line",
          8, 8, 0, 1, 0, 0), SCALAR_ONLY(cxb_chase_kernel)},
    {INFO("chase_mlp", "chase", "`value` independent chains walked in lockstep by one thread",
          8, 8, 0, 1, 0, 0), SCALAR_ONLY(cxb_chase_mlp_kernel)},
    {INFO("chase_dist", "chase", "batches of `value` dependent loads, each timed with rdtscp",
          8, 8, 0, 2, 0, 0), SCALAR_ONLY(cxb_chase_dist_kernel)},
    {INFO("crash", "selftest", "raises SIGSEGV (test-only)", 8, 0, 0, 0, 0, 1),
     SCALAR_ONLY(crash_kernel)},
};
enum { ROWS = sizeof table / sizeof table[0] };

int cxb_kernel_count(void) { return ROWS; }

int cxb_kernel_get(int index, struct cxb_kernel_info *out)
{
    if (index < 0 || index >= ROWS || !out)
        return cxb_fail(EINVAL, "no kernel at index %d", index);
    *out = table[index].info;
    out->isa_mask = 0;
    for (int i = 0; i < CXB_ISA_COUNT; i++)
        if (table[index].fn[i])
            out->isa_mask |= 1 << i;
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

int cxb_run(int index, int isa, void *const *bufs, size_t bytes, uint64_t count,
            uint64_t value, const int *cpus, int nthreads, struct cxb_run_result *out)
{
    enum { MAXT = 4096 };
    if (index < 0 || index >= ROWS || !out)
        return cxb_fail(EINVAL, "no kernel at index %d", index);
    const struct row *row = &table[index];
    if (isa < 0 || isa >= CXB_ISA_COUNT || !row->fn[isa])
        return cxb_fail(EINVAL, "kernel %s has no variant for ISA %d", row->info.key, isa);
    if (!cxb_isa_supported(isa))
        return cxb_fail(ENOTSUP, "this CPU cannot run ISA %d", isa);
    if (nthreads < 1 || nthreads > MAXT)
        return cxb_fail(EINVAL, "thread count %d is out of range", nthreads);
    for (int s = 0; s < row->info.streams; s++)
        if (!bufs || !bufs[s] || ((uintptr_t)bufs[s] % CXB_LINE))
            return cxb_fail(EINVAL, "stream %d is missing or not 64-byte aligned", s);
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
    size_t steps = bytes / unit, off = 0;
    for (int t = 0; t < nthreads; t++) {
        size_t n = steps * (size_t)(t + 1) / (size_t)nthreads - steps * (size_t)t / (size_t)nthreads;
        size_t len = t == nthreads - 1 ? bytes - off : n * unit;
        args[t] = (struct cxb_kargs){{0}, len, count, value, 0, NULL};
        for (int s = 0; s < row->info.streams; s++)
            args[t].buf[s] = (char *)bufs[s] + off;
        off += len;
    }
    struct timed w = {row->fn[isa], args, t0, t1};
    int rc = cxb_parallel(timed_slice, &w, cpus, nthreads);
    if (rc == 0) {
        uint64_t first = t0[0], last = t1[0], sum = 0;
        for (int t = 0; t < nthreads; t++) {
            first = t0[t] < first ? t0[t] : first;
            last = t1[t] > last ? t1[t] : last;
            sum += args[t].checksum;
        }
        out->ns = last - first;
        out->checksum = sum;
        out->end = args[0].end;
    }
    free(args);
    free(t0);
    free(t1);
    return rc;
}
