/* cdml-edge native archive core: the zstd frames of a seekable tar.zst.
 *
 * cz_zstd_read() decodes each frame a batch needs once (libzstd, one-shot into a buffer of
 * the size the seek table gives), then cuts every member out of the frames that hold it and
 * checks its CRC-32. It touches no Python object, so the caller releases the GIL around it.
 * Every size and offset comes from the archive and is checked: corrupt input gives a status,
 * never a crash. Without libzstd at build time every member answers CZ_NEED_PYTHON.
 */
#define _DEFAULT_SOURCE 1
#include "reader.h"
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(CZ_HAVE_ZSTD)
#include <zstd.h>
#include <zstd_errors.h>

/* Scratch buffers kept per thread between calls up to this size (larger ones are freed). */
#define KEEP_BYTES (8u << 20)

/* Per-thread decoding state: a decompression context (costly to create) and two buffers,
 * one for compressed bytes read from a file, one for frames decoded without a dst. */
typedef struct {
    ZSTD_DCtx *dctx;
    uint8_t *cbuf;
    uint64_t ccap;
    uint8_t *dbuf;
    uint64_t dcap;
} tls_state;

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static int tls_ok;

static void tls_free(void *p) {
    tls_state *t = p;
    if (!t) return;
    ZSTD_freeDCtx(t->dctx);
    free(t->cbuf);
    free(t->dbuf);
    free(t);
}

static void tls_make_key(void) { tls_ok = pthread_key_create(&tls_key, tls_free) == 0; }

static tls_state *tls(void) {
    pthread_once(&tls_once, tls_make_key);
    if (!tls_ok) return NULL;
    tls_state *t = pthread_getspecific(tls_key);
    if (t) return t;
    t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    t->dctx = ZSTD_createDCtx();
    if (!t->dctx || pthread_setspecific(tls_key, t) != 0) {
        tls_free(t);
        return NULL;
    }
    return t;
}

/* Make *buf hold at least need bytes; 0 on success. */
static int grow(uint8_t **buf, uint64_t *cap, uint64_t need) {
    if (need <= *cap) return 0;
    if (need > SIZE_MAX) return -1;
    uint8_t *nb = realloc(*buf, (size_t)need);
    if (!nb) return -1;
    *buf = nb;
    *cap = need;
    return 0;
}

static void shrink(tls_state *t) {
    if (t->ccap > KEEP_BYTES) { free(t->cbuf); t->cbuf = NULL; t->ccap = 0; }
    if (t->dcap > KEEP_BYTES) { free(t->dbuf); t->dbuf = NULL; t->dcap = 0; }
}

/* One frame as cz_zstd_read's arrays describe it. */
typedef struct {
    uint64_t coff, csize, doff, dsize, src_len;
    const uint8_t *src;
    uint8_t *dst;
    const uint8_t *plain;
    int32_t status;
    uint64_t err;
} frame_t;

/* The compressed bytes of frame f: the caller's, in mem, or read from fd into cbuf. */
static int32_t frame_source(tls_state *t, int fd, const uint8_t *mem, uint64_t mem_len,
                            frame_t *f, const uint8_t **src) {
    if (f->src) {
        if (f->src_len < f->csize) return CZ_TRUNCATED;
        *src = f->src;
        return CZ_OK;
    }
    if (mem) {
        if (f->coff > mem_len || mem_len - f->coff < f->csize) return CZ_TRUNCATED;
        *src = mem + f->coff;
        return CZ_OK;
    }
    if (fd < 0) return CZ_NEED_PYTHON;
    if (grow(&t->cbuf, &t->ccap, f->csize ? f->csize : 1)) return CZ_NO_MEMORY;
    uint64_t got = 0;
    int err = cz_pread_full(fd, t->cbuf, f->csize, f->coff, &got);
    if (err) {
        f->err = (uint64_t)err;
        return CZ_IO_ERROR;
    }
    if (got < f->csize) return CZ_TRUNCATED;
    *src = t->cbuf;
    return CZ_OK;
}

