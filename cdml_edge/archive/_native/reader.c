/* cdml-edge native archive core.
 *
 * cz_parse() turns a ZIP central directory into a flat index; cz_read_*() read a batch
 * of members (positional reads, inflate / zstd, CRC-32) without touching Python, so the
 * caller releases the GIL around them. Every length taken from the archive is checked
 * against the bytes actually present: corrupt input yields a status, never a crash.
 */
#define _DEFAULT_SOURCE 1 /* preadv */
#include "reader.h"
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zlib.h>

#if defined(CZ_HAVE_ZSTD)
#include <zstd.h>
#endif

#define LOCAL_SLACK 128u

/* libdeflate, when the system has it (libdeflate0), is loaded at run time: whole-buffer
 * inflate and CRC-32 about twice as fast as zlib. No header is needed to build; without
 * the library (or with CDML_EDGE_NO_LIBDEFLATE set) zlib does the work. */
typedef void *(*ld_alloc_fn)(void);
typedef int (*ld_inflate_fn)(void *, const void *, size_t, void *, size_t, size_t *);
typedef void (*ld_free_fn)(void *);
typedef uint32_t (*ld_crc_fn)(uint32_t, const void *, size_t);
static struct {
    ld_alloc_fn alloc;
    ld_inflate_fn inflate;
    ld_free_fn free;
    ld_crc_fn crc;
} LD;
static pthread_once_t ld_once = PTHREAD_ONCE_INIT;

