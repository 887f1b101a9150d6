/* cdml-edge native JPEG scan count: see scans.h. */
#include "scans.h"

#include <string.h>

size_t cdml_count_scans(const uint8_t *p, size_t n) {
    size_t count = 0;
    if (p == NULL || n < 2) return 0;
    const uint8_t *last = p + n - 1; /* a pair starts before the last byte */
    const uint8_t *q = p;
    while (q < last) {
        const uint8_t *ff = memchr(q, 0xFF, (size_t)(last - q));
        if (ff == NULL) break;
        if (ff[1] == 0xDA) count++;
        q = ff + 1;
    }
    return count;
}
