import type { BigIntStats } from 'node:fs';
import * as sys from '../backing/sys.js';
import { slowToFree } from '../backing/freeing.js';
import { subtreeDeeperThan } from '../backing/walk.js';
import { HomesError } from '../errors.js';
import type { HomeRef } from '../paths/parse.js';
import { checkComponent, decodeBackingName } from '../paths/names.js';
import { effectiveDirMode, effectiveFileMode, maySpecial, type SpecialKind } from '../policy/profiles.js';
import { isReservedDir, RESERVED_DIR, STATUS_NAME } from '../paths/reserved.js';
import type { FsContext } from './context.js';
import type { Removing } from './inodes.js';
import { dirEntryAttr, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFMT, S_IFREG, S_IFSOCK, type DirEntryAttr } from './present.js';
import { forgetHidden, hideOpenFile, HIDDEN_NAME, withEntryOnly, withOrphan } from './hidden.js';
import type { Caller, HomeState } from './state.js';
import { orphanName } from '../paths/hidden-names.js';

/** A listing: names and, for each, what the kernel puts in d_ino and d_type. */
export interface Listing {
  names: string[];
  stats: DirEntryAttr[];
  /**
   * Streamed (a part of a big listing, from the kernel's offset on): each
   * entry's own offset, where the next request starts after it. Absent: the
   * whole listing, which libfuse then keeps per open handle.
   */
  offsets?: number[];
}

/** Entries one streamed request answers at most (a 4 KiB READDIR takes 15 to 170 of them). */
const STREAM_CHUNK = 256;

/** lstat of every listed name, a bounded number at a time (each is a threadpool round trip). */
const LSTAT_BATCH = 64;

/**
 * A directory whose entries take more than this (ext4: 4 KiB blocks of about
 * 8 bytes plus the name per entry, so some 1,000 to 4,000 names) is a big
 * listing: read on the threadpool, its lstats in batches between which the
 * event loop serves everyone else, and at most one such listing per home at a
 * time (four in all). Measured (big-listing.test.ts, listings all JavaScript's):
 * four `ls -f` loops of a 50,000-entry home made another home's p99 1,039 ms
 * when one listing held the JS thread for its whole length, 14-57 ms now. The
 * binding streams what it lists (homes and below); these are the listings it
 * leaves to JavaScript.
 */
const BIG_DIR_BYTES = 64 * 1024;

/**
 * d_ino must be the st_ino that stat gives (git, find -inum, os.scandir rely on
 * it): every entry is lstat'ed. An entry that vanished meanwhile is left out;
 * one on another device (a mount point inside a home) is left out too, as it
 * is never served.
 */
export async function readdir(ctx: FsContext, path: string, offset = 0): Promise<Listing> {
  const vp = ctx.parse(path);
  // The daemon's own levels are listed whole, so the kernel never asks them at an offset.
  if (offset > 0 && vp.kind !== 'home') return { names: [], stats: [], offsets: [] };
  if (vp.kind === 'root') {
    const self = dirEntryAttr(await ctx.store.rootStat());
    return withDots(self, self, await ctx.store.listTenantsWithStats());
  }
  if (vp.kind === 'tenant') {
    const [self, parent] = await Promise.all([ctx.store.statTenant(vp.tenant), ctx.store.rootStat()]);
    return withDots(dirEntryAttr(self), dirEntryAttr(parent), await ctx.store.listHomesWithStats(vp.tenant));
  }
  const hs = await ctx.home(vp.home);
  if (isReservedDir(vp.rel)) {
    const status = { name: STATUS_NAME, attr: { ino: ctx.statusFiles.ino(hs.backing.id), mode: S_IFREG } };
    const backing = await readdirBacking(ctx, hs, vp.rel, offset, true, status);
    // gone since a streamed listing began: it ends there
    if (backing === null && offset > 0) return { names: [], stats: [], offsets: [] };
    return await reservedDirListing(ctx, hs, backing);
  }
  return readdirBacking(ctx, hs, vp.rel, offset);
}

/**
 * `.homesfs` lists `status` besides what the backing directory holds (a
 * backing entry of that name is hidden: the name is the daemon's); when the
 * backing directory does not exist it lists only `status`.
 */
