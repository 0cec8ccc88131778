/* Memory shared by two hosts (one CXL device mapped by both, or in tests two processes on
 * one machine): the hosts meet through a block at the region's start, then hand a flag
 * line back and forth or stream messages through a single-producer single-consumer ring.
 *
 * Across hosts no hardware keeps caches coherent (most devices today), so software does:
 * the writer flushes the lines it wrote (clflush, clflushopt or clwb) and fences; the
 * reader flushes the lines it is about to read, so that its loads go to the device
 * (CXB_XH_FLUSH). Without it (CXB_XH_NONE) a reader may see stale or torn data. Where the
 * hosts are in fact coherent (two processes, or guests of one QEMU host) nothing goes
 * wrong either way; `simulate` makes each host see the ring's messages through a private
 * copy that only the protocol moves (writer: copy out; reader: copy in): the worst a
 * non-coherent device can do to a program that forgets a step. The ring's indices and the
 * meeting block are always read and written on the region itself, with the flushes, as
 * doorbells in an uncached window are. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define XH_MAGIC 0x43584c4253484d31ull      /* "CXLBSHM1" */
#define XH_PAGE 4096
#define XH_SPIN 4096                        /* spins between looks at the clock */

/* The region: page 0 the meeting block, page 1 the flags (host 0's, host 1's) and the
 * atomic counter, page 2 the ring's indices (head, tail), then the ring's slots or a
 * pool's slices. Words two hosts write sit 128 bytes apart: the adjacent-line prefetcher
 * fetches lines in pairs.
 *
 * A meeting's generation is session << 32 | count. Each host's ready word keeps the last
 * meeting it attended or gave up, so both count meetings in step across the processes of
 * one run (a case per worker) without keeping anything themselves: host 0 opens the one
 * after its last, host 1 waits for that same number. A host that fails marks its abort
 * word with that meeting's number, and the other stops waiting. */
#define XH_APART 128
struct apart { uint64_t word, pad[XH_APART / 8 - 1]; };
struct meet_block {
    uint64_t magic, generation, key, pad[XH_APART / 8 - 3];
    struct apart ready[2], start[2], abort[2], phase[2];
};
enum { FLAGS = XH_PAGE, COUNTER = XH_PAGE + 2 * XH_APART, INDICES = 2 * XH_PAGE,
       SLOTS = 3 * XH_PAGE };
#define SESSION(g) ((g) >> 32)
#define COUNT(g) ((g) & 0xffffffffull)

static const char *const flush_names[] = {"clflush", "clflushopt", "clwb"};

#if defined(__x86_64__)
__attribute__((target("clflushopt"))) static void flushopt(void *p) { _mm_clflushopt(p); }
__attribute__((target("clwb"))) static void writeback(void *p) { _mm_clwb(p); }
#endif

/* Lines [p, p + bytes) written back (kind: CXB_FLUSH_*), then a store fence. */
static void publish(const void *p, size_t bytes, int kind)
{
#if defined(__x86_64__)
    const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)(CXB_LINE - 1));
    for (; c < (const char *)p + bytes; c += CXB_LINE) {
        if (kind == CXB_FLUSH_CLFLUSHOPT)
            flushopt((void *)c);
        else if (kind == CXB_FLUSH_CLWB)
            writeback((void *)c);
        else
            _mm_clflush(c);
    }
    _mm_sfence();
#else
    (void)p, (void)bytes, (void)kind;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/* Lines [p, p + bytes) dropped from this host's caches, so the next loads reach memory
 * (clflush: clwb keeps the line, which is what a reader must not). */
static void invalidate(const void *p, size_t bytes)
{
    publish(p, bytes, CXB_FLUSH_CLFLUSH);
#if defined(__x86_64__)
    _mm_mfence();
#endif
}

/* A control word of the region: stored, or loaded, with the flushes that make it cross. */
static void put(volatile uint64_t *w, uint64_t v)
{
    __atomic_store_n(w, v, __ATOMIC_RELEASE);
    publish((const void *)w, 8, CXB_FLUSH_CLFLUSH);
}

