import { chmodSync, chownSync, fstatSync, type BigIntStats } from 'node:fs';
import * as sys from '../backing/sys.js';
import { HomesError } from '../errors.js';
import { NAME_MAX_BYTES } from '../paths/names.js';
import { isReservedDir, isStatusPath } from '../paths/reserved.js';
import { chmodDecision } from '../policy/profiles.js';
import type { FsContext } from './context.js';
import type { TimeSpec } from './native-api.js';
import { hiddenFd, withEntry } from './hidden.js';
import { statusAttr, statusText, virtualDirAttr } from './status.js';
import { daemonDirAttr, homeNodeAttr, type Attr } from './present.js';
import { inodeKey, type HomeState } from './state.js';

/** Hidden, root-only file at the mount root that the start-up self-check writes to. */
export const SELFCHECK_NAME = '.homesfs-selfcheck';

function foreignDevice(hs: HomeState, st: BigIntStats): void {
  // A mount point inside a home would lead to another filesystem: never served.
  if (st.dev !== hs.backing.dev) throw new HomesError('CROSS_DEVICE', 'node is on another device than its home');
}

/** A file unlinked while open, under its hidden name: answered from the inode itself. */
async function hiddenAttr(ctx: FsContext, path: string): Promise<Attr | null> {
  const h = ctx.hidden.get(path);
  if (!h) return null;
  // Synchronous from picking the descriptor to using it (see hiddenFd).
  const st = fstatSync(hiddenFd(h), { bigint: true });
  const attr = homeNodeAttr(h.home.profile, h.home.backing.owner, st, false);
  const open = h.home.inodes.get(inodeKey(st.dev, st.ino));
  if (open) attr.size = BigInt(Math.max(open.size, Number(st.size)));
  return orphanLinkHidden(attr, h.inode.orphaned);
}

export async function getattr(ctx: FsContext, path: string): Promise<Attr> {
  const hidden = await hiddenAttr(ctx, path);
  if (hidden) return hidden;
  let vp;
  try {
    vp = ctx.parse(path);
  } catch (err) {
    // A component over NAME_MAX is ENAMETOOLONG, as on any Linux filesystem
    // (every lookup: stat, chmod, chown, truncate…). Another name that cannot
    // exist in the tree (".hidden" as a tenant, "_other" as a key) is simply not
    // there; creating one is refused elsewhere.
    if (err instanceof HomesError && path.split('/').some((c) => Buffer.byteLength(c) > NAME_MAX_BYTES)) {
      throw new HomesError('NAME_TOO_LONG', `a name component is longer than ${NAME_MAX_BYTES} bytes`);
    }
    if (err instanceof HomesError && (err.code === 'INVALID_NAME' || err.code === 'NAME_TOO_LONG')) {
      throw new HomesError('NOT_FOUND', 'no such name');
    }
    throw err;
  }
  if (vp.kind === 'root') return daemonDirAttr(await ctx.store.rootStat());
  if (vp.kind === 'tenant') return daemonDirAttr(await ctx.store.statTenant(vp.tenant));
  if (vp.rel.length === 0) {
    const hs = await ctx.revalidateHome(vp.home);
    return homeNodeAttr(hs.profile, hs.backing.owner, await ctx.store.useHome(hs.backing, sys.fstat), true);
  }
  const hs = await ctx.home(vp.home);
  const last = vp.rel[vp.rel.length - 1]!;
  // The home's statfs says namemax = maxNameBytes: a longer name cannot exist there.
  if (Buffer.byteLength(last) > hs.profile.maxNameBytes) {
    throw new HomesError('NAME_TOO_LONG', `name is longer than ${hs.profile.maxNameBytes} bytes (profile ${hs.profileName})`);
  }
  if (isStatusPath(vp.rel)) return statusAttr(ctx, hs, statusText(ctx, hs).length);
  let st: BigIntStats;
  let orphan = false;
  try {
    st = await withEntry(ctx, hs, vp.rel.slice(0, -1), last, (_dirFd, entry) => ((orphan = typeof entry !== 'string'), sys.lstat(entry)));
  } catch (err) {
    // `.homesfs` is always there: without a backing directory it is an empty one of the daemon's.
    if (isReservedDir(vp.rel) && sys.sysCode(err) === 'ENOENT') return virtualDirAttr(ctx, hs);
    throw err;
  }
  foreignDevice(hs, st);
  const attr = homeNodeAttr(hs.profile, hs.backing.owner, st, false);
  // While a file is open its charged size is the truth (writes in flight are already in it).
  const open = st.isFile() ? hs.inodes.get(inodeKey(st.dev, st.ino)) : undefined;
  if (open) attr.size = BigInt(Math.max(open.size, Number(st.size)));
  return orphanLinkHidden(attr, orphan);
}

