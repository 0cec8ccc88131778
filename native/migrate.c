/* Page migration: move_pages(2) of every 4 KiB page of a range to one node, timed as one
 * call. The checksum output counts the pages that did not land there. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "internal.h"

#define MPOL_MF_MOVE_ (1 << 1)

int cxb_move_pages_kernel(struct cxb_kargs *a)
{
    size_t n = a->bytes / 4096;
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
    if (syscall(SYS_move_pages, 0, (unsigned long)n, pages, nodes, status, MPOL_MF_MOVE_) < 0)
        rc = cxb_fail(errno, "move_pages of %zu pages to node %d", n, (int)a->count);
    uint64_t unmoved = 0;
    for (size_t i = 0; i < n; i++)
        unmoved += status[i] != (int)a->count;
    a->checksum = unmoved;
    free(pages);
    free(nodes);
    free(status);
    return rc;
}
