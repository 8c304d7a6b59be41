import * as sys from '../backing/sys.js';
import { HomesError } from '../errors.js';
import type { AttrPublisher } from './native-api.js';
import { inodeKey, type FileHandle, type HomeState, type OpenInode } from './state.js';
import type { BackingStore } from '../backing/store.js';
import type { Removing } from './inodes.js';

/**
 * Files unlinked while open. The session (native/src/session/ops_names.c)
 * does not let the last name of an open file go: it renames the file to a
 * hidden name (abi.h: HIDDEN_PREFIX, then HIDDEN_DIGITS hex digits) at its
 * home's root, then builds the path of every later request on that node (fstat, fchmod, fchown, and after a crash
 * the reopen of a dead handle) from the hidden name, and unlinks the hidden
 * name after the last release.
 *
 * The daemon takes that rename as the unlink it is for everyone but the
 * session: the name leaves its directory at once (nothing in listings, the
 * directory can be removed), and the file becomes its home's orphan, a
 * backing name at the home's root that no path reaches (paths/hidden-names.ts).
 * The orphan is no name for the ledger and the scan (which passes it over):
 * the hiding gives the name's inode back and the bytes stay charged until
 * the last close, as for any file unlinked while open; the session's unlink
 * after the last release removes the orphan and changes no count. And it
 * survives a crash of the daemon: a resumed daemon reopens the dead
 * handles on it (the very inode they were open on), and a path of the home
 * that ends in its hidden name, where no such backing name exists, means it.
 * A start that resumes nothing removes every orphan (BackingStore.purgeOrphans).
 */
export { HIDDEN_NAME, HIDDEN_NAME_PREFIX } from '../paths/hidden-names.js';
import { HIDDEN_NAME, isHiddenName, orphanName } from '../paths/hidden-names.js';

export interface HiddenNode {
  /** the open-file record of the unlinked inode: its handles' descriptors reach it */
  readonly inode: OpenInode;
  readonly home: HomeState;
}

/** What hiding and forgetting need from the fs context (FsContext). */
export interface HiddenHost {
  /** hidden names (their full virtual paths) and the inodes they stand for */
  readonly hidden: Map<string, HiddenNode>;
  readonly store: Pick<BackingStore, 'withDir'>;
  enterRemoval(st: { dev: bigint; ino: bigint }): Removing;
  leaveRemoval(r: Removing, gone?: boolean): boolean;
  settleRemoved(hs: HomeState, nodeFd: number, r: Removing, unseenLinks?: number): void;
  readonly handles: { values(): IterableIterator<FileHandle> };
  readonly deps: { readonly attrs?: Pick<AttrPublisher, 'handle'> };
  probeNode(dirFd: number, name: string): Promise<number | null>;
}

/**
 * A descriptor of the hidden inode: one of its open handles'. No descriptor of
 * its own: each would be one more the daemon holds per file a home unlinks
 * while open, outside every open-file cap. Use it synchronously only (no await
 * between picking it and the call that uses it): a handle's descriptor leaves
 * `fds` before its close is issued, so a descriptor picked and used in one
 * synchronous step is never a closed one, or a number reused by another open.
 * Gone (every handle released, the session about to unlink the name): ENOENT.
 */
export function hiddenFd(h: HiddenNode): number {
  for (const fd of h.inode.fds) return fd;
  throw new HomesError('NOT_FOUND', 'the unlinked file is no longer open');
}

/**
 * The session hides an open file whose last name goes (`name` in `dirFd` to
 * `to`, the hidden name `hiddenName` at the home's root): the file becomes
 * the home's orphan, and its inode, if JavaScript has it open, is
 * remembered under `to`. The ledger does not change (a rename). The session
 * decided the file is open (its handles may all be a dead daemon's, which
 * JavaScript never saw): a regular file whatever JavaScript knows.
 */
