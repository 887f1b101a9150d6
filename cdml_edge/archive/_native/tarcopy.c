/* cdml-edge native archive core: the plain copy of a tar.zst made by other tools.
 *
 * cz_tar_plain_copy() decompresses the zstd frames of a file (libzstd's streaming decoder:
 * concatenated and skippable frames, checksums checked) into another file, or nowhere
 * (out_fd < 0: the members walked alone), and walks the tar headers as the stream goes by.
 * It walks only what needs no judgement: ustar / GNU headers of regular files, folders,
 * links, devices and FIFOs (the last three as rows of their kind: entries the caller
 * skips) whose checksum, size and mtime are plain octal and right. At the first header it
 * does not walk (a zero block, a long name or pax record, a sparse file, a bad checksum, a
 * base-256 number, a cut header, a row past max_rows) it stops walking and goes on copying;
 * the caller walks the copy from there (resume_at) with the Python walk, which owns every
 * other case (and refuses an archive of more rows than allowed: a member-count bomb). The
 * walk alone ends there too: at the end-of-archive block, as the Python walk does, reading
 * no further. A member whose data runs past the end of the stream is recorded as the
 * Python walk records it; the walk resumes past the end, where it finds the end. Whether
 * the stream is worth a plain copy (zstd shrinks it by less than a quarter) is the
 * caller's to judge, before (its first 4 MiB) and after (the totals here).
 * Past stop_floor bytes of stream, more than stop_ratio times the input read so far stops it
 * (CZ_EXPANDS: a decompression bomb, walked or copied no further).
 * It touches no Python object, so the caller releases the GIL around it; every size comes
 * from the input and is checked: bad input gives a status, never a crash.
 */
#define _DEFAULT_SOURCE 1
#include "reader.h"
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAR_BLOCK 512
#define IN_CHUNK (1u << 20)  /* compressed bytes read at a time */
#define OUT_CHUNK (1u << 20) /* tar stream decoded before it is written */
/* Output offered to each decoder call (ZSTD_DStreamOutSize(), what python-zstandard offers). */
#define STEP (128u << 10)

void cz_tar_walk_free(cz_tar_walk *w) {
    if (!w) return;
    free(w->rows);
    free(w->names);
    free(w);
}

/* The plain octal number of a header field: digits 0-7 between optional spaces, ended by
 * the field or a NUL. -1 for anything else (empty, base-256, signs, other characters): the
 * Python walk judges those. */
static int64_t plain_octal(const uint8_t *f, size_t len) {
    size_t end = 0, a, b;
    while (end < len && f[end] != 0) end++;
    for (a = 0; a < end && f[a] == ' '; a++) {}
    for (b = end; b > a && f[b - 1] == ' '; b--) {}
    if (a == b) return -1;
    int64_t v = 0;
    for (size_t i = a; i < b; i++) {
        if (f[i] < '0' || f[i] > '7') return -1;
        v = v * 8 + (f[i] - '0'); /* at most 12 digits: below 2^36 */
    }
    return v;
}

/* Whether the header's stored checksum is its sum, read unsigned or signed (as tar does). */
static int checksum_ok(const uint8_t *h) {
    int64_t stored = plain_octal(h + 148, 8);
    if (stored < 0) return 0;
    int64_t sum = 8 * ' ', high = 0;
    for (int i = 0; i < TAR_BLOCK; i++) {
        if (i >= 148 && i < 156) continue;
        sum += h[i];
        high += h[i] >= 128;
    }
    return stored == sum || stored == sum - 256 * high;
}

static int all_zero(const uint8_t *h) {
    for (int i = 0; i < TAR_BLOCK; i++)
        if (h[i]) return 0;
    return 1;
}

static size_t field_len(const uint8_t *f, size_t cap) {
    size_t n = 0;
    while (n < cap && f[n]) n++;
    return n;
}

/* Append a row and its name (the ustar prefix joined as the Python walk joins it), then the
 * link's target for a link: 0, or -1 out of memory, or 1 when the rows already number
 * max_rows (nothing recorded: the walk stops there and the caller's walk judges the rest). */
