import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { HomesError } from '../../src/errors.js';
import {
  endsWithIncompleteChar,
  utf8Check,
  Utf8StreamValidator,
  type Utf8Verdict,
} from '../../src/policy/utf8.js';

const b = (...xs: number[]) => Uint8Array.from(xs);
const enc = (s: string) => new TextEncoder().encode(s);

/** Reference: the whole buffer decodes with a fatal decoder. */
function fullOk(bytes: Uint8Array): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    return true;
  } catch {
    return false;
  }
}

/** Reference: valid except possibly an incomplete final character. */
function streamOk(bytes: Uint8Array): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes, { stream: true });
    return true;
  } catch {
    return false;
  }
}

/** Bytes biased toward the UTF-8 edge cases (range limits of leads and continuations). */
const EDGE_BYTES = [
  0x00, 0x41, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed, 0xee,
  0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xf8, 0xfe, 0xff,
];
const edgeByte = fc.oneof(fc.constantFrom(...EDGE_BYTES), fc.integer({ min: 0, max: 255 }));
const randomBytes = (maxLength: number) =>
  fc.array(edgeByte, { maxLength }).map((xs) => Uint8Array.from(xs));
const validBytes = (maxLength: number) =>
  fc.string({ unit: 'binary', maxLength }).map((s) => enc(s));
/** Mostly-valid text with one byte changed: the interesting near-miss files. */
const mutatedBytes = (maxLength: number) =>
  fc
    .tuple(validBytes(maxLength), fc.nat(), edgeByte)
    .map(([bytes, at, v]) => {
      if (bytes.length === 0) return bytes;
      const out = bytes.slice();
      out[at % out.length] = v;
      return out;
    });
/** A slice of valid text: starts and ends may cut characters in half. */
const slicedBytes = (maxLength: number) =>
  fc.tuple(validBytes(maxLength), fc.nat(), fc.nat()).map(([bytes, x, y]) => {
    const lo = bytes.length === 0 ? 0 : x % (bytes.length + 1);
    const hi = lo + (bytes.length === 0 ? 0 : y % (bytes.length - lo + 1));
    return bytes.slice(lo, hi);
  });
const anyBytes = (maxLength: number) =>
  fc.oneof(validBytes(maxLength), mutatedBytes(maxLength), slicedBytes(maxLength), randomBytes(maxLength));

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

