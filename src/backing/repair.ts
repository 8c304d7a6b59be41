import type { Owner } from './store.js';
import * as sys from './sys.js';
import type fsType from 'node:fs';
import { entryPath, runWalkSync, syncIo, walkSteps } from './walk.js';


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
 * Synchronous: it runs on a scan worker (fs/scan.ts repairTree), where a call
 * costs ~2 µs against ~30 µs for a threadpool round trip from the JS thread
 * (a home of 200,000 files took longer than the control socket's 30 s
 * request timeout that way).
 */
export function repairTreeSync(fs: typeof fsType, homeFd: number, policy: RepairPolicy): RepairResult {
  const result: RepairResult = { owners: 0, modes: 0 };
  const fix = (path: Buffer): void => {
    let st: fsType.Stats | undefined;
    try {
      st = fs.lstatSync(path, { throwIfNoEntry: false });
    } catch {
      return;
    }
    if (!st) return; // vanished meanwhile
    if (st.uid !== policy.owner.uid || st.gid !== policy.owner.gid) {
      fs.lchownSync(path, policy.owner.uid, policy.owner.gid);
      result.owners++;
    }
    if (!policy.ownerBitsOnly || (!st.isFile() && !st.isDirectory())) return;
    if ((st.mode & NOT_OWNER_BITS) === 0) return;
    // chmod through an O_PATH descriptor of the node: a name swapped for a symlink meanwhile is not followed.
    let fd: number;
    try {
      fd = fs.openSync(path, sys.O_PATH | fs.constants.O_NOFOLLOW);
    } catch {
      return; // vanished meanwhile
    }
    try {
      const now = fs.fstatSync(fd);
      if (now.isFile() || now.isDirectory()) {
        fs.chmodSync(sys.fdPath(fd), now.mode & 0o700);
        result.modes++;
      }
    } finally {
      fs.closeSync(fd);
    }
  };
  // The home directory itself, through its descriptor's magic link (lstat would see the link).
  const home = fs.fstatSync(homeFd);
  if (home.uid !== policy.owner.uid || home.gid !== policy.owner.gid) {
    fs.chownSync(sys.fdPath(homeFd), policy.owner.uid, policy.owner.gid);
    result.owners++;
  }
  if ((home.mode & NOT_OWNER_BITS) !== 0) {
    fs.chmodSync(sys.fdPath(homeFd), home.mode & 0o700);
    result.modes++;
  }
  runWalkSync(walkSteps(homeFd), syncIo(fs, { visit: (dirFd, e) => (fix(entryPath(dirFd, e.name)), e.isDirectory()) }));
  return result;
}
