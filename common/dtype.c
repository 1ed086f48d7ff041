#include "dtype.h"

#include <strings.h>

static const struct {
    const char *name;
    size_t size;
} dtypes[HCCL_DATA_TYPE_RESERVED] = {
    [HCCL_DATA_TYPE_INT8] = {"int8", 1},     [HCCL_DATA_TYPE_INT16] = {"int16", 2},
    [HCCL_DATA_TYPE_INT32] = {"int32", 4},   [HCCL_DATA_TYPE_FP16] = {"half", 2},
    [HCCL_DATA_TYPE_FP32] = {"float", 4},    [HCCL_DATA_TYPE_INT64] = {"int64", 8},
    [HCCL_DATA_TYPE_UINT64] = {"uint64", 8}, [HCCL_DATA_TYPE_UINT8] = {"uint8", 1},
    [HCCL_DATA_TYPE_UINT16] = {"uint16", 2}, [HCCL_DATA_TYPE_UINT32] = {"uint32", 4},
    [HCCL_DATA_TYPE_FP64] = {"double", 8},   [HCCL_DATA_TYPE_BFP16] = {"bfloat16", 2},
};

/* Other spellings people use for the floating-point types (PyTorch, HCCL, MPI habits). */
static const struct {
    const char *name;
    int dt;
} dtype_aliases[] = {
    {"fp16", HCCL_DATA_TYPE_FP16},  {"float16", HCCL_DATA_TYPE_FP16},
    {"fp32", HCCL_DATA_TYPE_FP32},  {"float32", HCCL_DATA_TYPE_FP32},
    {"fp64", HCCL_DATA_TYPE_FP64},  {"float64", HCCL_DATA_TYPE_FP64},
    {"bf16", HCCL_DATA_TYPE_BFP16}, {"bfp16", HCCL_DATA_TYPE_BFP16},
};

static const char *const redops[HCCL_REDUCE_RESERVED] = {
    [HCCL_REDUCE_SUM] = "sum",
    [HCCL_REDUCE_PROD] = "prod",
    [HCCL_REDUCE_MAX] = "max",
    [HCCL_REDUCE_MIN] = "min",
};

int dtype_valid(int dt)
{
    return dt >= 0 && dt < HCCL_DATA_TYPE_RESERVED;
}

int redop_valid(int op)
{
    return op >= 0 && op < HCCL_REDUCE_RESERVED;
}

size_t dtype_size(int dt)
{
    return dtype_valid(dt) ? dtypes[dt].size : 0;
}

const char *dtype_name(int dt)
{
    return dtype_valid(dt) ? dtypes[dt].name : "invalid";
}

int dtype_from_name(const char *s)
{
    if (s == NULL)
        return -1;
    for (int dt = 0; dt < HCCL_DATA_TYPE_RESERVED; dt++)
        if (strcasecmp(s, dtypes[dt].name) == 0)
            return dt;
    for (size_t i = 0; i < sizeof(dtype_aliases) / sizeof(dtype_aliases[0]); i++)
        if (strcasecmp(s, dtype_aliases[i].name) == 0)
            return dtype_aliases[i].dt;
    return -1;
}

const char *redop_name(int op)
{
    return redop_valid(op) ? redops[op] : "invalid";
}

int redop_from_name(const char *s)
{
    if (s == NULL)
        return -1;
    for (int op = 0; op < HCCL_REDUCE_RESERVED; op++)
        if (strcasecmp(s, redops[op]) == 0)
            return op;
    return -1;
}