static void ld_load(void) {
    const char *off = getenv("CDML_EDGE_NO_LIBDEFLATE");
    if (off && *off && *off != '0') return;
    const char *names[] = {"libdeflate.so.0", "libdeflate.so", "libdeflate.0.dylib",
                           "libdeflate.dylib"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    ld_alloc_fn a = (ld_alloc_fn)dlsym(h, "libdeflate_alloc_decompressor");
    ld_inflate_fn d = (ld_inflate_fn)dlsym(h, "libdeflate_deflate_decompress");
    ld_free_fn f = (ld_free_fn)dlsym(h, "libdeflate_free_decompressor");
    ld_crc_fn c = (ld_crc_fn)dlsym(h, "libdeflate_crc32");
    if (!a || !d || !f || !c) return;
    LD.alloc = a;
    LD.inflate = d;
    LD.free = f;
    LD.crc = c;
}

int cz_inflate_backend(void) {
    pthread_once(&ld_once, ld_load);
    return LD.inflate != NULL;
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

int cz_have_zstd(void) {
#if defined(CZ_HAVE_ZSTD)
    return 1;
#else
    return 0;
#endif
}

int cz_zstd_bundled(void) {
#if defined(CZ_ZSTD_BUNDLED)
    return 1;
#else
    return 0;
#endif
}

unsigned cz_zstd_version(void) {
#if defined(CZ_HAVE_ZSTD)
    return ZSTD_versionNumber();
#else
    return 0;
#endif
}

void cz_free(cz_index *idx) {
    if (!idx) return;
    free(idx->entries);
    free(idx->names);
    free(idx);
}

static int fail(char *err, size_t errlen, int code, const char *msg, size_t entry) {
    if (err && errlen) snprintf(err, errlen, "%s (central directory entry %zu)", msg, entry);
    return code;
}

/* returns 0, or 1 corrupt / 2 truncated / 3 no memory with a message in err */
int cz_parse(const uint8_t *cd, size_t len, int64_t delta, cz_index **out, char *err,
             size_t errlen) {
    size_t cap = len / 46 + 1, count = 0, pos = 0, npos = 0;
    cz_index *idx = calloc(1, sizeof(*idx));
    if (!idx) return 3;
    idx->entries = malloc(cap * sizeof(cz_entry));
    idx->names = malloc(len + cap + 1);
    if (!idx->entries || !idx->names) {
        cz_free(idx);
        return 3;
    }
    while (pos < len) {
        if (len - pos < 46) {
            cz_free(idx);
            return fail(err, errlen, 2, "central directory entry cut short", count);
        }
        const uint8_t *p = cd + pos;
        if (rd32(p) != 0x02014b50u) {
            cz_free(idx);
            return fail(err, errlen, 1, "bad central directory signature", count);
        }
        size_t nlen = rd16(p + 28), elen = rd16(p + 30), clen = rd16(p + 32);
        if (len - pos - 46 < nlen + elen + clen) {
            cz_free(idx);
            return fail(err, errlen, 2, "central directory entry cut short", count);
        }
        cz_entry *e = &idx->entries[count];
        e->flags = rd16(p + 8);
        e->method = rd16(p + 10);
        e->dtime = rd16(p + 12);
        e->ddate = rd16(p + 14);
        e->crc = rd32(p + 16);
        e->csize = rd32(p + 20);
        e->usize = rd32(p + 24);
        e->offset = rd32(p + 42);
        e->cd_off = (uint32_t)pos;
        e->hdr_extra = (uint32_t)(nlen + elen);
        e->ut_mtime = INT64_MIN;
        const uint8_t *name = p + 46, *extra = name + nlen;
        int need64 = e->usize == 0xFFFFFFFFu || e->csize == 0xFFFFFFFFu ||
                     e->offset == 0xFFFFFFFFu;
        int got64 = 0;
        size_t i = 0;
        while (i + 4 <= elen) {
            uint16_t tag = rd16(extra + i), n = rd16(extra + i + 2);
            const uint8_t *v = extra + i + 4;
            if (i + 4 + n > elen) break;
            if (tag == 0x0001 && need64 && !got64) {
                size_t j = 0;
                got64 = 1;
                if (e->usize == 0xFFFFFFFFu) {
                    if (j + 8 > n) got64 = -1; else { e->usize = rd64(v + j); j += 8; }
                }
                if (got64 > 0 && e->csize == 0xFFFFFFFFu) {
                    if (j + 8 > n) got64 = -1; else { e->csize = rd64(v + j); j += 8; }
                }
                if (got64 > 0 && e->offset == 0xFFFFFFFFu) {
                    if (j + 8 > n) got64 = -1; else { e->offset = rd64(v + j); j += 8; }
                }
            } else if (tag == 0x5455 && n >= 5 && (v[0] & 1)) {
                e->ut_mtime = (int32_t)rd32(v + 1);
            }
            i += 4 + (size_t)n;
        }
        /* 2^32-1 bytes and no ZIP64 extra at all: that size itself (Go, zipfile) */
        int plain_max = got64 == 0 && e->csize != 0xFFFFFFFFu && e->offset != 0xFFFFFFFFu;
        if (need64 && got64 != 1 && !plain_max) {
            cz_free(idx);
            return fail(err, errlen, 1, "ZIP64 extra field is missing or short", count);
        }
        /* the prefix delta: offsets stay unsigned; an impossible one is caught on read */
        e->offset = (uint64_t)((int64_t)e->offset + delta);
        int ascii = 1;
        for (size_t k = 0; k < nlen; k++) {
            if (name[k] == 0) idx->special_names = 1;
            if (name[k] & 0x80) ascii = 0;
        }
        e->name_kind = ascii ? 0 : ((e->flags & 0x800) ? 1 : 2);
        if (e->name_kind == 2) idx->special_names = 1;
        e->is_dir = nlen > 0 && name[nlen - 1] == '/';
        if (e->is_dir) idx->ndirs++;
        e->name_off = (uint32_t)npos;
        e->name_len = (uint32_t)nlen;
        memcpy(idx->names + npos, name, nlen);
        npos += nlen;
        idx->names[npos++] = 0;
        pos += 46 + nlen + elen + clen;
        count++;
    }
    idx->count = count;
    idx->names_len = npos;
    *out = idx;
    return 0;
}

/* Overlapping members (local header on: 30 + csize bytes from the offset), in offset order
 * with ties in directory order. Returns 1 with the earlier member in pair[0] and the one
 * overlapping it in pair[1], 0 when none overlap, -1 out of memory. */
typedef struct {
    uint64_t off;
    uint32_t i;
} cz_span_key;

static int by_offset(const void *a, const void *b) {
    const cz_span_key *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

int cz_find_overlap(const cz_index *idx, uint32_t *pair) {
    size_t n = idx->count, k;
    const cz_entry *e = idx->entries;
    int sorted = 1;
    for (k = 1; k < n && sorted; k++) sorted = e[k - 1].offset <= e[k].offset;
    cz_span_key *order = NULL;
    if (!sorted) {
        order = malloc(n * sizeof(cz_span_key));
        if (!order) return -1;
        for (k = 0; k < n; k++) {
            order[k].off = e[k].offset;
            order[k].i = (uint32_t)k;
        }
        qsort(order, n, sizeof(cz_span_key), by_offset);
    }
    uint64_t end = 0;
    int have = 0;
    uint32_t prev = 0;
    for (k = 0; k < n; k++) {
        uint32_t i = order ? order[k].i : (uint32_t)k;
        if (have && e[i].offset < end) {
            pair[0] = prev;
            pair[1] = i;
            free(order);
            return 1;
        }
        end = e[i].offset + 30 + e[i].csize;
        prev = i;
        have = 1;
    }
    free(order);
    return 0;
}

/* ---------------------------------------------------------------- member decoding */

typedef struct {
    z_stream zs;
    int zs_ready;
    void *ld; /* libdeflate decompressor */
#if defined(CZ_HAVE_ZSTD)
    ZSTD_DCtx *zd;
#endif
} cz_codecs;

static void codecs_free(cz_codecs *c) {
    if (c->zs_ready) inflateEnd(&c->zs);
    if (c->ld) LD.free(c->ld);
#if defined(CZ_HAVE_ZSTD)
    if (c->zd) ZSTD_freeDCtx(c->zd);
#endif
}

static int inflate_member(cz_codecs *c, const uint8_t *src, uint64_t csize, uint8_t *dst,
                          uint64_t usize) {
    if (cz_inflate_backend() && csize <= SIZE_MAX && usize <= SIZE_MAX) {
        if (!c->ld) c->ld = LD.alloc();
        if (c->ld) {
            size_t got = 0;
            int r = LD.inflate(c->ld, src, (size_t)csize, dst, (size_t)usize, &got);
            if (r == 0) return got == usize ? CZ_OK : CZ_SIZE_MISMATCH;
            if (r == 3) return CZ_SIZE_MISMATCH; /* output would exceed the declared size */
            return CZ_DATA_ERROR;
        }
    }
    if (!c->zs_ready) {
        memset(&c->zs, 0, sizeof(c->zs));
        if (inflateInit2(&c->zs, -15) != Z_OK) return CZ_NO_MEMORY;
        c->zs_ready = 1;
    } else if (inflateReset(&c->zs) != Z_OK) {
        return CZ_DATA_ERROR;
    }
    z_stream *zs = &c->zs;
    uint64_t in_left = csize, out_left = usize;
    const uint8_t *in = src;
    uint8_t *outp = dst;
    int ret = Z_OK;
    for (;;) {
        uInt ai = in_left > UINT_MAX ? UINT_MAX : (uInt)in_left;
        uInt ao = out_left > UINT_MAX ? UINT_MAX : (uInt)out_left;
        zs->next_in = (Bytef *)in;
        zs->avail_in = ai;
        zs->next_out = outp;
        zs->avail_out = ao;
        ret = inflate(zs, Z_NO_FLUSH);
        in += ai - zs->avail_in;
        in_left -= ai - zs->avail_in;
        outp += ao - zs->avail_out;
        out_left -= ao - zs->avail_out;
        if (ret == Z_STREAM_END) break;
        if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT) return CZ_DATA_ERROR;
        if (ret == Z_MEM_ERROR) return CZ_NO_MEMORY;
        if (out_left == 0) {
            /* output full: the stream must end here, without producing more */
            uint8_t probe;
            zs->next_in = (Bytef *)in;
            zs->avail_in = in_left > UINT_MAX ? UINT_MAX : (uInt)in_left;
            zs->next_out = &probe;
            zs->avail_out = 1;
            ret = inflate(zs, Z_NO_FLUSH);
            if (ret == Z_STREAM_END && zs->avail_out == 1) return CZ_OK;
            if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT) return CZ_DATA_ERROR;
            if (zs->avail_out == 0) return CZ_SIZE_MISMATCH;
            return CZ_TRUNCATED;
        }
        if (in_left == 0) return CZ_TRUNCATED;
        if (ret == Z_BUF_ERROR) return CZ_TRUNCATED;
    }
    return out_left == 0 ? CZ_OK : CZ_SIZE_MISMATCH;
}

static int zstd_member(cz_codecs *c, const uint8_t *src, uint64_t csize, uint8_t *dst,
                       uint64_t usize) {
#if defined(CZ_HAVE_ZSTD)
    if (!c->zd) {
        c->zd = ZSTD_createDCtx();
        if (!c->zd) return CZ_NO_MEMORY;
    }
    ZSTD_inBuffer in = {src, (size_t)csize, 0};
    ZSTD_outBuffer outb = {dst, (size_t)usize, 0};
    for (;;) {
        size_t r = ZSTD_decompressStream(c->zd, &outb, &in);
        if (ZSTD_isError(r)) {
            ZSTD_DCtx_reset(c->zd, ZSTD_reset_session_only);
            return CZ_DATA_ERROR;
        }
        if (r == 0 && in.pos == in.size) break; /* every frame complete, input consumed */
        if (outb.pos == outb.size) {
            uint8_t probe;
            ZSTD_outBuffer pb = {&probe, 1, 0};
            r = ZSTD_decompressStream(c->zd, &pb, &in);
            ZSTD_DCtx_reset(c->zd, ZSTD_reset_session_only);
            if (ZSTD_isError(r)) return CZ_DATA_ERROR;
            if (pb.pos) return CZ_SIZE_MISMATCH;
            if (r != 0) return CZ_TRUNCATED;
            break;
        }
        if (in.pos == in.size) {
            ZSTD_DCtx_reset(c->zd, ZSTD_reset_session_only);
            return CZ_TRUNCATED;
        }
    }
    return outb.pos == usize ? CZ_OK : CZ_SIZE_MISMATCH;
#else
    (void)c; (void)src; (void)csize; (void)dst; (void)usize;
    return CZ_NEED_PYTHON;
#endif
}

uint32_t cz_crc32(const uint8_t *p, uint64_t n) {
    if (cz_inflate_backend()) return LD.crc(0, p, (size_t)n);
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)crc;
}

