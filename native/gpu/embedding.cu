// Embedding-bag gathers on the GPU (DLRM's sparse half, as FBGEMM's table-batched
// embeddings run it): each bag the fp32 sum of `pooling` rows that its indices name, from a
// table in device memory (HBM), in pinned host memory the library allocates, or in the
// caller's memory (placed on a node, DRAM or CXL) registered mapped; the host tables are
// read in place over the link. One warp a bag, its lanes over the row's columns (16-byte
// loads where rows allow). The table's values are multiples of 1/8 of at most 2, so every
// bag's sum is exact in fp32 whatever the order of its adds; after the timing every output
// element is checked against the host's sum of the same rows.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

extern "C" {
#include "cxb_gpu.h"
}

namespace {

// Element e (row x dim + column) of the table: a hash of e to one of -2, -1.875 .. 1.875.
// A sum of up to 2^20 of them (and each partial sum) is a multiple of 1/8 of at most 2^21
// in magnitude: exact in fp32 (24 bits of significand).
__host__ __device__ inline float value(u64 e) {
    u64 x = e * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (float)((int)(x >> 59) - 16) * 0.125f;
}

__global__ void fill_table(float *t, u64 n) {
    GRID_STRIDE(i, n) t[i] = value(i);
}

// One warp a bag (the grid's warps striding over the bags), its lanes over the columns:
// VEC, four floats a lane a load (dim a multiple of 4, the table 16-byte aligned).
template <bool VEC>
__global__ void bag_sum(const float *__restrict__ table, const long long *__restrict__ idx,
                        float *__restrict__ out, u64 bags, int pooling, int dim) {
    const int lane = threadIdx.x % 32;
    const u64 warps = (u64)gridDim.x * blockDim.x / 32;
    for (u64 b = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32; b < bags; b += warps) {
        const long long *rows = idx + b * pooling;
        if (VEC) {
            const int cols = dim / 4;
            const float4 *t4 = (const float4 *)table;
            float4 *o4 = (float4 *)(out + b * dim);
            for (int c = lane; c < cols; c += 32) {
                float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
                for (int k = 0; k < pooling; k++) {
                    const float4 v = t4[(u64)rows[k] * cols + c];
                    s.x += v.x;
                    s.y += v.y;
                    s.z += v.z;
                    s.w += v.w;
                }
                o4[c] = s;
            }
        } else {
            for (int c = lane; c < dim; c += 32) {
                float s = 0.f;
#pragma unroll 4
                for (int k = 0; k < pooling; k++) s += table[(u64)rows[k] * dim + c];
                out[b * dim + c] = s;
            }
        }
    }
}

// What one call holds, released however it ends.
struct Embedding {
    float *table = nullptr;         // HBM's
    float *pinned = nullptr;        // PINNED's (cudaHostAlloc)
    void *registered = nullptr;     // REGISTERED's (the caller's, registered)
    long long *idx = nullptr;
    float *out = nullptr;
    float *host_out = nullptr;
    float *acc = nullptr;
    ~Embedding() {
        cudaFree(table);
        cudaFree(idx);
        cudaFree(out);
        if (pinned) cudaFreeHost(pinned);
        if (registered) cudaHostUnregister(registered);
        free(host_out);
        free(acc);
    }
};

void fill_host(float *t, u64 n) {
    for (u64 i = 0; i < n; i++) t[i] = value(i);
}

}  // namespace