async function reservedDirListing(ctx: FsContext, hs: HomeState, backing: Listing | null): Promise<Listing> {
  const status = { ino: ctx.statusFiles.ino(hs.backing.id), mode: S_IFREG };
  if (backing === null) {
    const self = { ino: ctx.statusFiles.ino(hs.backing.id) | 1n, mode: S_IFDIR };
    const home = dirEntryAttr(await ctx.store.useHome(hs.backing, sys.fstat));
    return { names: ['.', '..', STATUS_NAME], stats: [self, home, status] };
  }
  // Streamed, the listing already has `status` (streamDir's `extra`) and no backing entry of that name.
  if (backing.offsets) return backing;
  const names: string[] = [];
  const stats: DirEntryAttr[] = [];
  backing.names.forEach((n, i) => {
    if (n === STATUS_NAME) return;
    names.push(n);
    stats.push(backing.stats[i]!);
  });
  names.push(STATUS_NAME);
  stats.push(status);
  return { names, stats };
}

type Extra = { name: string; attr: DirEntryAttr };

async function readdirBacking(ctx: FsContext, hs: HomeState, rel: readonly string[], offset: number): Promise<Listing>;
async function readdirBacking(ctx: FsContext, hs: HomeState, rel: readonly string[], offset: number, missingOk: boolean, extra?: Extra): Promise<Listing | null>;
async function readdirBacking(ctx: FsContext, hs: HomeState, rel: readonly string[], offset: number, missingOk = false, extra?: Extra): Promise<Listing | null> {
  const vp = { rel };
  if (missingOk) {
    try {
      return await readdirBacking(ctx, hs, rel, offset, false, extra);
    } catch (err) {
      if (sys.sysCode(err) === 'ENOENT') return null;
      throw err;
    }
  }
  const parentStat =
    vp.rel.length === 0
      ? ctx.store.statTenant(hs.backing.ref.tenant)
      : ctx.store.withDir(hs.backing, vp.rel.slice(0, -1), (fd) => sys.fstat(fd));
  return ctx.store.withDir(hs.backing, vp.rel, async (fd) => {
    const self = await sys.fstat(fd);
    if (offset === 0 && self.size <= BigInt(BIG_DIR_BYTES)) return listDir(hs, fd, self, await parentStat, false);
    // A big directory (or one already streamed: once under way, a listing stays in that form) is streamed.
    return ctx.listings.run(hs.backing.id, async () => streamDir(ctx, hs, fd, self, await parentStat, offset, extra));
  });
}

/**
 * A part of a big directory's listing, from the kernel's `offset` on, so that
 * libfuse keeps one request's worth per open handle instead of the whole
 * listing. The offsets are positions in the directory's sorted names ("."
 * is 1, ".." 2, an `extra` entry the daemon adds 3 (a backing entry of its
 * name is hidden), the n-th name n + 4). The names are read on the threadpool
 * when a listing starts and kept for its later requests while the directory
 * is unchanged (its mtime, ctime and size; a few directories at a time,
 * FsContext.streamedNames); only the names answered are lstat'ed. A directory that changes between requests
 * may show a name twice or miss one, as POSIX allows for a listing under way.
 */
async function streamDir(ctx: FsContext, hs: HomeState, fd: number, self: BigIntStats, parent: BigIntStats, offset: number, extra?: Extra): Promise<Listing> {
  // The names of a directory being streamed, kept while it is unchanged: one read for all the
  // requests of a listing under way (a listing that starts reads them afresh: timestamps are coarse).
  const key = `${self.dev}:${self.ino}`;
  const version = `${self.mtimeNs}:${self.ctimeNs}:${self.size}`;
  const kept = offset > 0 ? ctx.streamedNames.get(key) : undefined;
  let entries = kept?.version === version ? kept.names : undefined;
  if (!entries) {
    entries = await sys.readdirPooled(sys.fdPath(fd));
    ctx.streamedNames.set(key, { version, names: entries });
  }
  const out: Listing = { names: [], stats: [], offsets: [] };
  const add = (name: string, attr: DirEntryAttr, at: number) => {
    out.names.push(name);
    out.stats.push(attr);
    out.offsets!.push(at);
  };
  if (offset < 1) add('.', dirEntryAttr(self), 1);
  if (offset < 2) add('..', dirEntryAttr(parent), 2);
  if (offset < 3 && extra) add(extra.name, extra.attr, 3);
  for (let j = Math.max(0, offset - 3); j < entries.length && out.names.length < STREAM_CHUNK; j++) {
    const name = decodeBackingName(entries[j]!.name);
    if (name === null || name === extra?.name) continue;
    const st = await sys.lstat(sys.fdPath(fd, name)).catch(() => null);
    if (st && st.dev === hs.backing.dev) add(name, dirEntryAttr(st), j + 4);
  }
  return out;
}

