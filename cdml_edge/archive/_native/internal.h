/* What reader.c shares with frames.c (not part of the cffi interface). */
#ifndef CDML_INTERNAL_H
#define CDML_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32 of n bytes: libdeflate's when it was loaded, else zlib's */
uint32_t cz_crc32(const uint8_t *p, uint64_t n);
/* pread until len bytes or the end of the file; 0, or the errno of a failed read */
int cz_pread_full(int fd, uint8_t *buf, uint64_t len, uint64_t off, uint64_t *got);

#endif
