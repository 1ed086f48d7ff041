#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"

static uint64_t align_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

void shm_layout_make(uint64_t arena_bytes, uint32_t sq_entries, uint32_t cq_entries,
                     shm_layout_t *layout_p)
{
    shm_layout_t l;

    l.sq_entries = sq_entries;
    l.cq_entries = cq_entries;
    l.sq_off = SHM_PAGE;
    l.cq_off =
        align_up(l.sq_off + sizeof(ring_hdr_t) + (uint64_t)sq_entries * sizeof(desc_t), SHM_PAGE);
    l.seg_bytes =
        align_up(l.cq_off + sizeof(ring_hdr_t) + (uint64_t)cq_entries * sizeof(cqe_t), SHM_PAGE);
    l.arena_bytes = align_up(arena_bytes, SHM_PAGE);
    *layout_p = l;
}

/* Creates a sealed memfd of bytes (the client can neither shrink it under the daemon nor grow
 * it) and maps it. Returns the fd, or -errno. */
int shm_memfd_map(const char *name, uint64_t bytes, void **base_p)
{
    int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING), err;
    void *base;

    if (fd < 0) {
        ERR("IPC", "memfd_create() failed: %s", strerror(errno));
        return -errno;
    }
    if (ftruncate(fd, (off_t)bytes) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        err = -errno;
        ERR("IPC", "ftruncate()/F_ADD_SEALS on a %s memfd failed: %s", name, strerror(errno));
        close(fd);
        return err;
    }
    base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        err = -errno;
        ERR("IPC", "mmap() of %llu bytes failed: %s", (unsigned long long)bytes, strerror(errno));
        close(fd);
        return err;
    }
    *base_p = base;
    return fd;
}
