/* Placed buffers: mmap, a NUMA policy through raw mbind(2), prefault from named CPUs,
 * placement read back with move_pages(2), and page ranges moved. No libnuma. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "internal.h"

#define MPOL_DEFAULT_ 0
#define MPOL_PREFERRED_ 1
#define MPOL_BIND_ 2
#define MPOL_INTERLEAVE_ 3
#define MPOL_LOCAL_ 4
#define MPOL_WEIGHTED_INTERLEAVE_ 6
#define MPOL_MF_MOVE_ (1 << 1)
#define MAX_NODES 1024
#define MASK_WORDS (MAX_NODES / (8 * sizeof(unsigned long)))
#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MADV_HUGEPAGE
#define MADV_HUGEPAGE 14
#define MADV_NOHUGEPAGE 15
#endif

static const size_t KB4 = 4096, MB2 = 2ul << 20, GB1 = 1ul << 30;

static long sys_mbind(void *addr, size_t len, int mode, const unsigned long *mask,
                      unsigned flags)
{
    /* The kernel reads maxnode - 1 bits. */
    return syscall(SYS_mbind, addr, len, mode, mask, mask ? MAX_NODES + 1 : 0, flags);
}

static int set_mask(unsigned long *mask, const int *nodes, int n)
{
    memset(mask, 0, MASK_WORDS * sizeof *mask);
    for (int i = 0; i < n; i++) {
        if (nodes[i] < 0 || nodes[i] >= MAX_NODES)
            return cxb_fail(EINVAL, "node %d is out of range", nodes[i]);
        mask[nodes[i] / (8 * sizeof *mask)] |= 1ul << (nodes[i] % (8 * sizeof *mask));
    }
    return 0;
}

static int bind_range(void *addr, size_t len, int mode, const int *nodes, int n)
{
    unsigned long mask[MASK_WORDS];
    int rc = set_mask(mask, nodes, n);
    if (rc)
        return rc;
    if (sys_mbind(addr, len, mode, n ? mask : NULL, 0) != 0) {
        int err = errno;
        return cxb_fail(err, "mbind(mode %d) over %zu bytes", mode, len);
    }
    return 0;
}

/* Weighted placement without kernel support: bind consecutive page runs, weights[i]
 * pages of each round to nodes[i]. */
static int place_weighted(struct cxb_buffer *b, const int *nodes, const int *weights, int n)
{
    size_t off = 0;
    while (off < b->map_size) {
        for (int i = 0; i < n && off < b->map_size; i++) {
            size_t len = (size_t)weights[i] * b->page_size;
            if (len > b->map_size - off)
                len = b->map_size - off;
            int rc = bind_range((char *)b->addr + off, len, MPOL_BIND_, &nodes[i], 1);
            if (rc)
                return rc;
            off += len;
        }
    }
    return 0;
}

static int apply_policy(struct cxb_buffer *b, const int *nodes, const int *weights, int n,
                        int method)
{
    switch (b->policy) {
    case CXB_POL_LOCAL:
        return bind_range(b->addr, b->map_size, MPOL_LOCAL_, NULL, 0);
    case CXB_POL_BIND:
        return bind_range(b->addr, b->map_size, MPOL_BIND_, nodes, n);
    case CXB_POL_PREFERRED:
        if (n != 1)
            return cxb_fail(EINVAL, "preferred takes one node, got %d", n);
        return bind_range(b->addr, b->map_size, MPOL_PREFERRED_, nodes, n);
    case CXB_POL_INTERLEAVE:
        return bind_range(b->addr, b->map_size, MPOL_INTERLEAVE_, nodes, n);
    case CXB_POL_WEIGHTED:
        for (int i = 0; i < n; i++)
            if (!weights || weights[i] < 1)
                return cxb_fail(EINVAL, "weights must be positive integers");
        b->weighted_method = method;
        if (method == CXB_WEIGHTED_KERNEL)
            return bind_range(b->addr, b->map_size, MPOL_WEIGHTED_INTERLEAVE_, nodes, n);
        if (method == CXB_WEIGHTED_MANUAL)
            return place_weighted(b, nodes, weights, n);
        return cxb_fail(EINVAL, "unknown weighted method %d", method);
    }
    return cxb_fail(EINVAL, "unknown policy %d", b->policy);
}

