import { isOrphanName } from '../paths/hidden-names.js';
import type fsType from 'node:fs';
import type { RepairPolicy, RepairResult } from '../backing/repair.js';
import { entryPath, runWalkSync, syncIo, walkSteps, type WalkOptions, type WalkStats } from '../backing/walk.js';

export interface ScanResult {
  bytes: number;
  inodes: number;
  /** keys of `exclude` met in the tree: counted as inodes, their bytes left to the caller */
  excluded: string[];
  /** how the walk went (depth, descriptors): for the log */
  walk?: WalkStats;
  /** which walker measured it: scandir.node's lister, or the JS walk (the fallback) */
  scanner?: 'native' | 'js';
}

export interface ScanJob {
  id: number;
  rootFd: number;
  exclude: string[];
  /** a repair of the tree (backing/repair.ts) instead of a measure */
  repair?: RepairPolicy;
}

export type ScanReply =
  | { id: number; progress: { bytes: number; inodes: number } }
  | { id: number; result: ScanResult }
  | { id: number; repaired: RepairResult }
  | { id: number; error: string };

export const PROGRESS_EVERY = 10_000;

/**
 * Walk a home's backing tree once, synchronously: the sum of logical sizes of
 * its regular files (each inode once, so hard links are not counted twice)
 * and the number of inodes below the root. Symlinks are counted, never
 * followed; nothing outside the home is reached because every directory is
 * opened by descriptor (O_NOFOLLOW|O_DIRECTORY) below `rootFd`, iteratively
 * and with a bounded number of descriptors whatever the depth (see walk.ts).
 * Nothing is removed. Runs on a scan worker thread, never on the JS thread
 * that serves.
 */
export function walkTree(
  fs: typeof fsType,
  rootFd: number,
  exclude: Set<string>,
  onProgress: (p: { bytes: number; inodes: number }) => void,
  opts: WalkOptions = {},
): ScanResult {
  const seen = new Set<string>();
  const result: ScanResult = { bytes: 0, inodes: 0, excluded: [] };
  let sinceReport = 0;
  const visit = (dirFd: number, e: fsType.Dirent<Buffer>): boolean => {
    // An orphan is no name (fs/hidden.ts): its bytes are its open inode's, counted from its record.
    if (isOrphanName(e.name)) return false;
    let st: fsType.BigIntStats | undefined;
    try {
      // Buffer paths: names that are not UTF-8 are still measured, byte for byte.
      st = fs.lstatSync(entryPath(dirFd, e.name), { bigint: true, throwIfNoEntry: false });
    } catch {
      st = undefined;
    }
    if (!st) return false; // vanished while scanning
    if (++sinceReport >= PROGRESS_EVERY) {
      sinceReport = 0;
      onProgress({ bytes: result.bytes, inodes: result.inodes });
    }
    const key = `${st.dev}:${st.ino}`;
    // Every name counts as an inode, so that names cost something (a home capped at 10
    // inodes could otherwise make 60,000 hard links); bytes count once per inode.
    result.inodes++;
    if (st.nlink > 1n && !st.isDirectory()) {
      if (seen.has(key)) return false;
      seen.add(key);
    }
    if (st.isFile()) {
      if (exclude.has(key)) result.excluded.push(key);
      else result.bytes += Number(st.size);
    }
    return st.isDirectory();
  };
  const walk = runWalkSync(walkSteps(rootFd, opts), syncIo(fs, { visit }));
  return { ...result, walk, scanner: 'js' };
}
