/* The GPU library's whole C API (libcxbgpu, built by nvcc, loaded by cxlbench/gpu.py through
 * cffi's ABI mode). Plain enough for cdef once its preprocessor lines are dropped; C linkage
 * comes from the extern "C" around its #include in the .cu files. Every call returns 0 or a
 * CUDA error code; cxb_gpu_error() says what failed.
 * gpu.py reads each enum cxb_gpu_<kind> from here without the library (options need it
 * where nvcc is not): its CXB_GPU_<KIND>_<NAME> values 0, 1, 2, ... are the option's names
 * (lower-cased, _ as -) in value order, and CXB_GPU_<KIND>S, last, counts them. */
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

/* The streaming kernels, and the bytes each moves per element of one array (8-byte
 * doubles), which GB/s counts: CXB_GPU_BYTES_<KERNEL>, one a kernel (values, not names). */
enum cxb_gpu_kernel {
    CXB_GPU_KERNEL_READ, CXB_GPU_KERNEL_WRITE, CXB_GPU_KERNEL_COPY, CXB_GPU_KERNEL_SCALE,
    CXB_GPU_KERNEL_ADD, CXB_GPU_KERNEL_TRIAD, CXB_GPU_KERNEL_DOT, CXB_GPU_KERNELS
};
enum cxb_gpu_kernel_bytes {
    CXB_GPU_BYTES_READ = 8, CXB_GPU_BYTES_WRITE = 8, CXB_GPU_BYTES_COPY = 16,
    CXB_GPU_BYTES_SCALE = 16, CXB_GPU_BYTES_ADD = 24, CXB_GPU_BYTES_TRIAD = 24,
    CXB_GPU_BYTES_DOT = 16
};

/* A row of the library's streaming-kernel table (row i: kernel i): its name and bytes. */
struct cxb_gpu_kernel_row {
    const char *name;
    int bytes_per_element;
};

/* One case of a streaming kernel: three arrays of n doubles (n even: the kernels move
 * pairs) in device memory, the kernel launched reps times on a grid of blocks x threads
 * (grid-stride loops), `passes` times over the arrays a launch, each launch timed
 * by events around it alone. After the timing every element (or, for read and dot, the
 * reduced sum) is checked against its closed-form value: bad counts those off it. */
struct cxb_gpu_stream_args {
    int device;
    int kernel;                 /* enum cxb_gpu_kernel */
    unsigned long long n;
    int blocks;                 /* in: 0 for every SM full (out: the blocks launched) */
    int threads;
    int reps;
    int passes;                 /* times over the arrays in one launch */
    int resident;               /* out: blocks of the kernel an SM holds at once */
    unsigned long long *ns;     /* reps slots: each launch's time */
    unsigned long long bad;     /* out */
    double sum;                 /* out: read's and dot's last sum (all its passes) */
    double want_sum;            /* out: what that sum should be */
};

/* Host-device copies: direction H2D host to device, D2H device to host, BIDIR both at once
 * on two streams (host and host + bytes, two device buffers). engine CE: cudaMemcpyAsync
 * (the copy engines); SM: a kernel of blocks x threads (the SMs) copying 16 bytes a thread a
 * step through the host memory mapped into the device's space (bytes a multiple of 16, the
 * host 16-byte aligned; not pageable memory; both directions: one kernel, its warps
 * alternating between them). host_kind PAGEABLE: the caller's memory as it is, REGISTERED:
 * the caller's memory registered (cudaHostRegister) for the call, PINNED: pinned memory the
 * library allocates (cudaHostAlloc), WC: the same write-combined. Each repetition is timed
 * from an event before the first copy to the last stream's event after its copy. The bytes
 * are a pattern the library writes before the timing and compares, every byte, after it:
 * bad counts those that differ. */
enum cxb_gpu_direction {
    CXB_GPU_DIRECTION_H2D, CXB_GPU_DIRECTION_D2H, CXB_GPU_DIRECTION_BIDIR, CXB_GPU_DIRECTIONS
};
enum cxb_gpu_engine { CXB_GPU_ENGINE_CE, CXB_GPU_ENGINE_SM, CXB_GPU_ENGINES };
enum cxb_gpu_host_kind {
    CXB_GPU_HOST_KIND_PAGEABLE, CXB_GPU_HOST_KIND_REGISTERED, CXB_GPU_HOST_KIND_PINNED,
    CXB_GPU_HOST_KIND_WC, CXB_GPU_HOST_KINDS
};
struct cxb_gpu_copy_args {
    int device;
    int direction;              /* enum cxb_gpu_direction */
    int engine;                 /* enum cxb_gpu_engine */
    int host_kind;              /* enum cxb_gpu_host_kind */
    void *host;                 /* PAGEABLE and REGISTERED: bytes (x 2 for BIDIR) */
    unsigned long long bytes;
    int blocks;                 /* engine SM's grid */
    int threads;
    int reps;
    unsigned long long *ns;
    unsigned long long bad;     /* out */
};

