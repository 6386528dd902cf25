/* dtype.c — the dtype table: torch names, aliases, item sizes, the storage class names of
 * torch.save's typed storages (`FloatStorage` ...), and the oldest torch that loads each.
 * The torch_min column was read off the released wheels (torch/storage.py `_new_dtypes`,
 * which torch.load's weights_only unpickler allows): uint16/32/64 from 2.6, float8_e8m0fnu
 * (a dtype of 2.7) from 2.7; and checked by running torch 2.4.1 and 2.11.0
 * (tests/compat/test_older_torch.py). */
#include "tensor/dtype.h"

#include <string.h>

static const struct {
    ckpt_dtype dt;
    const char *name;
    size_t size;
    const char *storage; /* typed-storage class of _rebuild_tensor_v2, NULL if only v3 */
    int torch_min;       /* ckpt_dtype_torch_min */
} dtype_table[] = {
    {CKPT_DTYPE_FLOAT64, "float64", 8, "DoubleStorage", 204},
    {CKPT_DTYPE_FLOAT32, "float32", 4, "FloatStorage", 204},
    {CKPT_DTYPE_FLOAT16, "float16", 2, "HalfStorage", 204},
    {CKPT_DTYPE_BFLOAT16, "bfloat16", 2, "BFloat16Storage", 204},
    {CKPT_DTYPE_FLOAT8_E4M3FN, "float8_e4m3fn", 1, "Float8_e4m3fnStorage", 204},
    {CKPT_DTYPE_FLOAT8_E5M2, "float8_e5m2", 1, "Float8_e5m2Storage", 204},
    {CKPT_DTYPE_FLOAT8_E4M3FNUZ, "float8_e4m3fnuz", 1, "Float8_e4m3fnuzStorage", 204},
    {CKPT_DTYPE_FLOAT8_E5M2FNUZ, "float8_e5m2fnuz", 1, "Float8_e5m2fnuzStorage", 204},
    {CKPT_DTYPE_FLOAT8_E8M0FNU, "float8_e8m0fnu", 1, "Float8_e8m0fnuStorage", 207},
    {CKPT_DTYPE_INT8, "int8", 1, "CharStorage", 204},
    {CKPT_DTYPE_INT16, "int16", 2, "ShortStorage", 204},
    {CKPT_DTYPE_INT32, "int32", 4, "IntStorage", 204},
    {CKPT_DTYPE_INT64, "int64", 8, "LongStorage", 204},
    {CKPT_DTYPE_UINT8, "uint8", 1, "ByteStorage", 204},
    {CKPT_DTYPE_UINT16, "uint16", 2, "UInt16Storage", 206},
    {CKPT_DTYPE_UINT32, "uint32", 4, "UInt32Storage", 206},
    {CKPT_DTYPE_UINT64, "uint64", 8, "UInt64Storage", 206},
    {CKPT_DTYPE_BOOL, "bool", 1, "BoolStorage", 204},
    {CKPT_DTYPE_COMPLEX64, "complex64", 8, "ComplexFloatStorage", 204},
    {CKPT_DTYPE_COMPLEX128, "complex128", 16, "ComplexDoubleStorage", 204},
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

int ckpt_dtype_torch_min(ckpt_dtype dt) {
    for (size_t i = 0; i < TABLE_LEN(dtype_table); i++)
        if (dtype_table[i].dt == dt) return dtype_table[i].torch_min;
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

ckpt_dtype ck_dtype_from_storage_class(const char *cls) {
    if (!cls) return CKPT_DTYPE_INVALID;
    for (size_t i = 0; i < TABLE_LEN(dtype_table); i++)
        if (strcmp(dtype_table[i].storage, cls) == 0) return dtype_table[i].dt;
    return CKPT_DTYPE_INVALID;
}