int cxb_gpu_embedding(struct cxb_gpu_embedding_args *a) {
    if (a->table < 0 || a->table >= CXB_GPU_EMBEDDING_TABLES || a->rows == 0 || a->dim < 1 ||
        a->indices == nullptr || a->bags == 0 || a->pooling < 1 || a->pooling > (1 << 20) ||
        a->reps < 1 || a->blocks < 1 || a->threads < 32 || a->threads > 1024 ||
        a->threads % 32 ||
        (a->table == CXB_GPU_EMBEDDING_TABLE_REGISTERED && a->host == nullptr) ||
        a->rows > ~0ull / 4 / (u64)a->dim || a->bags > ~0ull / 8 / (u64)a->pooling ||
        a->bags > ~0ull / 4 / (u64)a->dim)
        return cxb_gpu_fail(cudaErrorInvalidValue, "cxb_gpu_embedding: table, rows, dim, "
                            "indices, bags, pooling (at most 2^20), reps, grid or host "
                            "memory out of range");
    const u64 lookups = a->bags * (u64)a->pooling, n = a->rows * (u64)a->dim;
    for (u64 i = 0; i < lookups; i++) {
        const long long r = a->indices[i];
        if (r < 0 || (u64)r >= a->rows) {
            char what[160];
            snprintf(what, sizeof what, "cxb_gpu_embedding: lookup %llu names row %lld, not "
                     "a row of a table of %llu", i, r, a->rows);
            return cxb_gpu_fail(cudaErrorInvalidValue, what);
        }
    }
    CK(cudaSetDevice(a->device));
    Embedding m;
    const float *table = nullptr;       // the table in the device's address space
    if (a->table == CXB_GPU_EMBEDDING_TABLE_HBM) {
        CK(cudaMalloc((void **)&m.table, n * sizeof(float)));
        fill_table<<<a->blocks, a->threads>>>(m.table, n);
        CK(cudaGetLastError());
        table = m.table;
    } else {
        float *host = (float *)a->host;
        if (a->table == CXB_GPU_EMBEDDING_TABLE_PINNED) {
            CK(cudaHostAlloc((void **)&m.pinned, n * sizeof(float), cudaHostAllocMapped));
            host = m.pinned;
        }
        fill_host(host, n);
        if (a->table == CXB_GPU_EMBEDDING_TABLE_REGISTERED) {
            CK(cudaHostRegister(a->host, n * sizeof(float), cudaHostRegisterMapped));
            m.registered = a->host;
        }
        void *dev = nullptr;
        CK(cudaHostGetDevicePointer(&dev, host, 0));
        table = (const float *)dev;
    }
    CK(cudaMalloc((void **)&m.idx, lookups * sizeof(long long)));
    CK(cudaMemcpy(m.idx, a->indices, lookups * sizeof(long long), cudaMemcpyHostToDevice));
    const u64 outs = a->bags * (u64)a->dim;
    CK(cudaMalloc((void **)&m.out, outs * sizeof(float)));
    CK(cudaMemset(m.out, 0xff, outs * sizeof(float)));         // NaN until a bag lands
    CK(cudaDeviceSynchronize());
    const bool vec = a->dim % 4 == 0 && (uintptr_t)table % 16 == 0;
    int rc = timed_launches([&] {
        if (vec)
            bag_sum<true><<<a->blocks, a->threads>>>(table, m.idx, m.out, a->bags, a->pooling,
                                                     a->dim);
        else
            bag_sum<false><<<a->blocks, a->threads>>>(table, m.idx, m.out, a->bags,
                                                      a->pooling, a->dim);
    }, a->reps, a->ns);
    if (rc) return rc;
    // Every output element against the host's sum of the same rows (exact: see value()).
    m.host_out = (float *)malloc(outs * sizeof(float));
    m.acc = (float *)malloc(a->dim * sizeof(float));
    if (!m.host_out || !m.acc)
        return cxb_gpu_fail(cudaErrorMemoryAllocation, "cxb_gpu_embedding: the check's "
                            "host memory");
    CK(cudaMemcpy(m.host_out, m.out, outs * sizeof(float), cudaMemcpyDeviceToHost));
    a->bad = 0;
    for (u64 b = 0; b < a->bags; b++) {
        for (int c = 0; c < a->dim; c++) m.acc[c] = 0.f;
        for (int k = 0; k < a->pooling; k++) {
            const u64 row = (u64)a->indices[b * a->pooling + k] * a->dim;
            for (int c = 0; c < a->dim; c++) m.acc[c] += value(row + c);
        }
        const float *got = m.host_out + b * a->dim;
        for (int c = 0; c < a->dim; c++) a->bad += !(got[c] == m.acc[c]);
    }
    return 0;
}
