/* Registered buffers (reg.h): whole pages of ordinary memory moved into the arena in place. */
#include "reg.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"

#define REG_MAGIC 0x68726567u /* "hreg" */

struct hc_reg {
    uint32_t magic;
    unsigned refs;
    int stale_logged;
    hc_comm_t *comm;
    uintptr_t lo, hi; /* the aliased pages; lo == hi: none (nothing to gain or in the arena) */
    uint64_t off;     /* arena offset of lo */
    hc_reg_t *next;
};

static uintptr_t page_size(void)
{
    static uintptr_t ps;

    if (ps == 0)
        ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    return ps;
}

/* A registration whose pages were unmapped and mapped again behind our back (the buffer freed
 * before HcclCommDeregister) no longer shows the arena's bytes: compare what the op would read
 * through both mappings. Best effort: equal bytes cannot tell. */
static int reg_intact(const hc_client_t *c, hc_reg_t *r, uintptr_t p, uint64_t len)
{
    uint64_t n = len == 0 ? 1 : len < 8 ? len : 8;

    if (memcmp((const void *)p, c->arena + r->off + (p - r->lo), n) == 0)
        return 1;
    if (!r->stale_logged) {
        r->stale_logged = 1;
        WARN("COLL",
             "the registered buffer at %p no longer holds the registered pages (was it freed "
             "before HcclCommDeregister?): it is staged again",
             (void *)r->lo);
    }
    return 0;
}

int hc_mem_off(hc_client_t *c, const void *p, uint64_t len, uint64_t *off_p)
{
    uintptr_t q = (uintptr_t)p;
    int found = 0;

    if (hc_in_arena(c, p, len, off_p))
        return 1;
    if (__atomic_load_n(&c->regs, __ATOMIC_ACQUIRE) == NULL)
        return 0;
    pthread_mutex_lock(&c->reg_lock);
    for (hc_reg_t *r = c->regs; r != NULL && !found; r = r->next) {
        if (r->lo == r->hi || q < r->lo || q >= r->hi || len > r->hi - q)
            continue;
        if (r->stale_logged || !reg_intact(c, r, q, len))
            break;
        *off_p = r->off + (q - r->lo);
        found = 1;
    }
    pthread_mutex_unlock(&c->reg_lock);
    return found;
}

/*
 * Whether every page of [lo, hi) is private anonymous read-write memory (what malloc, new and
 * anonymous mmap give), per /proc/self/maps: only that may be replaced by shared pages without
 * changing what the program sees. On failure *why names what was found.
 */
static int pages_private_anon(uintptr_t lo, uintptr_t hi, char *why, size_t cap)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    uintptr_t at = lo;

    snprintf(why, cap, "not mapped");
    if (f == NULL) {
        snprintf(why, cap, "/proc/self/maps: %s", strerror(errno));
        return 0;
    }
    while (at < hi && fgets(line, sizeof(line), f) != NULL) {
        uintptr_t s, e;
        char perms[8], path[256] = "";
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %*s %*s %*s %255[^\n]", &s, &e, perms,
                   path) < 3 ||
            e <= at)
            continue;
        if (s > at)
            break; /* a hole */
        const char *name = path + strspn(path, " ");
        if (strcmp(perms, "rw-p") != 0 || (name[0] != '\0' && strcmp(name, "[heap]") != 0)) {
            snprintf(why, cap, "%s %s", perms, name[0] ? name : "(anonymous)");
            fclose(f);
            return 0;
        }
        at = e;
    }
    fclose(f);
    return at >= hi;
}

/* Whether [r->lo, r->hi) is still the arena's block at r->off (the buffer was not unmapped). */
static int alias_mapped(const hc_client_t *c, const hc_reg_t *r)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long arena_ino = 0, ino;
    uintptr_t s, e;
    uint64_t off;
    int ok = 0;

    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %*s %" SCNx64 " %*s %lu", &s, &e, &off, &ino) ==
                4 &&
            s == (uintptr_t)c->arena) {
            arena_ino = ino;
            break;
        }
    rewind(f);
    while (arena_ino != 0 && !ok && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %*s %" SCNx64 " %*s %lu", &s, &e, &off, &ino) ==
            4)
            ok = ino == arena_ino && s <= r->lo && r->hi <= e && off + (r->lo - s) == r->off;
    fclose(f);
    return ok;
}

static hc_reg_t **reg_find(hc_client_t *c, const hc_reg_t *r)
{
    for (hc_reg_t **pp = &c->regs; *pp != NULL; pp = &(*pp)->next)
        if (*pp == r)
            return pp;
    return NULL;
}

/* Moves [lo, hi) into a new arena block; the caller holds reg_lock. */
static HcclResult alias_make(hc_client_t *c, hc_reg_t *r)
{
    uint64_t len = r->hi - r->lo;
    char why[300];

    if (!pages_private_anon(r->lo, r->hi, why, sizeof(why))) {
        ERR("COLL",
            "HcclCommRegister: [%p, %p) is not private anonymous read-write memory (%s); only "
            "malloc'ed, new'ed or anonymously mapped memory can be registered",
            (void *)r->lo, (void *)r->hi, why);
        return HCCL_E_PARA;
    }
    r->off = hc_arena_alloc(&c->alloc, len);
    if (r->off == UINT64_MAX) {
        ERR("COLL",
            "HcclCommRegister: no room for %" PRIu64 " bytes in the arena (HCCL_BUFFSIZE is the "
            "arena's size in MB)",
            len);
        return HCCL_E_MEMORY;
    }
    memcpy(c->arena + r->off, (const void *)r->lo, len);
    /* Old size 0 on a shared mapping: a second mapping of the same pages, put over the
     * caller's (which MREMAP_FIXED unmaps in the same step). */
    if (mremap(c->arena + r->off, 0, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)r->lo) ==
        MAP_FAILED) {
        ERR("COLL", "HcclCommRegister: mremap() of %" PRIu64 " bytes at %p failed: %s", len,
            (void *)r->lo, strerror(errno));
        hc_arena_free(&c->alloc, r->off);
        return HCCL_E_MEMORY;
    }
    return HCCL_SUCCESS;
}