/** The listing of an open directory: every entry lstat'ed (see readdir); a big one yielding between batches. */
async function listDir(hs: HomeState, fd: number, self: BigIntStats, parent: BigIntStats, big: boolean): Promise<Listing> {
  {
    const entries = await (big ? sys.readdirPooled : sys.readdirRaw)(sys.fdPath(fd));
    const named: Array<{ name: string; st: BigIntStats }> = [];
    for (let i = 0; i < entries.length; i += LSTAT_BATCH) {
      // A macrotask between batches: requests of other homes are answered in between.
      if (big && i > 0) await new Promise<void>((resume) => setImmediate(resume));
      const batch = entries.slice(i, i + LSTAT_BATCH).map(async (e) => {
        const name = decodeBackingName(e.name);
        // A name that is not UTF-8 could not be looked up again (paths arrive decoded):
        // it is left out of listings rather than shown under a name that means another file.
        if (name === null) return null;
        const st = await sys.lstat(sys.fdPath(fd, name)).catch(() => null);
        return st && st.dev === hs.backing.dev ? { name, st } : null;
      });
      for (const r of await Promise.all(batch)) if (r) named.push(r);
    }
    return withDots(dirEntryAttr(self), dirEntryAttr(parent), named);
  }
}

function withDots(self: DirEntryAttr, parent: DirEntryAttr, entries: Array<{ name: string; st: BigIntStats }>): Listing {
  const names = ['.', '..'];
  const stats = [self, parent];
  for (const e of entries) {
    names.push(e.name);
    stats.push(dirEntryAttr(e.st));
  }
  return { names, stats };
}

export async function mkdir(ctx: FsContext, path: string, mode: number, caller: Caller): Promise<void> {
  const vp = ctx.parseInHome(path, 'mkdir');
  await ctx.changing(vp.home, async (hs) => {
    await ctx.prepareNewEntry(hs, vp.dir, vp.name, true);
    await ctx.store.withDir(hs.backing, vp.dir, async (dirFd) => {
      await ctx.checkNewEntry(hs, dirFd, vp.dir, vp.name);
      const undo = ctx.addInode(hs);
      try {
        await sys.mkdir(sys.fdPath(dirFd, vp.name), effectiveDirMode(hs.profile, mode & 0o7777));
      } catch (err) {
        undo();
        throw err;
      }
      await ctx.ownNew(hs, dirFd, vp.name, caller, effectiveDirMode(hs.profile, mode & 0o7777));
    });
    // This caller's next mkdirs in the home may be made by the binding (fuse.nativeMkdir), with create slots' inodes.
    if (hs.nativeCreate?.dir) ctx.wantCredits(hs, caller.uid, true);
  });
}

export async function rmdir(ctx: FsContext, path: string): Promise<void> {
  const vp = ctx.parseInHome(path, 'rmdir');
  await ctx.changing(vp.home, async (hs) => {
    await ctx.store.withDir(hs.backing, vp.dir, async (dirFd) => {
      await sys.rmdir(sys.fdPath(dirFd, vp.name));
      ctx.store.dirsChanged(hs.backing);
      hs.ledger.removeInode();
    });
  });
}

