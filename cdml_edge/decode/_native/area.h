/* cdml-edge native area resize: box-filter downscaling of interleaved uint8 images. */
#ifndef CDML_AREA_H
#define CDML_AREA_H

#include <stddef.h>
#include <stdint.h>

/* Shrink src (sh rows of sw pixels, ch channels, rows sstride bytes apart) to dst (dh rows
 * of dw pixels, packed). Each output pixel is the mean of the source area it covers, partly
 * covered pixels weighted by their share, rounded to nearest: OpenCV's INTER_AREA.
 * Returns 0, 1 for sizes that do not shrink (dw > sw, dh > sh, or any size < 1), 2 when
 * out of memory. Touches no Python object: callers release the GIL around it. */
int cdml_area_resize(const uint8_t *src, int sw, int sh, size_t sstride, int ch,
                     uint8_t *dst, int dw, int dh);

#endif
