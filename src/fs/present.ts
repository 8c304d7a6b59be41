import type { BigIntStats } from 'node:fs';
import type { Owner } from '../backing/store.js';
import { HomesError } from '../errors.js';
import { ABI } from '../abi.js';
import { OWNER_BITS, type Profile } from '../policy/profiles.js';

/** What the op table (src/fuse/ops.ts) hands to the kernel for one node. */
export interface Attr {
  mode: number;
  uid: number;
  gid: number;
  size: bigint;
  nlink: number;
  ino: bigint;
  dev: bigint;
  rdev: bigint;
  blksize: number;
  blocks: bigint;
  atimeNs: bigint;
  mtimeNs: bigint;
  ctimeNs: bigint;
  /** the attributes change with no request the kernel sees (a status file's size): the kernel must not keep them */
  volatile?: boolean;
}

export const S_IFMT = 0o170000;
/**
 * Inode numbers the mount presents are the backing filesystem's own (libfuse's
 * use_ino), so they are stable across restarts and identical through stat,
 * fstat and readdir. Every presented node lives on the backing root's device
 * (tenants and homes on another device are refused), so they are unique.
 * Nodes the daemon makes up (the self-check file, status files) take numbers
 * with the top bit set, which no backing inode may have (refused as EIO).
 */
export const SYNTHETIC_INO_BASE = 1n << 63n;
/** The synthetic numbers handed out so far; new virtual nodes add theirs here. */
export const SYNTHETIC_INO = {
  selfCheck: SYNTHETIC_INO_BASE | 1n,
  /** `.homesfs/status` of the home with serial n: this | n << 1; its virtual `.homesfs` dir: that | 1 */
  statusTag: SYNTHETIC_INO_BASE | (1n << 48n),
} as const;

/** A backing inode number, refused if it falls into the synthetic range. */
export function backingIno(ino: bigint): bigint {
  if (ino >= SYNTHETIC_INO_BASE) throw new HomesError('IO', `backing inode number ${ino} collides with the daemon's synthetic range`);
  return ino;
}

/** What readdir hands to the kernel per entry: d_ino and d_type (mode >> 12). */
export interface DirEntryAttr {
  ino: bigint;
  mode: number;
}

export function dirEntryAttr(st: BigIntStats): DirEntryAttr {
  return { ino: backingIno(st.ino), mode: Number(st.mode) & S_IFMT };
}

export const S_IFDIR = 0o040000;
export const S_IFREG = 0o100000;
export const S_IFLNK = 0o120000;
export const S_IFIFO = 0o010000;
export const S_IFSOCK = 0o140000;
export const S_IFCHR = 0o020000;
export const S_IFBLK = 0o060000;

/** The two daemon levels: reachable by path, listable only by root. */
export function daemonDirAttr(st: BigIntStats): Attr {
  return {
    mode: S_IFDIR | 0o711,
    uid: 0,
    gid: 0,
    size: 4096n,
    nlink: 2,
    ino: backingIno(st.ino),
    dev: st.dev,
    rdev: 0n,
    blksize: 4096,
    blocks: 8n,
    atimeNs: st.atimeNs,
    mtimeNs: st.mtimeNs,
    ctimeNs: st.ctimeNs,
  };
}

/**
 * The mode a node inside a home is presented with. Forced modes are presented
 * even for nodes that reached the backing tree by other means, so what `ls`
 * shows is what the policy promises.
 */
export function presentedMode(profile: Profile, st: BigIntStats): number {
  const type = Number(st.mode) & S_IFMT;
  const perms = Number(st.mode) & 0o7777;
  // The owner's own bits, whatever reached the backing tree: nothing is ever open to another uid.
  if (profile.chmod === 'owner' && (type === S_IFDIR || type === S_IFREG)) return type | (perms & OWNER_BITS);
  if (type === S_IFDIR) return type | (profile.dirMode === 'asked' ? perms : profile.dirMode);
  if (type === S_IFREG) {
    if (profile.fileMode === 'asked') return type | perms;
    return type | profile.fileMode | (profile.allowUserExec ? perms & 0o100 : 0);
  }
  if (type === S_IFLNK) return type | 0o777;
  // FIFOs, sockets, devices: as asked where modes are, else the forced file mode without x.
  return type | (profile.fileMode === 'asked' ? perms : profile.fileMode & 0o666);
}

export function homeNodeAttr(profile: Profile, owner: Owner, st: BigIntStats, isHomeRoot: boolean): Attr {
  const presentOwner = profile.chown === 'allow' && !isHomeRoot ? { uid: Number(st.uid), gid: Number(st.gid) } : owner;
  return {
    mode: isHomeRoot ? S_IFDIR | ABI.HOME_ROOT_PERMS : presentedMode(profile, st),
    uid: presentOwner.uid,
    gid: presentOwner.gid,
    size: st.size,
    nlink: Number(st.nlink),
    ino: backingIno(st.ino),
    dev: st.dev,
    rdev: st.rdev,
    blksize: Number(st.blksize),
    blocks: st.blocks,
    atimeNs: st.atimeNs,
    mtimeNs: st.mtimeNs,
    ctimeNs: st.ctimeNs,
  };
}