/** `hidden`: the session's unlink of a hidden name at its node's last release, which means the home's orphan (hidden.ts). */
export async function unlink(ctx: FsContext, path: string, hidden = false): Promise<void> {
  const vp = ctx.parseInHome(path, 'unlink');
  if (hidden) {
    forgetHidden(ctx, path);
    // The orphan is no name: its name's inode went at the hiding, its bytes at the last close (hidden.ts).
    return ctx.changing(vp.home, (hs) =>
      withOrphan(ctx, hs, vp.dir, vp.name, async (_dirFd, entry) => {
        const node = await ctx.store.openNodeAt(entry);
        let slow = false;
        try {
          slow = slowToFree(await sys.fstat(node));
          await sys.unlink(entry);
        } finally {
          // The node holds the file: its close, not the unlink, frees the blocks.
          await ctx.closeRemoved(hs, node, slow, null);
        }
      }),
    );
  }
  await ctx.changing(vp.home, async (hs) => {
    await withEntryOnly(ctx, hs, vp.dir, vp.name, async (_dirFd, entry) => {
      const node = await ctx.store.openNodeAt(entry);
      let release: (() => void) | null = null;
      let slow = false;
      let removing: Removing | null = null;
      try {
        const st = await sys.fstat(node);
        slow = slowToFree(st);
        removing = ctx.enterRemoval(st);
        await sys.unlink(entry);
        // read after the unlink: nlink tells whether this was the last name.
        release = ctx.removal(hs, node, removing);
      } finally {
        if (removing) ctx.leaveRemoval(removing);
        // The node holds the file: its close, not the unlink, frees the blocks.
        await ctx.closeRemoved(hs, node, slow, release);
      }
    });
  });
}

function sameHome(a: HomeRef, b: HomeRef): boolean {
  return a.tenant === b.tenant && a.key === b.key;
}

/** renameat2(2)'s flags (linux/fs.h) the daemon takes, each alone; RENAME_WHITEOUT (4) is not one of them. */
export const RENAME_NOREPLACE = 1;
export const RENAME_EXCHANGE = 2;

/**
 * The control socket's helper renaming a home: the one rename allowed at the
 * home level. It is a plain rename(2) (src/cli/rename-helper.ts): with flags
 * it is refused (EINVAL) and the admission stays for the helper's own
 * request. NOREPLACE would add nothing (the helper's rename never replaces:
 * RENAME_BLOCKED below) and EXCHANGE would swap two homes' trees under the
 * state the registry keeps by name.
 */
async function admittedHomeRename(ctx: FsContext, from: string, to: string, caller: Caller, flags: number): Promise<boolean> {
  const a = ctx.admission;
  if (!a || a.pid !== caller.pid || a.from !== from || a.to !== to) return false;
  if (flags !== 0) throw new HomesError('INVALID_ARGUMENT', `a home is renamed without renameat2 flags (got ${flags})`);
  const [, tenant = '', fromKey = ''] = from.split('/');
  const [, toTenant = '', toKey = ''] = to.split('/');
  if (tenant !== toTenant) return false;
  await ctx.store.withTenant(tenant, async (tfd) => {
    // rename(2) would replace an empty directory: a home is never merged or replaced.
    const exists = await sys.lstat(sys.fdPath(tfd, toKey)).then(
      () => true,
      (err) => (sys.sysCode(err) === 'ENOENT' ? false : Promise.reject(err)),
    );
    if (exists) throw new HomesError('RENAME_BLOCKED', `${to.slice(1)} exists`);
    await sys.rename(sys.fdPath(tfd, fromKey), sys.fdPath(tfd, toKey));
  });
  ctx.admission = null;
  a.onRenamed();
  return true;
}

/**
 * `hide`: the session hides an open file whose last name goes (`to`, a hidden
 * name at its home's root: hidden.ts). `flags`: renameat2(2)'s, RENAME_NOREPLACE
 * or RENAME_EXCHANGE alone (anything else, RENAME_WHITEOUT included, EINVAL),
 * under the same rules as a rename (renameFlagged).
 */