/* Decode frame f into the dsize bytes at into. */
static int32_t decode_frame(tls_state *t, int fd, const uint8_t *mem, uint64_t mem_len,
                            frame_t *f, uint8_t *into) {
    if (f->dsize == 0) return CZ_OK; /* a skippable frame: nothing of the stream in it */
    const uint8_t *src = NULL;
    int32_t st = frame_source(t, fd, mem, mem_len, f, &src);
    if (st != CZ_OK) return st;
    if (f->csize > SIZE_MAX || f->dsize > SIZE_MAX) return CZ_NO_MEMORY;
    size_t r = ZSTD_decompressDCtx(t->dctx, into, (size_t)f->dsize, src, (size_t)f->csize);
    if (ZSTD_isError(r))
        return ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall ? CZ_SIZE_MISMATCH
                                                                   : CZ_DATA_ERROR;
    return r == f->dsize ? CZ_OK : CZ_SIZE_MISMATCH;
}

/* Copy member j (row sp of spans) out of its frames and check it; *aux: the failing
 * frame's row or the CRC seen. */
static int32_t cut_span(const frame_t *fr, const uint8_t *const *bytes, size_t nframes,
                        const uint64_t *sp, uint8_t *out, uint64_t *aux) {
    uint64_t off = sp[0], size = sp[1], f0 = sp[2], f1 = sp[3];
    if (f0 > f1 || f1 >= nframes || size > UINT64_MAX - off) return CZ_BAD_SPAN;
    uint64_t end = off + size, copied = 0;
    for (uint64_t k = f0; k <= f1; k++) {
        const frame_t *f = &fr[k];
        if (f->status != CZ_OK) {
            *aux = k;
            return f->status;
        }
        if (f->dsize > UINT64_MAX - f->doff) return CZ_BAD_SPAN;
        uint64_t lo = off > f->doff ? off : f->doff;
        uint64_t fend = f->doff + f->dsize, hi = end < fend ? end : fend;
        if (lo < hi) {
            memcpy(out + (lo - off), bytes[k] + (lo - f->doff), (size_t)(hi - lo));
            copied += hi - lo;
        }
    }
    if (copied != size) return CZ_BAD_SPAN;
    if (sp[5]) {
        uint32_t got = cz_crc32(out, size);
        if (got != (uint32_t)sp[4]) {
            *aux = got;
            return CZ_CRC_MISMATCH;
        }
    }
    return CZ_OK;
}

/* Decode every frame once (into its dst, else into scratch); bytes[k]: where frame k is. */
static void decode_frames(tls_state *t, int fd, const uint8_t *mem, uint64_t mem_len,
                          frame_t *fr, size_t nframes, const uint8_t **bytes) {
    uint64_t scratch = 0;
    int room = 1;
    for (size_t k = 0; k < nframes; k++) {
        if (fr[k].plain || fr[k].dst) continue;
        if (fr[k].dsize > UINT64_MAX - scratch) room = 0;
        else scratch += fr[k].dsize;
    }
    if (room && grow(&t->dbuf, &t->dcap, scratch ? scratch : 1)) room = 0;
    uint64_t at = 0;
    for (size_t k = 0; k < nframes; k++) {
        frame_t *f = &fr[k];
        if (f->plain) {
            bytes[k] = f->plain;
            f->status = CZ_OK;
            continue;
        }
        if (!f->dst && !room) {
            bytes[k] = NULL;
            f->status = CZ_NO_MEMORY;
            continue;
        }
        uint8_t *into = f->dst ? f->dst : t->dbuf + at;
        if (!f->dst) at += f->dsize;
        bytes[k] = into;
        f->status = decode_frame(t, fd, mem, mem_len, f, into);
    }
}

static int fail_all(int32_t *status, uint64_t *aux, size_t n, int32_t st) {
    for (size_t j = 0; j < n; j++) {
        status[j] = st;
        aux[j] = 0;
    }
    return (int)n;
}

