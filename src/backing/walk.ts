import type { Dirent } from 'node:fs';
import * as sys from './sys.js';

/**
 * One tree walk for every whole-tree job (the scans, `rescan`'s repair, the
 * removal of a deleted home): iterative, so no depth overflows the JS stack,
 * and with a bounded number of open descriptors, so no depth exhausts the
 * daemon's (a 4000-level tree under a 3000-descriptor limit broke the old
 * recursive walks, one descriptor per level).
 *
 * The walk is a generator of steps, run by a synchronous driver (the scan
 * worker) or an asynchronous one (threadpool calls): the same code decides
 * which descriptor is open when, whatever does the I/O.
 *
 * With `batch`, a directory's entries are not visited one step each: one
 * `list` step hands the job the whole directory as soon as it is opened, and
 * the job answers the subdirectories to enter. The scan's native lister
 * (src/fs/scan-native.ts) needs that shape: one call a directory, no object
 * per entry. Only the order of visits changes (a directory's entries before
 * its subtrees, not interleaved), which no count depends on.
 *
 * Descriptors: the directories within WINDOW levels of the current one stay
 * open, and further up only "anchors", ever sparser (about WINDOW per doubling
 * of the distance), so at most ~WINDOW·(1 + log2(depth/WINDOW)) are open
 * (measured: 82 at depth 5000, 117 at depth 100,000; the bound at 1,000,000 is
 * ~145), plus the caller's root. A directory
 * whose descriptor was closed and that still has work (entries left, or a
 * child to remove) is opened again from the nearest open ancestor, one
 * component at a time by name, O_NOFOLLOW|O_DIRECTORY, and each reopened
 * directory must be the same inode (st_dev, st_ino) as when the walk first
 * went through it. A rename racing the walk therefore never makes it leave
 * the tree or act elsewhere: the part that moved is dropped from this walk
 * (as a directory removed meanwhile would be). The cost of reopening is
 * O(log) amortized per level.
 */

export interface DirId {
  dev: bigint;
  ino: bigint;
}

export type WalkStep =
  /** open `name` below `dirFd`: O_PATH|O_DIRECTORY|O_NOFOLLOW, never a symlink → fd */
  | { op: 'open'; dirFd: number; name: Buffer }
  /** → DirId */
  | { op: 'fstat'; fd: number }
  /** → Dirent<Buffer>[] */
  | { op: 'readdir'; fd: number }
  | { op: 'close'; fd: number }
  /** an entry of an open directory: the job's own work; → true to descend into it (a directory) */
  | { op: 'visit'; dirFd: number; entry: Dirent<Buffer>; depth: number }
  /** every entry of the directory `name` below `parentFd` is done (post-order, only with `leave: true`) */
  | { op: 'leave'; parentFd: number; name: Buffer; depth: number }
  /** `batch` only: all entries of the open directory `fd` (at `depth`) are the job's; → the subdirectories to enter, { name }[] */
  | { op: 'list'; fd: number; depth: number };

export interface WalkStats {
  /** directories entered below the root */
  dirs: number;
  /** deepest level entered (the root's entries are level 1) */
  depth: number;
  /** most descriptors open at once, the root not counted */
  maxOpen: number;
  /** directories opened again on the way back up */
  reopened: number;
  /** subtrees dropped because they moved or vanished during the walk */
  lost: number;
}

export interface WalkOptions {
  /** post-order `leave` steps (tree removal) */
  leave?: boolean;
  /** levels kept open below the current directory (tests use small ones) */
  window?: number;
  /** `list` steps instead of `readdir` and `visit` (see above) */
  batch?: boolean;
}

/** Errors meaning "not there (any more) as a directory": the walk goes on without it. */
const GONE = new Set(['ENOENT', 'ENOTDIR', 'ELOOP']);
const gone = (err: unknown): boolean => typeof err === 'object' && err !== null && GONE.has(String((err as { code?: unknown }).code));

interface Frame {
  name: Buffer;
  id: DirId;
  /** -1 when closed */
  fd: number;
  /** Dirent<Buffer>s, or with `batch` only the subdirectories to enter */
  entries: Array<{ name: Buffer }>;
  next: number;
}

