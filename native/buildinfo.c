/* How the core was built, for run.json: results from two builds compare only when the
 * compiler and flags that made the kernels are known. */
#include "cxlbench.h"

#ifndef CXB_CFLAGS
#define CXB_CFLAGS "unknown"
#endif

/* clang defines __GNUC__ too, so it is asked first. */
#if defined(__clang__)
#define CXB_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define CXB_COMPILER "GCC " __VERSION__
#else
#define CXB_COMPILER __VERSION__
#endif

const char *cxb_build_info(int what)
{
    switch (what) {
    case 0: return CXB_COMPILER;
    case 1: return CXB_CFLAGS;
    default: return NULL;
    }
}
