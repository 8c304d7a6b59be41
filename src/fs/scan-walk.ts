import type fsType from 'node:fs';

export interface ScanResult {
  bytes: number;
  inodes: number;
  /** keys of `exclude` met in the tree: counted as inodes, their bytes left to the caller */
  excluded: string[];
}

export interface ScanJob {
  id: number;
  rootFd: number;
  exclude: string[];
}

export type ScanReply =
  | { id: number; progress: { bytes: number; inodes: number } }
  | { id: number; result: ScanResult }
  | { id: number; error: string };

const O_PATH = 0o10000000;
const PROGRESS_EVERY = 10_000;

/**
 * Walk a home's backing tree once, synchronously: the sum of logical sizes of
 * its regular files (each inode once, so hard links are not counted twice)
 * and the number of inodes below the root. Symlinks are counted, never
 * followed; nothing outside the home is reached because every directory is
 * opened by descriptor (O_NOFOLLOW|O_DIRECTORY) below `rootFd`. Nothing is
 * removed. Runs on a scan worker thread, never on the JS thread that serves.
 */
export function walkTree(fs: typeof fsType, rootFd: number, exclude: Set<string>, onProgress: (p: { bytes: number; inodes: number }) => void): ScanResult {
  const seen = new Set<string>();
  const result: ScanResult = { bytes: 0, inodes: 0, excluded: [] };
  let sinceReport = 0;
  const dirFlags = O_PATH | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW;
  const walk = (dirFd: number): void => {
    const prefix = Buffer.from(`/proc/self/fd/${dirFd}/`);
    let entries: fsType.Dirent<Buffer>[];
    try {
      entries = fs.readdirSync(prefix, { encoding: 'buffer', withFileTypes: true }) as fsType.Dirent<Buffer>[];
    } catch (err) {
      if (dirFd === rootFd) throw err;
      return; // a directory removed while scanning
    }
    for (const e of entries) {
      // Buffer paths: names that are not UTF-8 are still measured, byte for byte.
      const path = Buffer.concat([prefix, e.name]);
      let st: fsType.BigIntStats | undefined;
      try {
        st = fs.lstatSync(path, { bigint: true, throwIfNoEntry: false });
      } catch {
        st = undefined;
      }
      if (!st) continue; // vanished while scanning
      const key = `${st.dev}:${st.ino}`;
      if (st.nlink > 1n && !st.isDirectory()) {
        if (seen.has(key)) continue;
        seen.add(key);
      }
      result.inodes++;
      if (st.isFile()) {
        if (exclude.has(key)) result.excluded.push(key);
        else result.bytes += Number(st.size);
      }
      if (st.isDirectory()) {
        let fd: number;
        try {
          fd = fs.openSync(path, dirFlags);
        } catch {
          continue;
        }
        try {
          walk(fd);
        } finally {
          fs.closeSync(fd);
        }
      }
      if (++sinceReport >= PROGRESS_EVERY) {
        sinceReport = 0;
        onProgress({ bytes: result.bytes, inodes: result.inodes });
      }
    }
  };
  walk(rootFd);
  return result;
}
