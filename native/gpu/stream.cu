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

__global__ void k_write(double *__restrict__ a, const double *, double *, double *, u64 n) {
    GRID_STRIDE(i, n) a[i] = W;
}

__global__ void k_copy(const double *__restrict__ a, const double *, double *__restrict__ c,
                       double *, u64 n) {
    GRID_STRIDE(i, n) c[i] = a[i];
}

__global__ void k_scale(const double *, double *__restrict__ b, const double *__restrict__ c,
                        double *, u64 n) {
    GRID_STRIDE(i, n) b[i] = SCALAR * c[i];
}

__global__ void k_add(const double *__restrict__ a, const double *__restrict__ b,
                      double *__restrict__ c, double *, u64 n) {
    GRID_STRIDE(i, n) c[i] = a[i] + b[i];
}

__global__ void k_triad(double *__restrict__ a, const double *__restrict__ b,
                        const double *__restrict__ c, double *, u64 n) {
    GRID_STRIDE(i, n) a[i] = b[i] + SCALAR * c[i];
}

__global__ void k_dot(const double *__restrict__ a, const double *__restrict__ b, double *,
                      double *__restrict__ part, u64 n) {
    double s = 0.0;
    GRID_STRIDE(i, n) s += a[i] * b[i];
    s = block_sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// The table: name, bytes per element, the launch, which array it writes (0 a, 1 b, 2 c;
// -1: a sum) and that array's value afterwards. Row i is enum cxb_gpu_kernel's value i.
struct Row {
    const char *name;
    int bytes;
    void (*launch)(double *, double *, double *, double *, u64, int, int);
    int writes;
    double want;
};

const Row TABLE[] = {
    {"read", CXB_GPU_BYTES_READ,
     [](double *a, double *b, double *c, double *p, u64 n, int g, int t) {
         sum_blocks<<<g, t>>>(a, p, n); }, -1, A},
    {"write", CXB_GPU_BYTES_WRITE,
     [](double *a, double *b, double *c, double *p, u64 n, int g, int t) {
         k_write<<<g, t>>>(a, b, c, p, n); }, 0, W},
    {"copy", CXB_GPU_BYTES_COPY,
     [](double *a, double *b, double *c, double *p, u64 n, int g, int t) {
         k_copy<<<g, t>>>(a, b, c, p, n); }, 2, A},
    {"scale", CXB_GPU_BYTES_SCALE,
     [](double *a, double *b, double *c, double *p, u64 n, int g, int t) {
         k_scale<<<g, t>>>(a, b, c, p, n); }, 1, SCALAR * C},
    {"add", CXB_GPU_BYTES_ADD,
     [](double *a, double *b, double *c, double *p, u64 n, int g, int t) {
         k_add<<<g, t>>>(a, b, c, p, n); }, 2, A + B},
    {"triad", CXB_GPU_BYTES_TRIAD,
     [](double *a, double *b, double *c, double *p, u64 n, int g, int t) {
         k_triad<<<g, t>>>(a, b, c, p, n); }, 0, B + SCALAR * C},
    {"dot", CXB_GPU_BYTES_DOT,
     [](double *a, double *b, double *c, double *p, u64 n, int g, int t) {
         k_dot<<<g, t>>>(a, b, c, p, n); }, -1, A * B},
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
    if (s->kernel < 0 || s->kernel >= CXB_GPU_KERNELS || s->n == 0 || s->blocks < 1 ||
        s->threads < 32 || s->threads > 1024 || s->threads % 32 || s->reps < 1)
        return cxb_gpu_fail(cudaErrorInvalidValue, "cxb_gpu_stream: kernel, n, blocks, "
                            "threads (32 to 1024, whole warps) or reps out of range");
    const Row &row = TABLE[s->kernel];
    CK(cudaSetDevice(s->device));
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
        [&] { row.launch(m.a, m.b, m.c, m.part, s->n, s->blocks, s->threads); }, s->reps,
        s->ns);
    if (rc) return rc;
    s->bad = 0;
    s->sum = 0;
    s->want_sum = 0;
    if (row.writes < 0) {       // the blocks' partial sums, added here
        if (int rc = host_sum(m.part, s->blocks, &s->sum)) return rc;
        s->want_sum = row.want * (double)s->n;
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
