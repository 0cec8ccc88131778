/* cxlbench: the whole C API.
 *
 * native/build.py feeds this file to cffi's cdef after dropping preprocessor lines, so it
 * holds only plain declarations. Every entry point that can fail returns 0 on success or a
 * negative errno; cxb_last_error() then gives the C-side message (thread-local).
 * native.py reads each enum of CXB_<KIND>_<NAME> values 0, 1, 2, ... by its prefix: the
 * lower-cased names, in value order, are the names Python and suites use.
 */
#ifndef CXLBENCH_H
#define CXLBENCH_H
#include <stddef.h>
#include <stdint.h>

/* ---- errors ---------------------------------------------------------------------- */
const char *cxb_last_error(void);

/* ---- timing (timer.c) ------------------------------------------------------------ */
struct cxb_timer_info {
    int tsc_available;          /* rdtscp usable and invariant */
    double tsc_hz;              /* calibrated against CLOCK_MONOTONIC_RAW */
    double calibration_ms;      /* length of the calibration window */
    double mono_overhead_ns;    /* cost of one clock_gettime(CLOCK_MONOTONIC_RAW) */
    double tsc_overhead_cycles; /* cost of one rdtscp */
};
uint64_t cxb_now_ns(void);      /* CLOCK_MONOTONIC_RAW, for long regions */
uint64_t cxb_rdtscp(void);      /* 0 where there is no TSC */
int cxb_timer_calibrate(double window_ms, struct cxb_timer_info *out);

/* ---- CPU (cpu.c) ----------------------------------------------------------------- */
enum cxb_isa { CXB_ISA_SCALAR = 0, CXB_ISA_AVX2 = 1, CXB_ISA_AVX512 = 2 };
int cxb_isa_supported(int isa); /* 1 when this CPU (and OS) can run the variant */
int cxb_isa_compiled(int isa);  /* 1 when this build contains the variant */
int cxb_pin_self(int cpu);      /* pin the calling thread to one CPU */

/* ---- memory (memory.c) ----------------------------------------------------------- */
enum { CXB_PAGE_4K = 0, CXB_PAGE_THP = 1, CXB_PAGE_2M = 2, CXB_PAGE_1G = 3 };
enum {
    CXB_POL_LOCAL = 0,      /* first touch from the case's CPUs */
    CXB_POL_BIND = 1,
    CXB_POL_PREFERRED = 2,
    CXB_POL_INTERLEAVE = 3,
    CXB_POL_WEIGHTED = 4    /* nodes[i] gets weights[i] pages per round */
};
enum { CXB_WEIGHTED_NONE = 0, CXB_WEIGHTED_KERNEL = 1, CXB_WEIGHTED_MANUAL = 2 };

struct cxb_buffer {
    void *addr;
    size_t size;            /* bytes asked for */
    size_t map_size;        /* bytes mapped (size rounded up to the page size) */
    size_t page_size;       /* 4096, or the huge page size */
    int page_kind;
    int policy;
    int weighted_method;    /* which CXB_WEIGHTED_* placed a weighted buffer */
};

/* Map, apply the policy (nothing is faulted yet). weighted_method asks for the kernel's
 * MPOL_WEIGHTED_INTERLEAVE or cxlbench's own page-range mbind. */
int cxb_alloc(size_t size, int page_kind, int policy, const int *nodes, const int *weights,
              int nnodes, int weighted_method, struct cxb_buffer **out);
void cxb_free(struct cxb_buffer *buf);
/* Touch every page, split across threads pinned to cpus[0..ncpus). */
int cxb_prefault(struct cxb_buffer *buf, const int *cpus, int ncpus);
/* Drop the buffer's own NUMA policy (mbind MPOL_DEFAULT): its pages stay where they are,
 * and the task's default policy governs them, which lets NUMA balancing scan and move
 * them (it skips a range whose own policy does not ask for migrate-on-fault). */
int cxb_release_policy(struct cxb_buffer *buf);
/* The node of each page of [addr, addr + pages * page): nodes[i] is page i's node as
 * move_pages(2) reports it, or -errno (-ENOENT: not present, -EFAULT: not mapped). page
 * is 4096 (THP regions too: every base page answers with its huge page's node) or a
 * hugetlb page size. */
