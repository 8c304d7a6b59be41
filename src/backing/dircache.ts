import { LRUCache } from 'lru-cache';
import { ABI } from '../abi.js';
import * as sys from './sys.js';

/** What the cache needs of a home (a BackingHome). */
export interface DirHome {
  readonly fd: number;
  readonly dev: bigint;
  readonly ino: bigint;
  retired: boolean;
  /** bumped after every directory rename or rmdir in the home (see `DirCache`) */
  dirGen: number;
}

interface Entry {
  fd: number;
  /** operations currently using the descriptor */
  refs: number;
  /** dropped from the cache: close once the last user is done */
  dropped: boolean;
  home: DirHome;
  /** the home's dirGen when the walk that opened it began */
  gen: number;
}

export interface Lease {
  fd: number;
  release(): void;
}

/** Longest real path procfs reads back (d_path fills one page); past it, readlink fails. */
// One definition with the binding's native rmdir (native/src/fastpath/fastpath_unlink.c).
const READLINK_MAX = ABI.DIRCACHE_READLINK_MAX;
/** On a long walk, every ANCHOR-th level is cached too: a later miss below starts from there. */
const ANCHOR = 32;

/**
 * Descriptors of directories below homes, kept between operations so a path
 * of depth d costs one check instead of d opens and d closes.
 *
 * A cached descriptor is only used after `/proc/self/fd/<fd>` reads back as
 * exactly the path it was opened for: the directory is then, right now, where
 * a fresh component-by-component walk would have found it, inside its home.
 * Anything renamed, swapped for a symlink or moved away since (through the
 * mount or behind the daemon's back) no longer matches, and the caller walks
 * again. The check is a procfs readlink: no disk I/O.
 *
 * Past READLINK_MAX bytes of path procfs cannot answer, and every lookup
 * used to walk from the home's root: thousands of opens per stat at depth
 * 4000. A descriptor that deep is trusted instead while no
 * directory of its home was renamed or removed through the mount since the
 * walk that opened it began (the home's `dirGen`). Only the mount changes a
 * home's tree (the backing root and tenant directories are root-only, see
 * Backing safety), so that is the same answer, at the cost of a rename
 * anywhere in the home invalidating every deep entry of it.
 *
 * A miss walks from the nearest ancestor the cache holds (the parent, or an
 * anchor: every 32nd level of a long walk is kept), not from the home's root,
 * so it costs at most 32 opens plus a probe per 32 levels.
 */
export class DirCache {
  private readonly lru: LRUCache<string, Entry>;

  constructor(max = 1024) {
    this.lru = new LRUCache<string, Entry>({
      max,
      dispose: (e) => {
        e.dropped = true;
        if (e.refs === 0) void sys.close(e.fd).catch(() => undefined);
      },
    });
  }

  private release(e: Entry): void {
    e.refs--;
    if (e.refs === 0 && e.dropped) void sys.close(e.fd).catch(() => undefined);
  }

  private lease(e: Entry): Lease {
    let done = false;
    return {
      fd: e.fd,
      release: () => {
        if (done) return;
        done = true;
        this.release(e);
      },
    };
  }

  /** Take `e` (held by the caller) if it is still the directory at `expected`; else release and forget it. */
  private async valid(key: string, e: Entry, home: DirHome, expected: Buffer): Promise<boolean> {
    let ok = false;
    if (e.home === home && !home.retired) {
      if (expected.length < READLINK_MAX) {
        const at = await sys.readlink(sys.fdPath(e.fd)).catch(() => null);
        ok = at !== null && at.equals(expected);
      } else {
        ok = e.gen === home.dirGen;
      }
    }
    if (!ok) {
      this.release(e);
      if (this.lru.get(key) === e) this.lru.delete(key);
    }
    return ok;
  }

  /** Cache a freshly walked descriptor (held once, by the caller) if it can be trusted later. */
  private async keep(key: string, fd: number, home: DirHome, gen: number, expected: Buffer): Promise<Entry> {
    const entry: Entry = { fd, refs: 1, dropped: false, home, gen };
    let ok: boolean;
    if (expected.length < READLINK_MAX) {
      // a moved backing root (or anything that does not read back as expected) is never cached
      const at = await sys.readlink(sys.fdPath(fd)).catch(() => null);
      ok = at !== null && at.equals(expected);
    } else {
      ok = gen === home.dirGen;
    }
    if (ok) this.lru.set(key, entry);
    else entry.dropped = true;
    return entry;
  }

  /**
   * A descriptor of the directory `rel` (at least one component) below the
   * home, whose real path is `base/rel`. `step` opens one component below a
   * descriptor without following anything.
   */
  async acquire(home: DirHome, base: string, rel: readonly string[], step: (dirFd: number, name: string) => Promise<number>): Promise<Lease> {
    const gen = home.dirGen;
    const prefix = `${home.dev}:${home.ino}/`;
    const keyAt = (n: number) => prefix + rel.slice(0, n).join('/');
    const pathAt = (n: number) => Buffer.from(`${base}/${rel.slice(0, n).join('/')}`);
    const d = rel.length;
    // The directory itself, its parent, then anchors above.
    const candidates = [d];
    if (d > 1) candidates.push(d - 1);
    for (let n = Math.floor((d - 2) / ANCHOR) * ANCHOR; n > 0; n -= ANCHOR) candidates.push(n);
    let from: Entry | null = null;
    let level = 0;
    for (const n of candidates) {
      const key = keyAt(n);
      const e = this.lru.get(key);
      if (!e) continue;
      e.refs++;
      if (!(await this.valid(key, e, home, pathAt(n)))) continue;
      if (n === d) return this.lease(e);
      from = e;
      level = n;
      break;
    }
    // Walk down from there; each level's descriptor is closed once the next is open, except anchors and the last.
    let cur: Entry | null = from;
    let fd = from ? from.fd : home.fd;
    try {
      for (let n = level + 1; n <= d; n++) {
        const next = await step(fd, rel[n - 1]!);
        if (cur) this.release(cur);
        else if (fd !== home.fd) await sys.close(fd).catch(() => undefined);
        cur = null;
        fd = next;
        if (n === d || n % ANCHOR === 0) cur = await this.keep(keyAt(n), next, home, gen, pathAt(n));
      }
      return this.lease(cur!);
    } catch (err) {
      if (cur) this.release(cur);
      else if (fd !== home.fd) await sys.close(fd).catch(() => undefined);
      throw err;
    }
  }

  clear(): void {
    this.lru.clear();
  }
}
