/**
 * UTF-8 validation for text-only homes (the `scratch` profile's "text only").
 *
 * PURE: no I/O. The fs layer reads the few bytes around a write and asks here.
 *
 * Why a hand-written decoder instead of `TextDecoder({fatal:true})`:
 *  - a FUSE write lands at an arbitrary offset, so a character may start in the
 *    bytes before the write or end in the bytes after it. TextDecoder only tells
 *    "valid or not" for a whole buffer; we need to start in the middle of a
 *    character and to stop at the first clean boundary after the write.
 *  - we want the offset of the first bad byte for the refusal log line.
 *
 * The state machine is the WHATWG "UTF-8 decoder" (Encoding Standard §4.1),
 * which is exactly what `TextDecoder('utf-8', {fatal: true})` implements: it
 * rejects overlongs (C0, C1, E0 80..9F, F0 80..8F), surrogates (ED A0..BF),
 * code points above U+10FFFF (F4 90.., F5..FF) and stray continuation bytes.
 * The property tests compare both under random chunking.
 */

import { HomesError } from '../errors.js';

/** How many bytes around a write the caller must supply on each side. */
export const UTF8_CONTEXT_BYTES = 3;

export type Utf8Verdict =
  | {
      ok: true;
      /**
       * The checked window ends at end of file in the middle of a character.
       * Only reported when the window reaches EOF (see `utf8Check`); the next
       * append may complete the character, so the write is accepted.
       */
      incompleteTail: boolean;
    }
  | {
      ok: false;
      /** Offset within `data` of the first bad byte (best effort; 0 if the
       *  bad byte is in the prefix, data.length if it is in the suffix). */
      offset: number;
    };

function isContinuation(b: number): boolean {
  return (b & 0xc0) === 0x80;
}

/** Length of the sequence a byte starts: 1 for ASCII, 2..4 for a lead byte the
 *  decoder accepts, 0 for continuation bytes and never-valid bytes. */
function sequenceLength(b: number): number {
  if (b < 0x80) return 1;
  if (b >= 0xc2 && b <= 0xdf) return 2;
  if (b >= 0xe0 && b <= 0xef) return 3;
  if (b >= 0xf0 && b <= 0xf4) return 4;
  return 0;
}

/**
 * The WHATWG decoder's state, one byte at a time. `feed` returns false on the
 * byte that makes the input invalid; after that the decoder must not be used
 * (fatal mode stops at the first error, and so do we).
 */
class Utf8Decoder {
  /** continuation bytes still expected for the current character */
  needed = 0;
  private lower = 0x80;
  private upper = 0xbf;

  feed(b: number): boolean {
    if (this.needed === 0) {
      if (b < 0x80) return true;
      if (b >= 0xc2 && b <= 0xdf) {
        this.needed = 1;
        return true;
      }
      if (b >= 0xe0 && b <= 0xef) {
        // E0 80..9F would be overlong; ED A0..BF would encode a surrogate.
        if (b === 0xe0) this.lower = 0xa0;
        if (b === 0xed) this.upper = 0x9f;
        this.needed = 2;
        return true;
      }
      if (b >= 0xf0 && b <= 0xf4) {
        // F0 80..8F would be overlong; F4 90.. would exceed U+10FFFF.
        if (b === 0xf0) this.lower = 0x90;
        if (b === 0xf4) this.upper = 0x8f;
        this.needed = 3;
        return true;
      }
      // 80..BF stray continuation, C0/C1 overlong leads, F5..FF out of range.
      return false;
    }
    if (b < this.lower || b > this.upper) return false;
    // Only the first continuation byte has a narrowed range.
    this.lower = 0x80;
    this.upper = 0xbf;
    this.needed -= 1;
    return true;
  }
}

/**
 * Index in `prefix` where a character starts that the bytes of `prefix` do not
 * finish, or -1 if `prefix` ends on a character boundary (as far as 3 bytes can
 * tell). Three continuation bytes in a row, or a prefix that starts with
 * continuation bytes at file start, leave no character open into the write:
 * whatever they are, they were there before the write and it does not touch them.
 */
