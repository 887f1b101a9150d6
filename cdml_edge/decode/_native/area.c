/* Area (box) resampling, separable: a vertical pass over whole source rows (contiguous,
 * vectorised by the compiler) into a float row, then a horizontal pass of that row into
 * the output. Each axis has a table of the source pixels an output pixel covers and their
 * weights (the covered share of each, summing to 1), padded to a fixed tap count. */
#include "area.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* start[o] and taps weights w[o * taps + k] for source pixels start[o] + k */
static void area_tab(int src, int dst, int taps, int *start, float *w) {
    double scale = (double)src / dst;
    for (int o = 0; o < dst; o++) {
        double f1 = o * scale, f2 = f1 + scale;
        if (f2 > src) f2 = src;
        int s1 = (int)floor(f1), s2 = (int)ceil(f2 - 1e-9);
        if (s2 > src) s2 = src;
        if (s2 - s1 > taps) s2 = s1 + taps;
        double cell = f2 - f1;
        start[o] = s1;
        for (int k = 0; k < taps; k++) {
            double a = s1 + k, b = a + 1.0;
            double lo = a > f1 ? a : f1, hi = b < f2 ? b : f2;
            w[(size_t)o * taps + k] = k < s2 - s1 && hi > lo ? (float)((hi - lo) / cell) : 0.0f;
        }
    }
}

#if defined(__GNUC__)
typedef float cdml_v4 __attribute__((vector_size(16)));
#endif

/* Rounds a row of non-negative sums (each already holds the 0.5) to bytes. */
static void to_bytes(const float *restrict sums, size_t n, uint8_t *restrict out) {
    for (size_t j = 0; j < n; j++) {
        float v = sums[j] < 255.0f ? sums[j] : 255.0f;
        out[j] = (uint8_t)(int)v;
    }
}

/* row: sw pixels of ch floats, followed by taps pixels of zeros and one more float;
 * sums: dw * ch + 1 floats */
static void horizontal(const float *restrict row, int ch, int dw, int tx, const int *sx,
                       const float *restrict wx, float *restrict sums) {
#if defined(__GNUC__)
    if (ch == 3) { /* the common case: one 4-lane vector per pixel (the 4th lane unused) */
        for (int o = 0; o < dw; o++) {
            const float *w = wx + (size_t)o * tx;
            const float *p = row + (size_t)sx[o] * 3;
            cdml_v4 a = {0.5f, 0.5f, 0.5f, 0.5f};
            for (int k = 0; k < tx; k++, p += 3) {
                cdml_v4 px;
                memcpy(&px, p, sizeof(px));
                a += w[k] * px;
            }
            memcpy(sums + (size_t)o * 3, &a, sizeof(a)); /* the 4th lane is overwritten */
        }
        return;
    }
#endif
    for (int o = 0; o < dw; o++) {
        const float *w = wx + (size_t)o * tx;
        const float *p = row + (size_t)sx[o] * ch;
        for (int c = 0; c < ch; c++) {
            float acc = 0.5f;
            for (int k = 0; k < tx; k++) acc += w[k] * p[(size_t)k * ch + c];
            sums[(size_t)o * ch + c] = acc;
        }
    }
}

/* acc[j] = w * r[j] (first) or acc[j] += w * r[j] */
static void vertical(float *restrict acc, const uint8_t *restrict r, size_t n, float w,
                     int first) {
    if (first) {
        for (size_t j = 0; j < n; j++) acc[j] = w * (float)r[j];
    } else {
        for (size_t j = 0; j < n; j++) acc[j] += w * (float)r[j];
    }
}

int cdml_area_resize(const uint8_t *src, int sw, int sh, size_t sstride, int ch,
                     uint8_t *dst, int dw, int dh) {
    if (sw < 1 || sh < 1 || dw < 1 || dh < 1 || ch < 1 || dw > sw || dh > sh) return 1;
    int tx = (int)ceil((double)sw / dw) + 1, ty = (int)ceil((double)sh / dh) + 1;
    size_t line = (size_t)sw * ch;
    int *sx = malloc(sizeof(int) * ((size_t)dw + dh));
    float *wx = malloc(sizeof(float) * ((size_t)dw * tx + (size_t)dh * ty));
    float *acc = malloc(sizeof(float) * (line + (size_t)tx * ch + 1 + (size_t)dw * ch + 1));
    if (!sx || !wx || !acc) {
        free(sx);
        free(wx);
        free(acc);
        return 2;
    }
    int *sy = sx + dw;
    float *wy = wx + (size_t)dw * tx;
    area_tab(sw, dw, tx, sx, wx);
    area_tab(sh, dh, ty, sy, wy);
    memset(acc + line, 0, sizeof(float) * ((size_t)tx * ch + 1));
    float *sums = acc + line + (size_t)tx * ch + 1;
    for (int o = 0; o < dh; o++) {
        const float *w = wy + (size_t)o * ty;
        for (int k = 0; k < ty && (k == 0 || w[k] != 0.0f); k++)
            vertical(acc, src + (size_t)(sy[o] + k) * sstride, line, w[k], k == 0);
        horizontal(acc, ch, dw, tx, sx, wx, sums);
        to_bytes(sums, (size_t)dw * ch, dst + (size_t)o * dw * ch);
    }
    free(sx);
    free(wx);
    free(acc);
    return 0;
}
