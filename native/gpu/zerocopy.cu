// The GPU reading and writing host memory in place (zero-copy), over the link: the caller's
// buffer, placed on whichever node it chose (DRAM or CXL), registered mapped for the call.
// Bandwidth by a grid of threads, latency by one thread chasing a random cycle of lines.
#include <math.h>

#include "internal.h"

extern "C" {
#include "cxb_gpu.h"
}

namespace {

constexpr double START = 0.1, WRITTEN = 0.5;
constexpr u64 LINE_WORDS = 8;       // a 64-byte line of u64 words; a line's first word links

__global__ void zc_write(double *__restrict__ a, u64 n) {
    GRID_STRIDE(i, n) a[i] = WRITTEN;
}

// One thread, hops dependent loads on from where the last launch stopped (*at), so each
// launch walks lines the last did not; where it stops, so nothing is dropped.
__global__ void zc_chase(const volatile u64 *lines, u64 hops, u64 *at) {
    u64 line = *at;
    for (u64 h = 0; h < hops; h++) line = lines[line * LINE_WORDS];
    *at = line;
}

// A random single cycle through all `count` lines (Order's, as the device chase's), each
// line's first word the next's index.
void link_cycle(u64 *words, const Order &order) {
    for (u64 j = 0; j < order.count; j++)
        words[order(j) * LINE_WORDS] = order(j + 1 == order.count ? 0 : j + 1);
}

// What the caller's memory holds for the call: registered, mapped, unregistered at the end.
struct Mapped {
    void *host = nullptr;
    double *part = nullptr;
    u64 *end = nullptr;
    ~Mapped() {
        cudaFree(part);
        cudaFree(end);
        if (host) cudaHostUnregister(host);
    }
};

}  // namespace

int cxb_gpu_zero_copy(struct cxb_gpu_zero_copy_args *a) {
    const u64 n = a->bytes / sizeof(double), lines = a->bytes / (LINE_WORDS * 8);
    if (a->op < 0 || a->op >= CXB_GPU_ZERO_COPY_OPS || a->host == nullptr || lines < 2 ||
        a->reps < 1 || a->blocks < 1 || a->threads < 32 || a->threads > 1024 ||
        a->threads % 32 || (a->op == CXB_GPU_ZERO_COPY_OP_CHASE && a->hops == 0))
        return cxb_gpu_fail(cudaErrorInvalidValue, "cxb_gpu_zero_copy: op, memory, bytes "
                            "(two lines at least), reps, grid or hops out of range");
    CK(cudaSetDevice(a->device));
    double *host = (double *)a->host;
    const Order order(lines);
    if (a->op == CXB_GPU_ZERO_COPY_OP_CHASE) {
        link_cycle((u64 *)a->host, order);
    } else {
        for (u64 i = 0; i < n; i++) host[i] = START;
    }
    Mapped m;
    CK(cudaHostRegister(a->host, a->bytes, cudaHostRegisterMapped));
    m.host = a->host;
    void *dev = nullptr;
    CK(cudaHostGetDevicePointer(&dev, a->host, 0));
    CK(cudaMalloc((void **)&m.part, a->blocks * sizeof(double)));
    CK(cudaMemset(m.part, 0xff, a->blocks * sizeof(double)));    // NaN until a sum lands
    CK(cudaMalloc((void **)&m.end, sizeof(u64)));
    const u64 start = order(0);
    CK(cudaMemcpy(m.end, &start, sizeof start, cudaMemcpyHostToDevice));
    int rc = timed_launches([&] {
        if (a->op == CXB_GPU_ZERO_COPY_OP_READ)
            sum_blocks<<<a->blocks, a->threads>>>((const double *)dev, m.part, n);
        else if (a->op == CXB_GPU_ZERO_COPY_OP_WRITE)
            zc_write<<<a->blocks, a->threads>>>((double *)dev, n);
        else
            zc_chase<<<1, 1>>>((const volatile u64 *)dev, a->hops, m.end);
    }, a->reps, a->ns);
    if (rc) return rc;
    a->bad = 0;
    if (a->op == CXB_GPU_ZERO_COPY_OP_READ) {
        double sum;
        if (int rc = host_sum(m.part, a->blocks, &sum)) return rc;
        a->bad = !(fabs(sum - START * n) <= 1e-9 * START * n);
    } else if (a->op == CXB_GPU_ZERO_COPY_OP_WRITE) {
        for (u64 i = 0; i < n; i++) a->bad += host[i] != WRITTEN;
    } else {                    // where every launch's hops (the untimed one's too) end
        u64 end = 0;
        CK(cudaMemcpy(&end, m.end, sizeof end, cudaMemcpyDeviceToHost));
        a->bad = end != order((a->reps + 1ull) * a->hops % lines);
    }
    return 0;
}
