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
 * sums: dw * ch + 1 floats. Each sum adds its taps in order from 0.5; four output pixels
 * are summed side by side, so that the additions of one do not wait for each other's. */
static void horizontal(const float *restrict row, int ch, int dw, int tx, const int *sx,
                       const float *restrict wx, float *restrict sums) {
    /* size_t indices: Python builds extensions with -fwrapv, under which int arithmetic in
     * the addresses costs the loop about an eighth of its speed */
    size_t o = 0, n = (size_t)dw, taps = (size_t)tx;
#if defined(__GNUC__)
    if (ch == 3) { /* the common case: one 4-lane vector per pixel (the 4th lane unused) */
        for (; o + 4 <= n; o += 4) {
            const float *w0 = wx + o * taps, *w1 = w0 + taps, *w2 = w1 + taps, *w3 = w2 + taps;
            const float *p0 = row + (size_t)sx[o] * 3, *p1 = row + (size_t)sx[o + 1] * 3;
            const float *p2 = row + (size_t)sx[o + 2] * 3, *p3 = row + (size_t)sx[o + 3] * 3;
            cdml_v4 a0 = {0.5f, 0.5f, 0.5f, 0.5f}, a1 = a0, a2 = a0, a3 = a0;
            for (size_t k = 0; k < taps; k++, p0 += 3, p1 += 3, p2 += 3, p3 += 3) {
                cdml_v4 x0, x1, x2, x3;
                memcpy(&x0, p0, sizeof(x0));
                memcpy(&x1, p1, sizeof(x1));
                memcpy(&x2, p2, sizeof(x2));
                memcpy(&x3, p3, sizeof(x3));
                a0 += w0[k] * x0;
                a1 += w1[k] * x1;
                a2 += w2[k] * x2;
                a3 += w3[k] * x3;
            }
            float *s = sums + o * 3; /* each 4th lane is overwritten by the next */
            memcpy(s, &a0, sizeof(a0));
            memcpy(s + 3, &a1, sizeof(a1));
            memcpy(s + 6, &a2, sizeof(a2));
            memcpy(s + 9, &a3, sizeof(a3));
        }
        for (; o < n; o++) {
            const float *w = wx + o * taps;
            const float *p = row + (size_t)sx[o] * 3;
            cdml_v4 a = {0.5f, 0.5f, 0.5f, 0.5f};
            for (size_t k = 0; k < taps; k++, p += 3) {
                cdml_v4 px;
                memcpy(&px, p, sizeof(px));
                a += w[k] * px;
            }
            memcpy(sums + o * 3, &a, sizeof(a));
        }
        return;
    }
#endif
    size_t c_n = (size_t)ch;
    for (; o < n; o++) {
        const float *w = wx + o * taps;
        const float *p = row + (size_t)sx[o] * c_n;
        for (size_t c = 0; c < c_n; c++) {
            float acc = 0.5f;
            for (size_t k = 0; k < taps; k++) acc += w[k] * p[k * c_n + c];
            sums[o * c_n + c] = acc;
        }
    }
}

/* acc[j] = sum of w[k] * r[k][j] over the n rows, added in order: first the product of
 * row 0, then each next one. Up to three rows go in one pass over acc. */
static void vertical(float *restrict acc, const uint8_t *const *r, size_t n_cols,
                     const float *w, int n) {
    int k = 0;
    if (n >= 3) {
        const uint8_t *restrict r0 = r[0], *restrict r1 = r[1], *restrict r2 = r[2];
        float w0 = w[0], w1 = w[1], w2 = w[2];
        for (size_t j = 0; j < n_cols; j++)
            acc[j] = w0 * (float)r0[j] + w1 * (float)r1[j] + w2 * (float)r2[j];
        k = 3;
    } else if (n == 2) {
        const uint8_t *restrict r0 = r[0], *restrict r1 = r[1];
        float w0 = w[0], w1 = w[1];
        for (size_t j = 0; j < n_cols; j++) acc[j] = w0 * (float)r0[j] + w1 * (float)r1[j];
        k = 2;
    } else {
        const uint8_t *restrict r0 = r[0];
        float w0 = w[0];
        for (size_t j = 0; j < n_cols; j++) acc[j] = w0 * (float)r0[j];
        k = 1;
    }
    for (; k + 2 <= n; k += 2) {
        const uint8_t *restrict r0 = r[k], *restrict r1 = r[k + 1];
        float w0 = w[k], w1 = w[k + 1];
        for (size_t j = 0; j < n_cols; j++)
            acc[j] = acc[j] + w0 * (float)r0[j] + w1 * (float)r1[j];
    }
    for (; k < n; k++) {
        const uint8_t *restrict r0 = r[k];
        float w0 = w[k];
        for (size_t j = 0; j < n_cols; j++) acc[j] += w0 * (float)r0[j];
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
    const uint8_t **rows = malloc(sizeof(*rows) * (size_t)ty);
    if (!sx || !wx || !acc || !rows) {
        free(sx);
        free(wx);
        free(acc);
        free(rows);
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
        int n = 1;
        while (n < ty && w[n] != 0.0f) n++;
        for (int k = 0; k < n; k++) rows[k] = src + (size_t)(sy[o] + k) * sstride;
        vertical(acc, rows, line, w, n);
        horizontal(acc, ch, dw, tx, sx, wx, sums);
        to_bytes(sums, (size_t)dw * ch, dst + (size_t)o * dw * ch);
    }
    free(sx);
    free(wx);
    free(acc);
    free(rows);
    return 0;
}
