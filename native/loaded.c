/* Loaded latency (Mess, MLC --loaded_latency): thread 0 chases pointers while the other
 * threads stream over their slices of a second buffer with a pause after every batch of
 * lines. The pause sets the load; the chase's ns per load and the generators' bytes per
 * second give one point of the bandwidth-latency curve. */
#include <errno.h>
#include <stdlib.h>
#include "internal.h"
#if defined(__x86_64__)
#include <immintrin.h>
#define PAUSE() _mm_pause()
#else
#define PAUSE() __asm__ __volatile__("" ::: "memory")
#endif

#define BATCH_LINES CXB_LOADED_BATCH_LINES

struct loaded {
    struct cxb_loaded_args *a;
    int stop;
    int loading;            /* generators that have moved their first batch */
    uint64_t *t_start, *t_end, *moved, *sums;     /* one slot per thread */
};

/* One batch of lines at `line` in a CXB_LOAD_* mode. What is read is summed and what is
 * written is value + the line's index, so Python can check both afterwards. Aligned:
 * where the linker put this loop moved the generators' rate by 20 % (26 -> 21 GB/s on
 * the EPYC VM when it landed 32 bytes off a line), which no change to it asked for. */
static __attribute__((aligned(64))) uint64_t batch(char *base, size_t line, int mode,
                                                   uint64_t value, uint64_t *sum)
{
    static const int reads_of[CXB_LOAD_WRITE] = {
        [CXB_LOAD_READ] = 1, [CXB_LOAD_RW_3_1] = 3, [CXB_LOAD_RW_2_1] = 2, [CXB_LOAD_RW_1_1] = 1};
    uint64_t s = 0;
    for (size_t l = line; l < line + BATCH_LINES; l++) {
        uint64_t *p = (uint64_t *)(base + l * CXB_LINE);
        int write = mode >= CXB_LOAD_WRITE ||
                    (mode != CXB_LOAD_READ &&
                     (int)(l % (size_t)(reads_of[mode] + 1)) >= reads_of[mode]);
        if (!write) {
            for (int w = 0; w < 8; w++)
                s += p[w];
        } else if (mode == CXB_LOAD_WRITE_NT) {
#if defined(__x86_64__)
            for (int w = 0; w < 8; w++)
                _mm_stream_si64((long long *)&p[w], (long long)(value + l));
#else
            for (int w = 0; w < 8; w++)
                p[w] = value + l;
#endif
        } else {
            for (int w = 0; w < 8; w++)
                p[w] = value + l;
        }
    }
    *sum += s;
    return BATCH_LINES * CXB_LINE;
}

static int loaded_thread(void *p, int t)
{
    struct loaded *L = p;
    struct cxb_loaded_args *a = L->a;
    if (t == 0) {
        /* The load must be on before the chase is timed: wait for every generator. */
        while (__atomic_load_n(&L->loading, __ATOMIC_ACQUIRE) < a->generators)
            PAUSE();
        L->t_start[0] = cxb_now_ns();
        if (a->victim_buf) {
            uint64_t sum = 0;
            for (size_t l = 0; l < a->victim_bytes / CXB_LINE; l += BATCH_LINES)
                batch(a->victim_buf, l, CXB_LOAD_READ, 0, &sum);
            a->victim_sum = sum;
        } else if (a->ticks) {
            a->chase_end = cxb_chase_timed(a->chase_start, a->chase_loads / a->batch, a->batch,
                                       a->ticks);
        } else {
            void **q = a->chase_start;
            for (uint64_t n = a->chase_loads; n; n--)
                q = (void **)*q;
            a->chase_end = q;
        }
        L->t_end[0] = cxb_now_ns();
        __atomic_store_n(&L->stop, 1, __ATOMIC_RELEASE);
        return 0;
    }
    size_t lines = a->gen_bytes / CXB_LINE / (size_t)a->generators;
    lines -= lines % BATCH_LINES;
    char *base = (char *)a->gen_buf + (size_t)(t - 1) * lines * CXB_LINE;
    uint64_t moved = 0, sum = 0;
    size_t at = 0;
    L->t_start[t] = cxb_now_ns();
    moved += batch(base, at, a->mode, a->value, &sum);
    __atomic_add_fetch(&L->loading, 1, __ATOMIC_ACQ_REL);
    while (!__atomic_load_n(&L->stop, __ATOMIC_ACQUIRE)) {
        moved += batch(base, at, a->mode, a->value, &sum);
        at = at + 2 * BATCH_LINES <= lines ? at + BATCH_LINES : 0;
        for (uint32_t d = 0; d < a->delay; d++)
            PAUSE();
    }
#if defined(__x86_64__)
    _mm_sfence();
#endif
    L->t_end[t] = cxb_now_ns();
    L->moved[t] = moved;
    L->sums[t] = sum;
    return 0;
}

int cxb_loaded_latency(struct cxb_loaded_args *a)
{
    if (!a || (a->victim_buf ? !a->victim_bytes || a->victim_bytes % (BATCH_LINES * CXB_LINE)
                             : !a->chase_start || a->chase_loads == 0))
        return cxb_fail(EINVAL, "loaded latency needs a chase or a victim's stream of whole "
                        "batches of %d lines", BATCH_LINES);
    if (!a->victim_buf && a->ticks && (!a->batch || a->chase_loads % a->batch))
        return cxb_fail(EINVAL, "timed batches need whole batches of 1 or more loads");
    if (a->generators < 0 || a->mode < CXB_LOAD_READ || a->mode > CXB_LOAD_WRITE_NT)
        return cxb_fail(EINVAL, "bad generator count %d or mode %d", a->generators, a->mode);
    if (a->generators && (!a->gen_buf ||
                          a->gen_bytes / CXB_LINE / (size_t)a->generators < 2 * BATCH_LINES))
        return cxb_fail(EINVAL, "the load buffer is too small for %d generators", a->generators);
    size_t n = (size_t)a->generators + 1;
    struct loaded *L = calloc(1, sizeof *L);
    uint64_t *slots = calloc(4 * n, sizeof *slots);
    if (!L || !slots) {
        free(L);
        free(slots);
        return cxb_fail(ENOMEM, "cannot allocate the loaded-latency state");
    }
    *L = (struct loaded){a, 0, 0, slots, slots + n, slots + 2 * n, slots + 3 * n};
    int rc = cxb_parallel(loaded_thread, L, a->cpus, 1 + a->generators);
    if (rc == 0) {
        a->chase_ns = L->t_end[0] - L->t_start[0];
        a->gen_moved = 0;
        a->gen_ns = 0;
        for (int t = 1; t <= a->generators; t++) {
            a->gen_moved += L->moved[t];
            uint64_t ns = L->t_end[t] - L->t_start[t];
            a->gen_ns = ns > a->gen_ns ? ns : a->gen_ns;
            if (a->gen_batches)
                a->gen_batches[t - 1] = L->moved[t] / (BATCH_LINES * CXB_LINE);
            if (a->gen_sums)
                a->gen_sums[t - 1] = L->sums[t];
        }
    }
    free(slots);
    free(L);
    return rc;
}