/* The raw central-directory name of e (NULL when the index holds no names). */
static const uint8_t *central_name(const cz_index *idx, const cz_entry *e) {
    return idx->names ? (const uint8_t *)idx->names + e->name_off : NULL;
}

/* Whether the local header at buf names the member as the central directory does (cname,
 * e->name_len bytes); the caller made sure the local name's bytes are there. */
static int same_name(const cz_entry *e, const uint8_t *cname, const uint8_t *buf) {
    return !cname || (rd16(buf + 26) == e->name_len && memcmp(buf + 30, cname, e->name_len) == 0);
}

/* Decode one member from the bytes that start at its local header (avail of them).
 * *need is set to the total length required when avail is too short. */
static int decode(cz_codecs *c, const cz_entry *e, const uint8_t *cname, const uint8_t *buf,
                  uint64_t avail, uint8_t *dst, uint64_t *aux, uint64_t *need) {
    if (avail < 30) {
        *need = 30;
        return CZ_TRUNCATED;
    }
    if (rd32(buf) != 0x04034b50u) return CZ_BAD_LOCAL;
    uint64_t start = 30u + rd16(buf + 26) + rd16(buf + 28);
    /* the data descriptor after the data counts in what must be there (12 bytes read, as
     * Go and the Python path do): *need covers all of it, so one read on is enough */
    uint64_t tail = (e->flags & 8) ? 12u : 0u;
    if (e->csize > UINT64_MAX - start - tail) return CZ_TRUNCATED;
    if (start + e->csize + tail > avail) {
        *need = start + e->csize + tail;
        return CZ_TRUNCATED;
    }
    if (!same_name(e, cname, buf)) return CZ_NAME_MISMATCH;
    if (e->flags & 8) {
        /* the data descriptor: [signature] CRC-32, sizes; its CRC-32 must be the central
         * directory's */
        const uint8_t *q = buf + start + e->csize;
        uint32_t dcrc = rd32(q) == 0x08074b50u ? rd32(q + 4) : rd32(q);
        if (dcrc != e->crc) {
            *aux = dcrc;
            return CZ_DESCRIPTOR;
        }
    }
    const uint8_t *src = buf + start;
    int st;
    switch (e->method) {
    case 0:
        if (e->csize != e->usize) return CZ_SIZE_MISMATCH;
        memcpy(dst, src, (size_t)e->usize);
        st = CZ_OK;
        break;
    case 8:
        st = inflate_member(c, src, e->csize, dst, e->usize);
        break;
    case 93:
        st = zstd_member(c, src, e->csize, dst, e->usize);
        break;
    default:
        return CZ_NEED_PYTHON;
    }
    if (st != CZ_OK) return st;
    uint32_t got = cz_crc32(dst, e->usize);
    if (got != e->crc) {
        *aux = got;
        return CZ_CRC_MISMATCH;
    }
    return CZ_OK;
}

