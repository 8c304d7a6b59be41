/**
 * A dead daemon's handle reopened after a crash (native/src/session/handles.c).
 * The reopen goes by the node's path with no kernel in between: the kernel
 * checked the opener's permissions once, at the open the dead daemon answered,
 * and checks nothing now. So the daemon makes both checks the kernel would
 * have relied on: the file reached is the inode the handle was open on (a
 * number reused by another file, in any home, is not it), and the caller may
 * open it as the kernel's default_permissions would let it: past the home's
 * root (presented 0700, its owner's) and by the file's presented mode.
 */

export interface ReopenFacts {
  /** the request's caller (a writeback WRITE comes as 0: the kernel's own) */
  callerUid: number;
  callerGid: number;
  /** the home's owner: the only uid besides root the home's root lets in */
  homeOwnerUid: number;
  /** the inode the node was found with, and the one the path reached */
  expectedIno: bigint;
  ino: bigint;
  /** the reached file's presented owner, group and mode (permission bits) */
  uid: number;
  gid: number;
  mode: number;
  /** O_RDONLY 0, O_WRONLY 1, O_RDWR 2 */
  accMode: number;
}

export type ReopenRefusal = { code: 'IO' | 'ACCESS_DENIED'; reason: string };

/** null: the reopen may stand for the dead handle; else why not. */
export function reopenRefusal(f: ReopenFacts): ReopenRefusal | null {
  if (f.ino !== f.expectedIno) return { code: 'IO', reason: `the path reaches inode ${f.ino}, not the handle's ${f.expectedIno}` };
  if (f.callerUid === 0) return null;
  if (f.callerUid !== f.homeOwnerUid) return { code: 'ACCESS_DENIED', reason: `uid ${f.callerUid} cannot pass the home's root (its owner's, 0700)` };
  const shift = f.callerUid === f.uid ? 6 : f.callerGid === f.gid ? 3 : 0;
  const bits = (f.mode >> shift) & 7;
  const need = f.accMode === 0 ? 4 : f.accMode === 1 ? 2 : 6;
  if ((bits & need) !== need) return { code: 'ACCESS_DENIED', reason: `mode ${(f.mode & 0o777).toString(8)} does not let uid ${f.callerUid} open it for ${['reading', 'writing', 'reading and writing'][f.accMode] ?? 'reading and writing'}` };
  return null;
}