static int record(cz_tar_walk *w, const uint8_t *h, uint64_t at, int64_t size, int64_t mtime) {
    if (w->max_rows && w->count >= w->max_rows) {
        w->over = 1;
        return 1;
    }
    size_t nlen = field_len(h, 100), plen = 0;
    if (memcmp(h + 257, "ustar\0", 6) == 0) plen = field_len(h + 345, 155);
    size_t full = plen ? plen + 1 + nlen : nlen;
    size_t llen = h[156] == '1' || h[156] == '2' ? field_len(h + 157, 100) : 0;
    full += llen;
    if (w->count == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 1024;
        int64_t *rows = realloc(w->rows, cap * CZ_TAR_ROW * sizeof(int64_t));
        if (!rows) return -1;
        w->rows = rows;
        w->cap = cap;
    }
    if (!w->names || w->names_len + full > w->names_cap) { /* allocated for an empty name too */
        size_t cap = w->names_cap ? 2 * w->names_cap : 64u << 10;
        while (cap < w->names_len + full) cap *= 2;
        char *names = realloc(w->names, cap);
        if (!names) return -1;
        w->names = names;
        w->names_cap = cap;
    }
    char *dst = w->names + w->names_len;
    if (plen) {
        memcpy(dst, h + 345, plen);
        dst[plen] = '/';
        memcpy(dst + plen + 1, h, nlen);
    } else {
        memcpy(dst, h, nlen);
    }
    memcpy(dst + full - llen, h + 157, llen);
    int64_t *row = w->rows + w->count * CZ_TAR_ROW;
    row[0] = (int64_t)at;
    row[1] = size;
    row[2] = mtime;
    row[3] = (int64_t)w->names_len;
    row[4] = (int64_t)(full - llen);
    row[5] = h[156];
    row[6] = (int64_t)llen;
    w->names_len += full;
    w->count++;
    return 0;
}

