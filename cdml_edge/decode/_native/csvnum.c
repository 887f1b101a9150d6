/* cdml-edge native CSV numbers: see csvnum.h.
 *
 * A number is its digits as an integer m and a power of ten k. Where m <= 2^53 and
 * |k| <= 22 both are exact doubles, so m * 10^k (or m / 10^-k) is one correctly rounded
 * operation: the double nearest the decimal, which is what float() returns (Clinger's
 * fast path). Anything else is refused, never approximated. */
#include "csvnum.h"

#include <float.h>
#include <stdint.h>

#define MAX_EXACT (UINT64_C(1) << 53)
#define MAX_CELL 64 /* longer cells are refused: csv refuses fields past its own limit */

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                               1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                               1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* One cell p[0..n) as a double; 0 when it is not a plain number in the exact range. */
static int cell_value(const char *p, size_t n, double *value) {
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
    return 0; /* wider intermediates (x87) would round twice: the caller's way instead */
#endif
    if (n > MAX_CELL) return 0;
    size_t i = 0;
    int negative = 0;
    if (i < n && (p[i] == '+' || p[i] == '-')) negative = p[i++] == '-';
    uint64_t m = 0;
    long k = 0;
    size_t digits = 0;
    int big = 0; /* m past 2^53: the cell is refused once it is known to be a number */
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++, digits++) {
        if (m > (MAX_EXACT - 9) / 10) big = 1;
        else m = m * 10 + (uint64_t)(p[i] - '0');
    }
    if (i < n && p[i] == '.') {
        for (i++; i < n && p[i] >= '0' && p[i] <= '9'; i++, digits++) {
            if (m > (MAX_EXACT - 9) / 10) big = 1;
            else {
                m = m * 10 + (uint64_t)(p[i] - '0');
                k--;
            }
        }
    }
    if (digits == 0) return 0;
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        i++;
        int exp_negative = 0;
        if (i < n && (p[i] == '+' || p[i] == '-')) exp_negative = p[i++] == '-';
        if (i >= n || p[i] < '0' || p[i] > '9') return 0;
        long e = 0;
        for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
            if (e < 100000) e = e * 10 + (p[i] - '0');
        }
        k += exp_negative ? -e : e;
    }
    if (i != n || big) return 0;
    double v;
    if (m == 0) v = 0.0;
    else if (k >= 0 && k <= 22) v = (double)m * POW10[k];
    else if (k < 0 && k >= -22) v = (double)m / POW10[-k];
    else return 0;
    *value = negative ? -v : v;
    return 1;
}

long cdml_csv_numbers(const char *p, size_t n, char delim, size_t width, float *out, size_t cap) {
    if (p == NULL || out == NULL || width == 0) return -1;
    size_t rows = 0, at = 0;
    while (at < n) {
        size_t end = at;
        while (end < n && p[end] != '\n') end++;
        size_t stop = end; /* the line without its terminator */
        if (stop > at && p[stop - 1] == '\r') stop--;
        if (stop > at) {
            if (rows >= cap) return -1;
            float *row = out + rows * width;
            size_t cells = 0, start = at;
            for (size_t i = at; i <= stop; i++) {
                if (i < stop && p[i] != delim) {
                    if (p[i] == '\r') return -1; /* a lone \r ends a line for csv */
                    continue;
                }
                double v;
                if (cells >= width || !cell_value(p + start, i - start, &v)) return -1;
                row[cells++] = (float)v;
                start = i + 1;
            }
            if (cells != width) return -1;
            rows++;
        }
        at = end + 1;
    }
    return (long)rows;
}