/* Managed memory (cudaMallocManaged) of `bytes`, never more than the device has free, and
 * a grid of blocks x threads going through it once a repetition. mode FAULT: the host
 * has written every page (they live in host memory) and the timed launch reads them (a
 * sum, checked), each page migrating to the device on its fault; PREFETCH: the same with
 * cudaMemPrefetchAsync to the device inside the timed region, before the launch;
 * RESIDENT: the pages already on the device (prefetched untimed), the read alone;
 * FIRST_TOUCH: memory allocated anew and never touched, which the timed launch writes
 * (every double checked). Before each repetition of FAULT and PREFETCH the host writes
 * every page again, moving them back. */
enum cxb_gpu_managed_mode {
    CXB_GPU_MANAGED_MODE_FAULT, CXB_GPU_MANAGED_MODE_PREFETCH, CXB_GPU_MANAGED_MODE_RESIDENT,
    CXB_GPU_MANAGED_MODE_FIRST_TOUCH, CXB_GPU_MANAGED_MODES
};
struct cxb_gpu_managed_args {
    int device;
    int mode;                   /* enum cxb_gpu_managed_mode */
    unsigned long long bytes;
    int blocks;
    int threads;
    int reps;
    unsigned long long *ns;
    unsigned long long bad;     /* out */
};

/* Embedding-bag gather on the GPU: `bags` bags, each the fp32 sum of the `pooling` rows
 * (of `dim` floats) of a table of `rows` rows that indices[bag * pooling + k] name, into an
 * output in device memory. table HBM: the table in device memory; PINNED: in pinned host
 * memory the library allocates (cudaHostAlloc, mapped); REGISTERED: in the caller's memory
 * at `host` (placed on a node, rows x dim x 4 bytes), registered mapped for the call;
 * PINNED and REGISTERED are read in place over the link. The library fills the table with
 * values whose sums are exact in fp32, copies the indices to the device, and launches
 * blocks x threads (whole warps) untimed once and then reps times, each between two events;
 * every output element is then checked against the host's sum: bad counts those that
 * differ. */
enum cxb_gpu_embedding_table {
    CXB_GPU_EMBEDDING_TABLE_HBM, CXB_GPU_EMBEDDING_TABLE_PINNED,
    CXB_GPU_EMBEDDING_TABLE_REGISTERED, CXB_GPU_EMBEDDING_TABLES
};
struct cxb_gpu_embedding_args {
    int device;
    int table;                  /* enum cxb_gpu_embedding_table */
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
 * (direction IN) or from it (OUT). method COPIES: one cudaMemcpyAsync per block;
 * KERNEL: one kernel of grid x threads copying every block through the block table
 * (the host pool mapped into the device's space; block_bytes a multiple of 16). Each
 * repetition is one swap timed by events around all its copies, and by the host's clock
 * around the calls that issue them (one a block for COPIES: where that time nears the
 * events', the swap is bound by the CPU issuing it, not by the memory); every byte is
 * checked after the timing: bad counts those that differ. */
enum cxb_gpu_kv_direction {
    CXB_GPU_KV_DIRECTION_IN, CXB_GPU_KV_DIRECTION_OUT, CXB_GPU_KV_DIRECTIONS
};
enum cxb_gpu_kv_method {
    CXB_GPU_KV_METHOD_COPIES, CXB_GPU_KV_METHOD_KERNEL, CXB_GPU_KV_METHODS
};
struct cxb_gpu_kv_swap_args {
    int device;
    int direction;              /* enum cxb_gpu_kv_direction */
    int method;                 /* enum cxb_gpu_kv_method */
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
 * placed where it chose, registered mapped for the call. op READ (a sum over n doubles,
 * checked), WRITE (every double set, checked on the host), CHASE: one GPU thread
 * follows a random cycle through the buffer's 64-byte lines (built by the library, one
 * cycle through every line), `hops` dependent loads a repetition, each launch going on
 * where the last stopped, the end checked. One launch untimed, then each repetition one
 * launch between two events. */
enum cxb_gpu_zero_copy_op {
    CXB_GPU_ZERO_COPY_OP_READ, CXB_GPU_ZERO_COPY_OP_WRITE, CXB_GPU_ZERO_COPY_OP_CHASE,
    CXB_GPU_ZERO_COPY_OPS
};
struct cxb_gpu_zero_copy_args {
    int device;
    int op;                     /* enum cxb_gpu_zero_copy_op */
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
 * reach). One launch untimed walks the whole cycle, up to CXB_GPU_CHASE_WARM_MAX hops
 * (caches and TLBs warm), then each repetition `hops` dependent loads going on where the
 * last stopped, timed by clock64() around the loop (cycles) and by events around the
 * launch (ns); the end checked against where the cycle's order, computed on the host,
 * puts it. */
enum cxb_gpu_limits { CXB_GPU_CHASE_WARM_MAX = 1048576 };

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