export function* walkSteps(rootFd: number, opts: WalkOptions = {}): Generator<WalkStep, WalkStats, unknown> {
  const W = Math.max(1, opts.window ?? 8);
  const stats: WalkStats = { dirs: 0, depth: 0, maxOpen: 0, reopened: 0, lost: 0 };
  const batch = opts.batch === true;
  const rootId = (yield { op: 'fstat', fd: rootFd }) as DirId;
  const rootEntries = (yield batch ? { op: 'list', fd: rootFd, depth: 1 } : { op: 'readdir', fd: rootFd }) as Frame['entries'];
  const stack: Frame[] = [{ name: Buffer.alloc(0), id: rootId, fd: rootFd, entries: rootEntries, next: 0 }];
  let open = 0;

  /** Is frame k (0 = root) kept open while frame t is the deepest? */
  const keep = (k: number, t: number): boolean => {
    const d = t - k;
    if (k === 0 || d < W) return true;
    let span = 1;
    while (W * span * 2 <= d) span *= 2;
    return k % span === 0;
  };

  function* close(f: Frame): Generator<WalkStep, void, unknown> {
    if (f.fd < 0 || f.fd === rootFd) return;
    const fd = f.fd;
    f.fd = -1;
    open--;
    try {
      yield { op: 'close', fd };
    } catch {
      // a close that fails has released the descriptor all the same
    }
  }

  /** Drop frames k.. (they moved or vanished). */
  function* drop(k: number): Generator<WalkStep, void, unknown> {
    while (stack.length > k) yield* close(stack.pop()!);
    stats.lost++;
  }

  /** The descriptor of frame j, reopened by names from the nearest open ancestor if needed; -1 if it moved. */
  function* ensure(j: number): Generator<WalkStep, number, unknown> {
    if (stack[j]!.fd >= 0) return stack[j]!.fd;
    let a = j - 1;
    while (stack[a]!.fd < 0) a--;
    for (let k = a + 1; k <= j; k++) {
      const parent = stack[k - 1]!;
      const f = stack[k]!;
      let fd: number;
      try {
        fd = (yield { op: 'open', dirFd: parent.fd, name: f.name }) as number;
      } catch (err) {
        if (!gone(err)) throw err;
        yield* drop(k);
        return -1;
      }
      f.fd = fd;
      open++;
      stats.reopened++;
      stats.maxOpen = Math.max(stats.maxOpen, open);
      const id = (yield { op: 'fstat', fd }) as DirId;
      if (id.dev !== f.id.dev || id.ino !== f.id.ino) {
        yield* drop(k);
        return -1;
      }
      if (k - 1 > a && !keep(k - 1, j)) yield* close(parent);
    }
    return stack[j]!.fd;
  }

  try {
    while (stack.length > 0) {
      const t = stack.length - 1;
      const top = stack[t]!;
      if (top.next >= top.entries.length) {
        yield* close(top);
        if (t === 0) {
          stack.pop();
          break;
        }
        if (opts.leave) {
          const parentFd = yield* ensure(t - 1);
          // the parent moved: `top` went with it (dropped), nothing to leave
          if (parentFd < 0) continue;
          stack.pop();
          yield { op: 'leave', parentFd, name: top.name, depth: t };
        } else {
          stack.pop();
        }
        continue;
      }
      const entry = top.entries[top.next++]!;
      const dirFd = yield* ensure(t);
      if (dirFd < 0) continue;
      const descend = batch || ((yield { op: 'visit', dirFd, entry: entry as Dirent<Buffer>, depth: t + 1 }) as boolean);
      if (!descend) continue;
      let fd: number;
      try {
        fd = (yield { op: 'open', dirFd, name: entry.name }) as number;
      } catch (err) {
        if (gone(err)) continue; // vanished or replaced meanwhile
        throw err;
      }
      open++;
      stats.maxOpen = Math.max(stats.maxOpen, open);
      const child: Frame = { name: entry.name, id: { dev: 0n, ino: 0n }, fd, entries: [], next: 0 };
      stack.push(child);
      child.id = (yield { op: 'fstat', fd }) as DirId;
      try {
        child.entries = (yield batch ? { op: 'list', fd, depth: stack.length } : { op: 'readdir', fd }) as Frame['entries'];
      } catch (err) {
        if (!gone(err)) throw err;
        yield* close(child);
        stack.pop();
        continue;
      }
      const nt = stack.length - 1;
      stats.dirs++;
      stats.depth = Math.max(stats.depth, nt);
      // Going one level deeper moves some ancestors into a sparser band: only
      // those at exactly W·2^m levels up can have to close.
      for (let span = 2; W * span <= nt; span *= 2) {
        const k = nt - W * span;
        if (k > 0 && stack[k]!.fd >= 0 && !keep(k, nt)) yield* close(stack[k]!);
      }
    }
  } finally {
    // on an error: nothing stays open
    while (stack.length > 0) yield* close(stack.pop()!);
  }
  return stats;
}

