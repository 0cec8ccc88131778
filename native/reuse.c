/* LRU stack distances, for the tier model's caches: an access hits a fully associative
 * LRU cache of C units exactly when fewer than C distinct units were touched since the
 * last access to its own. One pass with a Fenwick tree over positions that marks each
 * unit's latest access: the distance is the marks between the two accesses. */
#include <errno.h>
#include <stdlib.h>
#include "internal.h"

int cxb_stack_distances(const int64_t *ids, size_t n, size_t nids, int64_t *out)
{
    if (nids == 0 && n > 0)
        return cxb_fail(EINVAL, "access 0 names unit %lld: there are no units",
                        (long long)ids[0]);
    int64_t *last = malloc((nids ? nids : 1) * sizeof *last);
    int32_t *tree = calloc(n + 1, sizeof *tree);    /* 1-based; marks at position + 1 */
    if (!last || !tree) {
        free(last);
        free(tree);
        return cxb_fail(ENOMEM, "stack distances of %zu accesses", n);
    }
    for (size_t u = 0; u < nids; u++)
        last[u] = -1;
    int64_t marked = 0;     /* marks at positions < i: one per distinct unit seen */
    for (size_t i = 0; i < n; i++) {
        int64_t id = ids[i];
        if (id < 0 || (size_t)id >= nids) {
            free(last);
            free(tree);
            return cxb_fail(EINVAL, "access %zu names unit %lld, not within 0..%zu", i,
                            (long long)id, nids - 1);
        }
        int64_t p = last[id];
        if (p < 0) {
            out[i] = -1;
        } else {
            int64_t upto = 0;   /* marks at positions <= p */
            for (size_t k = (size_t)p + 1; k > 0; k -= k & -k)
                upto += tree[k];
            out[i] = marked - upto;
            for (size_t k = (size_t)p + 1; k <= n; k += k & -k)
                tree[k]--;
            marked--;
        }
        for (size_t k = i + 1; k <= n; k += k & -k)
            tree[k]++;
        marked++;
        last[id] = (int64_t)i;
    }
    free(last);
    free(tree);
    return 0;
}
