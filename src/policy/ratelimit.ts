/**
 * Rate limit for refusal log lines.
 *
 * PURE (the clock is injected). A process stuck writing past its budget can
 * produce thousands of EDQUOT refusals a second; each must be answered, but a
 * warn line each would flood journald and drown every other home's lines. So:
 * per key (the caller builds it from home + op + code), at most `burst` lines
 * per fixed window; the first line admitted after a suppression says how many
 * were dropped, so the count is never lost silently.
 *
 * Memory is bounded: keys live in a Map in least-recently-used order, and past
 * `maxKeys` the least recently seen key is forgotten (its pending suppressed
 * count with it; `flush` can collect those counts periodically instead).
 */

import { HomesError } from '../errors.js';

export interface RefusalLimiterOptions {
  /** window length in milliseconds (> 0) */
  windowMs: number;
  /** log lines admitted per key per window (>= 1) */
  burst: number;
  /** clock in milliseconds; defaults to Date.now */
  now?: () => number;
  /** keys remembered at most; default 10_000 */
  maxKeys?: number;
}

export interface Admission {
  /** write this log line */
  log: boolean;
  /**
   * When `log`: lines suppressed for this key since its last logged line (add
   * it to the line). When not `log`: the suppressed count so far, this one
   * included (informational).
   */
  suppressed: number;
}

interface KeyState {
  windowStart: number;
  admitted: number;
  suppressed: number;
}

export const DEFAULT_MAX_KEYS = 10_000;

export class RefusalLimiter {
  readonly #windowMs: number;
  readonly #burst: number;
  readonly #now: () => number;
  readonly #maxKeys: number;
  readonly #keys = new Map<string, KeyState>();

  constructor(opts: RefusalLimiterOptions) {
    if (!(Number.isFinite(opts.windowMs) && opts.windowMs > 0)) {
      throw new HomesError('INVALID_ARGUMENT', 'RefusalLimiter: windowMs must be > 0', { windowMs: opts.windowMs });
    }
    if (!(Number.isSafeInteger(opts.burst) && opts.burst >= 1)) {
      throw new HomesError('INVALID_ARGUMENT', 'RefusalLimiter: burst must be an integer >= 1', { burst: opts.burst });
    }
    const maxKeys = opts.maxKeys ?? DEFAULT_MAX_KEYS;
    if (!(Number.isSafeInteger(maxKeys) && maxKeys >= 1)) {
      throw new HomesError('INVALID_ARGUMENT', 'RefusalLimiter: maxKeys must be an integer >= 1', { maxKeys });
    }
    this.#windowMs = opts.windowMs;
    this.#burst = opts.burst;
    this.#now = opts.now ?? Date.now;
    this.#maxKeys = maxKeys;
  }

  admit(key: string): Admission {
    const now = this.#now();
    const state = this.#keys.get(key);
    if (state === undefined) {
      this.#remember(key, { windowStart: now, admitted: 1, suppressed: 0 });
      return { log: true, suppressed: 0 };
    }
    // Touch: move the key to the most-recently-used end.
    this.#keys.delete(key);
    this.#keys.set(key, state);
    // A clock that steps backwards (NTP) starts a new window rather than
    // suppressing until it catches up.
    if (now - state.windowStart >= this.#windowMs || now < state.windowStart) {
      state.windowStart = now;
      state.admitted = 0;
    }
    if (state.admitted < this.#burst) {
      state.admitted += 1;
      const suppressed = state.suppressed;
      state.suppressed = 0;
      return { log: true, suppressed };
    }
    state.suppressed += 1;
    return { log: false, suppressed: state.suppressed };
  }

  /**
   * Collect and reset the pending suppressed counts (keys whose last lines
   * were dropped and that have not logged since), e.g. on a timer or at
   * shutdown, so a burst that simply stops is still reported.
   */
  flush(): Array<{ key: string; suppressed: number }> {
    const out: Array<{ key: string; suppressed: number }> = [];
    for (const [key, state] of this.#keys) {
      if (state.suppressed > 0) {
        out.push({ key, suppressed: state.suppressed });
        state.suppressed = 0;
      }
    }
    return out;
  }

  /** Keys currently remembered (for tests and `status`). */
  get size(): number {
    return this.#keys.size;
  }

  #remember(key: string, state: KeyState): void {
    while (this.#keys.size >= this.#maxKeys) {
      const oldest = this.#keys.keys().next();
      if (oldest.done === true) break;
      this.#keys.delete(oldest.value);
    }
    this.#keys.set(key, state);
  }
}
