/* Shared by the library's .cu files: failing with a message cxb_gpu_error() returns, the
 * grid-stride loop and a block's sum. */
#ifndef CXB_GPU_INTERNAL_H
#define CXB_GPU_INTERNAL_H
#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>

/* Records "what: CUDA's words (CUDA error e)" and returns e. */
int cxb_gpu_fail(cudaError_t e, const char *what);

typedef unsigned long long u64;

// A grid-stride loop over [0, n).
#define GRID_STRIDE(i, n)                                              \
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < (n); \
         i += (u64)gridDim.x * blockDim.x)

// The sum of v over the block, in thread 0 (blockDim.x a multiple of 32, at most 1024).
__device__ inline double block_sum(double v) {
    __shared__ double warps[32];
    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? warps[threadIdx.x] : 0.0;
    if (threadIdx.x < 32)
        for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
    return v;
}

// Each block's sum of n elements into part[blockIdx.x], for host_sum to add up. A template
// with internal linkage: each .cu launching it compiles its own (no kernel shared across
// files, which nvcc's whole-program mode would not link), and none where it is unused.
template <typename T>
static __global__ void sum_blocks(const T *__restrict__ a, double *__restrict__ part, u64 n) {
    double s = 0.0;
    GRID_STRIDE(i, n) s += a[i];
    s = block_sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// Elements of x further than tol x |want| from want (NaN included) added to *bad.
template <typename T>
static __global__ void count_off(const T *x, double want, double tol, u64 n, u64 *bad) {
    u64 mine = 0;
    GRID_STRIDE(i, n) mine += !(fabs(x[i] - want) <= tol * fabs(want));
    if (mine) atomicAdd(bad, mine);
}

#define CK(call)                                                   \
    do {                                                           \
        cudaError_t e_ = (call);                                   \
        if (e_ != cudaSuccess) return cxb_gpu_fail(e_, #call);     \
    } while (0)

// A random order of [0, count), computed on host and device alike: the cycle order(0),
// order(1), ... order(count - 1), order(0) is written by the device all at once (a host
// shuffle and a copy of 8-byte rows took many seconds at 4 GiB) and the host finds where
// a walk of any length ends without the cycle. A bijection on k bits (odd multiplies and
// xor-shifts, each invertible mod 2^k), applied again while it lands past count
// (cycle-walking: a bijection on [0, count), under two steps on average).
struct Order {
    u64 count, mask;
    int shift;
    explicit Order(u64 n) : count(n), mask(1), shift(1) {
        int k = 1;
        while ((1ull << k) < n) k++;
        mask = k == 64 ? ~0ull : (1ull << k) - 1;
        shift = (k + 1) / 2;
    }
    __host__ __device__ u64 mix(u64 x) const {
        x = (x * 0x9E3779B97F4A7C15ull) & mask; x ^= x >> shift;
        x = (x * 0xBF58476D1CE4E5B9ull) & mask; x ^= x >> shift;
        x = (x * 0x94D049BB133111EBull) & mask; x ^= x >> shift;
        return x;
    }
    __host__ __device__ u64 operator()(u64 j) const {
        u64 x = mix(j);
        while (x >= count) x = mix(x);
        return x;
    }
};

// Events freed however the timing ends.
struct Events {
    cudaEvent_t start = nullptr, stop = nullptr;
    ~Events() {
        if (start) cudaEventDestroy(start);
        if (stop) cudaEventDestroy(stop);
    }
};

// Rounds -1 (untimed: CUDA loads a module's kernels at their first launch, which no
// repetition should pay for) to reps - 1: prepare(r) on the host, then launch(r) queued on
// the default stream between two events of its own, ns[r] its time. Each returns 0 or the
// CUDA error, which ends the rounds.
template <typename Prepare, typename Launch>
int timed_rounds(Prepare prepare, Launch launch, int reps, u64 *ns) {
    Events ev;
    CK(cudaEventCreate(&ev.start));
    CK(cudaEventCreate(&ev.stop));
    for (int r = -1; r < reps; r++) {
        if (int rc = prepare(r)) return rc;
        CK(cudaDeviceSynchronize());
        CK(cudaEventRecord(ev.start));
        if (int rc = launch(r)) return rc;
        CK(cudaEventRecord(ev.stop));
        CK(cudaEventSynchronize(ev.stop));
        CK(cudaGetLastError());
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
        if (r >= 0) ns[r] = (u64)(ms * 1e6 + 0.5);
    }
    return 0;
}

// The same launch() every round, nothing between them.
template <typename Launch>
int timed_launches(Launch launch, int reps, u64 *ns) {
    return timed_rounds([](int) { return 0; }, [&](int) { launch(); return 0; }, reps, ns);
}

// *sum = the sum of `blocks` partial sums in device memory. 0, or the CUDA error.
inline int host_sum(const double *part, int blocks, double *sum) {
    double *h = (double *)malloc(blocks * sizeof(double));
    if (!h) return cxb_gpu_fail(cudaErrorMemoryAllocation, "partial sums");
    cudaError_t e = cudaMemcpy(h, part, blocks * sizeof(double), cudaMemcpyDeviceToHost);
    *sum = 0;
    for (int i = 0; e == cudaSuccess && i < blocks; i++) *sum += h[i];
    free(h);
    CK(e);
    return 0;
}

#endif
