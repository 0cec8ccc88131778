// HBM streaming kernels (BabelStream's set plus read and write) and the runtime's facts.
// Every timed launch is bracketed by its own two events; nothing runs on the host between
// them. Arrays start at closed-form values and every kernel is idempotent (what it writes
// depends only on arrays it does not write), so after any number of launches each element,
// or read's and dot's sum, has one known value, checked on the device after the timing.
#include <math.h>
#include <string.h>

#include "internal.h"

extern "C" {
#include "cxb_gpu.h"
}

namespace {

// Start values (a, b, c), the scalar and write's value. What each kernel writes must differ
// from its array's start far beyond the check's tolerance, or a kernel that wrote nothing
// would pass: c starts at 0.7, since add's 0.1 + 0.2 is 0.3 to 1e-17.
constexpr double A = 0.1, B = 0.2, C = 0.7, SCALAR = 0.4, W = 0.5;
constexpr double apart(double x, double y) { return x > y ? x - y : y - x; }
static_assert(apart(W, A) > 0.01 && apart(A, C) > 0.01 && apart(SCALAR * C, B) > 0.01 &&
              apart(A + B, C) > 0.01 && apart(B + SCALAR * C, A) > 0.01,
              "a kernel's result equals its array's start value");

__global__ void init(double *a, double *b, double *c, u64 n) {
    GRID_STRIDE(i, n) { a[i] = A; b[i] = B; c[i] = C; }
}

// The kernels move double2 (16-byte loads and stores: LDG.E.128, STG.E.128; a test reads
// them in the SASS) over n2 = n / 2 pairs, UNROLL grid strides a loop turn with every load
// of the turn issued before its first use, `passes` times over the arrays in one launch (a
// working set within L1 or L2 is read from there, not timed as a launch's overhead). One
// scalar 8-byte load a turn, as before, kept an H200 near 3.3 TB/s of its 4.8.
constexpr int UNROLL = 4;

// One pass of op over [0, n2): op.load(i) reads element i's inputs, op.store(i, v, u) uses
// them (u: which of the UNROLL slots, for read's and dot's separate sums). A turn's slots
// past n2 are predicated off rather than left to a one-at-a-time remainder loop: an array
// under UNROLL grid strides (16 MiB at an H200's full grid) still has its loads in flight
// together.
template <class Op>
__device__ __forceinline__ void pass(Op &op, u64 n2) {
    const u64 S = (u64)gridDim.x * blockDim.x;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n2; i += UNROLL * S) {
        typename Op::V v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            if (i + u * S < n2) v[u] = op.load(i + u * S);
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            if (i + u * S < n2) op.store(i + u * S, v[u], u);
    }
}

struct Two { double2 x, y; };

__device__ __forceinline__ double2 axpy(double2 b, double s, double2 c) {
    return make_double2(b.x + s * c.x, b.y + s * c.y);
}

struct Write {
    double2 *a;
    typedef int V;
    __device__ V load(u64) const { return 0; }
    __device__ void store(u64 i, V, int) const { a[i] = make_double2(W, W); }
};
struct Copy {
    const double2 *__restrict__ a; double2 *__restrict__ c;
    typedef double2 V;
    __device__ V load(u64 i) const { return a[i]; }
    __device__ void store(u64 i, V v, int) const { c[i] = v; }
};
struct Scale {
    double2 *__restrict__ b; const double2 *__restrict__ c;
    typedef double2 V;
    __device__ V load(u64 i) const { return c[i]; }
    __device__ void store(u64 i, V v, int) const { b[i] = make_double2(SCALAR * v.x, SCALAR * v.y); }
};
struct Add {
    const double2 *__restrict__ a, *__restrict__ b; double2 *__restrict__ c;
    typedef Two V;
    __device__ V load(u64 i) const { return {a[i], b[i]}; }
    __device__ void store(u64 i, V v, int) const { c[i] = make_double2(v.x.x + v.y.x, v.x.y + v.y.y); }
};
struct Triad {
    double2 *__restrict__ a; const double2 *__restrict__ b, *__restrict__ c;
    typedef Two V;
    __device__ V load(u64 i) const { return {b[i], c[i]}; }
    __device__ void store(u64 i, V v, int) const { a[i] = axpy(v.x, SCALAR, v.y); }
};
// read and dot: UNROLL sums a thread, so the adds of a turn are not one chain.
struct Read {
    const double2 *__restrict__ a; double s[UNROLL];
    typedef double2 V;
    __device__ V load(u64 i) const { return a[i]; }
    __device__ void store(u64, V v, int u) { s[u] += v.x + v.y; }
};
struct Dot {
    const double2 *__restrict__ a, *__restrict__ b; double s[UNROLL];
    typedef Two V;
    __device__ V load(u64 i) const { return {a[i], b[i]}; }
    __device__ void store(u64, V v, int u) { s[u] += v.x.x * v.y.x + v.x.y * v.y.y; }
};

