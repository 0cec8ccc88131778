// Paged-KV block swaps between device memory and a host pool, as LLM servers move a
// preempted sequence's KV blocks out of HBM and back (vLLM's swap_blocks): the pool is the
// caller's memory (placed on a node, DRAM or CXL) registered mapped for the call, the
// device side `blocks` blocks contiguous. Block j of the device goes to or comes from pool
// slot slots[j], by one cudaMemcpyAsync a block (the copy engines) or by one kernel copying
// 16-byte words through the block table (the SMs, the pool mapped into the device's
// space). One swap untimed, then each repetition one swap between two events; every byte
// is checked after the timing.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>

#include "internal.h"

extern "C" {
#include "cxb_gpu.h"
}

namespace {

// The pattern's 8 bytes at pool word q (bytes 8q .. 8q + 7, little-endian): a hash of q,
// so a block copied from or to the wrong slot, or shifted, differs.
__host__ __device__ inline u64 pattern_word(u64 q) {
    u64 x = q * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// The pattern byte at pool offset i (what the pool's byte i holds, or device block j's
// byte o does where i = slots[j] x block_bytes + o).
__host__ __device__ inline unsigned char pattern(u64 i) {
    return (unsigned char)(pattern_word(i >> 3) >> (i & 7) * 8);
}

// p[0, n) set to the pattern of pool offsets [start, start + n): whole words where aligned.
void fill_pattern(unsigned char *p, u64 start, u64 n) {
    u64 k = 0;
    for (; k < n && (start + k) % 8; k++) p[k] = pattern(start + k);
    for (; n - k >= 8; k += 8) {
        const u64 x = pattern_word((start + k) / 8);
        memcpy(p + k, &x, 8);
    }
    for (; k < n; k++) p[k] = pattern(start + k);
}

// The bytes of p[0, n) that differ from the pattern of pool offsets [start, start + n).
u64 count_wrong(const unsigned char *p, u64 start, u64 n) {
    u64 k = 0, bad = 0;
    for (; k < n && (start + k) % 8; k++) bad += p[k] != pattern(start + k);
    for (; n - k >= 8; k += 8) {
        u64 got;
        memcpy(&got, p + k, 8);
        const u64 x = pattern_word((start + k) / 8) ^ got;
        for (int b = 0; x && b < 8; b++) bad += ((x >> 8 * b) & 0xff) != 0;
    }
    for (; k < n; k++) bad += p[k] != pattern(start + k);
    return bad;
}

// Device block j's bytes set to (or, with bad, checked against) what slot slots[j] holds.
__global__ void fill_blocks(unsigned char *dev, const u64 *slots, u64 blocks, u64 bb) {
    GRID_STRIDE(i, blocks * bb) {
        const u64 j = i / bb;
        dev[i] = pattern(slots[j] * bb + (i - j * bb));
    }
}

__global__ void wrong_blocks(const unsigned char *dev, const u64 *slots, u64 blocks, u64 bb,
                             u64 *bad) {
    u64 mine = 0;
    GRID_STRIDE(i, blocks * bb) {
        const u64 j = i / bb;
        mine += dev[i] != pattern(slots[j] * bb + (i - j * bb));
    }
    if (mine) atomicAdd(bad, mine);
}

// Method KERNEL: every 16-byte word of every block, each thread a word a step, consecutive
// threads along a block; the host side through the block table.
template <int DIRECTION>
__global__ void swap_words(uint4 *__restrict__ pool, uint4 *__restrict__ dev,
                           const u64 *__restrict__ slots, u64 blocks, u64 words) {
    GRID_STRIDE(i, blocks * words) {
        const u64 j = i / words;
        uint4 *host = pool + slots[j] * words + (i - j * words);
        if (DIRECTION == CXB_GPU_KV_DIRECTION_IN) dev[i] = *host;
        else *host = dev[i];
    }
}

// What one call holds, released however it ends.
struct Swap {
    void *host = nullptr;           // registered
    unsigned char *dev = nullptr;
    u64 *slots = nullptr, *bad = nullptr;
    bool *used = nullptr;           // on the host: the pool's slots the swap names
    cudaStream_t stream = nullptr;
    Events ev;
    ~Swap() {
        if (stream) cudaStreamSynchronize(stream);     // (a failed call's copies in flight)
        cudaFree(dev);
        cudaFree(slots);
        cudaFree(bad);
        if (stream) cudaStreamDestroy(stream);
        if (host) cudaHostUnregister(host);
        free(used);
    }
};

}  // namespace

int cxb_gpu_kv_swap(struct cxb_gpu_kv_swap_args *a) {
    const u64 bb = a->block_bytes;
    if (a->direction < 0 || a->direction >= CXB_GPU_KV_DIRECTIONS || a->method < 0 ||
        a->method >= CXB_GPU_KV_METHODS || a->host == nullptr || a->pool_blocks == 0 ||
        bb == 0 || a->pool_blocks > ~0ull / bb || a->slots == nullptr ||
        a->issue_ns == nullptr || a->blocks == 0 || a->blocks > a->pool_blocks ||
        a->reps < 1 ||
        (a->method == CXB_GPU_KV_METHOD_KERNEL &&
         (bb % 16 || (uintptr_t)a->host % 16 || a->grid < 1 || a->threads < 32 ||
          a->threads > 1024 || a->threads % 32)))
        return cxb_gpu_fail(cudaErrorInvalidValue, "cxb_gpu_kv_swap: direction, method, "
                            "host memory, pool_blocks, block_bytes (the kernel's a multiple "
                            "of 16), blocks (at most pool_blocks), reps or grid out of range");
    Swap s;
    s.used = (bool *)calloc(a->pool_blocks, sizeof(bool));
    if (!s.used) return cxb_gpu_fail(cudaErrorMemoryAllocation, "cxb_gpu_kv_swap: slots");
    for (u64 j = 0; j < a->blocks; j++) {
        const u64 slot = a->slots[j];
        if (slot >= a->pool_blocks || s.used[slot]) {
            char what[160];
            snprintf(what, sizeof what, "cxb_gpu_kv_swap: block %llu's slot %llu is %s", j,
                     slot, slot >= a->pool_blocks ? "not in the pool" : "named twice");
            return cxb_gpu_fail(cudaErrorInvalidValue, what);
        }
        s.used[slot] = true;
    }
    CK(cudaSetDevice(a->device));
    unsigned char *pool = (unsigned char *)a->host;
    const u64 pool_bytes = a->pool_blocks * bb, dev_bytes = a->blocks * bb;
    // Swap in reads the pattern from every slot (a wrong slot holds another's); swap out
    // writes it into a pool of zeros (a stray write shows in a slot not swapped).
    if (a->direction == CXB_GPU_KV_DIRECTION_IN) fill_pattern(pool, 0, pool_bytes);
    else memset(pool, 0, pool_bytes);
    CK(cudaHostRegister(a->host, pool_bytes, cudaHostRegisterMapped));
    s.host = a->host;
    void *mapped = nullptr;
    CK(cudaHostGetDevicePointer(&mapped, a->host, 0));
    CK(cudaMalloc((void **)&s.dev, dev_bytes));
    CK(cudaMalloc((void **)&s.slots, a->blocks * sizeof(u64)));
    CK(cudaMemcpy(s.slots, a->slots, a->blocks * sizeof(u64), cudaMemcpyHostToDevice));
    if (a->direction == CXB_GPU_KV_DIRECTION_IN) {
        CK(cudaMemset(s.dev, 0, dev_bytes));    // not the pattern: a freed block may hold it
    } else {
        fill_blocks<<<256, 256>>>(s.dev, s.slots, a->blocks, bb);
        CK(cudaGetLastError());
    }
    CK(cudaDeviceSynchronize());
    CK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&s.ev.start));
    CK(cudaEventCreate(&s.ev.stop));
    const u64 words = bb / 16;
    for (int r = -1; r < a->reps; r++) {        // the first untimed
        CK(cudaEventRecord(s.ev.start, s.stream));
        const auto issued = std::chrono::steady_clock::now();
        if (a->method == CXB_GPU_KV_METHOD_COPIES) {
            for (u64 j = 0; j < a->blocks; j++) {
                unsigned char *host = pool + a->slots[j] * bb, *dev = s.dev + j * bb;
                if (a->direction == CXB_GPU_KV_DIRECTION_IN)
                    CK(cudaMemcpyAsync(dev, host, bb, cudaMemcpyHostToDevice, s.stream));
                else
                    CK(cudaMemcpyAsync(host, dev, bb, cudaMemcpyDeviceToHost, s.stream));
            }
        } else if (a->direction == CXB_GPU_KV_DIRECTION_IN) {
            swap_words<CXB_GPU_KV_DIRECTION_IN><<<a->grid, a->threads, 0, s.stream>>>(
                (uint4 *)mapped, (uint4 *)s.dev, s.slots, a->blocks, words);
        } else {
            swap_words<CXB_GPU_KV_DIRECTION_OUT><<<a->grid, a->threads, 0, s.stream>>>(
                (uint4 *)mapped, (uint4 *)s.dev, s.slots, a->blocks, words);
        }
        CK(cudaGetLastError());
        const auto issuing = std::chrono::steady_clock::now() - issued;
        CK(cudaEventRecord(s.ev.stop, s.stream));
        CK(cudaEventSynchronize(s.ev.stop));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, s.ev.start, s.ev.stop));
        if (r >= 0) {
            a->ns[r] = (u64)(ms * 1e6 + 0.5);
            a->issue_ns[r] = (u64)std::chrono::nanoseconds(issuing).count();
        }
    }
    CK(cudaStreamSynchronize(s.stream));
    a->bad = 0;
    if (a->direction == CXB_GPU_KV_DIRECTION_IN) {     // on the device: blocks against slots
        CK(cudaMalloc((void **)&s.bad, sizeof(u64)));
        CK(cudaMemset(s.bad, 0, sizeof(u64)));
        wrong_blocks<<<256, 256>>>(s.dev, s.slots, a->blocks, bb, s.bad);
        CK(cudaGetLastError());
        CK(cudaMemcpy(&a->bad, s.bad, sizeof(u64), cudaMemcpyDeviceToHost));
    } else {        // on the host (ordinary memory, cached): every slot of the pool
        for (u64 slot = 0; slot < a->pool_blocks; slot++) {
            const unsigned char *p = pool + slot * bb;
            if (s.used[slot]) {
                a->bad += count_wrong(p, slot * bb, bb);
            } else {
                for (u64 k = 0; k < bb; k++) a->bad += p[k] != 0;
            }
        }
    }
    return 0;
}
