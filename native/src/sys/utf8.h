#ifndef HOMESFS_UTF8_H
#define HOMESFS_UTF8_H
#include <stddef.h>
// Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF): 1 or 0.
int hs_utf8_valid_n (const unsigned char *p, size_t n);
// The same for a NUL-terminated string; NULL (no path) is valid.
int hs_utf8_valid (const char *s);
#endif
