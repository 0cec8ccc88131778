// The library's last error, per thread, in words.
#include <stdio.h>

#include "internal.h"

extern "C" {
#include "cxb_gpu.h"
}

static thread_local char error_text[256];

int cxb_gpu_fail(cudaError_t e, const char *what) {
    snprintf(error_text, sizeof error_text, "%s: %s (CUDA error %d)", what,
             cudaGetErrorString(e), (int)e);
    return (int)e;
}

const char *cxb_gpu_error(void) { return error_text; }