function openCharStart(prefix: Uint8Array): number {
  let i = prefix.length - 1;
  while (i >= 0 && isContinuation(prefix[i]!)) i -= 1;
  if (i < 0) return -1;
  const len = sequenceLength(prefix[i]!);
  const continuationsSeen = prefix.length - 1 - i;
  return len >= 2 && continuationsSeen < len - 1 ? i : -1;
}

/**
 * Would writing `data` between `prefix` and `suffix` introduce invalid UTF-8?
 *
 * - `prefix`: the (up to) 3 bytes of the file right before the write offset;
 *   fewer only at file start. For a write that starts past EOF, `prefix` is the
 *   file's current last (up to) 3 bytes and `opts.gap` the size of the hole:
 *   a hole reads as NUL bytes, which are valid text but end any character the
 *   file was in the middle of (so a hole after an incomplete tail is invalid,
 *   however large the hole; that is why it cannot be folded into `prefix`).
 * - `suffix`: the (up to) 3 bytes right after the write's end; fewer than 3
 *   means the file ends after them. Empty when `dataEndsAtEof`.
 *
 * What is checked: decoding starts at the character that contains the write
 * offset (its lead may sit in `prefix`), runs over `data`, and continues into
 * `suffix` until a character boundary followed by a non-continuation byte
 * (bytes from there on are untouched by the write). A continuation byte right
 * after the write that lost its lead (half of a character overwritten) is
 * invalid. When the window reaches end of file (`dataEndsAtEof`, or a suffix
 * shorter than 3 bytes), the whole suffix is decoded so that `incompleteTail`
 * tells exactly whether the file now ends inside a character; such a write is
 * accepted (a later append may complete it), and the fs layer decides what that
 * means at close/read time. When the window does not reach EOF (3 suffix bytes,
 * not `dataEndsAtEof`), the end of the file is untouched and its tail state
 * (complete or not) is what it was before the write.
 *
 * Guarantees (property-tested against TextDecoder on the spliced file):
 *  - if the file after the write decodes (allowing an incomplete final
 *    character), the write is accepted;
 *  - if the file before the write decoded (same allowance), the write is
 *    accepted only if the file after it does too;
 *  - when the window reaches EOF and the file was valid before, incompleteTail
 *    is true exactly when the file after the write ends inside a character.
 * Errors elsewhere in a file that was already invalid are not seen (the check
 * is local by design: it must cost O(write), not O(file)).
 */
export function utf8Check(
  prefix: Uint8Array,
  data: Uint8Array,
  suffix: Uint8Array,
  opts: { dataEndsAtEof: boolean; gap?: number },
): Utf8Verdict {
  if (opts.dataEndsAtEof && suffix.length > 0) {
    throw new HomesError('INVALID_ARGUMENT', 'utf8Check: a write that ends at EOF has no suffix', {
      suffixLength: suffix.length,
    });
  }
  const gap = opts.gap ?? 0;
  if (!Number.isSafeInteger(gap) || gap < 0 || (gap > 0 && !opts.dataEndsAtEof)) {
    // A write that starts past EOF necessarily ends at EOF.
    throw new HomesError('INVALID_ARGUMENT', 'utf8Check: gap is a hole before a write that ends at EOF', { gap });
  }
  const eofAfterSuffix = opts.dataEndsAtEof || suffix.length < UTF8_CONTEXT_BYTES;
  const dec = new Utf8Decoder();

  // Only the last 3 bytes can hold the start of a character that is still open.
  const pre = prefix.length > UTF8_CONTEXT_BYTES ? prefix.subarray(prefix.length - UTF8_CONTEXT_BYTES) : prefix;
  const open = openCharStart(pre);
  if (open >= 0) {
    // A hole cuts the open character short: NUL is not a continuation byte.
    if (gap > 0) return { ok: false, offset: 0 };
    for (let i = open; i < pre.length; i += 1) {
      // The open character was already broken before the write (e.g. E0 80):
      // no data can repair it, and the write would extend it.
      if (!dec.feed(pre[i]!)) return { ok: false, offset: 0 };
    }
  }

  for (let i = 0; i < data.length; i += 1) {
    const b = data[i]!;
    // ASCII fast path: nothing to track between characters.
    if (dec.needed === 0 && b < 0x80) continue;
    if (!dec.feed(b)) return { ok: false, offset: i };
  }

  for (let j = 0; j < suffix.length; j += 1) {
    const b = suffix[j]!;
    if (!eofAfterSuffix && dec.needed === 0 && !isContinuation(b)) {
      // A clean boundary: the rest of the file is exactly as it was.
      return { ok: true, incompleteTail: false };
    }
    if (!dec.feed(b)) return { ok: false, offset: data.length };
  }

  if (dec.needed === 0) return { ok: true, incompleteTail: false };
  if (eofAfterSuffix) return { ok: true, incompleteTail: true };
  // Unreachable with a 3-byte suffix (a character open in data or prefix needs
  // at most 3 more bytes); refuse rather than guess if a caller passes less.
  return { ok: false, offset: data.length };
}