export async function rename(ctx: FsContext, from: string, to: string, caller: Caller, hide = false, flags = 0): Promise<void> {
  // As the kernel: a bad flag is EINVAL before anything about the names.
  if (flags !== 0 && flags !== RENAME_NOREPLACE && flags !== RENAME_EXCHANGE) {
    throw new HomesError('INVALID_ARGUMENT', `renameat2 flags ${flags}: only RENAME_NOREPLACE or RENAME_EXCHANGE, alone, are supported`);
  }
  if (await admittedHomeRename(ctx, from, to, caller, flags)) return;
  const src = ctx.parseInHome(from, 'rename');
  const dst = ctx.parseInHome(to, 'rename');
  // Between homes: EXDEV, so mv(1) copies and deletes, and the target's budget applies.
  if (!sameHome(src.home, dst.home)) throw new HomesError('CROSS_HOME', 'rename between two homes');
  if (flags !== 0) {
    if (hide) throw new HomesError('IO', 'a hiding takes no renameat2 flags');
    return renameFlagged(ctx, src, dst, flags);
  }
  if (hide) {
    if (dst.dir.length !== 0 || !HIDDEN_NAME.test(dst.name)) throw new HomesError('IO', `a hiding names ${to}, not a hidden name at its home's root`);
    return ctx.changing(src.home, (hs) => ctx.store.withDir(hs.backing, src.dir, (dirFd) => hideOpenFile(ctx, hs, dirFd, src.name, to, dst.name)));
  }
  await ctx.changing(src.home, async (hs) => {
    if (dst.dir.length === 0 && dst.name === RESERVED_DIR) {
      const st = await ctx.store.withDir(hs.backing, src.dir, (srcDir) => sys.lstat(sys.fdPath(srcDir, src.name)));
      await ctx.prepareNewEntry(hs, dst.dir, dst.name, st.isDirectory());
    }
    await ctx.prepareNewEntry(hs, dst.dir, dst.name, true);
    await ctx.store.withDir(hs.backing, src.dir, (srcDir) =>
      ctx.store.withDir(hs.backing, dst.dir, async (dstDir) => {
        await checkComponent(dst.name, hs.profile.maxNameBytes);
        const cap = hs.profile.maxDepth;
        if (cap > 0 && dst.dir.length + 1 > cap) {
          throw new HomesError('OP_REFUSED', `nesting deeper than ${cap} levels is not allowed in profile ${hs.profileName}`);
        }
        // A directory moved deeper takes its subtree along: measured, not assumed
        // (a 100-deep subtree under a 100-deep directory makes 200). Moving to the
        // same depth or higher up never deepens anything, and costs no walk.
        if (cap > 0 && dst.dir.length > src.dir.length && (await subtreeDeeperThan(srcDir, src.name, cap - dst.dir.length - 1))) {
          throw new HomesError('OP_REFUSED', `nesting deeper than ${cap} levels is not allowed in profile ${hs.profileName} (the directory moved holds deeper levels)`);
        }
        let replaced = await ctx.probeNode(dstDir, dst.name);
        if (replaced !== null) {
          const fd = replaced;
          const same = await sameNode(fd, srcDir, src.name).catch(async (err: unknown) => {
            await sys.close(fd);
            throw err;
          });
          if (same) {
            // rename(2) between two names of one inode does nothing: no name goes.
            await sys.close(fd);
            replaced = null;
          }
        }
        const replacedSt = replaced !== null ? await sys.fstat(replaced) : null;
        const slow = replacedSt !== null && slowToFree(replacedSt);
        let release: (() => void) | null = null;
        let removing: Removing | null = null;
        try {
          if (replacedSt !== null) removing = ctx.enterRemoval(replacedSt);
          try {
            await sys.rename(sys.fdPath(srcDir, src.name), sys.fdPath(dstDir, dst.name));
          } finally {
            // Every rename, not only a directory's: what moved is known only racily (see DirCache).
            ctx.store.dirsChanged(hs.backing);
          }
          if (replaced !== null) release = ctx.removal(hs, replaced, removing!);
        } finally {
          if (removing) ctx.leaveRemoval(removing);
          // What was replaced lives on in `replaced` until this close frees it.
          if (replaced !== null) await ctx.closeRemoved(hs, replaced, slow, release);
        }
      }),
    );
  });
}

type Named = { home: HomeRef; dir: readonly string[]; name: string };

