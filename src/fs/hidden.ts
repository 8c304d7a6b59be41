import { ABI } from '../abi.js';
import * as sys from '../backing/sys.js';
import { HomesError } from '../errors.js';
import { inodeKey, type HomeState, type OpenInode } from './state.js';
import type { Removing } from './inodes.js';

/**
 * Files unlinked while open. The session (native/src/session/ops_names.c)
 * does not let the last name of an open file go: it renames the file to
 * `.fuse_hidden<16 hex digits>` in the same directory, then builds the path of
 * every later request on that node (fstat, fchmod, fchown) from the hidden
 * name, and unlinks the hidden name after the last release.
 *
 * The daemon takes that rename as the unlink it is: the backing name goes at
 * once (nothing appears in the backing tree or in listings, the directory can
 * be removed), and the hidden name is served from the descriptor of one of the
 * inode's open handles until the session unlinks it.
 */
/** native/src/abi.h HOMESFS_HIDDEN_PREFIX (test/unit/abi.test.ts) */
export const HIDDEN_NAME_PREFIX = '.fuse_hidden';
export const HIDDEN_NAME = new RegExp(`^\\${HIDDEN_NAME_PREFIX}[0-9a-f]{${ABI.HIDDEN_DIGITS}}$`);

export interface HiddenNode {
  /** the open-file record of the unlinked inode: its handles' descriptors reach it */
  readonly inode: OpenInode;
  readonly home: HomeState;
}

/** What hiding and forgetting need from the fs context (FsContext). */
export interface HiddenHost {
  /** hidden names (their full virtual paths) and the inodes they stand for */
  readonly hidden: Map<string, HiddenNode>;
  probeNode(dirFd: number, name: string): Promise<number | null>;
  enterRemoval(st: { dev: bigint; ino: bigint }): Removing;
  leaveRemoval(r: Removing, gone?: boolean): boolean;
  settleRemoved(hs: HomeState, nodeFd: number, r: Removing): void;
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
 * The session hiding an open file (`from` → `to`, same directory)? Then unlink the
 * backing name, remember the inode under `to` and return true. Anything else
 * (the name is not of the hidden form, the source is not an open regular file,
 * the target exists) is an ordinary rename: false.
 */
export async function hideOpenFile(ctx: HiddenHost, hs: HomeState, dirFd: number, name: string, to: string, hiddenName: string): Promise<boolean> {
  if (!HIDDEN_NAME.test(hiddenName)) return false;
  if ((await ctx.probeNode(dirFd, hiddenName).then(async (fd) => (fd === null ? false : (await sys.close(fd), true))))) return false;
  const node = await ctx.probeNode(dirFd, name);
  if (node === null) return false;
  try {
    const st = await sys.fstat(node);
    const key = inodeKey(st.dev, st.ino);
    if (!st.isFile() || !hs.inodes.has(key)) return false;
    const removing = ctx.enterRemoval(st);
    try {
      await sys.unlink(sys.fdPath(dirFd, name));
    } catch (err) {
      ctx.leaveRemoval(removing);
      throw err;
    }
    ctx.settleRemoved(hs, node, removing);
    // In the same synchronous step as the removal was settled: the record, if any handle still has it.
    const inode = hs.inodes.get(key);
    if (inode) ctx.hidden.set(to, { inode, home: hs });
  } finally {
    await sys.close(node);
  }
  return true;
}

/** libfuse unlinks the hidden name after the last release: forget the inode. */
export async function forgetHidden(ctx: Pick<HiddenHost, 'hidden'>, path: string): Promise<boolean> {
  const h = ctx.hidden.get(path);
  if (!h) return false;
  ctx.hidden.delete(path);
  return true;
}