/* Walk the complete header in w->head, at w->resume_at: 1 walked on, 0 stopped, -1 memory. */
static int walk_header(cz_tar_walk *w) {
    const uint8_t *h = w->head;
    if (all_zero(h)) {
        w->at_end = 1; /* an end-of-archive block: the walk ends here, cleanly */
        return 0;
    }
    if (!checksum_ok(h)) return 0;
    int64_t size = plain_octal(h + 124, 12);
    if (size < 0) return 0;
    uint8_t kind = h[156];
    if (kind == '5') { /* a directory: its header alone, whatever its size field says */
        w->resume_at += TAR_BLOCK;
        return 1;
    }
    if (kind == '1' || kind == '2' || kind == '3' || kind == '4' || kind == '6') {
        /* a link, a device or a FIFO: skipped (a row of its kind), its header alone */
        int r = record(w, h, w->resume_at, 0, 0);
        if (r) return r < 0 ? -1 : 0;
        w->resume_at += TAR_BLOCK;
        return 1;
    }
    if (kind != '0' && kind != 0 && kind != '7') return 0;
    int64_t mtime = plain_octal(h + 136, 12);
    if (mtime < 0) return 0;
    int r = record(w, h, w->resume_at, size, mtime);
    if (r) return r < 0 ? -1 : 0;
    w->resume_at += TAR_BLOCK + ((uint64_t)size + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
    return 1;
}

/* Walk the headers within the n stream bytes at buf (stream offset w->stream_bytes). */
static int walk(cz_tar_walk *w, const uint8_t *buf, size_t n) {
    uint64_t pos = w->stream_bytes, end = pos + n;
    while (w->walking && w->resume_at + w->head_fill < end) {
        uint64_t from = w->resume_at + w->head_fill;
        size_t take = TAR_BLOCK - w->head_fill;
        if (take > end - from) take = (size_t)(end - from);
        memcpy(w->head + w->head_fill, buf + (from - pos), take);
        w->head_fill += take;
        if (w->head_fill < TAR_BLOCK) break;
        w->head_fill = 0;
        int r = walk_header(w);
        if (r < 0) return -1;
        if (r == 0) w->walking = 0;
    }
    return 0;
}

static int write_full(int fd, const uint8_t *p, size_t n, uint64_t *err) {
    while (n) {
        ssize_t r = write(fd, p, n);
        if (r < 0) {
            if (errno == EINTR) continue;
            *err = (uint64_t)(errno ? errno : EIO);
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Whether the stream decoded so far is past the bound a bomb is stopped at. */
static int expands(const cz_tar_walk *w) {
    return w->stop_floor && w->stream_bytes > w->stop_floor &&
           (double)w->stream_bytes > w->stop_ratio * (double)w->compressed_read;
}

#if defined(CZ_HAVE_ZSTD)
#include <zstd.h>

static int32_t copy_loop(ZSTD_DCtx *d, int in_fd, uint64_t in_end, int out_fd, uint8_t *ibuf,
                         uint8_t *obuf, cz_tar_walk *w) {
    ZSTD_inBuffer in = {ibuf, 0, 0};
    uint64_t file_at = 0;
    size_t last = 0; /* libzstd's hint of the last call that did something: 0 at a frame's end */
    int fed = 0, full = 0;
    size_t held = 0; /* decoded bytes in obuf, not written yet */
    for (;;) {
        if (in.pos == in.size && !full) {
            uint64_t want = in_end - file_at < IN_CHUNK ? in_end - file_at : IN_CHUNK, got = 0;
            int err = want ? cz_pread_full(in_fd, ibuf, want, file_at, &got) : 0;
            if (err) { w->err = (uint64_t)err; return CZ_IO_ERROR; }
            if (!got) break;
            file_at += got;
            in.size = (size_t)got;
            in.pos = 0;
            fed = 1;
        }
        ZSTD_outBuffer out = {obuf + held, STEP, 0};
        size_t before = in.pos, whole = in.size;
        /* A frame's first byte alone: libzstd then never decodes the frame in one shot (it
         * does when the whole frame is in the input and its stated size fits the output, and
         * checks less there: the window limit, blocks over the window). The streaming path
         * refuses at least what the Python path's decoder refuses; a refusal here hands the
         * stream to the Python path, which judges it as ever. */
        if (last == 0 && in.size > in.pos) in.size = in.pos + 1;
        size_t hint = ZSTD_decompressStream(d, &out, &in);
        in.size = whole;
        if (ZSTD_isError(hint)) return CZ_DATA_ERROR;
        /* a call that took and gave nothing (the one after a full buffer, at a frame's end,
         * answers the next frame's header size) says nothing of the frame before */
        if (out.pos || in.pos > before) last = hint;
        w->compressed_read += in.pos - before;
        full = out.pos == out.size; /* more may be waiting in the decoder */
        if (out.pos) {
            if (walk(w, obuf + held, out.pos)) return CZ_NO_MEMORY;
            w->stream_bytes += out.pos;
            held += out.pos;
            if (expands(w)) return CZ_EXPANDS;
        }
        if (out_fd < 0 && !w->walking) return CZ_OK; /* the walk alone: it ended here */
        if (held + STEP > OUT_CHUNK) {
            if (out_fd >= 0 && write_full(out_fd, obuf, held, &w->err)) return CZ_IO_ERROR;
            held = 0;
        }
    }
    if (out_fd >= 0 && held && write_full(out_fd, obuf, held, &w->err)) return CZ_IO_ERROR;
    if (fed && last != 0) return CZ_TRUNCATED; /* the input ends inside a frame */
    return CZ_OK;
}

int cz_tar_plain_copy(int in_fd, uint64_t in_end, int out_fd, uint64_t max_rows,
                      double stop_ratio, uint64_t stop_floor, cz_tar_walk **result) {
    cz_tar_walk *w = calloc(1, sizeof(*w));
    *result = w;
    if (!w) return CZ_NO_MEMORY;
    w->walking = 1;
    w->max_rows = (size_t)max_rows;
    w->stop_ratio = stop_ratio;
    w->stop_floor = stop_floor;
    ZSTD_DCtx *d = ZSTD_createDCtx();
    uint8_t *ibuf = malloc(IN_CHUNK), *obuf = malloc(OUT_CHUNK);
    int32_t status = CZ_NO_MEMORY;
    if (d && ibuf && obuf)
        status = copy_loop(d, in_fd, in_end, out_fd, ibuf, obuf, w);
    ZSTD_freeDCtx(d);
    free(ibuf);
    free(obuf);
    return status;
}

#else /* no libzstd: the Python path copies */

int cz_tar_plain_copy(int in_fd, uint64_t in_end, int out_fd, uint64_t max_rows,
                      double stop_ratio, uint64_t stop_floor, cz_tar_walk **result) {
    (void)in_fd; (void)in_end; (void)out_fd; (void)max_rows;
    (void)stop_ratio; (void)stop_floor; (void)expands;
    (void)walk; (void)write_full;
    *result = NULL;
    return CZ_NEED_PYTHON;
}

#endif