/**
 * renameat2 with RENAME_NOREPLACE or RENAME_EXCHANGE, in one home: the rules
 * of a rename (names, the depth cap with the subtree a directory takes along,
 * the reserved name at the home's root), then one renameat2 in the backing
 * tree, which decides atomically what a check before it could only race:
 * NOREPLACE fails with EEXIST on a name that exists by then, EXCHANGE with
 * ENOENT when either is missing. Nothing is replaced or removed, so no
 * hiding, no removal and no change to the ledger (the same bytes and inodes,
 * under other names). EXCHANGE moves both nodes: each is checked as the one
 * moved to the other's place.
 */
async function renameFlagged(ctx: FsContext, src: Named, dst: Named, flags: number): Promise<void> {
  const exchange = flags === RENAME_EXCHANGE;
  await ctx.changing(src.home, async (hs) => {
    await ctx.prepareNewEntry(hs, dst.dir, dst.name, true);
    if (exchange) await ctx.prepareNewEntry(hs, src.dir, src.name, true);
    await ctx.store.withDir(hs.backing, src.dir, (srcDir) =>
      ctx.store.withDir(hs.backing, dst.dir, async (dstDir) => {
        checkComponent(dst.name, hs.profile.maxNameBytes);
        if (exchange) checkComponent(src.name, hs.profile.maxNameBytes);
        const cap = hs.profile.maxDepth;
        if (cap > 0 && dst.dir.length + 1 > cap) {
          throw new HomesError('OP_REFUSED', `nesting deeper than ${cap} levels is not allowed in profile ${hs.profileName}`);
        }
        // What arrives at each name: the source always, the target too for an exchange.
        const moves: { fromDir: number; name: string; depth: number; to: Named }[] = [{ fromDir: srcDir, name: src.name, depth: src.dir.length, to: dst }];
        if (exchange) moves.push({ fromDir: dstDir, name: dst.name, depth: dst.dir.length, to: src });
        for (const m of moves) {
          if (m.to.dir.length === 0 && m.to.name === RESERVED_DIR) {
            const st = await sys.lstat(sys.fdPath(m.fromDir, m.name));
            await ctx.prepareNewEntry(hs, m.to.dir, m.to.name, st.isDirectory());
          }
          // A directory moved deeper takes its subtree along (as in rename).
          if (cap > 0 && m.to.dir.length > m.depth && (await subtreeDeeperThan(m.fromDir, m.name, cap - m.to.dir.length - 1))) {
            throw new HomesError('OP_REFUSED', `nesting deeper than ${cap} levels is not allowed in profile ${hs.profileName} (the directory moved holds deeper levels)`);
          }
        }
        try {
          await ctx.deps.renameat2(srcDir, src.name, dstDir, dst.name, flags);
        } finally {
          // As after every rename: what moved is known only racily (see DirCache).
          ctx.store.dirsChanged(hs.backing);
        }
      }),
    );
  });
}

/** Whether `name` in dirFd is the node nodeFd holds (not followed). */
async function sameNode(nodeFd: number, dirFd: number, name: string): Promise<boolean> {
  const [a, b] = await Promise.all([sys.fstat(nodeFd), sys.lstat(sys.fdPath(dirFd, name))]);
  return a.dev === b.dev && a.ino === b.ino;
}

export async function symlink(ctx: FsContext, target: string, path: string, caller: Caller): Promise<void> {
  const vp = ctx.parseInHome(path, 'symlink');
  await ctx.changing(vp.home, async (hs) => {
    const rule = hs.profile.symlinks;
    if (rule === 'deny') throw new HomesError('OP_REFUSED', `symlinks are not allowed in profile ${hs.profileName}`);
    if (!ctx.linkStaysInside(hs, vp.dir, target)) throw new HomesError('OP_REFUSED', 'symlink target leaves the home', { target });
    await ctx.prepareNewEntry(hs, vp.dir, vp.name, false);
    await ctx.store.withDir(hs.backing, vp.dir, async (dirFd) => {
      await ctx.checkNewEntry(hs, dirFd, vp.dir, vp.name);
      const undo = ctx.addInode(hs);
      try {
        await sys.symlink(target, sys.fdPath(dirFd, vp.name));
      } catch (err) {
        undo();
        throw err;
      }
      await ctx.ownNew(hs, dirFd, vp.name, caller, 0);
    });
    // This caller's next symlinks in the home may be made by the binding (fuse.nativeSymlink), with create slots' inodes.
    if (hs.nativeCreate !== null && hs.nativeCreate.symlinks !== 0) ctx.wantCredits(hs, caller.uid, true);
  });
}

