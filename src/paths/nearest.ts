/**
 * The names an admin most likely meant: for a refusal that names a home that
 * does not exist (`homesctl exec` with a mistyped project), the existing
 * names within a small edit distance, closest first.
 */

/** Optimal string alignment distance: insertions, deletions, substitutions and adjacent swaps each cost 1. */
export function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const d: number[][] = Array.from({ length: rows }, (_, i) => Array.from({ length: cols }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * Up to `max` of `candidates` near `name`: a distance of at most a third of
 * the name's length (at least 1, at most 3), or the same name in another case;
 * closest first, ties in name order.
 */
export function nearestNames(name: string, candidates: Iterable<string>, max = 3): string[] {
  const limit = Math.min(3, Math.max(1, Math.floor(name.length / 3)));
  const lower = name.toLowerCase();
  const scored: Array<[number, string]> = [];
  for (const c of new Set(candidates)) {
    if (c === name) continue;
    const d = c.toLowerCase() === lower ? 0 : editDistance(name, c);
    if (d <= limit) scored.push([d, c]);
  }
  scored.sort((x, y) => x[0] - y[0] || (x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0));
  return scored.slice(0, max).map(([, c]) => c);
}