int cxb_node_map(void *addr, size_t pages, size_t page, int32_t *nodes);

/* Move pages [0, pages) of `page` bytes from addr (page-aligned) to `node`, `batch` pages
 * a call (0: one call), by move_pages(2) or by mbind(2) MPOL_BIND with MPOL_MF_MOVE (the
 * range's policy then stays bind:node). Only the calls are timed. A base page of a THP
 * queues its whole huge page, so pages beyond the range may move with it. */
enum { CXB_MOVE_BY_MOVE_PAGES = 0, CXB_MOVE_BY_MBIND = 1 };
struct cxb_move_args {
    void *addr;
    size_t pages;
    size_t page;            /* 4096, or the hugetlb page size */
    int node;
    int method;             /* CXB_MOVE_BY_* */
    uint64_t batch;
    const uint64_t *index;  /* optional, move_pages only: move pages index[0..pages) of the
                             * region at addr instead of [0, pages) (a scattered set, one
                             * call; status then follows the index) */
    int32_t *status;        /* out, optional (pages entries): each page's node after the
                             * move, or -errno saying why it is not on `node` */
    uint64_t moved;         /* out: pages on `node` after the move (moved or there before) */
    uint64_t t0, t1;        /* out: cxb_now_ns() before the first call, after the last */
};
int cxb_move(struct cxb_move_args *a);
/* 1 when mbind accepts MPOL_WEIGHTED_INTERLEAVE (Linux 6.9+), 0 otherwise. */
int cxb_has_weighted_interleave(void);

/* ---- kernels and drivers (kernels.c) ---------------------------------------------- */
/* How Python checks what a kernel or driver did: one Python function per kind, which
 * bandwidth.py picks by the stream kernel's row. */
enum cxb_check {
    CXB_CHECK_NONE = 0,         /* not checked; the row's `unchecked` says why */
    CXB_CHECK_INDEX_SUM = 1,    /* buf[0] index-filled (word i holds i): the words read add
                                 * up to a closed form. Of each step the bytes_read come
                                 * first; the bytes_written after them hold `value`. */
    CXB_CHECK_FILL = 2,         /* every uint64 word of buf[0] holds `value` */
    CXB_CHECK_COPY = 3,         /* buf[0] equals buf[1], which is index-filled */
    CXB_CHECK_TRIAD = 4,        /* numpy recomputes buf[0] = buf[1] + value * buf[2] */
    CXB_CHECK_CHAIN_END = 5,    /* each walk ends on the line the cycle's order predicts */
    CXB_CHECK_COUNTERS = 6,     /* the line's counters add up to the operations made */
    CXB_CHECK_LINES = 7,        /* lines read back: written ones hold value + their index,
                                 * the rest the index fill or its sum (and CHAIN_END) */
    CXB_CHECK_PAGES = 8,        /* after a move every page is on the node (a move_pages
                                 * query of each) and the index fill reads back whole */
    CXB_CHECK_POOLED = 9,       /* numpy pools the same bags in the same order */
    CXB_CHECK_UPDATED = 10,     /* numpy takes the same optimizer step on the same rows */
    CXB_CHECK_BLOCKS = 11,      /* each KV block read back sums to what was written to it */
    CXB_CHECK_STEPPED = 12,     /* numpy takes the same Adam step on the same parameters */
    CXB_CHECK_SNAPSHOT = 13,    /* the snapshot's checksum equals the source's */
    CXB_CHECK_MESSAGES = 14     /* the consumer reads each message's sequence number and
                                 * checksum back (stale and torn ones counted) */
};

/* What a row of either table says. */
struct cxb_entry {
    const char *key;        /* stable identifier, e.g. "read" */
    const char *benchmark;  /* the benchmark that runs it */
    const char *description;
    int check;              /* CXB_CHECK_* */
    const char *unchecked;  /* CXB_CHECK_NONE: why not; else NULL */
    int min_threads;        /* threads it needs */
    int max_threads;        /* threads it can take; 0: any number */
    int isa_mask;           /* bit i set: a variant for CXB_ISA_* i is compiled in */
    const char *needs;      /* what else it needs of the CPU, or NULL */
};