static uint64_t want_len(const cz_entry *e, uint64_t size) {
    if (e->offset >= size) return 0;
    uint64_t room = size - e->offset;
    uint64_t w = 30u + (uint64_t)e->hdr_extra + LOCAL_SLACK;
    w = e->csize > UINT64_MAX - w ? UINT64_MAX : w + e->csize;
    return w < room ? w : room;
}

int cz_pread_full(int fd, uint8_t *buf, uint64_t len, uint64_t off, uint64_t *got) {
    uint64_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, buf + done, (size_t)(len - done), (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            *got = done;
            return errno ? errno : EIO;
        }
        if (r == 0) break;
        done += (uint64_t)r;
    }
    *got = done;
    return 0;
}

/* A stored member read straight into its output: one preadv of the local header (assumed
 * as long as the central one) and the data. Returns 1 when it served the member (status
 * set), 0 when the generic path must (local header of another length, short file). */
static int stored_direct(const cz_entry *e, const uint8_t *cname, int fd, uint64_t file_size,
                         uint8_t *dst, int32_t *status, uint64_t *aux) {
    uint8_t head[4096]; /* local headers longer than this take the generic path */
    uint64_t hlen = 30u + (uint64_t)e->hdr_extra;
    if (e->method != 0 || e->csize != e->usize || (e->flags & 9) || hlen > sizeof(head) ||
        e->offset >= file_size || file_size - e->offset < hlen ||
        file_size - e->offset - hlen < e->usize || e->usize > SSIZE_MAX - hlen)
        return 0;
    struct iovec iov[2] = {{head, (size_t)hlen}, {dst, (size_t)e->usize}};
    uint64_t total = hlen + e->usize, done = 0;
    for (;;) {
        ssize_t r = preadv(fd, iov, 2, (off_t)e->offset);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return 0;
        done = (uint64_t)r;
        break;
    }
    if (done < total) return 0; /* short read: the generic path loops and reports */
    if (rd32(head) != 0x04034b50u) return 0;
    if (30u + (uint64_t)rd16(head + 26) + rd16(head + 28) != hlen) return 0;
    if (!same_name(e, cname, head)) {
        *status = CZ_NAME_MISMATCH;
        return 1;
    }
    uint32_t got = cz_crc32(dst, e->usize);
    if (got != e->crc) {
        *aux = got;
        *status = CZ_CRC_MISMATCH;
    } else {
        *status = CZ_OK;
    }
    return 1;
}