/** An orphaned file's attributes: the orphan is a link nobody sees (hidden.ts). */
function orphanLinkHidden(attr: Attr, orphaned: boolean): Attr {
  if (orphaned && attr.nlink > 0) attr.nlink -= 1;
  return attr;
}

export async function fgetattr(ctx: FsContext, fh: number, path: string | null): Promise<Attr> {
  if (ctx.statusFiles.owns(fh) && path !== null) {
    const vp = ctx.parseHomePath(path, 'open');
    return statusAttr(ctx, await ctx.home(vp.home), ctx.statusFiles.size(fh));
  }
  const h = ctx.handles.get(fh);
  const st = await sys.fstat(h.fd);
  return orphanLinkHidden(homeNodeAttr(h.home.profile, h.home.backing.owner, st, false), h.inode.orphaned);
}

/** Run `fn` with an O_PATH descriptor of the node at `path`, refusing symlinks where asked. */
async function withNode<T>(
  ctx: FsContext,
  hs: HomeState,
  dir: readonly string[],
  name: string,
  fn: (nodeFd: number, st: BigIntStats, dirFd: number) => Promise<T>,
): Promise<T> {
  // A hidden name the home's root lacks is the home's orphan (after a crash: hidden.ts withEntry).
  return withEntry(ctx, hs, dir, name, async (dirFd, entry) => {
    const fd = await ctx.store.openNodeAt(entry);
    try {
      const st = await sys.fstat(fd);
      foreignDevice(hs, st);
      return await fn(fd, st, dirFd);
    } finally {
      await sys.close(fd);
    }
  });
}

export async function chmod(ctx: FsContext, path: string, mode: number): Promise<void> {
  const vp = ctx.parseHomePath(path, 'chmod');
  const hs = await ctx.home(vp.home);
  if (vp.rel.length === 0) {
    // The home's own mode is fixed at 0700: a chmod of ~ (tar of "./") succeeds and changes nothing.
    if (hs.profile.chmod === 'deny-widen' && (mode & 0o7777 & ~0o700) !== 0) {
      throw new HomesError('OP_REFUSED', 'the mode of a home is fixed at 0700');
    }
    return;
  }
  const hidden = ctx.hidden.get(path);
  const apply = async (fd: number, st: BigIntStats): Promise<void> => {
    if (st.isSymbolicLink()) return; // Linux has no symlink modes; chmod through a link never reaches here
    const decision = chmodDecision(hs.profile, st.isDirectory(), Number(st.mode) & 0o7777, mode & 0o7777);
    if (decision.action === 'refuse') throw new HomesError('OP_REFUSED', `chmod to ${(mode & 0o7777).toString(8)} is not allowed by profile ${hs.profileName}`);
    if (decision.action === 'keep') return;
    // chmod through the O_PATH descriptor's magic link acts on that inode, never on a name.
    await sys.chmod(sys.fdPath(fd), decision.mode);
  };
  // fchmod of a file unlinked while open: the session asks by its hidden name.
  if (hidden) {
    // Synchronous from picking the descriptor to using it (see hiddenFd).
    const fd = hiddenFd(hidden);
    const st = fstatSync(fd, { bigint: true });
    if (st.isSymbolicLink()) return;
    const decision = chmodDecision(hs.profile, st.isDirectory(), Number(st.mode) & 0o7777, mode & 0o7777);
    if (decision.action === 'refuse') throw new HomesError('OP_REFUSED', `chmod to ${(mode & 0o7777).toString(8)} is not allowed by profile ${hs.profileName}`);
    if (decision.action === 'apply') chmodSync(sys.fdPath(fd), decision.mode);
    return;
  }
  await withNode(ctx, hs, vp.rel.slice(0, -1), vp.rel[vp.rel.length - 1]!, apply);
}

export async function chown(ctx: FsContext, path: string, uid: number, gid: number): Promise<void> {
  const vp = ctx.parseHomePath(path, 'chown');
  const hs = await ctx.home(vp.home);
  const keepUid = uid === 0xffffffff || uid === -1;
  const keepGid = gid === 0xffffffff || gid === -1;
  const hidden = ctx.hidden.get(path);
  if (hs.profile.chown === 'allow' && hidden) {
    // fchown of a file unlinked while open: the magic link of one of its handles' descriptors is the inode.
    chownSync(sys.fdPath(hiddenFd(hidden)), keepUid ? -1 : uid, keepGid ? -1 : gid);
    return;
  }
  if (hs.profile.chown === 'allow' && vp.rel.length > 0) {
    const { dir, name } = { dir: vp.rel.slice(0, -1), name: vp.rel[vp.rel.length - 1]! };
    await withEntry(ctx, hs, dir, name, (_dirFd, entry) => sys.lchown(entry, keepUid ? -1 : uid, keepGid ? -1 : gid));
    return;
  }
  const owner = hs.backing.owner;
  // tar and cp -a chown every file to its recorded owner: to the home's owner that is a no-op and succeeds.
  if ((keepUid || uid === owner.uid) && (keepGid || gid === owner.gid)) {
    await getattr(ctx, path); // the node must exist
    return;
  }
  throw new HomesError('OP_REFUSED', `chown to ${uid}:${gid}: every file of this home belongs to ${owner.uid}:${owner.gid}`);
}