/**
 * Does a file end inside a character? `tail` is the last (up to) 3 bytes of a
 * file that is otherwise valid. Lets the fs layer learn a file's tail state
 * (e.g. at open, or after a truncate) without decoding the whole file.
 */
export function endsWithIncompleteChar(tail: Uint8Array): boolean {
  const t = tail.length > UTF8_CONTEXT_BYTES ? tail.subarray(tail.length - UTF8_CONTEXT_BYTES) : tail;
  return openCharStart(t) >= 0;
}

/**
 * Sequential validator: feed a stream in chunks of any size (a whole file on
 * read, or a copy). Agrees with `TextDecoder('utf-8', {fatal: true})` on the
 * concatenation regardless of where chunks split, because the only state
 * carried between chunks is the decoder's (a character may straddle chunks).
 */
export class Utf8StreamValidator {
  private dec = new Utf8Decoder();
  private offset = 0;
  private charStart = 0;
  private failedAt = -1;
  private ended = false;

  /** Feed the next chunk. Returns false once the stream is invalid (sticky). */
  push(chunk: Uint8Array): boolean {
    // Pushing after end() is a caller bug that would silently merge two streams.
    if (this.ended) throw new HomesError('INVALID_ARGUMENT', 'Utf8StreamValidator: push after end (call reset)');
    if (this.failedAt >= 0) return false;
    const dec = this.dec;
    for (let i = 0; i < chunk.length; i += 1) {
      const b = chunk[i]!;
      if (dec.needed === 0) {
        if (b < 0x80) continue;
        this.charStart = this.offset + i;
      }
      if (!dec.feed(b)) {
        this.failedAt = this.offset + i;
        this.offset += chunk.length;
        return false;
      }
    }
    this.offset += chunk.length;
    return true;
  }

  /**
   * End of stream: false if the stream was invalid or ends inside a character
   * (then `errorOffset` is where that character starts). Call `reset()` before
   * checking another stream.
   */
  end(): boolean {
    if (this.failedAt < 0 && this.dec.needed > 0) this.failedAt = this.charStart;
    this.ended = true;
    return this.failedAt < 0;
  }

  /** Forget everything: ready for a new stream. */
  reset(): void {
    this.dec = new Utf8Decoder();
    this.offset = 0;
    this.charStart = 0;
    this.failedAt = -1;
    this.ended = false;
  }

  /** Absolute offset of the first bad byte so far, or -1. */
  get errorOffset(): number {
    return this.failedAt;
  }

  /** True while the bytes pushed so far end inside a character. */
  get midCharacter(): boolean {
    return this.failedAt < 0 && this.dec.needed > 0;
  }
}