/** Run a walk whose steps `io` answers synchronously (a worker thread). */
export function runWalkSync(gen: Generator<WalkStep, WalkStats, unknown>, io: (s: WalkStep) => unknown): WalkStats {
  let r = gen.next();
  while (!r.done) {
    let v: unknown;
    try {
      v = io(r.value);
    } catch (err) {
      r = gen.throw(err);
      continue;
    }
    r = gen.next(v);
  }
  return r.value;
}

/** Run a walk whose steps `io` answers with promises (threadpool calls). */
export async function runWalk(gen: Generator<WalkStep, WalkStats, unknown>, io: (s: WalkStep) => unknown): Promise<WalkStats> {
  let r = gen.next();
  while (!r.done) {
    let v: unknown;
    try {
      v = await io(r.value);
    } catch (err) {
      r = gen.throw(err);
      continue;
    }
    r = gen.next(v);
  }
  return r.value;
}

const O_PATH = 0o10000000;
const at = (fd: number, name: Buffer): Buffer => Buffer.concat([Buffer.from(`/proc/self/fd/${fd}/`), name]);

/** The job's own part of a walk: what to do with each entry, and after each directory. */
export interface WalkJob<R> {
  visit(dirFd: number, entry: Dirent<Buffer>, depth: number): R;
  leave?(parentFd: number, name: Buffer, depth: number): unknown;
  /** `batch` walks: a whole directory at once (see walkSteps) */
  list?(fd: number, depth: number): Array<{ name: Buffer }>;
}

/** Steps answered with synchronous calls of `fs` (a worker thread's own module). */
export function syncIo(fs: typeof import('node:fs'), job: WalkJob<boolean>): (s: WalkStep) => unknown {
  const dirFlags = O_PATH | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW;
  return (s) => {
    switch (s.op) {
      case 'open':
        return fs.openSync(at(s.dirFd, s.name), dirFlags);
      case 'fstat': {
        const st = fs.fstatSync(s.fd, { bigint: true });
        return { dev: st.dev, ino: st.ino } satisfies DirId;
      }
      case 'readdir':
        return fs.readdirSync(`/proc/self/fd/${s.fd}/`, { encoding: 'buffer', withFileTypes: true });
      case 'close':
        return fs.closeSync(s.fd);
      case 'visit':
        return job.visit(s.dirFd, s.entry, s.depth);
      case 'leave':
        return job.leave?.(s.parentFd, s.name, s.depth);
      case 'list':
        if (!job.list) throw new Error('a batch walk needs a job with list()');
        return job.list(s.fd, s.depth);
    }
  };
}

/** Steps answered on the threadpool: a whole tree never holds the JS thread. */
export function pooledIo(job: WalkJob<Promise<boolean>>): (s: WalkStep) => unknown {
  const io = sys.pooled;
  return async (s) => {
    switch (s.op) {
      case 'open':
        return io.open(at(s.dirFd, s.name), O_PATH | sys.C.O_DIRECTORY | sys.C.O_NOFOLLOW);
      case 'fstat': {
        const st = await io.fstat(s.fd);
        return { dev: st.dev, ino: st.ino } satisfies DirId;
      }
      case 'readdir':
        return io.readdirRaw(`/proc/self/fd/${s.fd}/`);
      case 'close':
        return io.close(s.fd);
      case 'visit':
        return job.visit(s.dirFd, s.entry, s.depth);
      case 'leave':
        return job.leave?.(s.parentFd, s.name, s.depth);
      case 'list':
        throw new Error('batch walks run synchronously (syncIo)');
    }
  };
}

/** The path of `name` in the directory `fd`, resolved by the kernel from the descriptor. */
export { at as entryPath };

const TOO_DEEP = Symbol('too deep');

/**
 * Does the directory `name` below `parentFd` hold a directory more than
 * `levels` levels below it? A walk of its directories only (files are not
 * stat'ed), stopped at the first one too deep: what a rename must know
 * before it moves a subtree deeper (a moved directory carries its own depth).
 * Not a directory: false.
 */
export async function subtreeDeeperThan(parentFd: number, name: string, levels: number): Promise<boolean> {
  let fd: number;
  try {
    fd = await sys.pooled.open(at(parentFd, Buffer.from(name)), O_PATH | sys.C.O_DIRECTORY | sys.C.O_NOFOLLOW);
  } catch (err) {
    if (gone(err)) return false;
    throw err;
  }
  try {
    await runWalk(
      walkSteps(fd),
      pooledIo({
        visit: async (_dirFd, e, depth) => {
          if (!e.isDirectory()) return false;
          if (depth > levels) throw TOO_DEEP;
          return true;
        },
      }),
    );
    return false;
  } catch (err) {
    if (err === TOO_DEEP) return true;
    throw err;
  } finally {
    await sys.pooled.close(fd);
  }
}
