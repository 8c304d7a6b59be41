import type fsType from 'node:fs';
import { runWalkSync, syncIo, walkSteps, type WalkOptions } from '../backing/walk.js';
import { PROGRESS_EVERY, type ScanResult } from './scan-walk.js';
import { isOrphanName } from '../paths/hidden-names.js';
import { nameAt, S_DIR, S_REG, type Lister } from './scandir.js';

/**
 * walkTree's twin on the native lister: one scandir.c call a directory (its
 * entries and their lstat, relative to the directory descriptor) instead of
 * an lstat through /proc/self/fd per entry and BigInt stats, Dirents and step
 * objects per entry. Every decision is walkTree's, made here in the same
 * terms: vanished entries skipped, each non-directory inode with nlink > 1
 * counted once, symlinks and other non-files counted as inodes only,
 * excluded files listed instead of measured, directories entered through the
 * same bounded-descriptor walk (walk.ts, `batch`). test/addon/scan-native
 * holds the two to identical results on random trees.
 */
export function walkTreeNative(
  fs: typeof fsType,
  lister: Lister,
  rootFd: number,
  exclude: Set<string>,
  onProgress: (p: { bytes: number; inodes: number }) => void,
  opts: WalkOptions = {},
): ScanResult {
  const seen = new Set<string>();
  const result: ScanResult = { bytes: 0, inodes: 0, excluded: [] };
  let sinceReport = 0;
  const list = (fd: number): Array<{ name: Buffer }> => {
    const l = lister.hs_sys_scandir(fd);
    const { type, nlink, size, dev, ino } = l;
    const enter: Array<{ name: Buffer }> = [];
    for (let i = 0; i < l.count; i++) {
      const t = type[i]!;
      if (t === 0) continue; // vanished while scanning
      // An orphan is no name (fs/hidden.ts): its bytes are its open inode's, counted from its record.
      if (t === S_REG && l.names[i === 0 ? 0 : l.nameEnd[i - 1]! + 1] === 0xff && isOrphanName(nameAt(l, i))) continue;
      if (++sinceReport >= PROGRESS_EVERY) {
        sinceReport = 0;
        onProgress({ bytes: result.bytes, inodes: result.inodes });
      }
      // keys only where a decision needs one: most entries have neither
      let key: string | undefined;
      // every name an inode, bytes once per inode: as walkTree
      result.inodes++;
      if (nlink[i]! > 1 && t !== S_DIR) {
        key = `${dev[i]}:${ino[i]}`;
        if (seen.has(key)) continue;
        seen.add(key);
      }
      if (t === S_REG) {
        if (exclude.size > 0 && exclude.has((key ??= `${dev[i]}:${ino[i]}`))) result.excluded.push(key);
        else result.bytes += size[i]!;
      } else if (t === S_DIR) {
        // a copy: the frame outlives this listing, which can be large
        enter.push({ name: Buffer.from(nameAt(l, i)) });
      }
    }
    return enter;
  };
  const walk = runWalkSync(
    walkSteps(rootFd, { ...opts, batch: true }),
    syncIo(fs, {
      visit: () => {
        throw new Error('a batch walk has no visit steps');
      },
      list,
    }),
  );
  return { ...result, walk, scanner: 'native' };
}