describe('utf8Check: table', () => {
  const cases: Array<{
    name: string;
    prefix: number[];
    data: number[];
    suffix: number[];
    eof: boolean;
    gap?: number;
    want: Utf8Verdict;
  }> = [
    { name: 'plain ASCII append', prefix: [0x61], data: [0x62, 0x63], suffix: [], eof: true, want: { ok: true, incompleteTail: false } },
    { name: 'empty write at empty file', prefix: [], data: [], suffix: [], eof: true, want: { ok: true, incompleteTail: false } },
    { name: 'two-byte char whole', prefix: [], data: [0xc3, 0xa9], suffix: [], eof: true, want: { ok: true, incompleteTail: false } },
    { name: 'lead at EOF: incomplete tail allowed', prefix: [0x61], data: [0xe2, 0x82], suffix: [], eof: true, want: { ok: true, incompleteTail: true } },
    { name: 'continuation completes prefix lead', prefix: [0x61, 0xe2, 0x82], data: [0xac], suffix: [], eof: true, want: { ok: true, incompleteTail: false } },
    { name: '4-byte char split 1|3', prefix: [0xf0], data: [0x9f, 0x98, 0x80], suffix: [], eof: true, want: { ok: true, incompleteTail: false } },
    { name: '4-byte char split 3|1', prefix: [0xf0, 0x9f, 0x98], data: [0x80, 0x41], suffix: [], eof: true, want: { ok: true, incompleteTail: false } },
    { name: 'lead in data, continuation in suffix', prefix: [0x61], data: [0xc3], suffix: [0xa9, 0x62], eof: false, want: { ok: true, incompleteTail: false } },
    { name: 'char spans prefix, data and suffix', prefix: [0xf0], data: [0x9f], suffix: [0x98, 0x80, 0x61], eof: false, want: { ok: true, incompleteTail: false } },
    { name: 'prefix open char not continued by data', prefix: [0x61, 0xe2, 0x82], data: [0x41], suffix: [], eof: true, want: { ok: false, offset: 0 } },
    { name: 'prefix open char, empty write at EOF stays incomplete', prefix: [0xe2, 0x82], data: [], suffix: [], eof: true, want: { ok: true, incompleteTail: true } },
    { name: 'stray continuation in data', prefix: [0x61], data: [0x62, 0x80], suffix: [], eof: true, want: { ok: false, offset: 1 } },
    { name: 'stray continuation after complete prefix char', prefix: [0xc3, 0xa9], data: [0xa9], suffix: [], eof: true, want: { ok: false, offset: 0 } },
    { name: 'overlong C0 80', prefix: [], data: [0xc0, 0x80], suffix: [], eof: true, want: { ok: false, offset: 0 } },
    { name: 'overlong C1 BF', prefix: [], data: [0x41, 0xc1, 0xbf], suffix: [], eof: true, want: { ok: false, offset: 1 } },
    { name: 'overlong E0 9F 80', prefix: [], data: [0xe0, 0x9f, 0x80], suffix: [], eof: true, want: { ok: false, offset: 1 } },
    { name: 'E0 A0 80 is U+0800: fine', prefix: [], data: [0xe0, 0xa0, 0x80], suffix: [], eof: true, want: { ok: true, incompleteTail: false } },
    { name: 'overlong F0 8F BF BF', prefix: [], data: [0xf0, 0x8f, 0xbf, 0xbf], suffix: [], eof: true, want: { ok: false, offset: 1 } },
    { name: 'surrogate ED A0 80 (U+D800)', prefix: [], data: [0xed, 0xa0, 0x80], suffix: [], eof: true, want: { ok: false, offset: 1 } },
    { name: 'surrogate split: lead ED in prefix, A0 in data', prefix: [0xed], data: [0xa0, 0x80], suffix: [], eof: true, want: { ok: false, offset: 0 } },
    { name: 'ED 9F BF is U+D7FF: fine', prefix: [], data: [0xed, 0x9f, 0xbf], suffix: [], eof: true, want: { ok: true, incompleteTail: false } },
    { name: 'above U+10FFFF: F4 90 80 80', prefix: [], data: [0xf4, 0x90, 0x80, 0x80], suffix: [], eof: true, want: { ok: false, offset: 1 } },
    { name: 'F4 8F BF BF is U+10FFFF: fine', prefix: [], data: [0xf4, 0x8f, 0xbf, 0xbf], suffix: [], eof: true, want: { ok: true, incompleteTail: false } },
    { name: 'F5 lead never valid', prefix: [], data: [0xf5, 0x80, 0x80, 0x80], suffix: [], eof: true, want: { ok: false, offset: 0 } },
    { name: 'FF byte', prefix: [0x61], data: [0xff], suffix: [], eof: true, want: { ok: false, offset: 0 } },
    { name: 'lead then ASCII inside data', prefix: [], data: [0xe2, 0x41], suffix: [], eof: true, want: { ok: false, offset: 1 } },
    { name: 'write replaces the lead of an existing char: orphaned continuation in suffix', prefix: [0x61], data: [0x41], suffix: [0xa9, 0x62], eof: false, want: { ok: false, offset: 1 } },
    { name: 'write ends with lead, suffix is ASCII', prefix: [], data: [0x41, 0xc3], suffix: [0x62, 0x63, 0x64], eof: false, want: { ok: false, offset: 2 } },
    { name: 'lead in data needs 3, suffix has all 3', prefix: [], data: [0xf0], suffix: [0x9f, 0x98, 0x80], eof: false, want: { ok: true, incompleteTail: false } },
    { name: 'short suffix reaches EOF mid-char: incomplete tail', prefix: [], data: [0xf0], suffix: [0x9f, 0x98], eof: false, want: { ok: true, incompleteTail: true } },
    { name: 'invalid byte after a clean boundary in a 3-byte suffix is not the write\'s', prefix: [], data: [0x41], suffix: [0x42, 0xff, 0x43], eof: false, want: { ok: true, incompleteTail: false } },
    { name: 'suffix reaching EOF is decoded whole', prefix: [], data: [0x41], suffix: [0x42, 0xe2], eof: false, want: { ok: true, incompleteTail: true } },
    { name: 'prefix already broken (E0 80) cannot be extended', prefix: [0xe0, 0x80], data: [0x80], suffix: [], eof: true, want: { ok: false, offset: 0 } },
    { name: 'three continuations in prefix close nothing', prefix: [0x80, 0x80, 0x80], data: [0x41], suffix: [], eof: true, want: { ok: true, incompleteTail: false } },
    { name: 'write past EOF after an incomplete tail: the hole cuts it', prefix: [0x61, 0xc3], data: [0xa9], suffix: [], eof: true, gap: 5, want: { ok: false, offset: 0 } },
    { name: 'write past EOF after a complete tail', prefix: [0x61, 0xc3, 0xa9], data: [0x41], suffix: [], eof: true, gap: 5, want: { ok: true, incompleteTail: false } },
    { name: 'longer prefix: only last 3 bytes matter', prefix: [0xff, 0xff, 0x61, 0xe2, 0x82], data: [0xac], suffix: [], eof: true, want: { ok: true, incompleteTail: false } },
  ];
  it.each(cases)('$name', ({ prefix, data, suffix, eof, gap, want }) => {
    expect(utf8Check(b(...prefix), b(...data), b(...suffix), { dataEndsAtEof: eof, gap: gap ?? 0 })).toEqual(want);
  });

  it.each([
    { name: 'a suffix on a write that claims to end at EOF', suffix: [0x42], opts: { dataEndsAtEof: true } },
    { name: 'a hole before a write that does not end at EOF', suffix: [0x42], opts: { dataEndsAtEof: false, gap: 4 } },
    { name: 'a negative hole', suffix: [], opts: { dataEndsAtEof: true, gap: -1 } },
  ])('refuses $name as a caller bug', ({ suffix, opts }) => {
    expect(() => utf8Check(b(), b(0x41), b(...suffix), opts)).toThrow(HomesError);
  });

  it('handles a 128 KiB write quickly and reports the bad offset', () => {
    const data = enc('é€😀a'.repeat(128 * 1024 / 10));
    expect(utf8Check(b(), data, b(), { dataEndsAtEof: true })).toEqual({ ok: true, incompleteTail: false });
    const bad = data.slice();
    bad[100_001] = 0xff;
    const v = utf8Check(b(), bad, b(), { dataEndsAtEof: true });
    expect(v.ok).toBe(false);
    // Best effort: the reported byte is at or just after the damaged one.
    if (!v.ok) expect(v.offset).toBeGreaterThanOrEqual(100_001 - 3);
    if (!v.ok) expect(v.offset).toBeLessThanOrEqual(100_001 + 1);
  });
});

