// Host-device copies by the copy engines (cudaMemcpyAsync) or by a kernel on the SMs
// reading and writing the host memory mapped into the device's space (as NCCL and
// nvbandwidth's SM copies do), from host memory of four kinds: the caller's as it is
// (pageable: the driver stages it through its own pinned buffers; copy engines only), the
// caller's registered for the call (its pages pinned where they are: a cxlbench buffer
// placed on any node, CXL nodes included), or pinned memory the library allocates, plain
// or write-combined. One round untimed, then each repetition timed by events: one before
// the copies, one after each stream's copy; every byte is checked after the timing.
#include <stdint.h>
#include <string.h>

#include "internal.h"

extern "C" {
#include "cxb_gpu.h"
}

namespace {

// What one case holds, released however it ends.
struct Copy {
    char *host = nullptr;           // the host side: bytes, or 2 x bytes both ways
    bool owned = false, registered = false;
    char *dev[2] = {nullptr, nullptr};
    cudaStream_t stream[2] = {nullptr, nullptr};
    cudaEvent_t start = nullptr, stop[2] = {nullptr, nullptr};
    ~Copy() {
        for (int i = 0; i < 2; i++) {
            cudaFree(dev[i]);
            if (stream[i]) cudaStreamDestroy(stream[i]);
            if (stop[i]) cudaEventDestroy(stop[i]);
        }
        if (start) cudaEventDestroy(start);
        if (registered) cudaHostUnregister(host);
        if (owned) cudaFreeHost(host);
    }
};

// The pattern byte at offset i of copy `which` (0: host to device, 1: device to host).
__host__ __device__ inline unsigned char pattern(unsigned long long i, int which) {
    return (unsigned char)((i * 131u + (i >> 12) * 7u + which * 61u + 17u) & 0xff);
}

__global__ void fill(unsigned char *p, u64 n, int which) {
    GRID_STRIDE(i, n) p[i] = pattern(i, which);
}

// The SMs' copy: 16 bytes a thread a step (n16 of them), between the device's view of
// mapped host memory and device memory.
__global__ void sm_copy(const uint4 *__restrict__ from, uint4 *__restrict__ to, u64 n16) {
    GRID_STRIDE(i, n16) to[i] = from[i];
}

// Both directions at once on the SMs: one kernel whose even warps copy one way and odd
// warps the other (as nvbandwidth's bidirectional SM copy), so both run on every SM for
// the whole copy. Two kernels on two streams would not: the first's grid fills the SMs
// and the second's blocks start only as it drains, one direction after the other.
__global__ void sm_copy_both(const uint4 *__restrict__ up_from, uint4 *__restrict__ up_to,
                             const uint4 *__restrict__ down_from, uint4 *__restrict__ down_to,
                             u64 n16) {
    const u64 warp = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32;
    const u64 warps = (u64)gridDim.x * blockDim.x / 32;
    const bool down = warp % 2;
    const u64 mine = down ? warps / 2 : (warps + 1) / 2;     // the warps going this way
    const uint4 *from = down ? down_from : up_from;
    uint4 *to = down ? down_to : up_to;
    for (u64 i = warp / 2 * 32 + threadIdx.x % 32; i < n16; i += mine * 32) to[i] = from[i];
}

__global__ void count_wrong(const unsigned char *p, u64 n, int which, u64 *bad) {
    u64 mine = 0;
    GRID_STRIDE(i, n) mine += p[i] != pattern(i, which);
    if (mine) atomicAdd(bad, mine);
}

}  // namespace

