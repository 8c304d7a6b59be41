/**
 * "Did you mean": the known word nearest to a misspelt one. PURE.
 *
 * Distance is the optimal-string-alignment edit distance (insert, delete,
 * substitute, swap two neighbours: each 1) between the lower-cased words, so
 * `maxbytes` finds `maxBytes` and `defualtProfile` finds `defaultProfile`. A
 * suggestion is made only when it is close: at most a third of the longer
 * word's length (at least 1), so `bogus` suggests nothing. Ties go to the
 * word with the smaller distance before lower-casing, then to the first one
 * listed.
 */
export function nearest(word: string, known: Iterable<string>): string | undefined {
  let best: { word: string; folded: number; exact: number } | undefined;
  for (const k of known) {
    if (k === word) continue;
    const folded = distance(word.toLowerCase(), k.toLowerCase());
    if (folded > Math.max(1, Math.floor(Math.max(word.length, k.length) / 3))) continue;
    const exact = distance(word, k);
    if (!best || folded < best.folded || (folded === best.folded && exact < best.exact)) best = { word: k, folded, exact };
  }
  return best?.word;
}

/** Optimal string alignment distance (Damerau-Levenshtein without repeated edits of one substring). */
export function distance(a: string, b: string): number {
  const A = [...a];
  const B = [...b];
  // three rows: the one before last (for swaps), the last, the current
  let prev2: number[] = [];
  let prev = Array.from({ length: B.length + 1 }, (_, j) => j);
  for (let i = 1; i <= A.length; i++) {
    const cur = [i];
    for (let j = 1; j <= B.length; j++) {
      const cost = A[i - 1] === B[j - 1] ? 0 : 1;
      let d = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + cost);
      if (i > 1 && j > 1 && A[i - 1] === B[j - 2] && A[i - 2] === B[j - 1]) d = Math.min(d, prev2[j - 2]! + 1);
      cur.push(d);
    }
    prev2 = prev;
    prev = cur;
  }
  return prev[B.length]!;
}

/** `key "x" (did you mean "y"?)`, or just `key "x"`. */
export function withSuggestion(word: string, known: Iterable<string>): string {
  const s = nearest(word, known);
  return s === undefined ? `"${word}"` : `"${word}" (did you mean "${s}"?)`;
}