int cxb_alloc(size_t size, int page_kind, int policy, const int *nodes, const int *weights,
              int nnodes, int weighted_method, struct cxb_buffer **out)
{
    if (!out || size == 0)
        return cxb_fail(EINVAL, "cannot allocate an empty buffer");
    if (nnodes < 0 || nnodes > MAX_NODES || (nnodes && !nodes))
        return cxb_fail(EINVAL, "bad node list");
    size_t page;
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    switch (page_kind) {
    case CXB_PAGE_4K: page = KB4; break;
    case CXB_PAGE_THP: page = MB2; break;
    case CXB_PAGE_2M: page = MB2; flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (21 << MAP_HUGE_SHIFT); break;
    case CXB_PAGE_1G: page = GB1; flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (30 << MAP_HUGE_SHIFT); break;
    default: return cxb_fail(EINVAL, "unknown page kind %d", page_kind);
    }
    struct cxb_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return cxb_fail(ENOMEM, "cannot allocate a buffer record");
    b->size = size;
    b->map_size = (size + page - 1) / page * page;
    b->page_size = page;
    b->page_kind = page_kind;
    b->policy = policy;
    if (page_kind == CXB_PAGE_THP) {
        /* Over-map and trim so the buffer starts on a huge-page boundary. */
        size_t span = b->map_size + page;
        char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, flags, -1, 0);
        if (raw == MAP_FAILED) {
            int err = errno;
            free(b);
            return cxb_fail(err, "mmap of %zu bytes", span);
        }
        char *aligned = (char *)(((uintptr_t)raw + page - 1) & ~(uintptr_t)(page - 1));
        if (aligned > raw)
            munmap(raw, (size_t)(aligned - raw));
        size_t tail = (size_t)(raw + span - (aligned + b->map_size));
        if (tail)
            munmap(aligned + b->map_size, tail);
        b->addr = aligned;
        madvise(b->addr, b->map_size, MADV_HUGEPAGE);
    } else {
        b->addr = mmap(NULL, b->map_size, PROT_READ | PROT_WRITE, flags, -1, 0);
        if (b->addr == MAP_FAILED) {
            int err = errno;
            size_t len = b->map_size;
            free(b);
            if (page_kind >= CXB_PAGE_2M)
                return cxb_fail(err, "mmap of %zu bytes of %s hugetlb pages (is the pool "
                                "under /sys/kernel/mm/hugepages large enough?)",
                                len, page_kind == CXB_PAGE_2M ? "2 MiB" : "1 GiB");
            return cxb_fail(err, "mmap of %zu bytes", len);
        }
        if (page_kind == CXB_PAGE_4K)
            madvise(b->addr, b->map_size, MADV_NOHUGEPAGE);
    }
    int rc = apply_policy(b, nodes, weights, nnodes, weighted_method);
    if (rc) {
        munmap(b->addr, b->map_size);
        free(b);
        return rc;
    }
    *out = b;
    return 0;
}

void cxb_free(struct cxb_buffer *b)
{
    if (!b)
        return;
    munmap(b->addr, b->map_size);
    free(b);
}

struct touch {
    struct cxb_buffer *b;
    int n;
};

static int touch_slice(void *p, int t)
{
    struct touch *tc = p;
    size_t pages = tc->b->map_size / tc->b->page_size;
    size_t lo = pages * (size_t)t / (size_t)tc->n, hi = pages * (size_t)(t + 1) / (size_t)tc->n;
    /* A write per base page: THP regions may still be backed by small pages. */
    size_t step = tc->b->page_kind == CXB_PAGE_THP ? KB4 : tc->b->page_size;
    volatile char *base = tc->b->addr;
    for (size_t off = lo * tc->b->page_size; off < hi * tc->b->page_size; off += step)
        base[off] = 0;
    return 0;
}

int cxb_release_policy(struct cxb_buffer *b)
{
    return bind_range(b->addr, b->map_size, MPOL_DEFAULT_, NULL, 0);
}

int cxb_prefault(struct cxb_buffer *b, const int *cpus, int ncpus)
{
    if (!b)
        return cxb_fail(EINVAL, "no buffer");
    struct touch tc = {b, ncpus > 0 ? ncpus : 1};
    return cxb_parallel(touch_slice, &tc, ncpus > 0 ? cpus : NULL, tc.n);
}

/* move_pages(2) without target nodes: where each page is, or -errno. */
/* Pages index[0..n) of the region at addr, or [0, n) without an index. */
static int query(char *addr, size_t n, size_t page, const uint64_t *index, int32_t *nodes)
{
    enum { CHUNK = 65536 };
    void **pages = malloc(CHUNK * sizeof *pages);
    if (!pages)
        return cxb_fail(ENOMEM, "cannot allocate the query array");
    int rc = 0;
    for (size_t first = 0; first < n && rc == 0; first += CHUNK) {
        size_t len = n - first < CHUNK ? n - first : CHUNK;
        for (size_t i = 0; i < len; i++)
            pages[i] = addr + (index ? index[first + i] : first + i) * page;
        if (syscall(SYS_move_pages, 0, (unsigned long)len, pages, NULL, nodes + first, 0) != 0)
            rc = cxb_fail(errno, "move_pages query of %zu pages", len);
    }
    free(pages);
    return rc;
}

