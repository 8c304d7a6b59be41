/**
 * Per-FUSE-operation request counts and latency histograms.
 *
 * On the hot path (every request that reaches JavaScript) `observe` costs a
 * Map lookup, a bucket search over 14 doubles and a few increments: no
 * allocation once an operation has been seen. Everything else (labels, text)
 * happens at scrape time.
 */

/** Upper bounds in seconds: 50 µs (a cached getattr) to 2.5 s (a stuck backing disk). */
export const LATENCY_BUCKETS = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5] as const;

export interface OpStats {
  readonly op: string;
  /** per bucket (not cumulative), the last slot is +Inf */
  readonly buckets: Float64Array;
  count: number;
  errors: number;
  sumSeconds: number;
}

export class OpMetrics {
  readonly #byOp = new Map<string, OpStats>();
  readonly #now: () => number;

  /** `now` in milliseconds (performance.now by default). */
  constructor(now: () => number = () => performance.now()) {
    this.#now = now;
  }

  /** The start time to hand back to `observe`. */
  start(): number {
    return this.#now();
  }

  observe(op: string, startMs: number, failed: boolean): void {
    const s = (this.#byOp.get(op) ?? this.#add(op)) as { -readonly [K in keyof OpStats]: OpStats[K] };
    const seconds = (this.#now() - startMs) / 1000;
    let i = 0;
    while (i < LATENCY_BUCKETS.length && seconds > LATENCY_BUCKETS[i]!) i++;
    s.buckets[i]! += 1;
    s.count += 1;
    s.sumSeconds += seconds;
    if (failed) s.errors += 1;
  }

  all(): OpStats[] {
    return [...this.#byOp.values()].sort((a, b) => a.op.localeCompare(b.op));
  }

  #add(op: string): OpStats {
    const s: OpStats = { op, buckets: new Float64Array(LATENCY_BUCKETS.length + 1), count: 0, errors: 0, sumSeconds: 0 };
    this.#byOp.set(op, s);
    return s;
  }
}