/* Stream kernels (bandwidth.c): every thread gets a slice of each stream. */
struct cxb_stream_args {
    void *buf[3];           /* the streams, 64-byte aligned */
    size_t bytes;           /* bytes of each */
    uint64_t passes;        /* passes over them */
    uint64_t value;         /* FILL and INDEX_SUM: the word stored; TRIAD: the scalar */
    uint64_t sum;           /* out, INDEX_SUM: the sum of the words read */
    uint32_t prefetch;      /* copy, copy_nt: lines prefetched ahead of the loads (0: none) */
    uint32_t ways;          /* copy, copy_nt, write, write_nt: pages walked side by side,
                             * a line of each in turn (0 or 1: straight through) */
};
/* Chase kernels (chase.c): one thread walks a cycle linked by cxb_chase_build. */
struct cxb_chase_args {
    void *start;            /* chase, chase_dist: a pointer of the cycle */
    void **starts;          /* chase_mlp: `chains` pointers, each replaced by its chain's end */
    uint64_t loads;         /* dependent loads (chase_mlp: per chain) */
    uint32_t chains;        /* chase_mlp: chains walked in lockstep, 1 to 16 */
    uint32_t batch;         /* chase_dist: loads per timed batch; loads is whole batches */
    uint64_t *ticks;        /* chase_dist, out: each batch's rdtscp ticks (ns without TSC) */
    void *end;              /* out: where the walk (chain 0) stopped */
};
/* The one signature of the kernel table: a kernel reads its family's member. */
struct cxb_kargs {
    struct cxb_stream_args stream;
    struct cxb_chase_args chase;
};

struct cxb_kernel_info {
    struct cxb_entry entry;
    uint32_t elem_bytes;    /* bytes per iteration step of the counts below */
    uint32_t bytes_read;    /* application bytes read per iteration */
    uint32_t bytes_written; /* application bytes written per iteration */
    int streams;            /* buffers the kernel takes */
    const char *buffers;    /* their names, comma-separated, in buf[] order: mem.<name> */
    int write_allocate;     /* its stores pull lines in first (not non-temporal) */
    int test_only;          /* runs only under CXLBENCH_TEST_KERNELS=1 */
};
int cxb_kernel_count(void);
int cxb_kernel_get(int index, struct cxb_kernel_info *out);

/* Run kernel `index` in its `isa` variant on nthreads threads, thread i pinned to cpus[i],
 * all released together at a barrier, each with a copy of *a whose streams are cut into
 * slices of whole steps (elem_bytes, at least a 64-byte line; the last thread also takes
 * any remainder). Then a->stream.sum holds the threads' sums added, a->chase.end thread
 * 0's, and *ns the last finish less the first start. */
int cxb_run(int index, int isa, struct cxb_kargs *a, const int *cpus, int nthreads,
            uint64_t *ns);

/* The entry points with argument structs of their own (below), in a table of the same
 * rows: cxb_<key> is the function. */
int cxb_driver_count(void);
int cxb_driver_get(int index, struct cxb_entry *out);

/* ---- loaded latency (loaded.c) --------------------------------------------------- */
enum { CXB_LOADED_BATCH_LINES = 8 };    /* lines a generator moves between pauses */
/* What the generators do: read, read R of every R+1 lines and write the rest, or write. */
enum cxb_load_mode {
    CXB_LOAD_READ = 0, CXB_LOAD_RW_3_1 = 1, CXB_LOAD_RW_2_1 = 2, CXB_LOAD_RW_1_1 = 3,
    CXB_LOAD_WRITE = 4, CXB_LOAD_WRITE_NT = 5
};
struct cxb_loaded_args {
    void *chase_start;      /* a pointer of a linked chase cycle */
    uint64_t chase_loads;   /* loads thread 0 times */
    void *gen_buf;          /* the generators' buffer, split between them */
    size_t gen_bytes;
    int generators;         /* load threads (0: idle latency) */
    int mode;               /* CXB_LOAD_* */
    uint32_t delay;         /* pause instructions after each batch of 8 lines */
    const int *cpus;        /* cpus[0] chases, cpus[1..generators] load */
    uint64_t value;         /* written lines get value + their line index in the slice */
    uint64_t chase_ns;      /* out */
    void *chase_end;        /* out */
    uint64_t gen_moved;     /* out: bytes the generators touched */
    uint64_t gen_ns;        /* out: the longest generator's run */
    uint64_t *gen_batches;  /* out, optional: batches of 8 lines each generator moved */
    uint64_t *gen_sums;     /* out, optional: sum of the uint64 words each generator read */
    /* Optional: the chase timed in batches of `batch` loads, one count each into ticks[]
     * (rdtscp, or the monotonic clock where cxb_tsc_usable() says no); chase_loads a
     * multiple of batch. */
    uint64_t *ticks;
    uint32_t batch;
    /* Optional, instead of the chase: thread 0 reads victim_bytes (whole batches of 8
     * lines) of victim_buf once, timed into chase_ns, its words summed into victim_sum. */
    void *victim_buf;
    size_t victim_bytes;
    uint64_t victim_sum;    /* out */
};
int cxb_loaded_latency(struct cxb_loaded_args *a);

