/* Which instruction sets run here, thread pinning, and the pinned-thread barrier start. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include "internal.h"

int cxb_isa_compiled(int isa)
{
#if defined(__x86_64__)
    return isa >= 0 && isa < CXB_ISA_COUNT;
#else
    return isa == CXB_ISA_SCALAR;
#endif
}

int cxb_isa_supported(int isa)
{
    if (!cxb_isa_compiled(isa))
        return 0;
#if defined(__x86_64__)
    /* __builtin_cpu_supports also checks that the OS saves the wide registers (xgetbv). */
    __builtin_cpu_init();
    switch (isa) {
    case CXB_ISA_AVX2:
        return __builtin_cpu_supports("avx2") != 0;
    case CXB_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") != 0;
    }
#endif
    return isa == CXB_ISA_SCALAR;
}

/* A set sized for `cpu` rather than cpu_set_t's fixed CPU_SETSIZE (1024), so CPUs of any
 * number pin (machines with more than 1024 CPUs exist). */
int cxb_pin_self(int cpu)
{
    if (cpu < 0)
        return cxb_fail(EINVAL, "CPU %d is out of range", cpu);
    cpu_set_t *set = CPU_ALLOC(cpu + 1);
    if (!set)
        return cxb_fail(ENOMEM, "cannot allocate a CPU set for CPU %d", cpu);
    size_t size = CPU_ALLOC_SIZE(cpu + 1);
    CPU_ZERO_S(size, set);
    CPU_SET_S(cpu, size, set);
    int rc = pthread_setaffinity_np(pthread_self(), size, set);
    CPU_FREE(set);
    if (rc)
        return cxb_fail(rc, "cannot pin a thread to CPU %d", cpu);
    return 0;
}

struct team {
    cxb_thread_fn fn;
    void *arg;
    int ready;              /* threads pinned and waiting */
    int go;                 /* 1: run, -1: give up (a thread could not be started) */
};

struct worker {
    pthread_t tid;
    int index;
    int cpu;                /* -1: not pinned */
    int status;
    char error[512];
    struct team *team;
};

static void *worker_main(void *p)
{
    struct worker *w = p;
    int rc = w->cpu >= 0 ? cxb_pin_self(w->cpu) : 0;
    /* Spin at the start line so all threads leave within a few cycles of each other. */
    __atomic_add_fetch(&w->team->ready, 1, __ATOMIC_ACQ_REL);
    int go;
    while ((go = __atomic_load_n(&w->team->go, __ATOMIC_ACQUIRE)) == 0)
        sched_yield();
    if (rc == 0 && go > 0)
        rc = w->team->fn(w->team->arg, w->index);
    w->status = rc;
    if (rc) {
        const char *msg = cxb_last_error();
        size_t i = 0;
        for (; msg[i] && i + 1 < sizeof w->error; i++)
            w->error[i] = msg[i];
        w->error[i] = 0;
    }
    return NULL;
}

int cxb_parallel(cxb_thread_fn fn, void *arg, const int *cpus, int n)
{
    if (n < 1)
        return cxb_fail(EINVAL, "need at least one thread, got %d", n);
    struct team team = {fn, arg, 0, 0};
    struct worker *ws = calloc((size_t)n, sizeof *ws);
    if (!ws)
        return cxb_fail(ENOMEM, "cannot allocate %d thread records", n);
    int started = 0, rc = 0;
    for (; started < n; started++) {
        struct worker *w = &ws[started];
        w->index = started;
        w->cpu = cpus ? cpus[started] : -1;
        w->team = &team;
        rc = pthread_create(&w->tid, NULL, worker_main, w);
        if (rc)
            break;
    }
    if (started == n)
        while (__atomic_load_n(&team.ready, __ATOMIC_ACQUIRE) < n)
            sched_yield();
    __atomic_store_n(&team.go, started == n ? 1 : -1, __ATOMIC_RELEASE);
    int status = 0, failed = -1;
    for (int i = 0; i < started; i++) {
        pthread_join(ws[i].tid, NULL);
        if (ws[i].status && failed < 0) {
            failed = i;
            status = ws[i].status;
        }
    }
    if (started < n)
        status = cxb_fail(rc, "cannot start thread %d of %d", started, n);
    else if (failed >= 0)
        cxb_fail(0, "thread %d: %s", failed, ws[failed].error);
    free(ws);
    return status;
}