int cz_zstd_read(int fd, const uint8_t *mem, uint64_t mem_len, const uint64_t *frames,
                 size_t nframes, const uint8_t *const *src, uint8_t *const *dst,
                 const uint8_t *const *plain, int32_t *fstatus, uint64_t *ferr,
                 const uint64_t *spans, size_t nspans, uint8_t *const *out, int32_t *status,
                 uint64_t *aux) {
    tls_state *t = tls();
    size_t n = nframes ? nframes : 1;
    frame_t *fr = t ? calloc(n, sizeof(*fr)) : NULL;
    const uint8_t **bytes = fr ? malloc(n * sizeof(*bytes)) : NULL;
    if (!bytes) {
        free(fr);
        return fail_all(status, aux, nspans, CZ_NO_MEMORY);
    }
    for (size_t k = 0; k < nframes; k++) {
        const uint64_t *row = frames + k * CZ_FRAME_FIELDS;
        fr[k] = (frame_t){row[0], row[1], row[2], row[3], row[4], src[k], dst[k], plain[k],
                          CZ_OK, 0};
    }
    decode_frames(t, fd, mem, mem_len, fr, nframes, bytes);
    int bad = 0;
    for (size_t j = 0; j < nspans; j++) {
        aux[j] = 0;
        status[j] = cut_span(fr, bytes, nframes, spans + j * CZ_SPAN_FIELDS, out[j], &aux[j]);
        if (status[j] != CZ_OK) bad++;
    }
    for (size_t k = 0; k < nframes; k++) {
        fstatus[k] = fr[k].status;
        ferr[k] = fr[k].err;
    }
    free(bytes);
    free(fr);
    shrink(t);
    return bad;
}

#else /* no libzstd: the Python path decodes */

int cz_zstd_read(int fd, const uint8_t *mem, uint64_t mem_len, const uint64_t *frames,
                 size_t nframes, const uint8_t *const *src, uint8_t *const *dst,
                 const uint8_t *const *plain, int32_t *fstatus, uint64_t *ferr,
                 const uint64_t *spans, size_t nspans, uint8_t *const *out, int32_t *status,
                 uint64_t *aux) {
    (void)fd; (void)mem; (void)mem_len; (void)frames; (void)src; (void)dst; (void)plain;
    (void)spans; (void)out;
    for (size_t k = 0; k < nframes; k++) { fstatus[k] = CZ_NEED_PYTHON; ferr[k] = 0; }
    for (size_t j = 0; j < nspans; j++) { status[j] = CZ_NEED_PYTHON; aux[j] = 0; }
    return (int)nspans;
}

#endif

/* One member in one frame, with scalars only (the cheapest call from Python). Returns the
 * member's status; *aux as cz_zstd_read gives it, or the errno of a failed read. */
int cz_zstd_read_one(int fd, const uint8_t *mem, uint64_t mem_len, uint64_t coff,
                     uint64_t csize, uint64_t doff, uint64_t dsize, uint8_t *dst,
                     uint64_t off, uint64_t size, uint32_t crc, int check_crc, uint8_t *out,
                     uint64_t *aux) {
    uint64_t frame[CZ_FRAME_FIELDS] = {coff, csize, doff, dsize, 0};
    uint64_t span[CZ_SPAN_FIELDS] = {off, size, 0, 0, crc, check_crc != 0};
    const uint8_t *none = NULL;
    uint8_t *dsts[1] = {dst}, *outs[1] = {out};
    int32_t st = CZ_NEED_PYTHON, fst = CZ_OK;
    uint64_t ferr = 0;
    cz_zstd_read(fd, mem, mem_len, frame, 1, &none, dsts, &none, &fst, &ferr, span, 1, outs,
                 &st, aux);
    if (st == CZ_IO_ERROR) *aux = ferr;
    return st;
}