describe('endsWithIncompleteChar', () => {
  it.each([
    { tail: [], want: false },
    { tail: [0x61], want: false },
    { tail: [0xc3], want: true },
    { tail: [0xc3, 0xa9], want: false },
    { tail: [0xe2, 0x82], want: true },
    { tail: [0xf0, 0x9f, 0x98], want: true },
    { tail: [0x9f, 0x98, 0x80], want: false },
    { tail: [0x61, 0xe2, 0x82, 0xac], want: false },
  ])('$tail -> $want', ({ tail, want }) => {
    expect(endsWithIncompleteChar(b(...tail))).toBe(want);
  });

  it('agrees with the decoder for any valid text cut anywhere', () => {
    fc.assert(
      fc.property(validBytes(40), fc.nat(), (bytes, cut) => {
        const file = bytes.slice(0, cut % (bytes.length + 1));
        expect(endsWithIncompleteChar(file.slice(-3))).toBe(!fullOk(file));
      }),
      { numRuns: 300 },
    );
  });
});

describe('Utf8StreamValidator', () => {
  it.each([
    { name: 'empty stream', chunks: [[]], ok: true, at: -1 },
    { name: 'char split over three chunks', chunks: [[0xf0, 0x9f], [0x98], [0x80]], ok: true, at: -1 },
    { name: 'incomplete at end', chunks: [[0x61, 0x62], [0xe2, 0x82]], ok: false, at: 2 },
    { name: 'bad continuation across chunks', chunks: [[0x61, 0xe0], [0x80]], ok: false, at: 2 },
    { name: 'surrogate across chunks', chunks: [[0xed], [0xb0, 0x80]], ok: false, at: 1 },
    { name: 'stray continuation', chunks: [[0x61], [0x80]], ok: false, at: 1 },
  ])('$name', ({ chunks, ok, at }) => {
    const v = new Utf8StreamValidator();
    for (const c of chunks) v.push(Uint8Array.from(c));
    expect(v.end()).toBe(ok);
    expect(v.errorOffset).toBe(at);
  });

  it('is sticky after an error and reusable after reset', () => {
    const v = new Utf8StreamValidator();
    expect(v.push(b(0xff))).toBe(false);
    expect(v.push(b(0x41))).toBe(false);
    expect(v.end()).toBe(false);
    expect(() => v.push(b(0x41))).toThrow(HomesError);
    v.reset();
    expect(v.push(b(0xc3))).toBe(true);
    expect(v.midCharacter).toBe(true);
    expect(v.push(b(0xa9))).toBe(true);
    expect(v.midCharacter).toBe(false);
    expect(v.end()).toBe(true);
  });

  it('agrees with TextDecoder({fatal:true}) under any chunking', () => {
    fc.assert(
      fc.property(anyBytes(64), fc.array(fc.nat(), { maxLength: 8 }), (bytes, cuts) => {
        const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((x, y) => x - y);
        const v = new Utf8StreamValidator();
        let prev = 0;
        for (const p of [...points, bytes.length]) {
          v.push(bytes.subarray(prev, p));
          prev = p;
        }
        expect(v.end()).toBe(fullOk(bytes));
        // The first bad byte: everything before it is a valid stream prefix.
        if (v.errorOffset >= 0) expect(streamOk(bytes.subarray(0, v.errorOffset))).toBe(true);
      }),
      { numRuns: 500 },
    );
  });
});

