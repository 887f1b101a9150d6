/* cdml-edge native archive core: the zstd frames of a seekable tar.zst.
 *
 * cz_zstd_read() goes through the frames a batch needs in order, decodes each once (libzstd,
 * one-shot into a buffer of the size the seek table gives) and, while it is in cache, copies
 * it into every member it holds part of; a member whose last frame has gone by is checked
 * against its CRC-32. It touches no Python object, so the caller releases the GIL around it.
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

/* A member of the batch while the frames go by: how much of it is in place, and why not. */
typedef struct {
    uint64_t off, size, f0, f1, crc, check;
    uint8_t *out;
    uint64_t copied;
    int32_t status;
    uint64_t aux;
} span_t;

/* Copy what frame k (at bytes, ok or failed with st) holds of member s. */
static void take(span_t *s, const frame_t *f, size_t k, const uint8_t *bytes, int32_t st) {
    if (s->status != CZ_OK) return;
    if (st != CZ_OK) {
        s->status = st;
        s->aux = k;
        return;
    }
    if (f->dsize > UINT64_MAX - f->doff) {
        s->status = CZ_BAD_SPAN;
        return;
    }
    uint64_t end = s->off + s->size, fend = f->doff + f->dsize;
    uint64_t lo = s->off > f->doff ? s->off : f->doff, hi = end < fend ? end : fend;
    if (lo < hi) {
        memcpy(s->out + (lo - s->off), bytes + (lo - f->doff), (size_t)(hi - lo));
        s->copied += hi - lo;
    }
}

/* Member s has seen all its frames: every byte in place, and the CRC-32 it should have. */
static void finish(span_t *s) {
    if (s->status != CZ_OK) return;
    if (s->copied != s->size) {
        s->status = CZ_BAD_SPAN;
        return;
    }
    if (s->check) {
        uint32_t got = cz_crc32(s->out, s->size);
        if (got != (uint32_t)s->crc) {
            s->status = CZ_CRC_MISMATCH;
            s->aux = got;
        }
    }
}

static int by_first_frame(const void *a, const void *b) {
    const span_t *x = *(const span_t *const *)a, *y = *(const span_t *const *)b;
    return x->f0 < y->f0 ? -1 : x->f0 > y->f0;
}

/* The frames in order, each decoded once (into its dst, else into one scratch buffer that
 * stays in cache) and, while it is hot, copied into every member it holds part of. */
static void sweep(tls_state *t, int fd, const uint8_t *mem, uint64_t mem_len, frame_t *fr,
                  size_t nframes, span_t **order, size_t nspans, span_t **active) {
    uint64_t most = 1;
    for (size_t k = 0; k < nframes; k++)
        if (!fr[k].plain && !fr[k].dst && fr[k].dsize > most) most = fr[k].dsize;
    int room = grow(&t->dbuf, &t->dcap, most) == 0;
    size_t next = 0, nactive = 0;
    for (size_t k = 0; k < nframes; k++) {
        frame_t *f = &fr[k];
        const uint8_t *bytes = f->plain;
        if (!bytes) {
            uint8_t *into = f->dst ? f->dst : (room ? t->dbuf : NULL);
            f->status = into ? decode_frame(t, fd, mem, mem_len, f, into) : CZ_NO_MEMORY;
            bytes = into;
        }
        while (next < nspans && order[next]->f0 == k) active[nactive++] = order[next++];
        size_t keep = 0;
        for (size_t j = 0; j < nactive; j++) {
            span_t *s = active[j];
            take(s, f, k, bytes, f->status);
            if (s->f1 == k) finish(s);
            else active[keep++] = s;
        }
        nactive = keep;
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
    frame_t *fr = t ? calloc(nframes ? nframes : 1, sizeof(*fr)) : NULL;
    span_t *sp = fr ? calloc(nspans ? nspans : 1, sizeof(*sp)) : NULL;
    span_t **order = sp ? malloc(2 * (nspans ? nspans : 1) * sizeof(*order)) : NULL;
    if (!order) {
        free(sp);
        free(fr);
        return fail_all(status, aux, nspans, CZ_NO_MEMORY);
    }
    for (size_t k = 0; k < nframes; k++) {
        const uint64_t *row = frames + k * CZ_FRAME_FIELDS;
        fr[k] = (frame_t){row[0], row[1], row[2], row[3], row[4], src[k], dst[k], plain[k],
                          CZ_OK, 0};
    }
    size_t n = 0; /* members whose frames are in range go through the sweep */
    for (size_t j = 0; j < nspans; j++) {
        const uint64_t *row = spans + j * CZ_SPAN_FIELDS;
        sp[j] = (span_t){row[0], row[1], row[2], row[3], row[4], row[5], out[j], 0, CZ_OK, 0};
        if (row[2] > row[3] || row[3] >= nframes || row[1] > UINT64_MAX - row[0])
            sp[j].status = CZ_BAD_SPAN;
        else
            order[n++] = &sp[j];
    }
    qsort(order, n, sizeof(*order), by_first_frame);
    sweep(t, fd, mem, mem_len, fr, nframes, order, n, order + nspans);
    int bad = 0;
    for (size_t j = 0; j < nspans; j++) {
        status[j] = sp[j].status;
        aux[j] = sp[j].aux;
        if (status[j] != CZ_OK) bad++;
    }
    for (size_t k = 0; k < nframes; k++) {
        fstatus[k] = fr[k].status;
        ferr[k] = fr[k].err;
    }
    free(order);
    free(sp);
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
 * member's status; *aux (when aux is not NULL) as cz_zstd_read gives it, or the errno of a
 * failed read. */
int cz_zstd_read_one(int fd, const uint8_t *mem, uint64_t mem_len, uint64_t coff,
                     uint64_t csize, uint64_t doff, uint64_t dsize, uint8_t *dst,
                     uint64_t off, uint64_t size, uint32_t crc, int check_crc, uint8_t *out,
                     uint64_t *aux) {
    uint64_t frame[CZ_FRAME_FIELDS] = {coff, csize, doff, dsize, 0};
    uint64_t span[CZ_SPAN_FIELDS] = {off, size, 0, 0, crc, check_crc != 0};
    const uint8_t *none = NULL;
    uint8_t *dsts[1] = {dst}, *outs[1] = {out};
    int32_t st = CZ_NEED_PYTHON, fst = CZ_OK;
    uint64_t ferr = 0, got = 0;
    cz_zstd_read(fd, mem, mem_len, frame, 1, &none, dsts, &none, &fst, &ferr, span, 1, outs,
                 &st, &got);
    if (aux) *aux = st == CZ_IO_ERROR ? ferr : got;
    return st;
}