int cz_read_fd(const cz_index *idx, int fd, uint64_t file_size, const uint32_t *ids,
               size_t n, uint8_t *const *outs, int32_t *status, uint64_t *aux) {
    cz_codecs c;
    memset(&c, 0, sizeof(c));
    uint8_t *scratch = NULL;
    uint64_t scap = 0;
    int bad = 0;
    for (size_t k = 0; k < n; k++) {
        aux[k] = 0;
        if (ids[k] >= idx->count) { status[k] = CZ_NEED_PYTHON; bad++; continue; }
        const cz_entry *e = &idx->entries[ids[k]];
        const uint8_t *cname = central_name(idx, e);
        if (stored_direct(e, cname, fd, file_size, outs[k], &status[k], &aux[k])) {
            if (status[k] != CZ_OK) bad++;
            continue;
        }
        uint64_t want = want_len(e, file_size), got = 0, need = 0;
        if (want > scap) {
            uint8_t *ns = realloc(scratch, (size_t)want);
            if (!ns) { status[k] = CZ_NO_MEMORY; bad++; continue; }
            scratch = ns;
            scap = want;
        }
        int err = cz_pread_full(fd, scratch, want, e->offset, &got);
        if (err) { status[k] = CZ_IO_ERROR; aux[k] = (uint64_t)err; bad++; continue; }
        int st = decode(&c, e, cname, scratch, got, outs[k], &aux[k], &need);
        if (st == CZ_TRUNCATED && need > got && got == want && e->offset < file_size &&
            need <= file_size - e->offset) {
            /* the local extra field is longer than the central one: read the rest */
            if (need > scap) {
                uint8_t *ns = realloc(scratch, (size_t)need);
                if (!ns) { status[k] = CZ_NO_MEMORY; bad++; continue; }
                scratch = ns;
                scap = need;
            }
            uint64_t more = 0;
            err = cz_pread_full(fd, scratch + got, need - got, e->offset + got, &more);
            if (err) { status[k] = CZ_IO_ERROR; aux[k] = (uint64_t)err; bad++; continue; }
            st = decode(&c, e, cname, scratch, got + more, outs[k], &aux[k], &need);
        }
        status[k] = st;
        if (st != CZ_OK) bad++;
    }
    free(scratch);
    codecs_free(&c);
    return bad;
}