int cxb_node_map(void *addr, size_t pages, size_t page, int32_t *nodes)
{
    if (!addr || !nodes || !page || page % KB4 || (uintptr_t)addr % KB4)
        return cxb_fail(EINVAL, "bad node-map arguments (a page-aligned address, pages "
                        "of a multiple of 4096 bytes, an output array)");
    return query(addr, pages, page, NULL, nodes);
}

/* Where a page's status says nothing yet: move_pages writes none for a batch it gave up. */
#define UNSET INT32_MIN

/* After the calls (untimed): mbind says nothing per page, move_pages nothing for pages
 * of a batch it gave up on, and EBUSY for every base page of a THP but the one that
 * queued it. Read back where each page is; keep move_pages' errno for a page not there. */
static int settle(struct cxb_move_args *a, int32_t *status, int32_t *now)
{
    size_t n = a->pages;
    int rc = 0;
    if (!now)
        rc = query(a->addr, n, a->page, a->index, status);
    else {
        size_t i = 0;
        while (i < n && status[i] == a->node)
            i++;
        if (i < n)
            rc = query(a->addr, n, a->page, a->index, now);
        for (; i < n && rc == 0; i++)
            if (status[i] != a->node && (now[i] == a->node || status[i] >= 0 || status[i] == UNSET))
                status[i] = now[i];
    }
    a->moved = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        a->moved += status[i] == a->node;
    return rc;
}

int cxb_move(struct cxb_move_args *a)
{
    if (!a)
        return cxb_fail(EINVAL, "no move arguments");
    a->t0 = a->t1 = cxb_now_ns();
    int pages_method = a->method == CXB_MOVE_BY_MOVE_PAGES;
    if (!a->addr || !a->pages || !a->page || a->page % KB4 || (uintptr_t)a->addr % a->page ||
        (!pages_method && (a->method != CXB_MOVE_BY_MBIND || a->index)))
        return cxb_fail(EINVAL, "bad move arguments (a page-aligned address, at least one "
                        "page of a multiple of 4096 bytes, method %d, a page list only "
                        "with move_pages)", a->method);
    unsigned long mask[MASK_WORDS];
    int rc = set_mask(mask, &a->node, 1);
    if (rc)
        return rc;
    size_t n = a->pages, per = a->batch && a->batch < n ? a->batch : n;
    int32_t *status = a->status ? a->status : malloc(n * sizeof *status), *targets = NULL;
    void **addrs = NULL;
    if (pages_method) {
        addrs = malloc(n * sizeof *addrs);
        targets = malloc(n * sizeof *targets);
    }
    if (!status || (pages_method && (!addrs || !targets)))
        rc = cxb_fail(ENOMEM, "cannot allocate the move arrays for %zu pages", n);
    for (size_t i = 0; i < n && rc == 0 && pages_method; i++) {
        addrs[i] = (char *)a->addr + (a->index ? a->index[i] : i) * a->page;
        targets[i] = a->node;
        status[i] = UNSET;
    }
    a->t0 = cxb_now_ns();
    for (size_t first = 0; first < n && rc == 0; first += per) {
        size_t len = n - first < per ? n - first : per;
        /* move_pages > 0: pages it could not move; their status is read back below. */
        if (pages_method ? syscall(SYS_move_pages, 0, (unsigned long)len, addrs + first,
                                   targets + first, status + first, MPOL_MF_MOVE_) < 0
                         : sys_mbind((char *)a->addr + first * a->page, len * a->page,
                                     MPOL_BIND_, mask, MPOL_MF_MOVE_) != 0)
            rc = cxb_fail(errno, "%s of %zu pages to node %d",
                          pages_method ? "move_pages" : "mbind(MPOL_MF_MOVE)", len, a->node);
    }
    a->t1 = cxb_now_ns();
    if (rc == 0)
        rc = settle(a, status, targets);
    if (!a->status)
        free(status);
    free(addrs);
    free(targets);
    return rc;
}

int cxb_has_weighted_interleave(void)
{
    /* Ask the kernel: mbind on a scratch page with node 0 in the mask. */
    void *p = mmap(NULL, KB4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    int node = 0, ok = bind_range(p, KB4, MPOL_WEIGHTED_INTERLEAVE_, &node, 1) == 0;
    munmap(p, KB4);
    return ok;
}
