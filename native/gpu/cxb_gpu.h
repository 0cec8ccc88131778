/* The GPU library's whole C API (libcxbgpu, built by nvcc, loaded by cxlbench/gpu.py through
 * cffi's ABI mode). Plain enough for cdef once its preprocessor lines are dropped; C linkage
 * comes from the extern "C" around its #include in the .cu files. Every call returns 0 or a
 * CUDA error code; cxb_gpu_error() says what failed. */
#ifndef CXB_GPU_H
#define CXB_GPU_H

/* What the runtime finds: versions (1000 x major + 10 x minor; driver 0 without one) and
 * how many devices; status is the device count's CUDA error (0: none). */
struct cxb_gpu_info {
    int runtime_version;
    int driver_version;
    int devices;
    int status;
};

/* One device's facts, as the runtime reports them (clocks in kHz). */
struct cxb_gpu_device {
    char name[256];
    int major, minor;
    int sms;
    int l2_bytes;
    int max_threads_per_sm;
    int max_blocks_per_sm;
    int clock_khz;
    int memory_clock_khz;
    int bus_width_bits;
    int ecc;
    int pci_domain, pci_bus, pci_device;
    unsigned long long memory_bytes;
};

/* A row of the streaming-kernel table: its name and the bytes it moves per element of one
 * array (8-byte doubles: read 8, copy 16, triad 24...). */
struct cxb_gpu_kernel_row {
    const char *name;
    int bytes_per_element;
};

/* One case of a streaming kernel: three arrays of n doubles in device memory, the kernel
 * launched reps times on a grid of blocks x threads (grid-stride loops), each launch timed
 * by events around it alone. After the timing every element (or, for read and dot, the
 * reduced sum) is checked against its closed-form value: bad counts those off it. */
struct cxb_gpu_stream_args {
    int device;
    int kernel;                 /* index into the kernel table */
    unsigned long long n;
    int blocks;
    int threads;
    int reps;
    unsigned long long *ns;     /* reps slots: each launch's time */
    unsigned long long bad;     /* out */
    double sum;                 /* out: read's and dot's last sum */
    double want_sum;            /* out: what that sum should be */
};

/* Host-device copies: direction 0 host to device, 1 device to host, 2 both at once on two
 * streams (host and host + bytes, two device buffers). engine 0: cudaMemcpyAsync (the copy
 * engines); 1: a kernel of blocks x threads (the SMs) copying 16 bytes a thread a step
 * through the host memory mapped into the device's space (bytes a multiple of 16, the
 * host 16-byte aligned; not pageable memory; both directions: one kernel, its warps
 * alternating between them). host_kind 0: the caller's memory as it is (pageable), 1: the caller's
 * memory registered (cudaHostRegister) for the call, 2: pinned memory the library
 * allocates (cudaHostAlloc), 3: the same write-combined. Each repetition is timed from an
 * event before the first copy to the last stream's event after its copy. The bytes are a
 * pattern the library writes before the timing and compares, every byte, after it: bad
 * counts those that differ. */
struct cxb_gpu_copy_args {
    int device;
    int direction;
    int engine;
    int host_kind;
    void *host;                 /* kinds 0 and 1: bytes (x 2 for both directions) */
    unsigned long long bytes;
    int blocks;                 /* engine 1's grid */
    int threads;
    int reps;
    unsigned long long *ns;
    unsigned long long bad;     /* out */
};

/* Managed memory (cudaMallocManaged) of `bytes`, never more than the device has free, and
 * a grid of blocks x threads going through it once a repetition. mode 0 fault: the host
 * has written every page (they live in host memory) and the timed launch reads them (a
 * sum, checked), each page migrating to the device on its fault; 1 prefetch: the same with
 * cudaMemPrefetchAsync to the device inside the timed region, before the launch; 2
 * resident: the pages already on the device (prefetched untimed), the read alone; 3 first
 * touch: memory allocated anew and never touched, which the timed launch writes (every
 * double checked). Before each repetition of modes 0 and 1 the host writes every page
 * again, moving them back. */
struct cxb_gpu_managed_args {
    int device;
    int mode;
    unsigned long long bytes;
    int blocks;
    int threads;
    int reps;
    unsigned long long *ns;
    unsigned long long bad;     /* out */
};

