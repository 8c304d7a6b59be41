import { StringDecoder } from 'node:string_decoder';
import { DEFAULT_MAX_LINE_BYTES } from './protocol.js';

export type LineEvent =
  /** A complete line, newline (and one trailing `\r`) removed, decoded as UTF-8 (invalid bytes become U+FFFD). */
  | { kind: 'line'; line: string }
  /**
   * The current line grew past the limit. Emitted once, as soon as the limit is
   * crossed; the rest of that line (up to and including its newline) is
   * discarded and decoding resumes with the next line.
   */
  | { kind: 'too_long'; maxBytes: number };

const NL = 0x0a;

/**
 * Splits a byte stream into newline-terminated lines. Pure (no I/O): feed it the
 * chunks a socket delivers, in any split, and it yields the same events.
 *
 * The split happens on raw bytes: 0x0A never occurs inside a multi-byte UTF-8
 * sequence, so a line's bytes are exact, and a `StringDecoder` carries a
 * character that straddles two chunks. The decoder is flushed at each newline,
 * so a broken sequence at the end of one line cannot leak into the next.
 */
export class LineDecoder {
  readonly maxLineBytes: number;
  private readonly decoder = new StringDecoder('utf8');
  private parts: string[] = [];
  private lineBytes = 0;
  private discarding = false;

  constructor(maxLineBytes: number = DEFAULT_MAX_LINE_BYTES) {
    if (!Number.isInteger(maxLineBytes) || maxLineBytes < 1) throw new RangeError(`maxLineBytes must be a positive integer, got ${maxLineBytes}`);
    this.maxLineBytes = maxLineBytes;
  }

  /** Bytes of the current, not yet terminated line (0 while discarding). */
  get pendingBytes(): number {
    return this.lineBytes;
  }

  /** Feed one chunk; returns the events it completes, in order. */
  push(chunk: Uint8Array): LineEvent[] {
    const events: LineEvent[] = [];
    const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    let start = 0;
    while (start <= buf.length) {
      const nl = buf.indexOf(NL, start);
      const end = nl === -1 ? buf.length : nl;
      this.take(buf.subarray(start, end), events);
      if (nl === -1) break;
      this.terminate(events);
      start = nl + 1;
    }
    return events;
  }

  /**
   * End of stream. An unterminated final line is returned as a line (so a
   * client that half-closes without a trailing newline is still answered); a
   * line being discarded is dropped. The decoder is reset and reusable.
   */
  end(): LineEvent[] {
    const events: LineEvent[] = [];
    if (this.discarding) {
      this.discarding = false;
    } else if (this.lineBytes > 0) {
      this.terminate(events);
    }
    this.reset();
    return events;
  }

  private take(seg: Buffer, events: LineEvent[]): void {
    if (seg.length === 0 || this.discarding) return;
    if (this.lineBytes + seg.length > this.maxLineBytes) {
      events.push({ kind: 'too_long', maxBytes: this.maxLineBytes });
      this.reset();
      this.discarding = true;
      return;
    }
    this.lineBytes += seg.length;
    const s = this.decoder.write(seg);
    if (s.length > 0) this.parts.push(s);
  }

  private terminate(events: LineEvent[]): void {
    if (this.discarding) {
      this.discarding = false;
      return;
    }
    this.parts.push(this.decoder.end());
    let line = this.parts.join('');
    if (line.endsWith('\r')) line = line.slice(0, -1);
    events.push({ kind: 'line', line });
    this.reset();
  }

  private reset(): void {
    this.decoder.end();
    this.parts = [];
    this.lineBytes = 0;
  }
}