template <class Op>
__global__ void k_passes(Op op, u64 n2, int passes) {
    for (int p = 0; p < passes; p++) pass(op, n2);
}

// A sum's kernel: its passes, then the thread's sums, the block's into part[blockIdx.x].
// The bounds let it have the registers to hold a turn's loads before its first add (fit
// into 32, ptxas reused one register pair and read kept one load in flight).
template <class Op>
__global__ void __launch_bounds__(1024, 1) k_sum(Op op, double *__restrict__ part, u64 n2,
                                                 int passes) {
#pragma unroll
    for (int u = 0; u < UNROLL; u++) op.s[u] = 0.0;
    for (int p = 0; p < passes; p++) pass(op, n2);
    double s = 0.0;
#pragma unroll
    for (int u = 0; u < UNROLL; u++) s += op.s[u];
    s = block_sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

typedef double2 D2;
#define V2(x) ((D2 *)(x))

// The table: name, bytes per element, the launch, which array it writes (0 a, 1 b, 2 c;
// -1: a sum) and that array's value afterwards. Row i is enum cxb_gpu_kernel's value i.
struct Row {
    const char *name;
    int bytes;
    void (*launch)(double *, double *, double *, double *, u64, int, int, int);
    int writes;
    double want;
    const void *kernel;     // for the occupancy its registers allow
};

const Row TABLE[] = {
    {"read", CXB_GPU_BYTES_READ,
     [](double *a, double *, double *, double *p, u64 n2, int g, int t, int ps) {
         k_sum<<<g, t>>>(Read{V2(a), {}}, p, n2, ps); }, -1, A,
     (const void *)k_sum<Read>},
    {"write", CXB_GPU_BYTES_WRITE,
     [](double *a, double *, double *, double *, u64 n2, int g, int t, int ps) {
         k_passes<<<g, t>>>(Write{V2(a)}, n2, ps); }, 0, W,
     (const void *)k_passes<Write>},
    {"copy", CXB_GPU_BYTES_COPY,
     [](double *a, double *, double *c, double *, u64 n2, int g, int t, int ps) {
         k_passes<<<g, t>>>(Copy{V2(a), V2(c)}, n2, ps); }, 2, A,
     (const void *)k_passes<Copy>},
    {"scale", CXB_GPU_BYTES_SCALE,
     [](double *, double *b, double *c, double *, u64 n2, int g, int t, int ps) {
         k_passes<<<g, t>>>(Scale{V2(b), V2(c)}, n2, ps); }, 1, SCALAR * C,
     (const void *)k_passes<Scale>},
    {"add", CXB_GPU_BYTES_ADD,
     [](double *a, double *b, double *c, double *, u64 n2, int g, int t, int ps) {
         k_passes<<<g, t>>>(Add{V2(a), V2(b), V2(c)}, n2, ps); }, 2, A + B,
     (const void *)k_passes<Add>},
    {"triad", CXB_GPU_BYTES_TRIAD,
     [](double *a, double *b, double *c, double *, u64 n2, int g, int t, int ps) {
         k_passes<<<g, t>>>(Triad{V2(a), V2(b), V2(c)}, n2, ps); }, 0, B + SCALAR * C,
     (const void *)k_passes<Triad>},
    {"dot", CXB_GPU_BYTES_DOT,
     [](double *a, double *b, double *, double *p, u64 n2, int g, int t, int ps) {
         k_sum<<<g, t>>>(Dot{V2(a), V2(b), {}}, p, n2, ps); }, -1, A * B,
     (const void *)k_sum<Dot>},
};
static_assert(sizeof TABLE / sizeof TABLE[0] == CXB_GPU_KERNELS,
              "one row a kernel of enum cxb_gpu_kernel");

// Device memory of one case, freed however the case ends.
struct Arrays {
    double *a = nullptr, *b = nullptr, *c = nullptr, *part = nullptr;
    u64 *bad = nullptr;
    ~Arrays() { cudaFree(a); cudaFree(b); cudaFree(c); cudaFree(part); cudaFree(bad); }
};

}  // namespace

int cxb_gpu_kernel_count(void) { return CXB_GPU_KERNELS; }

int cxb_gpu_kernel_info(int i, struct cxb_gpu_kernel_row *out) {
    if (i < 0 || i >= CXB_GPU_KERNELS)
        return cxb_gpu_fail(cudaErrorInvalidValue, "cxb_gpu_kernel_info");
    out->name = TABLE[i].name;
    out->bytes_per_element = TABLE[i].bytes;
    return 0;
}

