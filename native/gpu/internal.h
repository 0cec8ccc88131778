/* Shared by the library's .cu files: failing with a message cxb_gpu_error() returns. */
#ifndef CXB_GPU_INTERNAL_H
#define CXB_GPU_INTERNAL_H
#include <cuda_runtime.h>

/* Records "what: CUDA's words (CUDA error e)" and returns e. */
int cxb_gpu_fail(cudaError_t e, const char *what);

#define CK(call)                                                   \
    do {                                                           \
        cudaError_t e_ = (call);                                   \
        if (e_ != cudaSuccess) return cxb_gpu_fail(e_, #call);     \
    } while (0)

#endif
