/* A plain C pointer chase, kept apart from cxlbench as a reference: no cffi, no Python,
 * no shared code. Usage: plain_chase BYTES LOADS REPS [WINDOW [PAGE]]
 * One pointer per 64-byte line, one random cycle: windows of WINDOW bytes (default
 * 256 KiB; 0: the whole buffer) in random order, lines within each window in random
 * order (multichase's TLB locality). PAGE is 4k or thp (default): the buffer is a
 * 2 MiB-aligned mapping, madvised for huge pages or against them. Prints the median ns
 * per load over REPS. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static uint64_t state = 12345;
static uint64_t rnd(void)
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

static void shuffle(size_t *v, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = rnd() % i, t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return fprintf(stderr, "usage: %s BYTES LOADS REPS [WINDOW [4k|thp]]\n", argv[0]), 2;
    size_t bytes = strtoull(argv[1], 0, 0), loads = strtoull(argv[2], 0, 0);
    int reps = atoi(argv[3]);
    size_t group = argc > 4 ? strtoull(argv[4], 0, 0) : 256u << 10;
    int huge = argc <= 5 || strcmp(argv[5], "4k") != 0;
    if (group == 0 || group > bytes)
        group = bytes;
    if (group % 64 || bytes % group)
        return fprintf(stderr, "WINDOW must divide BYTES into whole lines\n"), 2;
    size_t align = 2u << 20;
    char *raw = mmap(0, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return perror("mmap"), 1;
    char *buf = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
    madvise(buf, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    size_t lines = bytes / 64, per = group / 64, groups = lines / per;
    size_t *g = malloc(groups * sizeof *g), *l = malloc(per * sizeof *l);
    size_t *order = malloc(lines * sizeof *order), k = 0;
    for (size_t i = 0; i < groups; i++)
        g[i] = i;
    shuffle(g, groups);
    for (size_t i = 0; i < groups; i++) {
        for (size_t j = 0; j < per; j++)
            l[j] = j;
        shuffle(l, per);
        for (size_t j = 0; j < per; j++)
            order[k++] = g[i] * per + l[j];
    }
    for (size_t i = 0; i < lines; i++)
        *(void **)(buf + order[i] * 64) = buf + order[(i + 1) % lines] * 64;
    void **p = (void **)(buf + order[0] * 64);
    for (size_t i = 0; i < loads; i++)      /* warm-up */
        p = *p;
    double *ns = malloc(reps * sizeof *ns);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        for (size_t i = 0; i < loads; i++)
            p = *p;
        ns[r] = (now() - t0) / loads;
    }
    qsort(ns, reps, sizeof *ns, cmp);
    printf("%.3f %p\n", ns[reps / 2], (void *)p);   /* printing p keeps the loop */
    return 0;
}
