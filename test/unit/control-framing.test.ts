import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { LineDecoder, type LineEvent } from '../../src/control/framing.js';

function feed(dec: LineDecoder, chunks: Uint8Array[], end = false): LineEvent[] {
  const out: LineEvent[] = [];
  for (const c of chunks) out.push(...dec.push(c));
  if (end) out.push(...dec.end());
  return out;
}

function splitAt(buf: Buffer, cuts: number[]): Buffer[] {
  const points = [...new Set(cuts.map((c) => c % (buf.length + 1)))].sort((a, b) => a - b);
  const parts: Buffer[] = [];
  let prev = 0;
  for (const p of points) {
    parts.push(buf.subarray(prev, p));
    prev = p;
  }
  parts.push(buf.subarray(prev));
  return parts;
}

/**
 * Reference model: split the whole input at once. An unterminated tail is only
 * reported if it is already over the limit (the decoder says so at once).
 */
function reference(buf: Buffer, max: number): LineEvent[] {
  const out: LineEvent[] = [];
  let start = 0;
  for (;;) {
    const nl = buf.indexOf(0x0a, start);
    if (nl === -1) {
      if (buf.length - start > max) out.push({ kind: 'too_long', maxBytes: max });
      break;
    }
    const seg = buf.subarray(start, nl);
    if (seg.length > max) out.push({ kind: 'too_long', maxBytes: max });
    else {
      let line = seg.toString('utf8');
      if (line.endsWith('\r')) line = line.slice(0, -1);
      out.push({ kind: 'line', line });
    }
    start = nl + 1;
  }
  return out;
}

const line = (s: string): LineEvent => ({ kind: 'line', line: s });

describe('LineDecoder', () => {
  it('yields complete lines and keeps a partial one', () => {
    const d = new LineDecoder();
    expect(d.push(Buffer.from('{"a":1}\n{"b"'))).toEqual([line('{"a":1}')]);
    expect(d.pendingBytes).toBe(4);
    expect(d.push(Buffer.from(':2}\n\n'))).toEqual([line('{"b":2}'), line('')]);
    expect(d.pendingBytes).toBe(0);
  });

  it('strips one trailing CR', () => {
    expect(new LineDecoder().push(Buffer.from('x\r\ny\r\r\n'))).toEqual([line('x'), line('y\r')]);
  });

  it('joins a multi-byte character split across chunks, byte by byte', () => {
    const text = 'héllo → 𝄞 日本\n';
    const bytes = Buffer.from(text);
    const d = new LineDecoder();
    const events = feed(d, [...bytes].map((b) => Buffer.from([b])));
    expect(events).toEqual([line('héllo → 𝄞 日本')]);
  });

  it('does not let a broken sequence at the end of a line leak into the next', () => {
    const d = new LineDecoder();
    // 0xE2 0x82 starts a 3-byte char but the line ends.
    const events = feed(d, [Buffer.from([0x61, 0xe2, 0x82, 0x0a, 0x62, 0x0a])]);
    expect(events).toEqual([line('a\uFFFD'), line('b')]);
  });

  it('accepts a line of exactly the maximum and refuses one byte more', () => {
    const d = new LineDecoder(8);
    expect(d.push(Buffer.from('12345678\n'))).toEqual([line('12345678')]);
    expect(d.push(Buffer.from('123456789\n'))).toEqual([{ kind: 'too_long', maxBytes: 8 }]);
  });

  it('counts bytes, not characters', () => {
    const d = new LineDecoder(6);
    expect(d.push(Buffer.from('ééé\n'))).toEqual([line('ééé')]); // 6 bytes
    expect(d.push(Buffer.from('éééé\n'))).toEqual([{ kind: 'too_long', maxBytes: 6 }]); // 8 bytes
  });

  it('reports an over-long line once, as soon as it crosses the limit, then recovers at the newline', () => {
    const d = new LineDecoder(10);
    expect(d.push(Buffer.from('x'.repeat(11)))).toEqual([{ kind: 'too_long', maxBytes: 10 }]);
    expect(d.pendingBytes).toBe(0);
    for (let i = 0; i < 100; i++) expect(d.push(Buffer.from('y'.repeat(1000)))).toEqual([]);
    expect(d.push(Buffer.from('zz\n{"ok":1}\n'))).toEqual([line('{"ok":1}')]);
    expect(d.push(Buffer.from('a'.repeat(10) + '\n'))).toEqual([line('a'.repeat(10))]);
  });

  it('end() returns an unterminated line, drops a discarded one, and resets', () => {
    const d = new LineDecoder(4);
    d.push(Buffer.from('ab'));
    expect(d.end()).toEqual([line('ab')]);
    d.push(Buffer.from('abcdefgh'));
    expect(d.end()).toEqual([]);
    expect(d.push(Buffer.from('cd\n'))).toEqual([line('cd')]);
    expect(d.end()).toEqual([]);
  });

  it('rejects a nonsensical limit', () => {
    expect(() => new LineDecoder(0)).toThrow(RangeError);
    expect(() => new LineDecoder(1.5)).toThrow(RangeError);
  });

  it('property: any chunking of valid UTF-8 lines gives the same events as the whole input', () => {
    const lineArb = fc.oneof(
      fc.string({ unit: 'grapheme', maxLength: 20 }),
      fc.string({ unit: 'binary', maxLength: 40 }),
      fc.string({ unit: fc.constantFrom('a', 'é', '日', '𝄞', '\r'), maxLength: 30 }),
    ).map((s) => s.replace(/\n/g, ''));
    fc.assert(
      fc.property(
        fc.array(lineArb, { maxLength: 12 }),
        fc.integer({ min: 1, max: 48 }),
        fc.array(fc.nat(), { maxLength: 30 }),
        fc.boolean(),
        (lines, max, cuts, trailing) => {
          const buf = Buffer.from(lines.join('\n') + (trailing ? '\n' : ''));
          const expected = reference(buf, max);
          const got = feed(new LineDecoder(max), splitAt(buf, cuts));
          expect(got).toEqual(expected);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('property: arbitrary bytes (invalid UTF-8 included) decode the same whatever the chunking', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 200 }).map((a) => Buffer.from(a.map((b) => (b % 7 === 0 ? 0x0a : b)))),
        fc.integer({ min: 1, max: 64 }),
        fc.array(fc.nat(), { maxLength: 40 }),
        (buf, max, cuts) => {
          const whole = feed(new LineDecoder(max), [buf], true);
          const split = feed(new LineDecoder(max), splitAt(buf, cuts), true);
          expect(split).toEqual(whole);
          expect(whole.slice(0, reference(buf, max).length)).toEqual(reference(buf, max));
        },
      ),
      { numRuns: 500 },
    );
  });
});