/* ---- coherence (coherence.c) ----------------------------------------------------- */
/* Ping-pong hands the line over by a store or a compare-and-swap. Atomics increment one
 * shared word by fetch-and-add or CAS, a word on a line of each thread's own, or
 * neighbouring words of one line (false sharing). */
enum cxb_pingpong_mode { CXB_PINGPONG_STORE = 0, CXB_PINGPONG_CAS = 1 };
enum cxb_atomic_mode {
    CXB_ATOMIC_FAA = 0, CXB_ATOMIC_CAS = 1, CXB_ATOMIC_PRIVATE = 2, CXB_ATOMIC_FALSE_SHARING = 3
};
struct cxb_coherence_args {
    void *line;             /* 64-byte aligned; CXB_ATOMIC_PRIVATE needs a line per thread */
    int mode;               /* CXB_PINGPONG_* or CXB_ATOMIC_* */
    uint64_t iterations;    /* ping-pong: round trips; atomics: operations per thread */
    const int *cpus;        /* thread i on cpus[i] */
    int threads;            /* ping-pong: 2; atomics: 1 or more (false sharing: 1..8) */
    uint64_t *thread_ns;    /* out, optional: each thread's time */
    uint64_t ns;            /* out: first start to last end */
};
int cxb_pingpong(struct cxb_coherence_args *a);
int cxb_atomics(struct cxb_coherence_args *a);

/* ---- memory shared by two hosts (crosshost.c) ------------------------------------ */
/* The software-coherence protocol: none, or the writer's flush (CXB_FLUSH_CLFLUSH,
 * _CLFLUSHOPT or _CLWB) and sfence with the reader's clflush before it reads. */
enum cxb_xh_protocol { CXB_XH_NONE = 0, CXB_XH_FLUSH = 1 };
struct cxb_xh_args {
    void *region;           /* page-aligned, mapped by both hosts: 3 pages and what the
                             * case uses after them (a ring's slots) */
    size_t bytes;
    int host;               /* 0 or 1: ping-pong's starter, the ring's producer, is 0 */
    uint32_t session;       /* meet: the run both hosts belong to (not 0), the same on both */
    uint64_t key;           /* meet: the case; host 1 refuses a meeting of another case */
    uint64_t generation;    /* out of meet, into the rest: the meeting, session << 32 |
                             * count; the flags and messages count from its count */
    uint64_t timeout_ns;    /* the longest wait for the other host */
    int protocol;           /* CXB_XH_* */
    int flush;              /* CXB_FLUSH_* the protocol's writer uses */
    int simulate;           /* ring: messages seen through a private copy per host */
    int plant;              /* ring: the writer leaves each message's last line unflushed
                             * (a message of one line: nothing left out) */
    int op;                 /* atomic: CXB_XHOP_ADD (lock xadd), CXB_XHOP_CAS (a cmpxchg loop)
                             * or CXB_XHOP_PLAIN (load, add, store: no atomicity at all) */
    uint64_t iterations;    /* ping-pong: round trips; ring: messages; atomic: operations;
                             * abort: meetings given up; together: the phase */
    size_t message;         /* ring: bytes a message, 64 or more, whole words */
    uint64_t ns;            /* out: this host's time */
    uint64_t stale;         /* out, ring consumer: messages of an older sequence number */
    uint64_t torn;          /* out, ring consumer: messages whose checksum is wrong */
    uint64_t value;         /* out, atomic: the counter once both hosts finished */
};
enum cxb_xh_op { CXB_XHOP_ADD = 0, CXB_XHOP_CAS = 1, CXB_XHOP_PLAIN = 2 };
int cxb_xh_meet(struct cxb_xh_args *a);
int cxb_xh_abort(struct cxb_xh_args *a);
int cxb_xh_pingpong(struct cxb_xh_args *a);
int cxb_xh_ring(struct cxb_xh_args *a);
int cxb_xh_atomic(struct cxb_xh_args *a);
int cxb_xh_together(struct cxb_xh_args *a);

