// Device-memory latency by working set: one thread's dependent loads through a random
// cycle, timed by clock64() around the loop on the SM (cycles) and by events around the
// launch (ns). A working set within L1, L2 or past it shows each level's latency; a page
// stride with few elements per page shows the TLBs' reach.
#include "internal.h"

extern "C" {
#include "cxb_gpu.h"
}

namespace {

// A global load cached in L1 (ld.global.ca): a pointer read from memory would otherwise be
// loaded through generic addressing, an extra step on every hop.
__device__ __forceinline__ const u64 *follow(const u64 *p) {
    u64 next;
    asm volatile("ld.global.ca.u64 %0, [%1];" : "=l"(next) : "l"(p));
    return (const u64 *)next;
}

// Each element holds the address of the next: one load a hop, nothing else in the loop.
__global__ void chase(u64 hops, const u64 **at, u64 *cycles) {
    const u64 *p = *at;
    long long t0 = clock64();
    for (u64 h = 0; h < hops; h++) p = follow(p);
    long long t1 = clock64();
    *at = p;                    // where it stopped: the next launch goes on from there
    *cycles = (u64)(t1 - t0);
}

struct Chase {
    char *base = nullptr;
    const u64 **at = nullptr;
    u64 *cycles = nullptr, *next = nullptr, *links = nullptr;
    ~Chase() { cudaFree(base); cudaFree(at); cudaFree(cycles); free(next); free(links); }
};

// Launches that warm the caches and TLBs with one walk of (up to 2^20 elements of) the cycle.
constexpr u64 WARM_MAX = 1ull << 20;

}  // namespace

int cxb_gpu_chase(struct cxb_gpu_chase_args *a) {
    const u64 count = a->stride ? a->bytes / a->stride : 0;
    if (a->stride < 8 || a->stride % 8 || count < 2 || a->hops == 0 || a->reps < 1)
        return cxb_gpu_fail(cudaErrorInvalidValue, "cxb_gpu_chase: stride (whole words), "
                            "bytes (two strides at least), hops or reps out of range");
    CK(cudaSetDevice(a->device));
    Chase c;
    c.next = random_cycle(count);
    if (!c.next) return cxb_gpu_fail(cudaErrorMemoryAllocation, "the chase's cycle");
    CK(cudaMalloc((void **)&c.base, count * a->stride));
    CK(cudaMalloc((void **)&c.at, sizeof *c.at));
    CK(cudaMalloc((void **)&c.cycles, (a->reps + 1) * sizeof(u64)));  // a round each
    // element i, at byte i x stride, holds the device address of element next[i]
    c.links = (u64 *)malloc(count * 8);
    if (!c.links) return cxb_gpu_fail(cudaErrorMemoryAllocation, "the chase's links");
    for (u64 i = 0; i < count; i++) c.links[i] = (u64)(c.base + c.next[i] * a->stride);
    CK(cudaMemcpy2D(c.base, a->stride, c.links, 8, 8, count, cudaMemcpyHostToDevice));
    const u64 *start = (const u64 *)c.base;
    CK(cudaMemcpy(c.at, &start, sizeof start, cudaMemcpyHostToDevice));
    // The untimed round walks the whole cycle (up to WARM_MAX): caches and TLBs warm.
    const u64 warm = count < WARM_MAX ? count : WARM_MAX;
    int rc = timed_rounds([](int) { return 0; }, [&](int r) {
        chase<<<1, 1>>>(r < 0 ? warm : a->hops, c.at, c.cycles + r + 1);
        return 0;
    }, a->reps, a->ns);
    if (rc) return rc;
    CK(cudaMemcpy(a->cycles, c.cycles + 1, a->reps * sizeof(u64), cudaMemcpyDeviceToHost));
    const u64 *end = nullptr;
    u64 at = 0;
    CK(cudaMemcpy(&end, c.at, sizeof end, cudaMemcpyDeviceToHost));
    for (u64 h = 0; h < warm + a->reps * a->hops; h++) at = c.next[at];
    a->bad = (const char *)end != c.base + at * a->stride;
    return 0;
}
