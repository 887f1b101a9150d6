/* cdml-edge native pixel scaling: uint8 samples to float32 in [0, 1]. */
#ifndef CDML_SCALE_H
#define CDML_SCALE_H

#include <stddef.h>
#include <stdint.h>

/* dst[i] = (float)src[i] / 255.0f for i in [0, n): the same float division as NumPy's
 * (IEEE single precision, rounded to nearest), in one pass over dst. Touches no Python
 * object: callers release the GIL around it. */
void cdml_scale_to_unit(const uint8_t *src, size_t n, float *dst);

#endif
