/* cdml-edge native JPEG scan count: the start-of-scan markers (FF DA) in a JPEG's bytes. */
#ifndef CDML_SCANS_H
#define CDML_SCANS_H

#include <stddef.h>
#include <stdint.h>

/* The FF DA byte pairs in p[0..n): the same count as bytes.count(b"\xff\xda"), since the
 * pair cannot overlap itself. Touches no Python object: callers release the GIL around it. */
size_t cdml_count_scans(const uint8_t *p, size_t n);

#endif
