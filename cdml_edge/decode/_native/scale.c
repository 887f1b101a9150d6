/* cdml-edge native pixel scaling: see scale.h. */
#include "scale.h"

void cdml_scale_to_unit(const uint8_t *src, size_t n, float *dst) {
    /* A division, not a product with 1/255: the product rounds 126 of the 256 values
     * differently. Compilers vectorise this loop (-O3); it must not be built with
     * -ffast-math or -freciprocal-math, which would turn it into the product. */
    for (size_t i = 0; i < n; i++) dst[i] = (float)src[i] / 255.0f;
}
