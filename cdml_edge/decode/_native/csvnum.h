/* cdml-edge native CSV numbers: the cells of a plain numeric CSV body as float32. */
#ifndef CDML_CSVNUM_H
#define CDML_CSVNUM_H

#include <stddef.h>
#include <stdint.h>

/* The rows of p[0..n) into out (row-major, `width` floats a row, room for `cap` rows).
 *
 * Lines end with "\n" or "\r\n"; empty lines are skipped. A cell is a plain decimal number,
 * [+-]? digits [. digits] [(e|E) [+-]? digits] with a digit before or after the point, no
 * space, at most 64 characters: the value Python's float() gives it, rounded to float32.
 * Returns the rows written, or -1 where anything else is met (another character, an empty
 * cell, a row of another width, a lone "\r", more than `cap` rows, a number of more than
 * 2^53 in its digits or a power of ten beyond 1e22 once they are read, which would need
 * more than one rounding): the caller then parses the text its own way, which gives the
 * same values where this gives any. Reads nothing outside p[0..n), writes nothing outside
 * out[0..cap*width). Touches no Python object: callers release the GIL around it. */
long cdml_csv_numbers(const char *p, size_t n, char delim, size_t width, float *out, size_t cap);

#endif