int cxb_gpu_info(struct cxb_gpu_info *out) {
    memset(out, 0, sizeof *out);
    cudaRuntimeGetVersion(&out->runtime_version);
    cudaDriverGetVersion(&out->driver_version);       // 0 where no driver is installed
    cudaError_t e = cudaGetDeviceCount(&out->devices);
    out->status = (int)e;
    if (e != cudaSuccess) {
        out->devices = 0;
        cxb_gpu_fail(e, "cudaGetDeviceCount");
    }
    return 0;
}

int cxb_gpu_device_info(int device, struct cxb_gpu_device *out) {
    memset(out, 0, sizeof *out);
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, device));
    strncpy(out->name, p.name, sizeof out->name - 1);
    out->memory_bytes = p.totalGlobalMem;
    struct { int *to; cudaDeviceAttr what; } attrs[] = {
        {&out->major, cudaDevAttrComputeCapabilityMajor},
        {&out->minor, cudaDevAttrComputeCapabilityMinor},
        {&out->sms, cudaDevAttrMultiProcessorCount},
        {&out->l2_bytes, cudaDevAttrL2CacheSize},
        {&out->max_threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor},
        {&out->max_blocks_per_sm, cudaDevAttrMaxBlocksPerMultiprocessor},
        {&out->clock_khz, cudaDevAttrClockRate},
        {&out->memory_clock_khz, cudaDevAttrMemoryClockRate},
        {&out->bus_width_bits, cudaDevAttrGlobalMemoryBusWidth},
        {&out->ecc, cudaDevAttrEccEnabled},
        {&out->pci_domain, cudaDevAttrPciDomainId},
        {&out->pci_bus, cudaDevAttrPciBusId},
        {&out->pci_device, cudaDevAttrPciDeviceId},
    };
    for (auto &x : attrs) CK(cudaDeviceGetAttribute(x.to, x.what, device));
    return 0;
}

int cxb_gpu_stream(struct cxb_gpu_stream_args *s) {
    if (s->kernel < 0 || s->kernel >= CXB_GPU_KERNELS || s->n == 0 || s->n % 2 ||
        s->blocks < 0 || s->threads < 32 || s->threads > 1024 || s->threads % 32 ||
        s->reps < 1 || s->passes < 1)
        return cxb_gpu_fail(cudaErrorInvalidValue, "cxb_gpu_stream: kernel, n (even: pairs "
                            "of doubles), blocks, threads (32 to 1024, whole warps), reps or "
                            "passes out of range");
    const Row &row = TABLE[s->kernel];
    CK(cudaSetDevice(s->device));
    // Blocks of this kernel an SM holds at once (its registers, not only its threads,
    // limit them); blocks 0: that many on every SM, the full grid.
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&s->resident, row.kernel, s->threads, 0));
    if (s->blocks == 0) {
        int sms = 0;
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, s->device));
        s->blocks = s->resident * sms;
    }
    Arrays m;
    size_t bytes = s->n * sizeof(double);
    CK(cudaMalloc(&m.a, bytes));
    CK(cudaMalloc(&m.b, bytes));
    CK(cudaMalloc(&m.c, bytes));
    CK(cudaMalloc(&m.part, s->blocks * sizeof(double)));
    CK(cudaMemset(m.part, 0xff, s->blocks * sizeof(double)));    // NaN until a sum lands
    CK(cudaMalloc(&m.bad, sizeof(u64)));
    init<<<s->blocks, s->threads>>>(m.a, m.b, m.c, s->n);
    CK(cudaGetLastError());
    int rc = timed_launches(
        [&] { row.launch(m.a, m.b, m.c, m.part, s->n / 2, s->blocks, s->threads, s->passes); }, s->reps,
        s->ns);
    if (rc) return rc;
    s->bad = 0;
    s->sum = 0;
    s->want_sum = 0;
    if (row.writes < 0) {       // the blocks' partial sums, added here
        if (int rc = host_sum(m.part, s->blocks, &s->sum)) return rc;
        s->want_sum = row.want * (double)s->n * s->passes;
        s->bad = !(fabs(s->sum - s->want_sum) <= 1e-9 * s->want_sum);
    } else {
        const double *x = row.writes == 0 ? m.a : row.writes == 1 ? m.b : m.c;
        CK(cudaMemset(m.bad, 0, sizeof(u64)));
        count_off<<<s->blocks, s->threads>>>(x, row.want, 1e-12, s->n, m.bad);
        CK(cudaGetLastError());
        CK(cudaMemcpy(&s->bad, m.bad, sizeof(u64), cudaMemcpyDeviceToHost));
    }
    return 0;
}