/* Embedding-bag gather on the GPU: `bags` bags, each the fp32 sum of the `pooling` rows
 * (of `dim` floats) of a table of `rows` rows that indices[bag * pooling + k] name, into an
 * output in device memory. table 0: the table in device memory (HBM); 1: in pinned host
 * memory the library allocates (cudaHostAlloc, mapped); 2: in the caller's memory at
 * `host` (placed on a node, rows x dim x 4 bytes), registered mapped for the call; 1 and
 * 2 are read in place over the link. The library fills the table with values whose sums
 * are exact in fp32, copies the indices to the device, and launches blocks x threads
 * (whole warps) untimed once and then reps times, each between two events; every output
 * element is then checked against the host's sum: bad counts those that differ. */
struct cxb_gpu_embedding_args {
    int device;
    int table;
    void *host;
    unsigned long long rows;
    int dim;
    const long long *indices;   /* bags x pooling row numbers, each < rows */
    unsigned long long bags;
    int pooling;
    int blocks;
    int threads;
    int reps;
    unsigned long long *ns;
    unsigned long long bad;     /* out */
};

/* Paged-KV block swaps between device memory and a host pool (the caller's memory at
 * `host`, placed on a node, pool_blocks x block_bytes, registered for the call): the
 * `blocks` host blocks at slots[j] (distinct, each < pool_blocks) move to device block j
 * (direction 0, swap in) or from it (1, swap out). method 0: one cudaMemcpyAsync per
 * block; 1: one kernel of grid x threads copying every block through the block table
 * (the host pool mapped into the device's space; block_bytes a multiple of 16). Each
 * repetition is one swap timed by events around all its copies, and by the host's clock
 * around the calls that issue them (one a block for method 0: where that time nears the
 * events', the swap is bound by the CPU issuing it, not by the memory); every byte is
 * checked after the timing: bad counts those that differ. */
struct cxb_gpu_kv_swap_args {
    int device;
    int direction;
    int method;
    void *host;
    unsigned long long pool_blocks;
    unsigned long long block_bytes;
    const unsigned long long *slots;
    unsigned long long blocks;
    int grid;
    int threads;
    int reps;
    unsigned long long *ns;
    unsigned long long *issue_ns;   /* reps slots: the host's time issuing each swap's calls */
    unsigned long long bad;     /* out */
};

/* The GPU reading or writing host memory directly (zero-copy): the caller's memory,
 * placed where it chose, registered mapped for the call. op 0 read (a sum over n doubles,
 * checked), 1 write (every double set, checked on the host), 2 chase: one GPU thread
 * follows a random cycle through the buffer's 64-byte lines (built by the library, one
 * cycle through every line), `hops` dependent loads a repetition, each launch going on
 * where the last stopped, the end checked. One launch untimed, then each repetition one
 * launch between two events. */
struct cxb_gpu_zero_copy_args {
    int device;
    int op;
    void *host;
    unsigned long long bytes;
    int blocks;
    int threads;
    unsigned long long hops;
    int reps;
    unsigned long long *ns;
    unsigned long long bad;     /* out */
};

/* Device-memory latency: one GPU thread chasing a random cycle through `bytes` of device
 * memory, one element every `stride` bytes (128: a line each; 2 MiB: a page each, for TLB
 * reach). One launch untimed walks the whole cycle (caches and TLBs warm), then each
 * repetition `hops` dependent loads going on where the last stopped, timed by clock64()
 * around the loop (cycles) and by events around the launch (ns); the end checked against
 * the cycle followed on the host. */
struct cxb_gpu_chase_args {
    int device;
    unsigned long long bytes;
    unsigned long long stride;
    unsigned long long hops;
    int reps;
    unsigned long long *ns;
    unsigned long long *cycles;
    unsigned long long bad;     /* out */
};

int cxb_gpu_kernel_count(void);
int cxb_gpu_kernel_info(int i, struct cxb_gpu_kernel_row *out);
int cxb_gpu_info(struct cxb_gpu_info *out);
int cxb_gpu_device_info(int device, struct cxb_gpu_device *out);
int cxb_gpu_stream(struct cxb_gpu_stream_args *args);
int cxb_gpu_copy(struct cxb_gpu_copy_args *args);
int cxb_gpu_zero_copy(struct cxb_gpu_zero_copy_args *args);
int cxb_gpu_chase(struct cxb_gpu_chase_args *args);
int cxb_gpu_managed(struct cxb_gpu_managed_args *args);
int cxb_gpu_embedding(struct cxb_gpu_embedding_args *args);
int cxb_gpu_kv_swap(struct cxb_gpu_kv_swap_args *args);
const char *cxb_gpu_error(void);

#endif