static uint64_t get(volatile uint64_t *w, int fresh)
{
    if (fresh)
        invalidate((const void *)w, 8);
    return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

static int check(struct cxb_xh_args *a, size_t need)
{
    if (!a || !a->region || (uintptr_t)a->region % XH_PAGE || a->bytes < need ||
        (a->host != 0 && a->host != 1) || a->timeout_ns == 0)
        return cxb_fail(EINVAL, "bad shared-region arguments (a page-aligned region of at "
                        "least %zu bytes, host 0 or 1, a timeout)", need);
    if (a->protocol != CXB_XH_NONE && a->protocol != CXB_XH_FLUSH)
        return cxb_fail(EINVAL, "protocol %d is neither none nor flush", a->protocol);
    if (a->protocol == CXB_XH_FLUSH &&
        (a->flush < CXB_FLUSH_CLFLUSH || a->flush > CXB_FLUSH_CLWB))
        return cxb_fail(EINVAL, "the protocol's flush must be clflush, clflushopt or clwb");
    if (a->protocol == CXB_XH_FLUSH && !cxb_flush_supported(a->flush))
        return cxb_fail(ENOTSUP, "%s is not supported by this CPU", flush_names[a->flush]);
    return 0;
}

/* The meeting this host is in (after cxb_xh_meet) or goes to next: the one after the
 * last it attended or gave up in this session. Both hosts count alike, in step. */
static uint64_t number(struct cxb_xh_args *a)
{
    if (a->generation)
        return a->generation;
    uint64_t last = get(&((struct meet_block *)a->region)->ready[a->host].word, 1);
    return (SESSION(last) == a->session ? last : (uint64_t)a->session << 32) + 1;
}

/* ECONNABORTED where the other host gave up the meeting this host is in (or goes to):
 * its abort word holds the last meeting of its session it gave up. */
static int given_up(struct cxb_xh_args *a, const char *what)
{
    uint64_t meeting = number(a);
    uint64_t mark = get(&((struct meet_block *)a->region)->abort[1 - a->host].word, 1);
    if (SESSION(mark) != SESSION(meeting) || mark < meeting)
        return 0;
    return cxb_fail(ECONNABORTED, "host %d gave up meeting %llu while host %d waited for %s "
                    "(its error is in its own output)", 1 - a->host,
                    (unsigned long long)COUNT(meeting), a->host, what);
}

/* Waits until *w (read fresh from the region where `fresh`) equals `want`, or is at
 * least it; ETIMEDOUT once the timeout passed without it, ECONNABORTED where the other
 * host gave up this meeting. A wait that ends within XH_SPIN looks at nothing else (the
 * timed loops' waits cost one load each, and no more). */
static int wait_for(struct cxb_xh_args *a, volatile uint64_t *w, uint64_t want, int exact,
                    int fresh, const char *what)
{
    uint64_t since = 0;
    for (unsigned spin = 1;; spin++) {
        uint64_t seen = get(w, fresh);
        if (exact ? seen == want : seen >= want)
            return 0;
        if (spin % XH_SPIN)
            continue;
        int rc = given_up(a, what);
        if (rc)
            return rc;
        /* A host whose other side shares its CPU (two processes of one machine) lets it
         * run; elsewhere this returns at once. */
        sched_yield();
        uint64_t now = cxb_now_ns();
        if (!since)
            since = now;
        else if (now - since > a->timeout_ns)
            return cxb_fail(ETIMEDOUT, "host %d waited %.3g s for %s", a->host,
                            (double)a->timeout_ns / 1e9, what);
    }
}

/* Both hosts at one point (word pair `w`, value v) before either goes on. The values
 * only grow, so a host already at a later point has passed this one. */
static int both_at(struct cxb_xh_args *a, struct apart *w, uint64_t v, const char *what)
{
    put(&w[a->host].word, v);
    return wait_for(a, &w[1 - a->host].word, v, 0, 1, what);
}

/* Both hosts inside C before either reads the clock (the meeting itself ends in Python
 * on each host). */
static int start_together(struct cxb_xh_args *a)
{
    return both_at(a, ((struct meet_block *)a->region)->start, a->generation,
                   "the other host to start");
}

int cxb_xh_together(struct cxb_xh_args *a)
{
    int rc = check(a, SLOTS);
    if (rc)
        return rc;
    if (!a->generation || a->iterations >= 0xfffe)
        return cxb_fail(EINVAL, "together: after a meeting, at a phase below 65534");
    char what[48];
    snprintf(what, sizeof what, "the other host at phase %llu",
             (unsigned long long)a->iterations);
    return both_at(a, ((struct meet_block *)a->region)->phase,
                   COUNT(a->generation) << 16 | a->iterations, what);
}

int cxb_xh_meet(struct cxb_xh_args *a)
{
    int rc = check(a, SLOTS);
    if (rc)
        return rc;
    if (a->session == 0)
        return cxb_fail(EINVAL, "a meeting needs a session (not 0) both hosts name");
    struct meet_block *m = a->region;
    a->generation = 0;
    uint64_t g = number(a);
    if (COUNT(g) == 0)
        return cxb_fail(EOVERFLOW, "session %u has held 2^32 - 1 meetings: start another",
                        a->session);
    int other = 1 - a->host;
    if (a->host == 0) {
        /* Host 0 opens the meeting: the work pages cleared (and, at a session's first,
         * the barriers an earlier session left), then the case, then its number (host 1
         * reads them in that order). */
        if (get(&m->magic, 1) != XH_MAGIC || SESSION(get(&m->generation, 1)) != a->session) {
            memset(m->start, 0, sizeof m->start);
            memset(m->phase, 0, sizeof m->phase);
            publish(m->start, sizeof m->start + sizeof m->abort + sizeof m->phase,
                    CXB_FLUSH_CLFLUSH);
        }
        memset((char *)a->region + FLAGS, 0, SLOTS - FLAGS);
        publish((char *)a->region + FLAGS, SLOTS - FLAGS, CXB_FLUSH_CLFLUSH);
        put(&m->magic, XH_MAGIC);
        put(&m->key, a->key);
        put(&m->generation, g);
    } else {
        /* Host 0 may have given this meeting up before opening it. */
        rc = given_up(a, "host 0 to open the meeting");
        if (!rc && (rc = wait_for(a, &m->generation, g, 1, 1, "host 0 to open the meeting"))
            == -ETIMEDOUT) {
            uint64_t held = get(&m->generation, 1);
            return cxb_fail(ETIMEDOUT, "host 1 waited %.3g s for host 0 to open meeting %llu "
                            "of session %u (the region holds meeting %llu of session %llu: "
                            "do both hosts name the same session?)",
                            (double)a->timeout_ns / 1e9, (unsigned long long)COUNT(g),
                            a->session, (unsigned long long)COUNT(held),
                            (unsigned long long)SESSION(held));
        }
        if (rc)
            return rc;
        if (get(&m->magic, 1) != XH_MAGIC)
            return cxb_fail(EPROTO, "the region's first page is no cxlbench meeting block");
        uint64_t key = get(&m->key, 1);
        if (key != a->key)
            return cxb_fail(EPROTO, "host 0 opened meeting %llu for another case (key "
                            "%016llx, this host's %016llx): run the same suite with the same "
                            "options on both hosts", (unsigned long long)COUNT(g),
                            (unsigned long long)key, (unsigned long long)a->key);
    }
    /* From here a failure leaves a->generation set: the caller gives up this meeting. */
    a->generation = g;
    put(&m->ready[a->host].word, g);
    char what[48];
    snprintf(what, sizeof what, "host %d to arrive", other);
    /* A host that gives up marks its ready word too: arrived, or given up? */
    if ((rc = wait_for(a, &m->ready[other].word, g, 1, 1, what)))
        return rc;
    return given_up(a, what);
}

/* This host gives up `iterations` meetings from the one it is in (a->generation) or
 * goes to next: the rest of a case it leaves. The other host's waits for any of them end
 * at once, and both count them as held, so the next case finds both in step. */
int cxb_xh_abort(struct cxb_xh_args *a)
{
    int rc = check(a, SLOTS);
    if (rc)
        return rc;
    if ((a->session == 0 && a->generation == 0) || a->iterations == 0 ||
        a->iterations >= 0xffffffffull)
        return cxb_fail(EINVAL, "abort: a session or a meeting, and 1 or more meetings");
    struct meet_block *m = a->region;
    uint64_t last = number(a) + a->iterations - 1;
    if (SESSION(last) != SESSION(number(a)))
        return cxb_fail(EOVERFLOW, "abort: past the session's last meeting");
    put(&m->abort[a->host].word, last);
    uint64_t ready = get(&m->ready[a->host].word, 1);
    if (SESSION(ready) != SESSION(last) || ready < last)
        put(&m->ready[a->host].word, last);
    return 0;
}

int cxb_xh_pingpong(struct cxb_xh_args *a)
{
    int rc = check(a, SLOTS);
    if (rc)
        return rc;
    volatile uint64_t *mine = (uint64_t *)((char *)a->region + FLAGS + a->host * XH_APART);
    volatile uint64_t *theirs = (uint64_t *)((char *)a->region + FLAGS +
                                             (1 - a->host) * XH_APART);
    int fenced = a->protocol == CXB_XH_FLUSH;
    /* The flags count from this meeting's generation: a value an earlier meeting left
     * in a host's cache is below every one this meeting waits for. */
    uint64_t base = COUNT(a->generation) << 32;
    if ((rc = start_together(a)))
        return rc;
    uint64_t t0 = cxb_now_ns();
    /* Host 0 stores i and waits for host 1's i; host 1 waits, then answers. Polled
     * fresh with the protocol; without it, as a program that forgot. */
    for (uint64_t i = base + 1; i <= base + a->iterations; i++) {
        if (a->host == 1 && (rc = wait_for(a, theirs, i, 0, fenced, "host 0's flag")))
            return rc;
        __atomic_store_n(mine, i, __ATOMIC_RELEASE);
        if (fenced)
            publish((const void *)mine, 8, a->flush);
        if (a->host == 0 && (rc = wait_for(a, theirs, i, 0, fenced, "host 1's flag")))
            return rc;
    }
    a->ns = cxb_now_ns() - t0;
    return 0;
}

/* A message's words: its sequence number, a pattern of it, and a checksum of the rest. */
static uint64_t pattern(uint64_t seq, size_t w) { return seq * 0x9E3779B97F4A7C15ull ^ w; }

int cxb_xh_ring(struct cxb_xh_args *a)
{
    int rc = check(a, SLOTS);
    if (rc)
        return rc;
    if (a->message < CXB_LINE || a->message % 8)
        return cxb_fail(EINVAL, "a message is at least %d bytes, whole words", CXB_LINE);
    size_t slot = (a->message + CXB_LINE - 1) / CXB_LINE * CXB_LINE;
    uint64_t slots = (a->bytes - SLOTS) / slot;
    if (slots < 2)
        return cxb_fail(EINVAL, "the region holds %llu slots of %zu bytes; the ring needs 2",
                        (unsigned long long)slots, slot);
    volatile uint64_t *head = (uint64_t *)((char *)a->region + INDICES);
    volatile uint64_t *tail = (uint64_t *)((char *)a->region + INDICES + XH_APART);
    char *ring = (char *)a->region + SLOTS;
    /* simulate: this host's private view of the slots; otherwise the region itself. */
    char *view = ring;
    if (a->simulate && !(view = calloc(slots, slot)))
        return cxb_fail(ENOMEM, "cannot allocate a private view of %llu slots",
                        (unsigned long long)slots);
    size_t words = a->message / 8;
    int fenced = a->protocol == CXB_XH_FLUSH;
    /* Sequence numbers count from this meeting's generation: a message an earlier
     * meeting left in a slot (or a cache) is stale, not mistaken for this one's. */
    uint64_t base = COUNT(a->generation) << 32;
    a->stale = a->torn = 0;
    if ((rc = start_together(a))) {
        if (view != ring)
            free(view);
        return rc;
    }
    uint64_t t0 = cxb_now_ns();
    for (uint64_t i = 0; i < a->iterations && rc == 0; i++) {
        size_t off = (size_t)(i % slots) * slot;
        uint64_t *msg = (uint64_t *)(view + off);
        if (a->host == 0) {                          /* the producer */
            if (i >= slots && (rc = wait_for(a, tail, i - slots + 1, 0, 1, "room in the ring")))
                break;
            uint64_t seq = base + i + 1, sum = 0;
            msg[0] = seq;
            for (size_t w = 1; w + 1 < words; w++)
                sum += msg[w] = pattern(seq, w);
            msg[words - 1] = sum ^ seq;
            /* plant: the last line left unpublished, a program's missing flush */
            size_t out = a->plant && a->message > CXB_LINE ? a->message - CXB_LINE : a->message;
            if (a->simulate && fenced)
                memcpy(ring + off, msg, out);
            if (fenced && !a->simulate)
                publish(msg, out, a->flush);
            put(head, i + 1);
        } else {                                     /* the consumer */
            if ((rc = wait_for(a, head, i + 1, 0, 1, "a message")))
                break;
            if (fenced) {
                if (a->simulate)
                    memcpy(msg, ring + off, a->message);
                else
                    invalidate(msg, a->message);
            }
            volatile uint64_t *in = msg;
            uint64_t sum = 0;
            for (size_t w = 1; w + 1 < words; w++)
                sum += in[w];
            if (in[0] != base + i + 1)
                a->stale++;
            else if ((sum ^ (base + i + 1)) != in[words - 1])
                a->torn++;
            put(tail, i + 1);
        }
    }
    /* The producer leaves once every message is read: the consumer's last store to the
     * indices must land before host 0 clears them for the next meeting. */
    if (rc == 0 && a->host == 0)
        rc = wait_for(a, tail, a->iterations, 0, 1, "the last message to be read");
    a->ns = cxb_now_ns() - t0;
    if (view != ring)
        free(view);
    return rc;
}

/* Both hosts add 1 to one counter `iterations` times each (CXB_XHOP_ADD: lock xadd;
 * CXB_XHOP_CAS: a compare-and-swap loop; CXB_XHOP_PLAIN: a load and a store), then meet and
 * read it: 2 x iterations where the device keeps atomics atomic across hosts. With the
 * protocol each operation is bracketed by the reader's flush and the writer's (what a
 * program on a non-coherent device must do, and still no atomicity across hosts). */
int cxb_xh_atomic(struct cxb_xh_args *a)
{
    int rc = check(a, SLOTS);
    if (rc)
        return rc;
    if (a->op < CXB_XHOP_ADD || a->op > CXB_XHOP_PLAIN)
        return cxb_fail(EINVAL, "atomic op %d is not add, cas or plain", a->op);
    volatile uint64_t *counter = (uint64_t *)((char *)a->region + COUNTER);
    int fenced = a->protocol == CXB_XH_FLUSH;
    if ((rc = start_together(a)))
        return rc;
    uint64_t t0 = cxb_now_ns();
    for (uint64_t i = 0; i < a->iterations; i++) {
        if (fenced)
            invalidate((const void *)counter, 8);
        if (a->op == CXB_XHOP_ADD) {
            __atomic_fetch_add(counter, 1, __ATOMIC_SEQ_CST);
        } else if (a->op == CXB_XHOP_CAS) {
            uint64_t v = __atomic_load_n(counter, __ATOMIC_RELAXED);
            while (!__atomic_compare_exchange_n(counter, &v, v + 1, 0, __ATOMIC_SEQ_CST,
                                                __ATOMIC_RELAXED))
                ;
        } else {
            *counter = *counter + 1;
        }
        if (fenced)
            publish((const void *)counter, 8, a->flush);
    }
    a->ns = cxb_now_ns() - t0;
    /* Both done before either reads what the counter came to. */
    struct apart *phase = ((struct meet_block *)a->region)->phase;
    uint64_t at = COUNT(a->generation) << 16;
    if ((rc = both_at(a, phase, at | 0xfffe, "the other host to finish its operations")))
        return rc;
    a->value = get(counter, 1);
    /* ...and both have read it before host 0 may clear the page for the next meeting. */
    return both_at(a, phase, at | 0xffff, "the other host to read the counter");
}
