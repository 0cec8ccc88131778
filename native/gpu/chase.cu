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
    u64 *cycles = nullptr;
    ~Chase() { cudaFree(base); cudaFree(at); cudaFree(cycles); }
};

// Element order(j), at byte order(j) x stride, holds the address of element order(j + 1).
__global__ void link(char *base, u64 stride, Order order) {
    GRID_STRIDE(j, order.count) {
        u64 next = j + 1 == order.count ? 0 : j + 1;
        *(u64 *)(base + order(j) * stride) = (u64)(base + order(next) * stride);
    }
}


}  // namespace

int cxb_gpu_chase(struct cxb_gpu_chase_args *a) {
    const u64 count = a->stride ? a->bytes / a->stride : 0;
    if (a->stride < 8 || a->stride % 8 || count < 2 || a->hops == 0 || a->reps < 1)
        return cxb_gpu_fail(cudaErrorInvalidValue, "cxb_gpu_chase: stride (whole words), "
                            "bytes (two strides at least), hops or reps out of range");
    CK(cudaSetDevice(a->device));
    Chase c;
    const Order order(count);
    CK(cudaMalloc((void **)&c.base, count * a->stride));
    CK(cudaMalloc((void **)&c.at, sizeof *c.at));
    CK(cudaMalloc((void **)&c.cycles, (a->reps + 1) * sizeof(u64)));  // a round each
    link<<<1024, 256>>>(c.base, a->stride, order);
    CK(cudaGetLastError());
    const u64 *start = (const u64 *)(c.base + order(0) * a->stride);
    CK(cudaMemcpy(c.at, &start, sizeof start, cudaMemcpyHostToDevice));
    // The untimed round walks the whole cycle (up to WARM_MAX): caches and TLBs warm.
    const u64 warm = count < CXB_GPU_CHASE_WARM_MAX ? count : CXB_GPU_CHASE_WARM_MAX;
    int rc = timed_rounds([](int) { return 0; }, [&](int r) {
        chase<<<1, 1>>>(r < 0 ? warm : a->hops, c.at, c.cycles + r + 1);
        return 0;
    }, a->reps, a->ns);
    if (rc) return rc;
    CK(cudaMemcpy(a->cycles, c.cycles + 1, a->reps * sizeof(u64), cudaMemcpyDeviceToHost));
    const u64 *end = nullptr;
    CK(cudaMemcpy(&end, c.at, sizeof end, cudaMemcpyDeviceToHost));
    const u64 walked = (warm + (u64)a->reps * a->hops) % count;
    a->bad = (const char *)end != c.base + order(walked) * a->stride;
    return 0;
}