export async function utimens(ctx: FsContext, path: string, atime: TimeSpec, mtime: TimeSpec): Promise<void> {
  const vp = ctx.parseHomePath(path, 'utimens');
  const hs = await ctx.home(vp.home);
  if (vp.rel.length === 0) {
    await ctx.store.withTenant(vp.home.tenant, (tenantFd) => ctx.deps.utimensat(sys.fdPath(tenantFd, vp.home.key), atime, mtime));
    return;
  }
  const dir = vp.rel.slice(0, -1);
  const name = vp.rel[vp.rel.length - 1]!;
  // AT_SYMLINK_NOFOLLOW on a single validated name below a descriptor: a symlink gets its own times.
  await ctx.store.withDir(hs.backing, dir, (dirFd) => ctx.deps.utimensat(sys.fdPath(dirFd, name), atime, mtime));
}

export interface StatFs {
  bsize: number;
  frsize: number;
  blocks: number;
  bfree: number;
  bavail: number;
  files: number;
  ffree: number;
  favail: number;
  fsid: number;
  flag: number;
  namemax: number;
}

const U32 = 0xffffffff;

/**
 * Inside a home, `df .` shows the home's budget, not the backing disk: the
 * budget is the limit the writer will meet first. df computes used = size −
 * free, so a home over its budget (lowered below usage) reports size = its
 * real usage and free = 0: used is then the truth and use% 100, instead of a
 * size that hides the overage. The binding carries 32-bit counts, so the
 * fragment size grows until the block counts fit.
 */
export async function statfs(ctx: FsContext, path: string): Promise<StatFs> {
  const vp = ctx.parse(path);
  const disk =
    vp.kind === 'home'
      ? await ctx.store.useHome((await ctx.home(vp.home)).backing, (fd) => sys.statfs(sys.fdPath(fd)))
      : await sys.statfs(ctx.store.root);
  let totalBytes = disk.blocks * disk.bsize;
  let freeBytes = disk.bfree * disk.bsize;
  let availBytes = disk.bavail * disk.bsize;
  let files = disk.files;
  let ffree = disk.ffree;
  let namemax: number = NAME_MAX_BYTES;
  if (vp.kind === 'home') {
    const hs = await ctx.home(vp.home);
    const room = hs.ledger.room();
    if (room.cap !== null) {
      const left = Math.max(0, room.cap - room.bytes);
      totalBytes = Math.max(room.cap, room.bytes);
      freeBytes = Math.min(left, freeBytes);
      availBytes = Math.min(left, availBytes);
    }
    const { inodes, limits } = hs.ledger.snapshot();
    if (limits.maxInodes > 0) {
      files = Math.max(limits.maxInodes, inodes);
      ffree = Math.min(Math.max(0, limits.maxInodes - inodes), ffree);
    }
    namemax = hs.profile.maxNameBytes;
  }
  let frsize = 4096;
  while (Math.ceil(totalBytes / frsize) > U32) frsize *= 2;
  return {
    bsize: frsize,
    frsize,
    blocks: Math.ceil(totalBytes / frsize),
    bfree: Math.floor(freeBytes / frsize),
    bavail: Math.floor(availBytes / frsize),
    files: Math.min(files, U32),
    ffree: Math.min(ffree, U32),
    favail: Math.min(ffree, U32),
    fsid: 0,
    flag: 0,
    namemax,
  };
}

export async function readlink(ctx: FsContext, path: string): Promise<string> {
  const vp = ctx.parseInHome(path, 'readlink');
  const hs = await ctx.home(vp.home);
  const raw = await ctx.store.withDir(hs.backing, vp.dir, (dirFd) => sys.readlink(sys.fdPath(dirFd, vp.name)));
  let target: string;
  try {
    target = new TextDecoder('utf-8', { fatal: true }).decode(raw);
  } catch {
    throw new HomesError('NOT_UTF8_NAME', 'symlink target is not valid UTF-8');
  }
  if (!ctx.linkStaysInside(hs, vp.dir, target)) {
    throw new HomesError('SYMLINK_ESCAPES', 'symlink target leaves the home', { target });
  }
  return target;
}

export function access(ctx: FsContext, path: string): Promise<Attr> {
  // default_permissions makes the kernel check modes itself; access only needs existence.
  return getattr(ctx, path);
}