export async function hideOpenFile(ctx: HiddenHost, hs: HomeState, dirFd: number, name: string, to: string, hiddenName: string): Promise<void> {
  if (!HIDDEN_NAME.test(hiddenName)) throw new HomesError('IO', `${hiddenName} is not a hidden name`);
  return ctx.store.withDir(hs.backing, [], async (rootFd) => {
    const orphan = sys.fdPathRaw(rootFd, orphanName(hiddenName));
    if (await sys.lstat(orphan).then(() => true, (err) => (sys.sysCode(err) === 'ENOENT' ? false : Promise.reject(err)))) {
      throw new HomesError('IO', `the orphan of ${hiddenName} exists already`);
    }
    const node = await ctx.probeNode(dirFd, name);
    if (node === null) throw new HomesError('NOT_FOUND', `${name}: no such file to hide`);
    try {
      const st = await sys.fstat(node);
      const key = inodeKey(st.dev, st.ino);
      if (!st.isFile()) throw new HomesError('IO', `${name}: only a regular file is hidden`);
      const removing = ctx.enterRemoval(st);
      try {
        await sys.rename(sys.fdPath(dirFd, name), orphan);
      } catch (err) {
        ctx.leaveRemoval(removing);
        throw err;
      }
      // Settled as the unlink it is, the orphan being no name: the name's inode now, the bytes with
      // the last name or at the last close (inodes.ts removal, in the same synchronous step).
      ctx.settleRemoved(hs, node, removing, 1);
      const inode = hs.inodes.get(key);
      if (inode) {
        inode.orphaned = true;
        ctx.hidden.set(to, { inode, home: hs });
        for (const h of ctx.handles.values()) if (h.inode === inode) ctx.deps.attrs?.handle(h);
      }
    } finally {
      await sys.close(node);
    }
  });
}

/**
 * Where a path of the home whose last component is `name` lies: the
 * directory's own entry, or, for a hidden name at the home's root that the
 * root does not have, the home's orphan of that name (after a crash, the
 * session's requests on a hidden node come by path: the dead daemon's map of
 * them is gone). Only at the root, where the session puts every hidden name:
 * elsewhere such a name is only ever a user's, and a user's absent name never
 * reaches an unlinked file.
 * `fn` gets the directory's descriptor and the entry's path below it.
 */
export async function withEntry<T>(ctx: HiddenHost, hs: HomeState, dir: readonly string[], name: string, fn: (dirFd: number, entry: string | Buffer) => Promise<T>): Promise<T> {
  if (dir.length === 0 && isHiddenName(name)) {
    const here = await ctx.store.withDir(hs.backing, dir, (dirFd) => sys.lstat(sys.fdPath(dirFd, name)).then(() => true, (err) => (sys.sysCode(err) === 'ENOENT' ? false : Promise.reject(err))));
    if (!here) return ctx.store.withDir(hs.backing, [], (rootFd) => fn(rootFd, sys.fdPathRaw(rootFd, orphanName(name))));
  }
  return withEntryOnly(ctx, hs, dir, name, fn);
}

/** The directory's own entry, never an orphan (a user's unlink). */
export function withEntryOnly<T>(ctx: HiddenHost, hs: HomeState, dir: readonly string[], name: string, fn: (dirFd: number, entry: string | Buffer) => Promise<T>): Promise<T> {
  return ctx.store.withDir(hs.backing, dir, (dirFd) => fn(dirFd, sys.fdPath(dirFd, name)));
}

/** The home's orphan of hidden name `name` (the session's unlink at the last release: `dir` is the home's root). */
export function withOrphan<T>(ctx: HiddenHost, hs: HomeState, _dir: readonly string[], name: string, fn: (dirFd: number, entry: string | Buffer) => Promise<T>): Promise<T> {
  if (!isHiddenName(name)) return Promise.reject(new HomesError('IO', `${name} is not a hidden name`));
  return ctx.store.withDir(hs.backing, [], (rootFd) => fn(rootFd, sys.fdPathRaw(rootFd, orphanName(name))));
}

/** The session unlinks the hidden name after the last release: the inode is forgotten here (the orphan is unlinked as any file: dir.ts). */
export function forgetHidden(ctx: Pick<HiddenHost, 'hidden'>, path: string): void {
  ctx.hidden.delete(path);
}