export async function link(ctx: FsContext, from: string, to: string, caller?: Caller): Promise<void> {
  const src = ctx.parseInHome(from, 'link');
  const dst = ctx.parseInHome(to, 'link');
  if (!sameHome(src.home, dst.home)) throw new HomesError('CROSS_HOME', 'hard link between two homes');
  // The kernel links a file with no name only when it is an O_TMPFILE's (file.ts createUnnamed).
  if (ctx.hidden.has(from)) return nameUnnamed(ctx, from, src.name, dst);
  await ctx.changing(src.home, async (hs) => {
    if (hs.profile.hardLinks === 'deny') throw new HomesError('OP_REFUSED', `hard links are not allowed in profile ${hs.profileName}`);
    await ctx.prepareNewEntry(hs, dst.dir, dst.name, false);
    await ctx.store.withDir(hs.backing, src.dir, (srcDir) =>
      ctx.store.withDir(hs.backing, dst.dir, async (dstDir) => {
        await ctx.checkNewEntry(hs, dstDir, dst.dir, dst.name);
        const st = await sys.lstat(sys.fdPath(srcDir, src.name));
        // As on Linux: never a directory. A symlink or special file only where the profile has them at all.
        if (st.isDirectory()) throw new HomesError('OP_REFUSED', 'a directory cannot be hard-linked');
        if (st.isSymbolicLink() && hs.profile.symlinks === 'deny') throw new HomesError('OP_REFUSED', `symlinks are not allowed in profile ${hs.profileName}`);
        if (!st.isFile() && !st.isSymbolicLink() && hs.profile.specialFiles === 'none') {
          throw new HomesError('OP_REFUSED', `special files are not allowed in profile ${hs.profileName}`);
        }
        // Same inode, no new bytes; but a new name, and every name counts as an inode
        // (so a home capped at 10 inodes cannot make 60,000 names: EDQUOT).
        const undo = ctx.addInode(hs);
        try {
          // linkat without AT_SYMLINK_FOLLOW: the source name is never followed.
          await sys.link(sys.fdPath(srcDir, src.name), sys.fdPath(dstDir, dst.name));
        } catch (err) {
          undo();
          throw err;
        }
      }),
    );
    // This caller's next links in the home may be made by the binding (fuse.nativeLink), with create slots' inodes.
    if (caller !== undefined && hs.nativeCreate?.link) ctx.wantCredits(hs, caller.uid, true);
  });
}

/**
 * linkat(2) of an O_TMPFILE file: its first name, as a create's (the name's
 * checks, its inode), and its bytes stay with it from now on. Its orphan
 * becomes that name (linked there, then unlinked, the home busy throughout),
 * and it is hidden no more: the session's table drops the hidden name with
 * the LINK's answer (a file of one link has one name), and its last release
 * unlinks nothing. A hard link in a profile that denies them is still a
 * file's first name, as a create is.
 */
