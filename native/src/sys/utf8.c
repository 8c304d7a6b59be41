// The one UTF-8 validator of the native side: names on every path op, and
// the bytes JS asks about (Fuse._isValidUtf8). It must agree with the
// TextDecoder JS uses (fatal mode): test/addon/binding.test.ts compares both.
#include <stddef.h>
#include <string.h>
#include "sys/utf8.h"

// Strict UTF-8 validation of a NUL-terminated string: rejects stray
// continuation bytes, truncated sequences, overlong forms, UTF-16 surrogates
// (U+D800..U+DFFF) and code points above U+10FFFF. NULL is accepted (no path).
int hs_utf8_valid_n (const unsigned char *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) { i++; continue; }
    unsigned char lo = 0x80, hi = 0xBF;
    size_t need;
    if (c >= 0xC2 && c <= 0xDF) { need = 1; }
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) { need = 2; }
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c >= 0xEE && c <= 0xEF) { need = 2; }
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) { need = 3; }
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else return 0;
    if (n - i - 1 < need) return 0;
    if (p[i + 1] < lo || p[i + 1] > hi) return 0;
    for (size_t k = 2; k <= need; k++) {
      if ((p[i + k] & 0xC0) != 0x80) return 0;
    }
    i += need + 1;
  }
  return 1;
}

int hs_utf8_valid (const char *s) {
  if (s == NULL) return 1;
  return hs_utf8_valid_n((const unsigned char *) s, strlen(s));
}
