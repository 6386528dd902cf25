/* dtype.c — the dtype table: torch names, aliases, item sizes, and the storage class names
 * of torch.save's typed storages (`FloatStorage` ...). */
#include "tensor/dtype.h"

#include <string.h>

static const struct {
    ckpt_dtype dt;
    const char *name;
    size_t size;
    const char *storage; /* typed-storage class of _rebuild_tensor_v2, NULL if only v3 */
} dtype_table[] = {
    {CKPT_DTYPE_FLOAT64, "float64", 8, "DoubleStorage"},
    {CKPT_DTYPE_FLOAT32, "float32", 4, "FloatStorage"},
    {CKPT_DTYPE_FLOAT16, "float16", 2, "HalfStorage"},
    {CKPT_DTYPE_BFLOAT16, "bfloat16", 2, "BFloat16Storage"},
    {CKPT_DTYPE_FLOAT8_E4M3FN, "float8_e4m3fn", 1, "Float8_e4m3fnStorage"},
    {CKPT_DTYPE_FLOAT8_E5M2, "float8_e5m2", 1, "Float8_e5m2Storage"},
    {CKPT_DTYPE_FLOAT8_E4M3FNUZ, "float8_e4m3fnuz", 1, "Float8_e4m3fnuzStorage"},
    {CKPT_DTYPE_FLOAT8_E5M2FNUZ, "float8_e5m2fnuz", 1, "Float8_e5m2fnuzStorage"},
    {CKPT_DTYPE_FLOAT8_E8M0FNU, "float8_e8m0fnu", 1, "Float8_e8m0fnuStorage"},
    {CKPT_DTYPE_INT8, "int8", 1, "CharStorage"},
    {CKPT_DTYPE_INT16, "int16", 2, "ShortStorage"},
    {CKPT_DTYPE_INT32, "int32", 4, "IntStorage"},
    {CKPT_DTYPE_INT64, "int64", 8, "LongStorage"},
    {CKPT_DTYPE_UINT8, "uint8", 1, "ByteStorage"},
    {CKPT_DTYPE_UINT16, "uint16", 2, "UInt16Storage"},
    {CKPT_DTYPE_UINT32, "uint32", 4, "UInt32Storage"},
    {CKPT_DTYPE_UINT64, "uint64", 8, "UInt64Storage"},
    {CKPT_DTYPE_BOOL, "bool", 1, "BoolStorage"},
    {CKPT_DTYPE_COMPLEX64, "complex64", 8, "ComplexFloatStorage"},
    {CKPT_DTYPE_COMPLEX128, "complex128", 16, "ComplexDoubleStorage"},
};

static const struct {
    const char *alias;
    ckpt_dtype dt;
} dtype_aliases[] = {
    {"double", CKPT_DTYPE_FLOAT64},    {"float", CKPT_DTYPE_FLOAT32},
    {"half", CKPT_DTYPE_FLOAT16},      {"bf16", CKPT_DTYPE_BFLOAT16},
    {"fp16", CKPT_DTYPE_FLOAT16},      {"fp32", CKPT_DTYPE_FLOAT32},
    {"fp64", CKPT_DTYPE_FLOAT64},      {"short", CKPT_DTYPE_INT16},
    {"int", CKPT_DTYPE_INT32},         {"long", CKPT_DTYPE_INT64},
    {"cfloat", CKPT_DTYPE_COMPLEX64},  {"cdouble", CKPT_DTYPE_COMPLEX128},
    {"complex32", CKPT_DTYPE_INVALID},
};

#define TABLE_LEN(t) (sizeof(t) / sizeof((t)[0]))

const char *ckpt_dtype_name(ckpt_dtype dt) {
    for (size_t i = 0; i < TABLE_LEN(dtype_table); i++)
        if (dtype_table[i].dt == dt) return dtype_table[i].name;
    return "invalid";
}

size_t ckpt_dtype_itemsize(ckpt_dtype dt) {
    for (size_t i = 0; i < TABLE_LEN(dtype_table); i++)
        if (dtype_table[i].dt == dt) return dtype_table[i].size;
    return 0;
}

ckpt_dtype ckpt_dtype_from_name(const char *name) {
    if (!name) return CKPT_DTYPE_INVALID;
    if (strncmp(name, "torch.", 6) == 0) name += 6;
    for (size_t i = 0; i < TABLE_LEN(dtype_table); i++)
        if (strcmp(dtype_table[i].name, name) == 0) return dtype_table[i].dt;
    for (size_t i = 0; i < TABLE_LEN(dtype_aliases); i++)
        if (strcmp(dtype_aliases[i].alias, name) == 0) return dtype_aliases[i].dt;
    return CKPT_DTYPE_INVALID;
}

ckpt_dtype ckpt_dtype_from_storage_class(const char *cls) {
    if (!cls) return CKPT_DTYPE_INVALID;
    for (size_t i = 0; i < TABLE_LEN(dtype_table); i++)
        if (strcmp(dtype_table[i].storage, cls) == 0) return dtype_table[i].dt;
    return CKPT_DTYPE_INVALID;
}
