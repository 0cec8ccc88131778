// Managed memory (cudaMallocManaged): what the GPU pays for pages that live on the host
// when it first reads them (a fault per page group, migrated on demand), against moving
// them ahead (cudaMemPrefetchAsync), against pages already resident, and the GPU's first
// touch of memory never used. Never oversubscribed: the memory must fit in what the device
// has free, so every figure is migration, not eviction.
#include <math.h>

#include "internal.h"

extern "C" {
#include "cxb_gpu.h"
}

namespace {

constexpr double START = 0.1, WRITTEN = 0.5;

__global__ void write_all(double *a, u64 n) {
    GRID_STRIDE(i, n) a[i] = WRITTEN;
}

// Every page to the device, queued on the default stream (CUDA 13 names the place).
cudaError_t prefetch(const void *p, size_t bytes, int device) {
#if CUDART_VERSION >= 13000
    cudaMemLocation to = {};
    to.type = cudaMemLocationTypeDevice;
    to.id = device;
    return cudaMemPrefetchAsync(p, bytes, to, 0, 0);
#else
    return cudaMemPrefetchAsync(p, bytes, device, 0);
#endif
}

struct Managed {
    double *a = nullptr, *part = nullptr;
    u64 *bad = nullptr;
    ~Managed() { cudaFree(a); cudaFree(part); cudaFree(bad); }
};

}  // namespace

int cxb_gpu_managed(struct cxb_gpu_managed_args *m) {
    const u64 n = m->bytes / sizeof(double);
    if (m->mode < 0 || m->mode >= CXB_GPU_MANAGED_MODES || n == 0 ||
        m->bytes % sizeof(double) || m->blocks < 1 || m->threads < 32 || m->threads > 1024 ||
        m->threads % 32 || m->reps < 1)
        return cxb_gpu_fail(cudaErrorInvalidValue, "cxb_gpu_managed: mode, bytes (whole "
                            "doubles), grid or reps out of range");
    CK(cudaSetDevice(m->device));
    int on_demand = 0;
    CK(cudaDeviceGetAttribute(&on_demand, cudaDevAttrConcurrentManagedAccess, m->device));
    if (!on_demand)
        return cxb_gpu_fail(cudaErrorNotSupported, "this device does not migrate managed "
                            "pages on demand (cudaDevAttrConcurrentManagedAccess is 0)");
    size_t free_bytes = 0, total = 0;
    CK(cudaMemGetInfo(&free_bytes, &total));
    if (m->bytes > free_bytes / 10 * 9)
        return cxb_gpu_fail(cudaErrorMemoryAllocation, "managed memory over 90 % of what the "
                            "device has free would be oversubscribed (evictions measured, "
                            "not migrations)");
    Managed g;
    CK(cudaMalloc(&g.part, m->blocks * sizeof(double)));
    CK(cudaMemset(g.part, 0xff, m->blocks * sizeof(double)));   // NaN until a sum lands
    CK(cudaMalloc(&g.bad, sizeof(u64)));
    // Each round from its own start: memory never touched (first touch), or every page
    // written on the host (where they then live: the CPU's writes fault them back from the
    // device), or left on the device after the untimed round's prefetch (resident).
    int rc = timed_rounds([&](int) {
        if (m->mode == CXB_GPU_MANAGED_MODE_FIRST_TOUCH) {
            CK(cudaFree(g.a));
            g.a = nullptr;
            CK(cudaMallocManaged(&g.a, m->bytes));
        } else if (g.a == nullptr || m->mode != CXB_GPU_MANAGED_MODE_RESIDENT) {
            if (g.a == nullptr) CK(cudaMallocManaged(&g.a, m->bytes));
            for (u64 i = 0; i < n; i++) g.a[i] = START;
            if (m->mode == CXB_GPU_MANAGED_MODE_RESIDENT)
                CK(prefetch(g.a, m->bytes, m->device));
        }
        return 0;
    }, [&](int) {
        if (m->mode == CXB_GPU_MANAGED_MODE_PREFETCH) CK(prefetch(g.a, m->bytes, m->device));
        if (m->mode == CXB_GPU_MANAGED_MODE_FIRST_TOUCH)
            write_all<<<m->blocks, m->threads>>>(g.a, n);
        else
            sum_blocks<<<m->blocks, m->threads>>>(g.a, g.part, n);
        return 0;
    }, m->reps, m->ns);
    if (rc) return rc;
    // The last repetition checked: every double written, or the sum of what the host wrote.
    if (m->mode == CXB_GPU_MANAGED_MODE_FIRST_TOUCH) {
        CK(cudaMemset(g.bad, 0, sizeof(u64)));
        count_off<<<m->blocks, m->threads>>>(g.a, WRITTEN, 0.0, n, g.bad);
        CK(cudaGetLastError());
        CK(cudaMemcpy(&m->bad, g.bad, sizeof(u64), cudaMemcpyDeviceToHost));
    } else {
        double sum;
        if (int rc = host_sum(g.part, m->blocks, &sum)) return rc;
        m->bad = !(fabs(sum - START * n) <= 1e-9 * START * n);
    }
    return 0;
}
