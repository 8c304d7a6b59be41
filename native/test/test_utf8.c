// utf8.c against the definition: named edge cases, then a reference decoder
// written from the Unicode definition (decode, then reject overlongs,
// surrogates and code points past U+10FFFF) compared over every 1-, 2- and
// 3-byte sequence, every 4-byte one whose tail is continuation bytes or one
// of a set of boundary bytes, and a random sample of longer strings. Each
// input sits in a buffer of exactly its length: AddressSanitizer (the
// Makefile builds with it) reports a read past the end.
#include <stdint.h>
#include <string.h>
#include "harness.h"
#include "../src/sys/utf8.h"

static int ref_valid(const unsigned char *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) { i++; continue; }
    else if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return 0;
    if (n - i < len) return 0;
    for (size_t k = 1; k < len; k++) {
      if ((p[i + k] & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    i += len;
  }
  return 1;
}

// The validator on a heap copy of exactly n bytes.
static int valid_exact(const unsigned char *p, size_t n) {
  unsigned char *b = malloc(n ? n : 1);
  memcpy(b, p, n);
  int r = hs_utf8_valid_n(b, n);
  free(b);
  return r;
}

#define V(s) valid_exact((const unsigned char *) (s), sizeof(s) - 1)

TEST(named_edge_cases) {
  CHECK_EQ(V(""), 1);
  CHECK_EQ(V("plain ascii"), 1);
  CHECK_EQ(V("caf\xC3\xA9"), 1);                 // U+00E9
  CHECK_EQ(V("\xC2\x80"), 1);                    // U+0080, the first 2-byte
  CHECK_EQ(V("\xDF\xBF"), 1);                    // U+07FF
  CHECK_EQ(V("\xE0\xA0\x80"), 1);                // U+0800, the first 3-byte
  CHECK_EQ(V("\xED\x9F\xBF"), 1);                // U+D7FF, below the surrogates
  CHECK_EQ(V("\xEE\x80\x80"), 1);                // U+E000, above them
  CHECK_EQ(V("\xEF\xBF\xBF"), 1);                // U+FFFF
  CHECK_EQ(V("\xF0\x90\x80\x80"), 1);            // U+10000, the first 4-byte
  CHECK_EQ(V("\xF4\x8F\xBF\xBF"), 1);            // U+10FFFF, the last
  CHECK_EQ(V("\xF0\x9F\x98\x80 emoji"), 1);
  // overlongs
  CHECK_EQ(V("\xC0\x80"), 0);                    // NUL in two bytes
  CHECK_EQ(V("\xC1\xBF"), 0);
  CHECK_EQ(V("\xE0\x80\xAF"), 0);                // '/' in three
  CHECK_EQ(V("\xE0\x9F\xBF"), 0);                // U+07FF in three
  CHECK_EQ(V("\xF0\x80\x80\xAF"), 0);
  CHECK_EQ(V("\xF0\x8F\xBF\xBF"), 0);            // U+FFFF in four
  // UTF-16 surrogates
  CHECK_EQ(V("\xED\xA0\x80"), 0);                // U+D800
  CHECK_EQ(V("\xED\xBF\xBF"), 0);                // U+DFFF
  CHECK_EQ(V("\xED\xA0\xBD\xED\xB8\x80"), 0);    // a CESU-8 pair
  // past U+10FFFF
  CHECK_EQ(V("\xF4\x90\x80\x80"), 0);            // U+110000
  CHECK_EQ(V("\xF5\x80\x80\x80"), 0);
  CHECK_EQ(V("\xF7\xBF\xBF\xBF"), 0);
  CHECK_EQ(V("\xF8\x88\x80\x80\x80"), 0);        // 5-byte form
  CHECK_EQ(V("\xFC\x84\x80\x80\x80\x80"), 0);    // 6-byte form
  CHECK_EQ(V("\xFE"), 0);
  CHECK_EQ(V("\xFF"), 0);
  // stray continuations and truncated sequences
  CHECK_EQ(V("\x80"), 0);
  CHECK_EQ(V("a\xBF"), 0);
  CHECK_EQ(V("\xC3"), 0);
  CHECK_EQ(V("\xE2\x82"), 0);
  CHECK_EQ(V("\xF0\x9F\x98"), 0);
  CHECK_EQ(V("\xF0\x9F\x98x"), 0);
  CHECK_EQ(V("\xE2x\xAC"), 0);
  CHECK_EQ(V("ok\xC3"), 0);
  // the NUL-terminated form: NULL is no path, and so valid
  CHECK_EQ(hs_utf8_valid(NULL), 1);
  CHECK_EQ(hs_utf8_valid("h\xC3\xA9llo"), 1);
  CHECK_EQ(hs_utf8_valid("h\xC3llo"), 0);
  // the length bounds the check: a valid prefix of an invalid buffer is valid
  CHECK_EQ(hs_utf8_valid_n((const unsigned char *) "ab\xFF", 2), 1);
}

TEST(every_1_2_3_byte_sequence_agrees_with_the_reference) {
  unsigned char b[3];
  long mismatches = 0, valid = 0;
  for (uint32_t v = 0; v < 256; v++) {
    b[0] = (unsigned char) v;
    int r = hs_utf8_valid_n(b, 1);
    if (r != ref_valid(b, 1)) mismatches++;
    valid += r;
  }
  CHECK_EQ(valid, 128);
  valid = 0;
  for (uint32_t v = 0; v < 1u << 16; v++) {
    b[0] = (unsigned char) (v >> 8); b[1] = (unsigned char) v;
    int r = hs_utf8_valid_n(b, 2);
    if (r != ref_valid(b, 2)) mismatches++;
    valid += r;
  }
  // 128 * 128 pairs of ASCII, plus the 1920 code points U+0080..U+07FF
  CHECK_EQ(valid, 128 * 128 + 1920);
  valid = 0;
  for (uint32_t v = 0; v < 1u << 24; v++) {
    b[0] = (unsigned char) (v >> 16); b[1] = (unsigned char) (v >> 8); b[2] = (unsigned char) v;
    int r = hs_utf8_valid_n(b, 3);
    if (r != ref_valid(b, 3)) mismatches++;
    valid += r;
  }
  // ASCII^3 + 2 * ASCII * two-byte + the 3-byte code points minus surrogates
  CHECK_EQ(valid, 128L * 128 * 128 + 2L * 128 * 1920 + (0x10000 - 0x800 - 0x800));
  CHECK_EQ(mismatches, 0);
}

TEST(four_byte_sequences_agree_with_the_reference) {
  // Every lead byte; each tail byte from the continuation range or a boundary.
  static const unsigned char other[] = { 0x00, 0x41, 0x7F, 0xC0, 0xC2, 0xE0, 0xED, 0xF0, 0xF4, 0xF5, 0xFF };
  unsigned char tail[64 + sizeof(other)];
  size_t nt = 0;
  for (int c = 0x80; c <= 0xBF; c++) tail[nt++] = (unsigned char) c;
  for (size_t k = 0; k < sizeof(other); k++) tail[nt++] = other[k];
  long mismatches = 0, valid4 = 0, checked = 0;
  unsigned char b[4];
  for (int lead = 0; lead < 256; lead++) {
    b[0] = (unsigned char) lead;
    for (size_t x = 0; x < nt; x++)
      for (size_t y = 0; y < nt; y++)
        for (size_t z = 0; z < nt; z++) {
          b[1] = tail[x]; b[2] = tail[y]; b[3] = tail[z];
          int r = hs_utf8_valid_n(b, 4);
          if (r != ref_valid(b, 4)) mismatches++;
          if (lead >= 0xF0 && x < 64 && y < 64 && z < 64) valid4 += r;
          checked++;
        }
  }
  // every 4-byte code point U+10000..U+10FFFF, once
  CHECK_EQ(valid4, 0x100000);
  CHECK(checked > 100000000L / 100);
  CHECK_EQ(mismatches, 0);
}

TEST(random_strings_agree_with_the_reference) {
  uint64_t s = 0x9E3779B97F4A7C15ULL;
  unsigned char b[16];
  long mismatches = 0, valid = 0;
  for (long i = 0; i < 2000000; i++) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    size_t n = (size_t) (s % 16);
    uint64_t t = s;
    for (size_t k = 0; k < n; k++) {
      t = t * 6364136223846793005ULL + 1442695040888963407ULL;
      unsigned char c = (unsigned char) (t >> 56);
      // favour bytes that start or continue sequences, so valid strings are common too
      if ((t >> 40) & 1) c = (unsigned char) (0x80 | (c & 0x3F));
      b[k] = c;
    }
    int r = (i % 64 == 0) ? valid_exact(b, n) : hs_utf8_valid_n(b, n);
    if (r != ref_valid(b, n)) mismatches++;
    valid += r;
  }
  CHECK(valid > 1000);
  CHECK_EQ(mismatches, 0);
}
