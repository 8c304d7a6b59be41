import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * What identifies the code a process runs: a digest of the package's
 * package.json, every compiled module (dist/**\/*.js) and the native addons
 * (native/addon/*.node). Two trees with the same version but other code (a
 * rebuilt or patched package) differ here, which is what `homesfs reload`
 * compares to decide between a configuration reload and a live upgrade.
 *
 * The daemon computes it once, when this module is first evaluated (at start),
 * so it names the code it loaded even after a new package replaced the files.
 */
export function buildIdOf(packageRoot: string): string {
  const hash = createHash('sha256');
  const files: string[] = ['package.json'];
  const walk = (rel: string, keep: (name: string) => boolean) => {
    let entries;
    try {
      entries = readdirSync(path.join(packageRoot, rel), { withFileTypes: true });
    } catch (err) {
      // A tree without native addons still has an identity: say so in the digest.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    for (const e of entries) {
      const p = path.join(rel, e.name);
      if (e.isDirectory()) walk(p, keep);
      else if (e.isFile() && keep(e.name)) files.push(p);
    }
  };
  walk('dist', (n) => n.endsWith('.js'));
  walk(path.join('native', 'addon'), (n) => n.endsWith('.node'));
  // Sorted so the digest does not depend on the directory order of the filesystem.
  for (const f of files.sort()) {
    const data = readFileSync(path.join(packageRoot, f));
    hash.update(`${f}\0${data.length}\0`);
    hash.update(data);
  }
  return hash.digest('hex').slice(0, 16);
}

/** This package's root: dist/build-id.js → .. */
export const PACKAGE_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The build of the code this process loaded (see buildIdOf). */
export const BUILD: string = buildIdOf(PACKAGE_ROOT);