/* ---- flush and persistence (flush.c) --------------------------------------------- */
enum cxb_flush_kind {
    CXB_FLUSH_CLFLUSH = 0, CXB_FLUSH_CLFLUSHOPT = 1, CXB_FLUSH_CLWB = 2, CXB_FLUSH_NT = 3
};
struct cxb_flush_args {
    void *buf;
    size_t bytes;
    int kind;               /* CXB_FLUSH_* */
    int dirty;              /* lines written before the timed flush (else clean, cached) */
    int write;              /* time write + flush together (the persistence path) */
    uint64_t value;         /* what is written */
    uint64_t ns;            /* out: the flushes (or writes + flushes) and one sfence */
};
int cxb_flush_supported(int kind);
int cxb_flush(struct cxb_flush_args *a);
/* Untimed: write back and drop every line of the range from the caches (clflushopt, or
 * clflush), so a benchmark's next timed region reads memory. ENOTSUP off x86-64. */
int cxb_evict(const void *buf, size_t bytes);

/* ---- touches during a page migration (migrate.c) ----------------------------- */
/* cpus[0] moves every 4 KiB page of buf to `node` (by cxb_move)
 * while cpus[1] keeps reading (write: and storing back) one word of a line at a time,
 * pages in a scattered order and the next line of each page on each sweep (so every
 * touch in a run of bytes / 64 is of a distinct line), from lead_ns before the move until
 * tail_ns after it. The buffer's lines are flushed before the lead and again after the
 * move (before the tail), so the touches there miss every cache. Each touch gives a
 * sample pair (start ns since the toucher began, ns it took, the timer included); the
 * first max_samples are kept. control_ns > 0 makes a control run: nothing moves, the
 * mover only stays busy that long. */
enum {
    CXB_TOUCH_WINDOW = 128,     /* the toucher counts its involuntary switches every ... */
    CXB_TOUCH_CHECK_NS = 1000   /* ... so many touches and after every touch this long */
};
struct cxb_touch_args {
    void *buf;
    size_t bytes;
    int node;
    int method;             /* CXB_MOVE_BY_* */
    uint64_t batch;         /* pages per call, 0: all */
    int write;
    const int *cpus;
    uint64_t lead_ns, tail_ns;
    uint64_t control_ns;    /* 0: move; else a control run of this length */
    uint64_t *samples;      /* 2 * max_samples */
    uint64_t max_samples;
    uint8_t *switches;      /* out, max_samples: where the toucher counted its involuntary
                             * context switches (after touch i), those since the count
                             * before (at most 255); not those during the flush */
    uint64_t nsamples;      /* out: pairs kept */
    uint64_t touches;       /* out: touches made */
    uint64_t move_start, move_end;  /* out: ns since the toucher began */
    uint64_t tail_start;    /* out: ns since the toucher began, the flush after the move done */
    uint64_t timer_ns;      /* out: median time of an empty timed touch (the clock's cost) */
    uint64_t voluntary, involuntary;    /* out: the toucher's context switches in all */
    uint64_t unmoved;       /* out: pages not on `node` after the move */
};
int cxb_migrate_touch(struct cxb_touch_args *a);
/* The byte offsets of the toucher's first n touches in a buffer of `pages` 4 KiB pages. */
int cxb_touch_walk(size_t pages, uint64_t *offsets, size_t n);
/* ---- embedding bags (embedding.c) ------------------------------------------------ */
/* Row element types; an int8 row is dim bytes then its fp32 scale and bias (FBGEMM's
 * row-wise quantisation): element d is q[d] * scale + bias. */
