import { lstatSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

/** Sum of the logical sizes of the regular files below dir, each inode once (what the ledger counts; a local git clone hard-links). */
export function regularBytes(dir: string, seen = new Set<number>()): number {
  let total = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) total += regularBytes(p, seen);
    else if (e.isFile()) {
      const st = lstatSync(p);
      if (seen.has(st.ino)) continue;
      seen.add(st.ino);
      total += st.size;
    }
  }
  return total;
}

/** Every name below dir, as the ledger counts inodes (a hard link is one more). */
export function namesBelow(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    n++;
    if (e.isDirectory()) n += namesBelow(join(dir, e.name));
  }
  return n;
}
