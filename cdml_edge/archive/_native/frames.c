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

/* The compressed bytes of frame f: the caller's, in mem, or read from fd into cbuf. */
static int32_t frame_source(tls_state *t, int fd, const uint8_t *mem, uint64_t mem_len,
                            cz_frame *f, const uint8_t **src) {
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
                            cz_frame *f, uint8_t *into) {
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

/* Copy member s out of its frames and check it; *aux: the failing frame or the CRC seen. */
static int32_t cut_span(const cz_frame *frames, const uint8_t *const *bytes, size_t nframes,
                        const cz_span *s, uint64_t *aux) {
    if (s->f0 > s->f1 || s->f1 >= nframes || s->size > UINT64_MAX - s->off) return CZ_BAD_SPAN;
    uint64_t end = s->off + s->size, copied = 0;
    for (size_t k = s->f0; k <= s->f1; k++) {
        const cz_frame *f = &frames[k];
        if (f->status != CZ_OK) {
            *aux = k;
            return f->status;
        }
        if (f->dsize > UINT64_MAX - f->doff) return CZ_BAD_SPAN;
        uint64_t lo = s->off > f->doff ? s->off : f->doff;
        uint64_t fend = f->doff + f->dsize, hi = end < fend ? end : fend;
        if (lo < hi) {
            memcpy(s->out + (lo - s->off), bytes[k] + (lo - f->doff), (size_t)(hi - lo));
            copied += hi - lo;
        }
    }
    if (copied != s->size) return CZ_BAD_SPAN;
    if (s->check_crc) {
        uint32_t got = cz_crc32(s->out, s->size);
        if (got != s->crc) {
            *aux = got;
            return CZ_CRC_MISMATCH;
        }
    }
    return CZ_OK;
}

/* Decode every frame once (into its dst, else into scratch); bytes[k]: where frame k is. */
static void decode_frames(tls_state *t, int fd, const uint8_t *mem, uint64_t mem_len,
                          cz_frame *frames, size_t nframes, const uint8_t **bytes) {
    uint64_t scratch = 0;
    int room = 1;
    for (size_t k = 0; k < nframes; k++) {
        frames[k].err = 0;
        if (frames[k].plain || frames[k].dst) continue;
        if (frames[k].dsize > UINT64_MAX - scratch) room = 0;
        else scratch += frames[k].dsize;
    }
    if (room && grow(&t->dbuf, &t->dcap, scratch ? scratch : 1)) room = 0;
    uint64_t at = 0;
    for (size_t k = 0; k < nframes; k++) {
        cz_frame *f = &frames[k];
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

int cz_zstd_read(int fd, const uint8_t *mem, uint64_t mem_len, cz_frame *frames,
                 size_t nframes, const cz_span *spans, size_t nspans, int32_t *status,
                 uint64_t *aux) {
    tls_state *t = tls();
    const uint8_t **bytes = t ? malloc((nframes ? nframes : 1) * sizeof(*bytes)) : NULL;
    if (!bytes) {
        for (size_t j = 0; j < nspans; j++) { status[j] = CZ_NO_MEMORY; aux[j] = 0; }
        return (int)nspans;
    }
    decode_frames(t, fd, mem, mem_len, frames, nframes, bytes);
    int bad = 0;
    for (size_t j = 0; j < nspans; j++) {
        aux[j] = 0;
        status[j] = cut_span(frames, bytes, nframes, &spans[j], &aux[j]);
        if (status[j] != CZ_OK) bad++;
    }
    free(bytes);
    shrink(t);
    return bad;
}

#else /* no libzstd: the Python path decodes */

int cz_zstd_read(int fd, const uint8_t *mem, uint64_t mem_len, cz_frame *frames,
                 size_t nframes, const cz_span *spans, size_t nspans, int32_t *status,
                 uint64_t *aux) {
    (void)fd; (void)mem; (void)mem_len; (void)frames; (void)nframes; (void)spans;
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
    cz_frame f = {coff, csize, doff, dsize, NULL, 0, dst, NULL, CZ_OK, 0};
    cz_span s = {off, size, 0, 0, crc, check_crc != 0, out};
    int32_t st = CZ_NEED_PYTHON;
    cz_zstd_read(fd, mem, mem_len, &f, 1, &s, 1, &st, aux);
    if (st == CZ_IO_ERROR) *aux = f.err;
    return st;
}
