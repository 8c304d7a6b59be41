/**
 * What each home was refused lately, and how often per code.
 *
 * PURE (the clock is injected). The op table (src/fuse/ops.ts) records every policy refusal
 * here before its log line is rate-limited, so the counts are exact; the last
 * `keep` refusals of each home are what its `.homesfs/status` file shows the
 * agent that was refused, and the counts feed the metrics endpoint. Memory is
 * bounded by the number of homes (at most `keep` entries and one counter per
 * code each).
 */

export interface Refusal {
  /** ms since the epoch */
  at: number;
  op: string;
  /** path below the home root ('' = the home itself) */
  path: string;
  code: string;
  errno: string;
  /** the reason in plain words */
  reason: string;
}

export const DEFAULT_KEEP = 20;

interface HomeRefusals {
  recent: Refusal[];
  byCode: Map<string, number>;
}

export class RefusalBook {
  readonly #keep: number;
  readonly #homes = new Map<string, HomeRefusals>();

  constructor(keep = DEFAULT_KEEP) {
    this.#keep = keep;
  }

  record(home: string, r: Refusal): void {
    let h = this.#homes.get(home);
    if (!h) {
      h = { recent: [], byCode: new Map() };
      this.#homes.set(home, h);
    }
    h.recent.push(r);
    if (h.recent.length > this.#keep) h.recent.shift();
    h.byCode.set(r.code, (h.byCode.get(r.code) ?? 0) + 1);
  }

  /** Newest first. */
  recent(home: string): Refusal[] {
    return [...(this.#homes.get(home)?.recent ?? [])].reverse();
  }

  /** Every home's refusal count per code. */
  counts(): Array<{ home: string; code: string; count: number }> {
    const out: Array<{ home: string; code: string; count: number }> = [];
    for (const [home, h] of this.#homes) for (const [code, count] of h.byCode) out.push({ home, code, count });
    return out;
  }

  /** A deleted home's record goes with it. */
  forget(home: string): void {
    this.#homes.delete(home);
  }

  /** A renamed home keeps its record under the new name. */
  rename(from: string, to: string): void {
    const h = this.#homes.get(from);
    this.#homes.delete(from);
    if (h) this.#homes.set(to, h);
  }
}
