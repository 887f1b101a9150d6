/* cdml-edge native archive core: ZIP central-directory index and batch member reads
 * (reader.c), zstd frames of a seekable tar.zst decoded and cut into members (frames.c),
 * the plain copy of a stock tar.zst written and walked (tarcopy.c). */
#ifndef CDML_READER_H
#define CDML_READER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t offset;    /* local header offset in the file (prefix delta applied) */
    uint64_t csize;
    uint64_t usize;
    int64_t ut_mtime;   /* extended-timestamp mtime, or INT64_MIN when absent */
    uint32_t crc;
    uint32_t name_off;  /* into the names blob */
    uint32_t name_len;
    uint32_t hdr_extra; /* central name + extra length: estimate of the local ones */
    uint32_t cd_off;    /* offset of the central record in the central directory */
    uint16_t method;
    uint16_t flags;
    uint16_t dtime;
    uint16_t ddate;
    uint8_t name_kind;  /* 0 ASCII, 1 flagged UTF-8, 2 other (decoded by the caller) */
    uint8_t is_dir;
} cz_entry;

typedef struct {
    cz_entry *entries;
    size_t count;
    char *names;        /* every name followed by a NUL */
    size_t names_len;
    size_t ndirs;
    int special_names;  /* a name holds a NUL byte, or needs the caller's decoding */
} cz_index;

/* status codes of cz_read_* (one per member) */
#define CZ_OK 0
#define CZ_BAD_LOCAL 1
#define CZ_TRUNCATED 2
#define CZ_DATA_ERROR 3
#define CZ_SIZE_MISMATCH 4
#define CZ_CRC_MISMATCH 5
#define CZ_NEED_PYTHON 6
#define CZ_IO_ERROR 7
#define CZ_NO_MEMORY 8
#define CZ_BAD_SPAN 9 /* a member's bytes are not all inside the frames given for it */
#define CZ_DESCRIPTOR 10 /* the data descriptor's CRC-32 is not the central directory's */
#define CZ_NAME_MISMATCH 11 /* the local header's name is not the central directory's */
#define CZ_EXPANDS 12 /* a stream past stop_floor bytes and stop_ratio times its input */

int cz_have_zstd(void);
unsigned cz_zstd_version(void); /* ZSTD_versionNumber() of the libzstd linked, 0 without */
int cz_zstd_bundled(void);      /* 1: libzstd compiled from the bundled sources */
int cz_inflate_backend(void); /* 1: libdeflate, 0: zlib */
int cz_parse(const uint8_t *cd, size_t len, int64_t delta, cz_index **out,
             char *err, size_t errlen);
void cz_free(cz_index *idx);
int cz_find_overlap(const cz_index *idx, uint32_t *pair);
int cz_read_fd(const cz_index *idx, int fd, uint64_t file_size, const uint32_t *ids,
               size_t n, uint8_t *const *outs,
                int32_t *status, uint64_t *aux);
int cz_read_one_fd(const cz_index *idx, int fd, uint64_t file_size, uint32_t id,
                   uint8_t *out);
int cz_read_one_mem(const cz_index *idx, const uint8_t *mem, uint64_t mem_len, uint32_t id,
                    uint8_t *out);
int cz_read_mem(const cz_index *idx, const uint8_t *mem, uint64_t mem_len,
                const uint32_t *ids, size_t n, uint8_t *const *outs,
               int32_t *status, uint64_t *aux);
int cz_read_bufs(const cz_index *idx, const uint8_t *const *bufs, const uint64_t *lens,
                 const uint32_t *ids, size_t n, uint8_t *const *outs,
               int32_t *status, uint64_t *aux);

/* tar.zst: frames of a seekable zstd file and the members cut from them. Offsets "in the
 * stream" are in the decompressed tar stream. Frame k is row k of `frames`:
 *   coff (in the file or mem), csize, doff (in the stream), dsize (0: skippable), src_len
 * with src[k] its compressed bytes when the caller read them (src_len of them), dst[k] a
 * buffer of dsize bytes to decode into (a cache entry), plain[k] the frame already decoded;
 * each NULL when not given. Member j is row j of `spans`:
 *   off (in the stream), size, f0, f1 (rows of `frames` holding it), crc, check_crc
 * and out[j] its size bytes. fstatus/ferr: per frame, the status and a failed read's errno;
 * status/aux: per member, the status and the failing frame's row or the CRC seen. */
#define CZ_FRAME_FIELDS 5
#define CZ_SPAN_FIELDS 6

int cz_zstd_read(int fd, const uint8_t *mem, uint64_t mem_len, const uint64_t *frames,
                 size_t nframes, const uint8_t *const *src, uint8_t *const *dst,
                 const uint8_t *const *plain, int32_t *fstatus, uint64_t *ferr,
                 const uint64_t *spans, size_t nspans, uint8_t *const *out, int32_t *status,
                 uint64_t *aux);
int cz_zstd_read_one(int fd, const uint8_t *mem, uint64_t mem_len, uint64_t coff,
                     uint64_t csize, uint64_t doff, uint64_t dsize, uint8_t *dst,
                     uint64_t off, uint64_t size, uint32_t crc, int check_crc, uint8_t *out,
                     uint64_t *aux);

/* tar.zst made by other tools (tarcopy.c): its tar stream decompressed into a file (a plain
 * copy), the headers that need no judgement walked on the way. Row k of `rows` is entry k:
 *   header offset, size, mtime, name offset (in `names`), name length, type flag (the
 *   header's byte: '0', '7' or 0 a file; '1'-'4', '6' a link, device or FIFO, skipped),
 *   length of the link's target (in `names`, after the name)
 * resume_at: the first header not walked (the caller's walk goes on there): also the first
 * entry past max_rows rows (0: no limit), which the caller refuses. out_fd < 0:
 * nothing written, the members walked alone. */
#define CZ_TAR_ROW 7

typedef struct {
    int64_t *rows;
    size_t count;
    size_t cap;
    size_t max_rows;      /* the walk stops at a row past this many (0: no limit) */
    double stop_ratio;    /* CZ_EXPANDS once the stream is past stop_floor bytes and ... */
    uint64_t stop_floor;  /* ... more than stop_ratio times the input read (0: no limit) */
    char *names;
    size_t names_len;
    size_t names_cap;
    uint64_t resume_at;
    uint64_t stream_bytes;
    uint64_t compressed_read;
    uint64_t err;         /* errno of a failed read or write */
    uint8_t head[512];    /* the header under way */
    size_t head_fill;
    int walking;
    int at_end;           /* the walk stopped at an all-zero block (the end of the archive) */
    int over;             /* the walk stopped at an entry past max_rows rows */
} cz_tar_walk;

int cz_tar_plain_copy(int in_fd, uint64_t in_end, int out_fd, uint64_t max_rows,
                      double stop_ratio, uint64_t stop_floor, cz_tar_walk **result);
void cz_tar_walk_free(cz_tar_walk *w);

#endif
