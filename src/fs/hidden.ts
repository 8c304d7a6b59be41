import * as sys from '../backing/sys.js';
import type { FsContext } from './context.js';
import { inodeKey, type HomeState } from './state.js';

/**
 * Files unlinked while open. libfuse 2.9 (without hard_remove) does not let
 * the name go: it renames the open file to `.fuse_hidden<16 hex digits>` in
 * the same directory, then resolves every later request on that node (fstat,
 * fchmod, fchown) by the hidden name, and unlinks the hidden name after the
 * last release. (With hard_remove it drops the name instead, and fstat answers
 * ENOENT before the daemon is even asked: native-notes/fuse-native.md.)
 *
 * The daemon takes that rename as the unlink it is: the backing name goes at
 * once (nothing appears in the backing tree or in listings, the directory can
 * be removed), and the hidden name is served from an O_PATH descriptor of the
 * inode until libfuse unlinks it.
 */
export const HIDDEN_NAME = /^\.fuse_hidden[0-9a-f]{16}$/;

export interface HiddenNode {
  /** O_PATH descriptor of the unlinked inode */
  readonly fd: number;
  readonly home: HomeState;
}

/**
 * libfuse hiding an open file (`from` → `to`, same directory)? Then unlink the
 * backing name, remember the inode under `to` and return true. Anything else
 * (the name is not of libfuse's form, the source is not an open regular file,
 * the target exists) is an ordinary rename: false.
 */
export async function hideOpenFile(ctx: FsContext, hs: HomeState, dirFd: number, name: string, to: string, hiddenName: string): Promise<boolean> {
  if (!HIDDEN_NAME.test(hiddenName)) return false;
  if ((await ctx.probeNode(dirFd, hiddenName).then(async (fd) => (fd === null ? false : (await sys.close(fd), true))))) return false;
  const node = await ctx.probeNode(dirFd, name);
  if (node === null) return false;
  try {
    const st = await sys.fstat(node);
    if (!st.isFile() || !hs.inodes.has(inodeKey(st.dev, st.ino))) {
      await sys.close(node);
      return false;
    }
    await sys.unlink(sys.fdPath(dirFd, name));
    ctx.settleRemoved(hs, node);
  } catch (err) {
    await sys.close(node);
    throw err;
  }
  const old = ctx.hidden.get(to);
  if (old) await sys.close(old.fd);
  ctx.hidden.set(to, { fd: node, home: hs });
  return true;
}

/** libfuse unlinks the hidden name after the last release: forget the inode. */
export async function forgetHidden(ctx: FsContext, path: string): Promise<boolean> {
  const h = ctx.hidden.get(path);
  if (!h) return false;
  ctx.hidden.delete(path);
  await sys.close(h.fd);
  return true;
}