/* Puts private pages holding the arena block's bytes back at [lo, hi), if the block is still
 * mapped there; frees the block unless that failed. */
static void alias_undo(hc_client_t *c, hc_reg_t *r)
{
    uint64_t len = r->hi - r->lo;
    void *tmp;

    if (r->lo == r->hi)
        return;
    if (!alias_mapped(c, r)) {
        WARN("COLL",
             "HcclCommDeregister: the buffer at %p was unmapped before it was deregistered; "
             "nothing to restore",
             (void *)r->lo);
    } else if ((tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                           0)) == MAP_FAILED) {
        ERR("COLL", "HcclCommDeregister: mmap() of %" PRIu64 " bytes failed: %s", len,
            strerror(errno));
        return; /* the pages stay shared, and valid */
    } else {
        memcpy(tmp, c->arena + r->off, len);
        if (mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)r->lo) == MAP_FAILED) {
            ERR("COLL", "HcclCommDeregister: mremap() back to %p failed: %s", (void *)r->lo,
                strerror(errno));
            munmap(tmp, len);
            return;
        }
    }
    hc_arena_free(&c->alloc, r->off);
}

HcclResult hc_reg_add(hc_comm_t *comm, void *buf, uint64_t len, void **handle_p)
{
    hc_client_t *c = comm->c;
    uintptr_t ps = page_size(), b = (uintptr_t)buf, lo, hi;
    uint64_t off;
    hc_reg_t *r;
    HcclResult rc = HCCL_SUCCESS;

    if (buf == NULL || handle_p == NULL)
        return HCCL_E_PTR;
    if (len == 0 || len > UINTPTR_MAX - b)
        return HCCL_E_PARA;
    lo = (b + ps - 1) / ps * ps;
    hi = (b + len) / ps * ps;
    /* Arena memory needs nothing, and a buffer without a whole page gains nothing. */
    if (hi <= lo || hc_in_arena(c, buf, len, &off))
        lo = hi = 0;
    pthread_mutex_lock(&c->reg_lock);
    for (r = c->regs; r != NULL; r = r->next) {
        if (r->comm == comm && r->lo == lo && r->hi == hi && lo != hi) {
            r->refs++; /* the same pages again: the same registration */
            *handle_p = r;
            pthread_mutex_unlock(&c->reg_lock);
            return HCCL_SUCCESS;
        }
        if (lo < r->hi && r->lo < hi) {
            ERR("COLL",
                "HcclCommRegister: the pages of [%p, %p) overlap a buffer registered before "
                "([%p, %p))",
                buf, (void *)(b + len), (void *)r->lo, (void *)r->hi);
            pthread_mutex_unlock(&c->reg_lock);
            return HCCL_E_PARA;
        }
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        pthread_mutex_unlock(&c->reg_lock);
        return HCCL_E_MEMORY;
    }
    *r = (hc_reg_t){.magic = REG_MAGIC, .refs = 1, .comm = comm, .lo = lo, .hi = hi};
    if (lo != hi)
        rc = alias_make(c, r);
    if (rc == HCCL_SUCCESS) {
        r->next = c->regs;
        __atomic_store_n(&c->regs, r, __ATOMIC_RELEASE);
        *handle_p = r;
        if (lo != hi)
            INFO("COLL", "registered [%p, %p): %" PRIu64 " bytes in the arena at %" PRIu64,
                 (void *)lo, (void *)hi, (uint64_t)(hi - lo), r->off);
    } else {
        free(r);
    }
    pthread_mutex_unlock(&c->reg_lock);
    return rc;
}

static void reg_unlink_free(hc_client_t *c, hc_reg_t **pp)
{
    hc_reg_t *r = *pp;

    alias_undo(c, r);
    *pp = r->next;
    r->magic = 0;
    free(r);
}

HcclResult hc_reg_remove(hc_comm_t *comm, void *handle)
{
    hc_client_t *c = comm->c;
    hc_reg_t **pp;
    HcclResult rc = HCCL_SUCCESS;

    if (handle == NULL)
        return HCCL_E_PTR;
    pthread_mutex_lock(&c->reg_lock);
    pp = reg_find(c, handle);
    if (pp == NULL || (*pp)->magic != REG_MAGIC || (*pp)->comm != comm) {
        ERR("COLL", "HcclCommDeregister: %p is not a handle registered with this comm", handle);
        rc = HCCL_E_PARA;
    } else if (--(*pp)->refs == 0) {
        reg_unlink_free(c, pp);
    }
    pthread_mutex_unlock(&c->reg_lock);
    return rc;
}

void hc_reg_drop_comm(hc_comm_t *comm)
{
    hc_client_t *c = comm->c;

    pthread_mutex_lock(&c->reg_lock);
    for (hc_reg_t **pp = &c->regs; *pp != NULL;) {
        if ((*pp)->comm == comm)
            reg_unlink_free(c, pp);
        else
            pp = &(*pp)->next;
    }
    pthread_mutex_unlock(&c->reg_lock);
}