describe('utf8Check against the spliced file', () => {
  /**
   * The model: actually perform the write on a copy of the file (zero-filling a
   * hole when the offset is past EOF), then ask TextDecoder about the result.
   */
  const scenario = fc.record({
    file: anyBytes(24),
    data: fc.oneof(slicedBytes(12), randomBytes(6), validBytes(6)),
    offset: fc.nat({ max: 30 }),
  });

  it('accepts iff the result decodes (an incomplete final char being allowed and reported)', () => {
    fc.assert(
      fc.property(scenario, ({ file, data, offset }) => {
        const gap = Math.max(0, offset - file.length);
        const before = concat(file, new Uint8Array(gap));
        const end = offset + data.length;
        const after = concat(before.subarray(0, offset), data, before.subarray(Math.min(end, before.length)));
        const dataEndsAtEof = end >= before.length;
        // What the fs layer reads around the write: for a write past EOF, the
        // current tail of the file and the size of the hole.
        const prefix = gap > 0 ? file.subarray(Math.max(0, file.length - 3)) : after.subarray(Math.max(0, offset - 3), offset);
        const suffix = after.subarray(end, Math.min(after.length, end + 3));
        const verdict = utf8Check(prefix, data, suffix, { dataEndsAtEof, gap });
        // The check can only know about EOF when the suffix is shorter than 3
        // bytes (or absent); with exactly 3 bytes left, the tail is untouched.
        const windowReachesEof = dataEndsAtEof || after.length - end < 3;

        // Completeness, for any file: a result that decodes is never refused.
        if (streamOk(after)) expect(verdict.ok).toBe(true);
        if (fullOk(after)) expect(verdict).toEqual({ ok: true, incompleteTail: false });
        // incompleteTail is only ever claimed about the real end of the file.
        if (verdict.ok && verdict.incompleteTail) {
          expect(windowReachesEof).toBe(true);
          expect(fullOk(after)).toBe(false);
        }
        if (!verdict.ok) {
          expect(verdict.offset).toBeGreaterThanOrEqual(0);
          expect(verdict.offset).toBeLessThanOrEqual(data.length);
        }
        // Soundness, for a file that was valid text (possibly mid-append) before.
        if (streamOk(file)) {
          expect(verdict.ok).toBe(streamOk(after));
          if (verdict.ok && windowReachesEof) expect(verdict.incompleteTail).toBe(!fullOk(after));
          // Otherwise the end of the file was not touched: its tail state stands.
          if (verdict.ok && !windowReachesEof) expect(fullOk(after)).toBe(fullOk(file));
        }
      }),
      { numRuns: 500 },
    );
  });

  it('a valid text written in random pieces at increasing offsets is always accepted', () => {
    fc.assert(
      fc.property(validBytes(30), fc.array(fc.nat(), { maxLength: 6 }), (text, cuts) => {
        const points = [...new Set(cuts.map((c) => c % (text.length + 1)))].sort((x, y) => x - y);
        let prev = 0;
        for (const p of [...points, text.length]) {
          const verdict = utf8Check(text.subarray(Math.max(0, prev - 3), prev), text.subarray(prev, p), new Uint8Array(), {
            dataEndsAtEof: true,
          });
          expect(verdict).toEqual({ ok: true, incompleteTail: !fullOk(text.subarray(0, p)) });
          prev = p;
        }
      }),
      { numRuns: 300 },
    );
  });
});
