import * as sys from '../backing/sys.js';
import { Ledger } from '../policy/ledger.js';
import type { FsContext } from './context.js';
import type { HomeState } from './state.js';

export interface ScanResult {
  bytes: number;
  inodes: number;
}

/**
 * Walk a home's backing tree once: the sum of logical sizes of its regular
 * files (each inode once, so hard links are not counted twice) and the number
 * of inodes below the home root. Symlinks are counted, never followed; nothing
 * outside the home is reached because every directory is opened by descriptor.
 * Nothing is removed: the mount runs with hard_remove, so libfuse never makes
 * `.fuse_hidden*` files, and a file of that name in a home is the user's.
 */
export async function measureTree(
  rootFd: number,
  onProgress?: (r: ScanResult) => void,
  /** the size to charge for a file (a rescan substitutes the ledger's size for open files) */
  sizeOf: (key: string, diskSize: number) => number = (_k, size) => size,
): Promise<ScanResult> {
  const seen = new Set<string>();
  const result: ScanResult = { bytes: 0, inodes: 0 };
  let sinceReport = 0;
  const walk = async (dirFd: number): Promise<void> => {
    const entries = await sys.pooled.readdirRaw(sys.fdPath(dirFd));
    for (const e of entries) {
      // Buffer paths: names that are not UTF-8 are still measured, byte for byte.
      const path = Buffer.concat([Buffer.from(`/proc/self/fd/${dirFd}/`), e.name]);
      let st;
      try {
        st = await sys.pooled.lstat(path);
      } catch {
        continue; // vanished while scanning
      }
      const key = `${st.dev}:${st.ino}`;
      if (st.nlink > 1n && !st.isDirectory()) {
        if (seen.has(key)) continue;
        seen.add(key);
      }
      result.inodes++;
      if (st.isFile()) result.bytes += sizeOf(key, Number(st.size));
      if (st.isDirectory()) {
        let fd: number;
        try {
          fd = await sys.pooled.open(path, sys.O_PATH | sys.C.O_DIRECTORY | sys.C.O_NOFOLLOW);
        } catch {
          continue;
        }
        try {
          await walk(fd);
        } finally {
          await sys.pooled.close(fd);
        }
      }
      if (onProgress && ++sinceReport >= 10_000) {
        sinceReport = 0;
        onProgress(result);
      }
    }
  };
  await walk(rootFd);
  return result;
}

export async function scanHome(ctx: FsContext, hs: HomeState): Promise<void> {
  const log = ctx.log.child({ home: hs.backing.id });
  hs.scan = 'scanning';
  const started = Date.now();
  try {
    const r = await ctx.store.useHome(hs.backing, (fd) =>
      measureTree(fd, (p) => {
        hs.scanProgress = { bytes: p.bytes, inodes: p.inodes };
        log.info({ bytes: p.bytes, inodes: p.inodes }, 'scan progress');
      }),
    );
    hs.ledger = new Ledger(hs.ledger.limits, { bytes: r.bytes, inodes: r.inodes });
    hs.scan = 'done';
    log.info({ bytes: r.bytes, inodes: r.inodes, ms: Date.now() - started, profile: hs.profileName }, 'home ledger built');
  } catch (err) {
    hs.scan = 'failed';
    hs.scanError = (err as Error).message;
    log.error({ err }, 'home scan failed: writes to this home are refused until a rescan succeeds');
  }
}
