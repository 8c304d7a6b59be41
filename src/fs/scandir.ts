/**
 * The scan's native directory lister, scandir.node (native/src/sys/scandir.c, built
 * next to homesfs.node by the same node-gyp rebuild): a separate addon without
 * global state, because the scan runs on worker threads and homesfs.node must
 * be loaded once per process (its module init and tables are process-wide).
 * Absent or unloadable (a binding built without it), the scan falls back to
 * the JS walk, which remains its specification.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** One directory, as scandir.c's hs_sys_scandir() returns it: facts only, no decision. */
export interface Listing {
  count: number;
  /** (st_mode >> 12) & 15, or 0: the lstat failed (vanished since getdents) */
  type: Uint8Array;
  nlink: Float64Array;
  size: Float64Array;
  dev: BigUint64Array;
  ino: BigUint64Array;
  /** raw names, each followed by a NUL; name i ends at nameEnd[i] */
  names: Buffer;
  nameEnd: Uint32Array;
}

export interface Lister {
  hs_sys_scandir(dirFd: number): Listing;
}

export const S_DIR = 4;
export const S_REG = 8;
const VERSION = 1;

/** Raw bytes of entry i's name (a view: copy it to keep it past the listing). */
export function nameAt(l: Listing, i: number): Buffer {
  return l.names.subarray(i === 0 ? 0 : l.nameEnd[i - 1]! + 1, l.nameEnd[i]!);
}

/** scandir.node, or null (HOMESFS_SCAN_NATIVE=0 forces the JS walk: for comparisons). */
export function loadLister(): Lister | null {
  if (process.env.HOMESFS_SCAN_NATIVE === '0') return null;
  try {
    const require = createRequire(import.meta.url);
    const mod = require(path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../native/addon/scandir.node')) as Partial<Lister> & { SCANDIR_VERSION?: number };
    if (mod.SCANDIR_VERSION !== VERSION || typeof mod.hs_sys_scandir !== 'function') return null;
    return mod as Lister;
  } catch {
    return null;
  }
}
