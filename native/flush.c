/* Flush and persistence costs: clflush, clflushopt and clwb of clean or dirty lines,
 * non-temporal stores, and write-then-flush of a range, each ended by sfence. An
 * instruction the CPU lacks is refused with ENOTSUP, never replaced by another. */
#include <errno.h>
#include <string.h>
#include "internal.h"
#if defined(__x86_64__)
#include <immintrin.h>
#include <cpuid.h>
#endif

static const char *const names[] = {"clflush", "clflushopt", "clwb", "nt"};

int cxb_flush_supported(int kind)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (kind == CXB_FLUSH_CLFLUSH || kind == CXB_FLUSH_NT)
        return __get_cpuid(1, &a, &b, &c, &d) && (d >> 19 & 1) && (d >> 26 & 1);
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    if (kind == CXB_FLUSH_CLFLUSHOPT)
        return b >> 23 & 1;
    if (kind == CXB_FLUSH_CLWB)
        return b >> 24 & 1;
#else
    (void)kind;
#endif
    return 0;
}

#if defined(__x86_64__)
__attribute__((target("clflushopt"))) static void flushopt(void *p) { _mm_clflushopt(p); }
__attribute__((target("clwb"))) static void writeback(void *p) { _mm_clwb(p); }

static void flush_line(int kind, char *p)
{
    switch (kind) {
    case CXB_FLUSH_CLFLUSH: _mm_clflush(p); break;
    case CXB_FLUSH_CLFLUSHOPT: flushopt(p); break;
    case CXB_FLUSH_CLWB: writeback(p); break;
    }
}
#endif

int cxb_flush(struct cxb_flush_args *a)
{
    if (!a || !a->buf || a->bytes < CXB_LINE || a->kind < 0 || a->kind > CXB_FLUSH_NT)
        return cxb_fail(EINVAL, "bad flush arguments");
    if (!cxb_flush_supported(a->kind))
        return cxb_fail(ENOTSUP, "%s is not supported by this CPU", names[a->kind]);
#if defined(__x86_64__)
    char *base = a->buf;
    size_t lines = a->bytes / CXB_LINE;
    /* Prepare outside the timed region: dirty lines are written, clean ones read and
     * then written back, so both start in the cache. */
    volatile uint64_t sink = 0;
    for (size_t l = 0; l < lines; l++) {
        uint64_t *w = (uint64_t *)(base + l * CXB_LINE);
        if (a->dirty || a->write)
            w[0] = a->value + l;
        else
            sink += w[0];
    }
    if (!a->dirty && !a->write) {
        for (size_t l = 0; l < lines; l++)
            _mm_clflush(base + l * CXB_LINE);
        _mm_mfence();
        for (size_t l = 0; l < lines; l++)
            sink += ((volatile uint64_t *)(base + l * CXB_LINE))[0];
    }
    _mm_mfence();
    uint64_t t0 = cxb_now_ns();
    for (size_t l = 0; l < lines; l++) {
        char *p = base + l * CXB_LINE;
        if (a->kind == CXB_FLUSH_NT) {
            for (int w = 0; w < CXB_LINE / 8; w++)
                _mm_stream_si64((long long *)(p + 8 * w), (long long)(a->value + l));
            continue;
        }
        if (a->write)                       /* the persistence path: write, then flush */
            for (int w = 0; w < CXB_LINE / 8; w++)
                ((uint64_t *)p)[w] = a->value + l;
        flush_line(a->kind, p);
    }
    _mm_sfence();
    a->ns = cxb_now_ns() - t0;
    (void)sink;
    return 0;
#else
    return cxb_fail(ENOTSUP, "%s is not supported on this architecture", names[a->kind]);
#endif
}

/* Write back and drop every line of [buf, buf + bytes) from the caches: what a benchmark
 * does, untimed, so the next timed region finds its data in memory (as a serving step
 * finds the KV-cache after the weights streamed through, or a checkpoint its state). */
int cxb_evict(const void *buf, size_t bytes)
{
#if defined(__x86_64__)
    if (!buf && bytes)
        return cxb_fail(EINVAL, "evict: no buffer");
    const char *p = (const char *)((uintptr_t)buf & ~(uintptr_t)(CXB_LINE - 1));
    const char *end = (const char *)buf + bytes;
    static int opt = -1;        /* CPUID once: in a VM each one is an exit */
    if (opt < 0)
        __atomic_store_n(&opt, cxb_flush_supported(CXB_FLUSH_CLFLUSHOPT), __ATOMIC_RELAXED);
    if (__atomic_load_n(&opt, __ATOMIC_RELAXED)) {
        for (; p < end; p += CXB_LINE)
            flushopt((void *)p);
        _mm_sfence();
    } else {
        for (; p < end; p += CXB_LINE)
            _mm_clflush(p);
        _mm_mfence();
    }
    return 0;
#else
    (void)buf;
    (void)bytes;
    return cxb_fail(ENOTSUP, "evict: no cache-line flush on this architecture");
#endif
}