async function nameUnnamed(ctx: FsContext, from: string, hidden: string, dst: Named): Promise<void> {
  await ctx.changing(dst.home, async (hs) => {
    await ctx.prepareNewEntry(hs, dst.dir, dst.name, false);
    await ctx.store.withDir(hs.backing, dst.dir, async (dstDir) => {
      await ctx.checkNewEntry(hs, dstDir, dst.dir, dst.name);
      await ctx.store.withDir(hs.backing, [], async (rootFd) => {
        // Claimed with no await between the look and the claim: a second LINK racing this one
        // finds it gone (ENOENT), never names the file twice as its first name.
        const claimed = ctx.hidden.get(from);
        if (claimed === undefined) throw new HomesError('NOT_FOUND', `${hidden}: the file was closed or named meanwhile`);
        forgetHidden(ctx, from);
        const { inode } = claimed;
        const orphan = sys.fdPathRaw(rootFd, orphanName(hidden));
        const undo = ctx.addInode(hs);
        try {
          // linkat without AT_SYMLINK_FOLLOW: the orphan is a regular file the daemon made.
          await sys.link(orphan, sys.fdPath(dstDir, dst.name));
        } catch (err) {
          undo();
          // Still open (not released meanwhile): still the unnamed file it was.
          if (inode.handles > 0) ctx.hidden.set(from, claimed);
          throw err;
        }
        inode.orphaned = false;
        inode.unlinked = false;
        await sys.unlink(orphan);
        for (const h of ctx.handles.values()) if (h.inode === inode) ctx.deps.attrs?.handle(h);
      });
    });
  });
}

const KIND_OF_TYPE: Record<number, SpecialKind> = { [S_IFIFO]: 'fifo', [S_IFSOCK]: 'socket', [S_IFCHR]: 'char', [S_IFBLK]: 'block' };

/**
 * mknod(2), mkfifo(3) and bind(2) of a Unix socket. The daemon creates the
 * backing node and never opens it: the kernel serves FIFOs and sockets on the
 * mount's own inode, and the mount is nodev, so a device node opens nothing.
 */
export async function mknod(ctx: FsContext, path: string, mode: number, dev: number, caller: Caller): Promise<void> {
  const vp = ctx.parseInHome(path, 'mknod');
  await ctx.changing(vp.home, (hs) => mknodIn(ctx, hs, vp, mode, dev, caller));
}

async function mknodIn(ctx: FsContext, hs: HomeState, vp: { dir: readonly string[]; name: string }, mode: number, dev: number, caller: Caller): Promise<void> {
  const type = mode & S_IFMT;
  // The session turns mknod(S_IFREG) into create; a regular file is still made here if one comes.
  const kind = type === S_IFREG || type === 0 ? null : KIND_OF_TYPE[type];
  if (kind === undefined) throw new HomesError('INVALID_ARGUMENT', `mknod of file type ${type.toString(8)}`);
  if (kind !== null && !maySpecial(hs.profile, kind, caller.uid)) {
    throw new HomesError(
      'OP_REFUSED',
      kind === 'char' || kind === 'block'
        ? `device nodes are not allowed in profile ${hs.profileName}${hs.profile.specialFiles === 'all' ? ' (only for uid 0)' : ''}`
        : `FIFOs and sockets are not allowed in profile ${hs.profileName}`,
    );
  }
  // A forced mode applies to special files too, without execute bits (they mean nothing there).
  const perms = kind === null || hs.profile.fileMode === 'asked' ? effectiveFileMode(hs.profile, mode & 0o7777) : effectiveFileMode(hs.profile, 0) & 0o666;
  await ctx.prepareNewEntry(hs, vp.dir, vp.name, false);
  await ctx.store.withDir(hs.backing, vp.dir, async (dirFd) => {
    await ctx.checkNewEntry(hs, dirFd, vp.dir, vp.name);
    const undo = ctx.addInode(hs);
    try {
      await ctx.deps.mknod(sys.fdPath(dirFd, vp.name), (kind === null ? S_IFREG : type) | perms, kind === 'char' || kind === 'block' ? dev : 0);
    } catch (err) {
      undo();
      throw err;
    }
    await ctx.ownNew(hs, dirFd, vp.name, caller, perms);
  });
}

/** fsync(2) on a directory: git and sqlite rely on it to make a create or rename durable. */
export async function fsyncdir(ctx: FsContext, path: string): Promise<void> {
  const vp = ctx.parse(path);
  if (vp.kind !== 'home') return; // the daemon's own levels hold nothing to flush
  const hs = await ctx.home(vp.home);
  await ctx.store.withDir(hs.backing, vp.rel, async (dirFd) => {
    const fd = await sys.open(sys.fdPath(dirFd), sys.C.O_RDONLY | sys.C.O_DIRECTORY);
    try {
      await sys.fsync(fd);
    } finally {
      await sys.close(fd);
    }
  });
}
