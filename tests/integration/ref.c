#include "ref.h"

#include <string.h>

#include "dtype.h"
#include "half.h"

static int is_unsigned(int dt)
{
    return dt == HCCL_DATA_TYPE_UINT8 || dt == HCCL_DATA_TYPE_UINT16 ||
           dt == HCCL_DATA_TYPE_UINT32 || dt == HCCL_DATA_TYPE_UINT64;
}

int64_t ref_val(int dt, int op, uint32_t r, uint64_t k)
{
    uint64_t h = (uint64_t)r * 3 + k * 7 + k / 5;

    if (op == HCCL_REDUCE_PROD)
        return 1 + (int64_t)(h % 3);
    return is_unsigned(dt) ? (int64_t)(h % 9) : (int64_t)(h % 9) - 4;
}

int64_t ref_reduce(int op, int64_t a, int64_t b)
{
    switch (op) {
    case HCCL_REDUCE_SUM: return a + b;
    case HCCL_REDUCE_PROD: return a * b;
    case HCCL_REDUCE_MAX: return a > b ? a : b;
    default: return a < b ? a : b;
    }
}

int64_t ref_reduced(int dt, int op, uint32_t n, uint64_t k)
{
    int64_t acc = ref_val(dt, op, 0, k);

    for (uint32_t r = 1; r < n; r++)
        acc = ref_reduce(op, acc, ref_val(dt, op, r, k));
    return acc;
}

void ref_store(int dt, void *buf, uint64_t i, int64_t v)
{
    switch (dt) {
    case HCCL_DATA_TYPE_INT8:
    case HCCL_DATA_TYPE_UINT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case HCCL_DATA_TYPE_INT16:
    case HCCL_DATA_TYPE_UINT16: ((int16_t *)buf)[i] = (int16_t)v; break;
    case HCCL_DATA_TYPE_INT32:
    case HCCL_DATA_TYPE_UINT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case HCCL_DATA_TYPE_INT64:
    case HCCL_DATA_TYPE_UINT64: ((int64_t *)buf)[i] = v; break;
    case HCCL_DATA_TYPE_FP16: ((uint16_t *)buf)[i] = float_to_fp16((float)v); break;
    case HCCL_DATA_TYPE_BFP16: ((uint16_t *)buf)[i] = float_to_bf16((float)v); break;
    case HCCL_DATA_TYPE_FP32: ((float *)buf)[i] = (float)v; break;
    case HCCL_DATA_TYPE_FP64: ((double *)buf)[i] = (double)v; break;
    default: break;
    }
}

void ref_fill(int dt, int op, uint32_t r, void *buf, uint64_t first, uint64_t count)
{
    for (uint64_t i = 0; i < count; i++)
        ref_store(dt, buf, i, ref_val(dt, op, r, first + i));
}

int ref_equal(int dt, const void *buf, uint64_t i, int64_t v)
{
    uint8_t want[8];
    size_t es = dtype_size(dt);

    ref_store(dt, want, 0, v);
    return memcmp((const uint8_t *)buf + i * es, want, es) == 0;
}