enum cxb_emb_dtype { CXB_EMB_FP32 = 0, CXB_EMB_FP16 = 1, CXB_EMB_BF16 = 2, CXB_EMB_INT8 = 3 };
enum cxb_emb_pool { CXB_POOL_SUM = 0, CXB_POOL_MEAN = 1 };
struct cxb_embedding_args {
    const void *table;      /* rows of row_bytes each (several tables stacked) */
    uint64_t rows;
    uint64_t row_bytes;
    uint32_t dim;           /* elements per row */
    int dtype;              /* CXB_EMB_* */
    int pool;               /* CXB_POOL_* */
    int isa;                /* CXB_ISA_*: the variant the bag loop is compiled for */
    const int64_t *indices; /* the row of each lookup */
    const int64_t *offsets; /* bags + 1: bag b pools indices[offsets[b] .. offsets[b + 1]) */
    uint64_t bags;
    float *out;             /* bags x dim, fp32 */
    uint32_t prefetch;      /* prefetch the row this many lookups ahead (0: none) */
    uint32_t regs;          /* most vector registers a pass over a bag's columns sums in
                             * (0: all there are to spare, 16 zmm or 8 ymm; ymm passes of
                             * 12 and 16 only where asked) */
    uint64_t sample_every;  /* time every n-th bag alone (0: none) ... */
    uint64_t *bag_ns;       /* ... into bag_ns[b / sample_every] */
    uint64_t ns;            /* out: first thread's start to last thread's finish */
    uint64_t bad;           /* out: lookups naming no row, skipped (a check fails on any) */
};
/* The bags split between nthreads threads in contiguous ranges of about equal lookups,
 * thread i on cpus[i]. */
int cxb_embedding_bag(struct cxb_embedding_args *a, const int *cpus, int nthreads);
/* 1 when this CPU runs the bag loop's variant for CXB_ISA_* isa (avx2 and avx512 also
 * need FMA and F16C). */
int cxb_embedding_isa_supported(int isa);

/* Training's update of the rows a batch touched (fp32 tables), as FBGEMM's CPU backward
 * does it: lookups grouped by row, each row's gradient summed from the bags that looked it
 * up (the gradient of a bag's output is the output itself: a loss of |out|^2 / 2, divided
 * by the bag's length under mean pooling), then one step per row, no two threads on one
 * row. SGD: w -= lr g. Row-wise Adagrad: s += mean(g^2), w -= lr g / (sqrt(s) + eps). */
enum cxb_emb_optim { CXB_OPTIM_SGD = 0, CXB_OPTIM_ADAGRAD = 1 };
struct cxb_embedding_update_args {
    float *table;           /* rows of row_bytes (fp32 elements, dim of them) */
    uint64_t row_bytes;
    uint32_t dim;
    int optim;              /* CXB_OPTIM_* */
    int pool;               /* CXB_POOL_*: mean divides each bag's gradient by its length */
    const int64_t *rows;    /* the distinct rows looked up, nrows of them */
    uint64_t nrows;
    const int64_t *starts;  /* nrows + 1: row i's lookups are at bag_of[starts[i] ..] */
    const int64_t *bag_of;  /* the bag of each lookup, grouped by row */
    const int64_t *offsets; /* the forward's bag offsets (lengths for mean) */
    const float *out;       /* bags x dim: the forward's pooled output */
    float *state;           /* Adagrad: one float per table row */
    float lr, eps;
    uint64_t ns;            /* out */
};
int cxb_embedding_update(struct cxb_embedding_update_args *a, const int *cpus, int nthreads);

/* ---- optimizer step (optimizer.c) ------------------------------------------------ */
/* One fused Adam or AdamW step over n parameters, torch.optim's order of operations:
 * g += wd p (Adam's L2; AdamW instead p *= 1 - lr wd), m = b1 m + (1 - b1) g,
 * v = b2 v + (1 - b2) g^2, p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
 * fp32: params and grads fp32. Mixed: params and grads bf16, the step taken on the fp32
 * master copy, params written from it rounded to nearest even. Threads take slices of
 * whole 64-byte lines of the fp32 arrays. */
