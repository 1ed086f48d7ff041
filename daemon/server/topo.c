/* The node's topology through hwloc (see topo.h). */
#include "server/topo.h"

#include <arpa/inet.h>
#include <hwloc.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

struct topo {
    hwloc_topology_t h;
};

uint64_t topo_host_id(topo_t *t)
{
    char id[64] = "";
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    if (f != NULL) {
        if (fgets(id, sizeof(id), f) == NULL)
            id[0] = '\0';
        fclose(f);
    }
    for (const char *c = id; *c != '\0'; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211ull;
    h &= 0xffffffffffffull;
    if (t != NULL) {
        hwloc_bitmap_t set = hwloc_bitmap_alloc();
        if (set != NULL && hwloc_get_cpubind(t->h, set, HWLOC_CPUBIND_PROCESS) == 0 &&
            hwloc_bitmap_weight(set) > 0)
            cores = hwloc_bitmap_weight(set);
        hwloc_bitmap_free(set);
    }
    if (cores < 1)
        cores = 1;
    return (h ? h : 1) << 16 | (uint64_t)(cores > 0xffff ? 0xffff : cores);
}

topo_t *topo_load(void)
{
    topo_t *t = calloc(1, sizeof(*t));

    if (t == NULL)
        return NULL;
    if (hwloc_topology_init(&t->h) != 0) {
        free(t);
        return NULL;
    }
    /* NICs and RDMA devices are I/O objects, filtered out by default. */
    hwloc_topology_set_io_types_filter(t->h, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    /* NICs and RDMA devices are what matters here; GPU and display probing (OpenGL through
     * X11, OpenCL, CUDA, ...) only costs start-up time. PCI devices come from sysfs through
     * hwloc's Linux backend; its libpciaccess plugin would find the same and leave
     * allocations behind when hwloc unloads it at exit. */
    for (const char *const *g = (const char *const[]){"gl", "opencl", "cuda", "nvml", "rsmi",
                                                      "levelzero", "pci", NULL};
         *g != NULL; g++)
        hwloc_topology_set_components(t->h, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, *g);
    if (hwloc_topology_load(t->h) != 0) {
        ERR("INIT", "hwloc could not load the topology");
        hwloc_topology_destroy(t->h);
        free(t);
        return NULL;
    }
    return t;
}

void topo_free(topo_t *t)
{
    if (t == NULL)
        return;
    hwloc_topology_destroy(t->h);
    free(t);
}

/* The first non-I/O ancestor's cpuset, or NULL when it is the whole machine (no locality). */
static hwloc_const_cpuset_t locality(topo_t *t, hwloc_obj_t dev)
{
    hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(t->h, dev);

    if (a == NULL || a->cpuset == NULL || a->type == HWLOC_OBJ_MACHINE)
        return NULL;
    return a->cpuset;
}

static hwloc_obj_t osdev_named(topo_t *t, const char *name)
{
    for (hwloc_obj_t o = hwloc_get_next_osdev(t->h, NULL); o != NULL;
         o = hwloc_get_next_osdev(t->h, o))
        if (o->name != NULL && strcmp(o->name, name) == 0)
            return o;
    return NULL;
}

/* The interface that holds IPv4 address ip, or 0. */
static int iface_of(const char *ip, char *out, size_t cap)
{
    struct ifaddrs *ifs;
    char a[INET_ADDRSTRLEN];
    int found = 0;

    if (getifaddrs(&ifs) != 0)
        return 0;
    for (struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next) {
        if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
            continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, a, sizeof(a));
        if (strcmp(a, ip) == 0) {
            snprintf(out, cap, "%s", i->ifa_name);
            found = 1;
        }
    }
    freeifaddrs(ifs);
    return found;
}

int topo_pin_near(topo_t *t, const char *ip, char *nic_out, size_t nic_cap, char *out, size_t cap)
{
    hwloc_obj_t dev;
    hwloc_const_cpuset_t near;

    out[0] = nic_out[0] = '\0';
    if (t == NULL || !iface_of(ip, nic_out, nic_cap))
        return 1;
    if ((dev = osdev_named(t, nic_out)) == NULL || (near = locality(t, dev)) == NULL) {
        INFO("INIT", "%s: hwloc knows no locality for it; threads are not pinned", nic_out);
        return 1;
    }
    hwloc_bitmap_list_snprintf(out, cap, near);
    if (hwloc_set_cpubind(t->h, near, HWLOC_CPUBIND_PROCESS) != 0) {
        WARN("INIT", "pinning to cores %s near %s failed", out, nic_out);
        out[0] = '\0';
        return -1;
    }
    INFO("INIT", "threads pinned to cores %s, near %s", out, nic_out);
    return 0;
}

static char *list_of(hwloc_const_bitmap_t b)
{
    char *s = NULL;

    if (b == NULL || hwloc_bitmap_list_asprintf(&s, b) < 0)
        return strdup("");
    return s;
}

int topo_describe(topo_t *t, Hccld__TopologyResp *r)
{
    size_t n = 0, cap = 0;

    if (t == NULL)
        return -1;
    r->packages = (uint32_t)hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PACKAGE);
    r->numa_nodes = (uint32_t)hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_NUMANODE);
    r->cores = (uint32_t)hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_CORE);
    r->pus = (uint32_t)hwloc_get_nbobjs_by_type(t->h, HWLOC_OBJ_PU);
    for (hwloc_obj_t o = hwloc_get_next_osdev(t->h, NULL); o != NULL;
         o = hwloc_get_next_osdev(t->h, o))
        if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
            o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS)
            cap++;
    r->devices = calloc(cap + 1, sizeof(*r->devices));
    if (r->devices == NULL)
        return -1;
    for (hwloc_obj_t o = hwloc_get_next_osdev(t->h, NULL); o != NULL && n < cap;
         o = hwloc_get_next_osdev(t->h, o)) {
        if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK &&
            o->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS)
            continue;
        Hccld__TopoDevice *d = calloc(1, sizeof(*d));
        if (d == NULL)
            break;
        hccld__topo_device__init(d);
        hwloc_const_cpuset_t near = locality(t, o);
        hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(t->h, o);
        d->name = strdup(o->name ? o->name : "");
        d->kind = o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ? "net" : "rdma";
        d->cpuset = near != NULL ? list_of(near) : strdup("");
        d->nodeset = near != NULL && a != NULL ? list_of(a->nodeset) : strdup("");
        r->devices[n++] = d;
    }
    r->n_devices = n;
    return 0;
}

void topo_resp_free(Hccld__TopologyResp *r)
{
    for (size_t i = 0; i < r->n_devices; i++) {
        free(r->devices[i]->name);
        free(r->devices[i]->cpuset);
        free(r->devices[i]->nodeset);
        free(r->devices[i]);
    }
    free(r->devices);
    r->devices = NULL;
    r->n_devices = 0;
}
