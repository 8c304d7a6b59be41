import { LRUCache } from 'lru-cache';
import * as sys from './sys.js';

interface Entry {
  fd: number;
  /** operations currently using the descriptor */
  refs: number;
  /** dropped from the cache: close once the last user is done */
  dropped: boolean;
}

export interface Lease {
  fd: number;
  release(): void;
}

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

  /**
   * A descriptor of the directory whose real path must be `expected`. `walk`
   * opens it safely when the cache cannot answer; its result is cached only if
   * it reads back as `expected` too (a moved backing root is never cached).
   */
  async acquire(key: string, expected: Buffer, walk: () => Promise<number>): Promise<Lease> {
    const cached = this.lru.get(key);
    if (cached) {
      cached.refs++;
      const at = await sys.readlink(sys.fdPath(cached.fd)).catch(() => null);
      if (at !== null && at.equals(expected)) {
        return this.lease(cached);
      }
      this.release(cached);
      if (this.lru.get(key) === cached) this.lru.delete(key);
    }
    const fd = await walk();
    const entry: Entry = { fd, refs: 1, dropped: false };
    const at = await sys.readlink(sys.fdPath(fd)).catch(() => null);
    if (at !== null && at.equals(expected)) this.lru.set(key, entry);
    else entry.dropped = true;
    return this.lease(entry);
  }

  clear(): void {
    this.lru.clear();
  }
}