/* Members decoded from bytes already in memory that start at their local headers: bufs[k]
 * (lens[k] of them) for each member, or, when bufs is NULL, the archive held in mem. */
static int read_held(const cz_index *idx, const uint8_t *mem, uint64_t mem_len,
                     const uint8_t *const *bufs, const uint64_t *lens, const uint32_t *ids,
                     size_t n, uint8_t *const *outs, int32_t *status, uint64_t *aux) {
    cz_codecs c;
    memset(&c, 0, sizeof(c));
    int bad = 0;
    for (size_t k = 0; k < n; k++) {
        aux[k] = 0;
        if (ids[k] >= idx->count) { status[k] = CZ_NEED_PYTHON; bad++; continue; }
        const cz_entry *e = &idx->entries[ids[k]];
        const uint8_t *p = mem;
        uint64_t avail = 0, need = 0;
        if (bufs) {
            p = bufs[k];
            avail = lens[k];
        } else if (e->offset < mem_len) {
            p = mem + e->offset;
            avail = mem_len - e->offset;
        }
        int st = decode(&c, e, central_name(idx, e), p, avail, outs[k], &aux[k], &need);
        if (bufs && st == CZ_TRUNCATED && need > avail) st = CZ_NEED_PYTHON; /* read more */
        status[k] = st;
        if (st != CZ_OK) bad++;
    }
    codecs_free(&c);
    return bad;
}

int cz_read_mem(const cz_index *idx, const uint8_t *mem, uint64_t mem_len,
                const uint32_t *ids, size_t n, uint8_t *const *outs, int32_t *status,
                uint64_t *aux) {
    return read_held(idx, mem, mem_len, NULL, NULL, ids, n, outs, status, aux);
}

int cz_read_bufs(const cz_index *idx, const uint8_t *const *bufs, const uint64_t *lens,
                 const uint32_t *ids, size_t n, uint8_t *const *outs, int32_t *status,
                 uint64_t *aux) {
    return read_held(idx, NULL, 0, bufs, lens, ids, n, outs, status, aux);
}

/* Single-member reads: the status of the member (the batch calls' per-member code). */
int cz_read_one_fd(const cz_index *idx, int fd, uint64_t file_size, uint32_t id,
                   uint8_t *out) {
    int32_t st = CZ_NEED_PYTHON;
    uint64_t aux = 0;
    cz_read_fd(idx, fd, file_size, &id, 1, &out, &st, &aux);
    return st;
}

int cz_read_one_mem(const cz_index *idx, const uint8_t *mem, uint64_t mem_len, uint32_t id,
                    uint8_t *out) {
    int32_t st = CZ_NEED_PYTHON;
    uint64_t aux = 0;
    cz_read_mem(idx, mem, mem_len, &id, 1, &out, &st, &aux);
    return st;
}
