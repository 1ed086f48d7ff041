/*
 * The element types and reduction operators of the HCCL API: sizes, names and validation.
 * Names follow nccl-tests ("float", "half", "bfloat16", ...) so that benchmark output and
 * command lines look the same as NCCL's.
 */
#ifndef HCCLD_COMMON_DTYPE_H
#define HCCLD_COMMON_DTYPE_H

#include <stddef.h>

#include "hccl/hccl.h"

/* Bytes per element of dt, or 0 if dt is not a valid HcclDataType. */
size_t dtype_size(int dt);
/* The nccl-tests name of dt ("int8", ..., "bfloat16"), or "invalid". */
const char *dtype_name(int dt);
/* The HcclDataType named s (case-insensitive; also fp16, fp32, fp64, bf16, bfp16, float16,
 * float32, float64), or -1 if s is NULL or unknown. */
int dtype_from_name(const char *s);
/* "sum", "prod", "max", "min", or "invalid". */
const char *redop_name(int op);
/* The HcclReduceOp named s (case-insensitive), or -1 if s is NULL or unknown. */
int redop_from_name(const char *s);
/* 1 if dt (op) is a valid HcclDataType (HcclReduceOp), else 0. */
int dtype_valid(int dt);
int redop_valid(int op);

#endif
