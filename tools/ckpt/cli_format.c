/* cli_format.c — text for `ckpt` output: human-readable sizes and shapes (elements of every
 * dtype: ckpt_elem_format in the library). */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *cli_human_size(uint64_t n, char *buf, size_t size) {
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (n < 1024) {
        snprintf(buf, size, "%llu B", (unsigned long long)n);
        return buf;
    }
    double v = (double)n;
    int u = -1;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, size, v < 10.0 ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

const char *cli_shape_str(int ndim, const int64_t *shape, char *buf, size_t size) {
    size_t o = 0;
    o += (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < size) snprintf(buf + o, size - o, "]");
    return buf;
}
