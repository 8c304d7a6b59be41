import type { Owner } from './store.js';
import * as sys from './sys.js';
import { entryPath, pooledIo, runWalk, walkSteps } from './walk.js';

// A walk of a whole tree: on the threadpool, never holding the JS thread (as the scans).
const io = sys.pooled;

export interface RepairResult {
  /** nodes whose owner or group was not the one the profile presents */
  owners: number;
  /** files and directories that had group, other or special bits */
  modes: number;
}

/** What a repair puts right: the owner on disk, and (where the profile keeps only the owner's bits) the mode. */
export interface RepairPolicy {
  owner: Owner;
  ownerBitsOnly: boolean;
}

const NOT_OWNER_BITS = 0o7077;

/**
 * Bring a home's backing tree (the home directory included) to what its
 * profile presents: every node owned by the home's owner, and files and
 * directories without group/other/special bits. Homes written by an older
 * daemon had root-owned 0600 files: readable through the mount, but not by
 * their owner anywhere else, and locked once the home was switched to a
 * profile that shows real ownership. Symlinks get their owner (lchown), never
 * a mode, and are never followed; every directory is opened by descriptor,
 * iteratively and with a bounded number of them whatever the depth (walk.ts).
 */
export async function repairTree(homeFd: number, policy: RepairPolicy): Promise<RepairResult> {
  const result: RepairResult = { owners: 0, modes: 0 };
  const fix = async (path: string | Buffer): Promise<void> => {
    let st;
    try {
      st = await io.lstat(path);
    } catch {
      return; // vanished meanwhile
    }
    if (Number(st.uid) !== policy.owner.uid || Number(st.gid) !== policy.owner.gid) {
      await io.lchown(path, policy.owner.uid, policy.owner.gid);
      result.owners++;
    }
    if (!policy.ownerBitsOnly || (!st.isFile() && !st.isDirectory())) return;
    const mode = Number(st.mode) & 0o7777;
    if ((mode & NOT_OWNER_BITS) === 0) return;
    // chmod through an O_PATH descriptor of the node: a name swapped for a symlink meanwhile is not followed.
    const fd = await io.open(path, sys.O_PATH | sys.C.O_NOFOLLOW);
    try {
      const now = await io.fstat(fd);
      if (now.isFile() || now.isDirectory()) {
        await io.chmod(sys.fdPath(fd), Number(now.mode) & 0o700);
        result.modes++;
      }
    } finally {
      await io.close(fd);
    }
  };
  // The home directory itself, through its descriptor's magic link (lstat would see the link).
  const home = await io.fstat(homeFd);
  if (Number(home.uid) !== policy.owner.uid || Number(home.gid) !== policy.owner.gid) {
    await io.chown(sys.fdPath(homeFd), policy.owner.uid, policy.owner.gid);
    result.owners++;
  }
  if ((Number(home.mode) & NOT_OWNER_BITS) !== 0) {
    await io.chmod(sys.fdPath(homeFd), Number(home.mode) & 0o700);
    result.modes++;
  }
  await runWalk(walkSteps(homeFd), pooledIo({ visit: async (dirFd, e) => (await fix(entryPath(dirFd, e.name)), e.isDirectory()) }));
  return result;
}