enum cxb_adam_kind { CXB_ADAM_ADAM = 0, CXB_ADAM_ADAMW = 1 };
enum cxb_precision { CXB_PRECISION_FP32 = 0, CXB_PRECISION_MIXED = 1 };
struct cxb_adam_args {
    void *params;           /* n fp32, or n bf16 (mixed) */
    const void *grads;      /* likewise */
    float *m, *v;           /* the moments, n fp32 each */
    float *master;          /* mixed: the fp32 master copy; else unused */
    uint64_t n;
    int kind;               /* CXB_ADAM_* */
    int precision;          /* CXB_PRECISION_* */
    int isa;                /* CXB_ISA_* */
    float lr, beta1, beta2, eps, weight_decay;
    uint64_t step;          /* t, from 1: the bias corrections' exponent */
    uint64_t ns;            /* out: first thread's start to last thread's finish */
};
int cxb_adam(struct cxb_adam_args *a, const int *cpus, int nthreads);

/* ---- checkpoint snapshots (checkpoint.c) ----------------------------------------- */
/* The whole of src, or the dirty rows of a table gathered in the order given and packed,
 * copied to dst in chunks with regular or non-temporal stores, or rep movsb (x86-64); a
 * whole copy may prefetch and walk pages as the bandwidth kernels do. Per chunk, optionally:
 * clwb of its lines (regular stores; NT stores leave none cached) then sfence, the
 * persistence path; and a pwrite of it to fd at its offset in dst, one fsync at the end.
 * Chunks are split between the threads in contiguous ranges. */
enum cxb_ckpt_store { CXB_CKPT_REGULAR = 0, CXB_CKPT_NT = 1, CXB_CKPT_REP = 2 };
struct cxb_checkpoint_args {
    void *dst;              /* 64-byte aligned: bytes, or nrows * row_bytes */
    const void *src;        /* 64-byte aligned */
    uint64_t bytes;         /* a whole snapshot (rows NULL): bytes, whole 64-byte lines */
    const int64_t *rows;    /* a differential one: the dirty rows of src; NULL: whole */
    uint64_t nrows;
    uint64_t src_rows;      /* rows in src: a dirty row past them is skipped, counted */
    uint64_t row_bytes;     /* whole 64-byte lines */
    uint64_t chunk;         /* bytes a chunk, whole lines (rows: whole rows, at least one) */
    int store;              /* CXB_CKPT_* */
    int isa;                /* CXB_ISA_* */
    int persist;            /* per chunk: clwb its lines (regular stores), then sfence */
    int fd;                 /* >= 0: each chunk also pwritten at its dst offset; fsync */
    uint32_t prefetch;      /* rows: prefetch the row this many ahead (0: none) */
    uint32_t lines_ahead;   /* whole: lines a software prefetch reads ahead (0: none) */
    uint32_t ways;          /* whole: pages walked side by side (0 or 1: straight) */
    uint64_t t0, t1;        /* out: cxb_now_ns() at the first thread's start, at the last
                             * one's end (with a file: after the fsync) */
    uint64_t ns;            /* out: t1 - t0 */
    uint64_t bad;           /* out: dirty rows outside src, skipped (a check fails) */
};
int cxb_checkpoint(struct cxb_checkpoint_args *a, const int *cpus, int nthreads);

/* ---- paged KV-cache (kvcache.c) ---------------------------------------------------- */
/* The block pools of paged attention (vLLM's layout): per layer, K and V each of
 * (blocks, block tokens, kv_heads, head_dim). Block b of layer l, K (kv 0) or V (kv 1)
 * of a pool starts at base + (b / group) * group_bytes + (b % group) * block_bytes +
 * l * layer_bytes + kv * kv_bytes: a pool has one group (the cache, vLLM's swap space);
 * LMCache-style chunk storage keeps each chunk's blocks of every layer together, a group
 * per chunk. Every token written is words base + 0, base + 1, ..., with base a hash of
 * (gen, layer, kv, sequence, position), so numpy knows what each block holds. */
