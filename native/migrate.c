/* Page migration of every 4 KiB page of a range to node `count`, in batches of `value`
 * pages (0: one batch), by move_pages(2) or by mbind(2) with MPOL_MF_MOVE. The checksum
 * output counts the pages that did not land there (move_pages' per-page status). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "internal.h"

#define MPOL_MF_MOVE_ (1 << 1)
#define MPOL_BIND_ 2

int cxb_mbind_move_kernel(struct cxb_kargs *a)
{
    size_t n = a->bytes / 4096, batch = a->value ? a->value : n;
    unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {0};
    if (a->count >= 1024)
        return cxb_fail(EINVAL, "node %llu is out of range", (unsigned long long)a->count);
    mask[a->count / (8 * sizeof(unsigned long))] |= 1ul << (a->count % (8 * sizeof(unsigned long)));
    for (size_t first = 0; first < n; first += batch) {
        size_t len = (n - first < batch ? n - first : batch) * 4096;
        if (syscall(SYS_mbind, (char *)a->buf[0] + first * 4096, len, MPOL_BIND_, mask,
                    1025ul, MPOL_MF_MOVE_) != 0)
            return cxb_fail(errno, "mbind(MPOL_MF_MOVE) of %zu bytes to node %d", len,
                            (int)a->count);
    }
    a->checksum = 0;        /* the caller counts pages with move_pages' query */
    return 0;
}

int cxb_move_pages_kernel(struct cxb_kargs *a)
{
    size_t n = a->bytes / 4096, batch = a->value ? a->value : n;
    void **pages = malloc(n * sizeof *pages);
    int *nodes = malloc(n * sizeof *nodes), *status = malloc(n * sizeof *status);
    if (!pages || !nodes || !status) {
        free(pages);
        free(nodes);
        free(status);
        return cxb_fail(ENOMEM, "cannot allocate move_pages arrays for %zu pages", n);
    }
    for (size_t i = 0; i < n; i++) {
        pages[i] = (char *)a->buf[0] + i * 4096;
        nodes[i] = (int)a->count;
    }
    int rc = 0;
    for (size_t first = 0; first < n && rc == 0; first += batch) {
        size_t len = n - first < batch ? n - first : batch;
        if (syscall(SYS_move_pages, 0, (unsigned long)len, pages + first, nodes + first,
                    status + first, MPOL_MF_MOVE_) < 0)
            rc = cxb_fail(errno, "move_pages of %zu pages to node %d", len, (int)a->count);
    }
    uint64_t unmoved = 0;
    for (size_t i = 0; i < n; i++)
        unmoved += status[i] != (int)a->count;
    a->checksum = unmoved;
    free(pages);
    free(nodes);
    free(status);
    return rc;
}