int cxb_gpu_copy(struct cxb_gpu_copy_args *a) {
    const bool sm = a->engine == CXB_GPU_ENGINE_SM;
    const bool both = a->direction == CXB_GPU_DIRECTION_BIDIR;
    // PAGEABLE and REGISTERED: the caller's memory
    const bool callers = a->host_kind <= CXB_GPU_HOST_KIND_REGISTERED;
    if (a->direction < 0 || a->direction >= CXB_GPU_DIRECTIONS || a->host_kind < 0 ||
        a->host_kind >= CXB_GPU_HOST_KINDS || a->bytes == 0 || a->reps < 1 ||
        (callers && a->host == nullptr) || a->engine < 0 || a->engine >= CXB_GPU_ENGINES)
        return cxb_gpu_fail(cudaErrorInvalidValue, "cxb_gpu_copy: direction, engine, host "
                            "kind, bytes, reps or host memory out of range");
    if (sm && (a->host_kind == CXB_GPU_HOST_KIND_PAGEABLE || a->bytes % 16 ||
               (uintptr_t)a->host % 16 || a->blocks < 1 || a->threads < 32 ||
               a->threads > 1024 || a->threads % 32 || (both && a->blocks * a->threads < 64)))
        return cxb_gpu_fail(cudaErrorInvalidValue, "cxb_gpu_copy: an SM copy needs mapped "
                            "(not pageable) host memory 16-byte aligned, bytes a multiple of "
                            "16 and a grid of whole warps (two at least both ways)");
    CK(cudaSetDevice(a->device));
    const unsigned long long n = a->bytes;
    const size_t host_bytes = both ? 2 * n : n;
    Copy c;
    if (callers) {
        c.host = (char *)a->host;
        if (a->host_kind == CXB_GPU_HOST_KIND_REGISTERED) {
            CK(cudaHostRegister(c.host, host_bytes,
                                sm ? cudaHostRegisterMapped : cudaHostRegisterDefault));
            c.registered = true;
        }
    } else {
        CK(cudaHostAlloc((void **)&c.host, host_bytes,
                         (a->host_kind == CXB_GPU_HOST_KIND_WC ? cudaHostAllocWriteCombined
                                                               : cudaHostAllocDefault) |
                             (sm ? cudaHostAllocMapped : 0)));
        c.owned = true;
    }
    // Copy 0 goes host to device (host[0, n) -> dev[0]), copy 1 device to host
    // (dev[1] -> host[n, 2n) both ways, host[0, n) for D2H).
    const bool up = a->direction != CXB_GPU_DIRECTION_D2H;
    const bool down = a->direction != CXB_GPU_DIRECTION_H2D;
    char *down_host = c.host + (both ? n : 0);
    if (up) {
        for (unsigned long long i = 0; i < n; i++) c.host[i] = (char)pattern(i, 0);
        CK(cudaMalloc((void **)&c.dev[0], n));
        // Not the pattern: a block freed by an earlier case may still hold it.
        CK(cudaMemset(c.dev[0], 0, n));
    }
    if (down) {
        CK(cudaMalloc((void **)&c.dev[1], n));
        fill<<<256, 256>>>((unsigned char *)c.dev[1], n, 1);
        CK(cudaGetLastError());
        memset(down_host, 0, n);
    }
    // What the SMs see of the host side (the same pages, through the device's mapping).
    char *mapped = nullptr;
    if (sm) CK(cudaHostGetDevicePointer((void **)&mapped, c.host, 0));
    char *down_mapped = sm ? mapped + (both ? n : 0) : nullptr;
    CK(cudaDeviceSynchronize());
    CK(cudaEventCreate(&c.start));
    for (int i = 0; i < 2; i++) {
        CK(cudaStreamCreateWithFlags(&c.stream[i], cudaStreamNonBlocking));
        CK(cudaEventCreate(&c.stop[i]));
    }
    // One round untimed: the driver's first copies set up what later ones reuse.
    for (int r = -1; r < a->reps; r++) {
        CK(cudaEventRecord(c.start, c.stream[0]));
        CK(cudaStreamWaitEvent(c.stream[1], c.start, 0));
        if (sm && up && down) {
            sm_copy_both<<<a->blocks, a->threads, 0, c.stream[0]>>>(
                (const uint4 *)mapped, (uint4 *)c.dev[0], (const uint4 *)c.dev[1],
                (uint4 *)down_mapped, n / 16);
            CK(cudaGetLastError());
        } else if (sm) {
            if (up)
                sm_copy<<<a->blocks, a->threads, 0, c.stream[0]>>>(
                    (const uint4 *)mapped, (uint4 *)c.dev[0], n / 16);
            if (down)
                sm_copy<<<a->blocks, a->threads, 0, c.stream[1]>>>(
                    (const uint4 *)c.dev[1], (uint4 *)down_mapped, n / 16);
            CK(cudaGetLastError());
        } else {
            if (up)
                CK(cudaMemcpyAsync(c.dev[0], c.host, n, cudaMemcpyHostToDevice, c.stream[0]));
            if (down)
                CK(cudaMemcpyAsync(down_host, c.dev[1], n, cudaMemcpyDeviceToHost,
                                   c.stream[1]));
        }
        CK(cudaEventRecord(c.stop[0], c.stream[0]));
        CK(cudaEventRecord(c.stop[1], c.stream[1]));
        float ms[2] = {0, 0};
        for (int i = 0; i < 2; i++) {
            CK(cudaEventSynchronize(c.stop[i]));
            CK(cudaEventElapsedTime(&ms[i], c.start, c.stop[i]));
        }
        if (r >= 0) a->ns[r] = (unsigned long long)((ms[0] > ms[1] ? ms[0] : ms[1]) * 1e6 + 0.5);
    }
    // The check reads on the device: the host side comes back by DMA first (a CPU reading
    // write-combined memory would take minutes for a large copy).
    unsigned long long *bad;
    CK(cudaMalloc((void **)&bad, sizeof *bad));
    cudaError_t e = cudaMemset(bad, 0, sizeof *bad);
    if (e == cudaSuccess && up) count_wrong<<<256, 256>>>((unsigned char *)c.dev[0], n, 0, bad);
    if (e == cudaSuccess && down) {
        e = cudaMemcpy(c.dev[1], down_host, n, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) count_wrong<<<256, 256>>>((unsigned char *)c.dev[1], n, 1, bad);
    }
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpy(&a->bad, bad, sizeof *bad, cudaMemcpyDeviceToHost);
    cudaFree(bad);
    CK(e);
    return 0;
}