enum cxb_kv_op {
    CXB_KVOP_DECODE = 0,    /* steps of: append token tokens + i of every sequence, then
                             * read all its tokens, every layer, K and V */
    CXB_KVOP_WRITE = 1,     /* write tokens [0, tokens) of every sequence (prefill) */
    CXB_KVOP_COPY = 2       /* copy runs of blocks from pool to dst, group by group */
};
struct cxb_kv_pool {
    void *base;
    uint64_t blocks;        /* blocks of each layer's K (and V) */
    uint64_t group;         /* blocks stored together (at least 1) */
    uint64_t group_bytes;   /* bytes from a group to the next */
    uint64_t layer_bytes;   /* bytes from a layer's blocks to the next layer's */
    uint64_t kv_bytes;      /* bytes from K's blocks to V's */
};
struct cxb_kvcache_args {
    int op;                 /* CXB_KVOP_* */
    int isa;                /* CXB_ISA_*: the scan's and the token writes' variant */
    uint32_t prefetch;      /* DECODE: lines of the next entry's block prefetched before
                             * each block is read (0: none) */
    uint32_t cold;          /* DECODE: before each step, untimed, every thread evicts the
                             * blocks its entries will read (cxb_evict; nothing off x86-64),
                             * then a barrier, then the step's clock starts. 0: the blocks
                             * stay cached from step to step. (WRITE and COPY: the caller
                             * evicts before the call.) */
    struct cxb_kv_pool pool;    /* DECODE, WRITE: the blocks the table names; COPY: source */
    struct cxb_kv_pool dst;     /* COPY: destination */
    uint32_t layers;
    uint32_t block;         /* tokens per block */
    uint64_t token_bytes;   /* kv_heads x head_dim x element bytes: a multiple of 8 */
    const int64_t *table;   /* DECODE, WRITE: seqs x width, each sequence's physical blocks */
    uint32_t seqs, width;
    uint64_t tokens;        /* DECODE: tokens held before the first step; WRITE: to write */
    uint32_t steps;         /* DECODE: decode steps; COPY: groups of runs, each timed */
    uint64_t gen;           /* tokens written carry it in their hash */
    const int64_t *runs;    /* COPY: (source block, destination block, blocks) triples */
    const int64_t *groups;  /* COPY: steps + 1 offsets: group i is runs [groups[i], ..) */
    uint64_t *sums;         /* DECODE, out (added to): the uint64 words read of each layer,
                             * K/V and table entry: sums[(l * 2 + kv) * seqs * width + e] */
    uint64_t *step_ns;      /* out, optional: each step's (group's) time, threads together,
                             * barrier to barrier */
    uint64_t ns;            /* out: the steps' times added (cold evictions not in it) */
    uint64_t bad;           /* out: table entries or runs outside their pool, skipped */
};
/* Threads split each step: DECODE and WRITE the table's entries in contiguous ranges
 * (the thread reading a sequence's last block appends its token), COPY the step's bytes;
 * thread i on cpus[i]; a barrier between steps. */
int cxb_kvcache(struct cxb_kvcache_args *a, const int *cpus, int nthreads);

/* ---- kernel set-up (chase.c, bandwidth.c) --------------------------------------- */
/* Link one pointer per 64-byte line into one random cycle: windows of window_bytes
 * (0: the whole buffer) in random order, each walked to its end before the next, its
 * lines in random order. With run_lines > 0 (the TLB knob), a window's pages of
 * page_bytes are visited run_lines lines at a time, round after round. order[i] is the
 * i-th line visited. */
int cxb_chase_build(void *buf, size_t bytes, size_t window_bytes, size_t page_bytes,
                    size_t run_lines, uint64_t seed, uint32_t *order);
/* buf[i] = i for each uint64 in the buffer: what CXB_CHECK_INDEX_SUM kernels read is known. */
int cxb_fill_index(void *buf, size_t bytes, const int *cpus, int ncpus);

/* ---- build information (buildinfo.c) ---------------------------------------------- */
/* what 0: the compiler that built the core and its version; 1: the flags it was given
 * (build.py passes them as CXB_CFLAGS); anything else: NULL. */
const char *cxb_build_info(int what);

/* ---- reuse (reuse.c) ------------------------------------------------------------- */
/* Untimed analysis for the tier model: for each of n accesses to units 0..nids-1, the
 * distinct units touched since the last access to its own (its LRU stack distance), or -1
 * for a first access. */
int cxb_stack_distances(const int64_t *ids, size_t n, size_t nids, int64_t *out);


#endif
