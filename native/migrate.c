/* Page migration of every 4 KiB page of a range to a node, in batches of pages, by
 * move_pages(2) or by mbind(2) with MPOL_MF_MOVE: two kernel-table rows (node = count,
 * batch = value, 0: one batch; the checksum output counts the pages that did not land,
 * from move_pages' per-page status), and a driver that times one thread's touches of
 * the pages while another moves them. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "internal.h"

#define MPOL_MF_MOVE_ (1 << 1)
#define MPOL_BIND_ 2
#define PAGE 4096

static int mbind_range(char *buf, size_t n, int node, size_t batch)
{
    unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {0};
    if (node < 0 || node >= 1024)
        return cxb_fail(EINVAL, "node %d is out of range", node);
    mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
    for (size_t first = 0; first < n; first += batch) {
        size_t len = (n - first < batch ? n - first : batch) * PAGE;
        if (syscall(SYS_mbind, buf + first * PAGE, len, MPOL_BIND_, mask, 1025ul,
                    MPOL_MF_MOVE_) != 0)
            return cxb_fail(errno, "mbind(MPOL_MF_MOVE) of %zu bytes to node %d", len, node);
    }
    return 0;
}

static int move_pages_range(char *buf, size_t n, int node, size_t batch, uint64_t *unmoved)
{
    void **pages = malloc(n * sizeof *pages);
    int *nodes = malloc(n * sizeof *nodes), *status = malloc(n * sizeof *status);
    int rc = 0;
    if (!pages || !nodes || !status)
        rc = cxb_fail(ENOMEM, "cannot allocate move_pages arrays for %zu pages", n);
    for (size_t i = 0; i < n && rc == 0; i++) {
        pages[i] = buf + i * PAGE;
        nodes[i] = node;
    }
    for (size_t first = 0; first < n && rc == 0; first += batch) {
        size_t len = n - first < batch ? n - first : batch;
        if (syscall(SYS_move_pages, 0, (unsigned long)len, pages + first, nodes + first,
                    status + first, MPOL_MF_MOVE_) < 0)
            rc = cxb_fail(errno, "move_pages of %zu pages to node %d", len, node);
    }
    if (rc == 0) {
        *unmoved = 0;
        for (size_t i = 0; i < n; i++)
            *unmoved += status[i] != node;
    }
    free(pages);
    free(nodes);
    free(status);
    return rc;
}

/* method 0: move_pages, 1: mbind (which reports no per-page status: *unmoved = 0, the
 * caller counts pages with move_pages' query). */
static int move_range(void *buf, size_t bytes, int node, uint64_t batch, int method,
                      uint64_t *unmoved)
{
    size_t n = bytes / PAGE, per = batch ? batch : n;
    *unmoved = 0;
    return method ? mbind_range(buf, n, node, per)
                  : move_pages_range(buf, n, node, per, unmoved);
}

int cxb_mbind_move_kernel(struct cxb_kargs *a)
{
    return move_range(a->buf[0], a->bytes, (int)a->count, a->value, 1, &a->checksum);
}

int cxb_move_pages_kernel(struct cxb_kargs *a)
{
    return move_range(a->buf[0], a->bytes, (int)a->count, a->value, 0, &a->checksum);
}

/* ---- touches during a move ---------------------------------------------------- */

struct touch_state {
    struct cxb_touch_args *a;
    uint64_t t0;            /* the toucher's start: sample times count from here */
    int moving, moved;      /* the mover's flags, seen by the toucher */
    int rc;
};

static int touch_thread(struct touch_state *s)
{
    struct cxb_touch_args *a = s->a;
    volatile uint64_t *base = a->buf;
    size_t pages = a->bytes / PAGE, words = PAGE / 8;
    /* Pages in a scattered order (an odd stride over a power of two, skipping what is past
     * the end), so the toucher does not march in step with the mover. */
    size_t span = 1, step = 0x9E3779B1u, at = 0;
    while (span < pages)
        span <<= 1;
    uint64_t moved_at = 0, n = 0;
    s->t0 = cxb_now_ns();
    __atomic_store_n(&s->moving, 1, __ATOMIC_RELEASE);     /* the toucher is running */
    for (;;) {
        do
            at = (at + step) & (span - 1);
        while (at >= pages);
        volatile uint64_t *w = base + at * words + (at * 7 % words);
        uint64_t before = cxb_now_ns();
        uint64_t v = *w;
        if (a->write)
            *w = v;             /* the same value: a store fault, the data unchanged */
        uint64_t after = cxb_now_ns();
        if (n < a->max_samples) {
            a->samples[2 * n] = before - s->t0;
            a->samples[2 * n + 1] = after - before;
        }
        n++;
        if (!moved_at && __atomic_load_n(&s->moved, __ATOMIC_ACQUIRE))
            moved_at = after;
        if (moved_at && after - moved_at >= a->tail_ns)
            break;
    }
    a->touches = n;
    a->nsamples = n < a->max_samples ? n : a->max_samples;
    return 0;
}

static int mover_thread(struct touch_state *s)
{
    struct cxb_touch_args *a = s->a;
    while (!__atomic_load_n(&s->moving, __ATOMIC_ACQUIRE))
        ;
    while (cxb_now_ns() - s->t0 < a->lead_ns)      /* the toucher's baseline */
        ;
    a->move_start = cxb_now_ns() - s->t0;
    int rc = move_range(a->buf, a->bytes, a->node, a->batch, a->method, &a->unmoved);
    a->move_end = cxb_now_ns() - s->t0;
    __atomic_store_n(&s->moved, 1, __ATOMIC_RELEASE);  /* even on failure: the toucher ends */
    return rc;
}

static int touch_role(void *p, int t)
{
    return t == 0 ? mover_thread(p) : touch_thread(p);
}

int cxb_migrate_touch(struct cxb_touch_args *a)
{
    if (!a || !a->buf || a->bytes < PAGE || (uintptr_t)a->buf % PAGE || !a->samples ||
        a->method < 0 || a->method > 1 || !a->cpus)
        return cxb_fail(EINVAL, "bad migrate-touch arguments (a page-aligned buffer of at "
                        "least one page, a sample array, method 0 or 1, two CPUs)");
    struct touch_state s = {a, 0, 0, 0, 0};
    return cxb_parallel(touch_role, &s, a->cpus, 2);
}
