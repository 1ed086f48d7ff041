/*
 * The smallest whole program: every rank sums its rank + 1 over 1024 floats and checks the
 * result. Run under a launcher (hccl-run, torchrun, mpirun, Slurm):
 *
 *     make                                  # builds build/examples/allreduce too
 *     build/bin/hccl-run -n 4 -- build/examples/allreduce
 *
 * Built as any program of yours would be, from the source tree:
 *
 *     cc allreduce.c $(PKG_CONFIG_PATH=build/lib/pkgconfig pkg-config --cflags --libs hccl)
 */
#include <hccl/hccl.h>
#include <stdint.h>
#include <stdio.h>

#define COUNT 1024

static int failed(const char *call, HcclResult rc)
{
    fprintf(stderr, "%s: %s\n", call, HcclGetErrorString(rc));
    return 1;
}

int main(void)
{
    static float buf[COUNT];
    HcclComm comm;
    HcclResult rc;
    uint32_t rank, nranks;

    if ((rc = HcclCommInitFromEnv(&comm)) != HCCL_SUCCESS)
        return failed("HcclCommInitFromEnv", rc);
    HcclGetRankId(comm, &rank);
    HcclGetRankSize(comm, &nranks);
    for (int i = 0; i < COUNT; i++)
        buf[i] = (float)(rank + 1);
    rc = HcclAllReduce(buf, buf, COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL);
    if (rc != HCCL_SUCCESS)
        return failed("HcclAllReduce", rc);
    float want = (float)nranks * (float)(nranks + 1) / 2;
    for (int i = 0; i < COUNT; i++)
        if (buf[i] != want) {
            fprintf(stderr, "rank %u: element %d is %g, not %g\n", rank, i, buf[i], want);
            return 1;
        }
    printf("rank %u of %u: allreduce of %d floats: %g, as expected\n", rank, nranks, COUNT, want);
    return HcclCommDestroy(comm) == HCCL_SUCCESS ? 0 : 1;
}
