/* Clocks: CLOCK_MONOTONIC_RAW for long regions, rdtscp for short ones. The TSC rate is
 * measured against the monotonic clock at start-up, never typed in. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include "internal.h"
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

uint64_t cxb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t cxb_rdtscp(void)
{
#if defined(__x86_64__)
    unsigned aux;
    return __rdtscp(&aux);
#else
    return 0;
#endif
}

static int tsc_invariant(void)
{
    /* CXLBENCH_NO_TSC=1 hides the TSC, as on a CPU without the invariant bit: tests use
     * it to check that every TSC user falls back together. */
    const char *hide = getenv("CXLBENCH_NO_TSC");
    if (hide && *hide && *hide != '0')
        return 0;
#if defined(__x86_64__)
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000000u), "c"(0));
    if (a < 0x80000007u)
        return 0;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000007u), "c"(0));
    return (d >> 8) & 1;        /* invariant TSC */
#else
    return 0;
#endif
}

/* The one decision to use rdtscp for short regions, for kernels and Python alike. */
int cxb_tsc_usable(void)
{
    static int usable = -1;
    if (usable < 0)
        usable = tsc_invariant();
    return usable;
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* One call's cost: the median of many back-to-back pairs, not their mean, which one
 * preemption (or an emulator's stall) among them inflates a thousandfold and which,
 * subtracted from every timed batch, would read a real latency as none. */
static double median_delta(uint64_t (*clock)(void))
{
    enum { N = 1001 };
    uint64_t d[N];
    for (int i = 0; i < N; i++) {
        uint64_t a = clock();
        d[i] = clock() - a;
    }
    qsort(d, N, sizeof d[0], by_value);
    return (double)d[N / 2];
}

int cxb_timer_calibrate(double window_ms, struct cxb_timer_info *out)
{
    if (!out || window_ms <= 0)
        return cxb_fail(EINVAL, "timer calibration needs a positive window");
    out->mono_overhead_ns = median_delta(cxb_now_ns);
    out->calibration_ms = window_ms;
    out->tsc_available = cxb_tsc_usable();
    out->tsc_hz = 0;
    out->tsc_overhead_cycles = 0;
    if (!out->tsc_available)
        return 0;
    out->tsc_overhead_cycles = median_delta(cxb_rdtscp);
    /* Bracket the window with both clocks; the median of three sheds one preemption. */
    double hz3[3];
    for (int round = 0; round < 3; round++) {
        uint64_t n0 = cxb_now_ns(), s0 = cxb_rdtscp();
        uint64_t target = n0 + (uint64_t)(window_ms * 1e6 / 3);
        uint64_t n1, s1;
        do {
            n1 = cxb_now_ns();
            s1 = cxb_rdtscp();
        } while (n1 < target);
        hz3[round] = (double)(s1 - s0) * 1e9 / (double)(n1 - n0);
    }
    double lo = hz3[0] < hz3[1] ? hz3[0] : hz3[1], hi = hz3[0] < hz3[1] ? hz3[1] : hz3[0];
    out->tsc_hz = hz3[2] < lo ? lo : hz3[2] > hi ? hi : hz3[2];
    return 0;
}
