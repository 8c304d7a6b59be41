import type { BigIntStats } from 'node:fs';
import { INLINE_FREE_MAX_BYTES } from '../backing/freeing.js';
import { ABI } from '../abi.js';
import { NATIVE_OPEN_WRITE, type AttrPublisher } from '../fs/native-api.js';
import { HIDDEN_NAME_PREFIX } from '../fs/hidden.js';
import { presentedMode } from '../fs/present.js';
import type { FileHandle, HomeState } from '../fs/state.js';
import type { Logger } from '../log.js';
import { RESERVED_DIR } from '../paths/reserved.js';
import { chmodDecision, effectiveDirMode, effectiveFileMode, type Profile } from '../policy/profiles.js';
import type { FastPathNative } from './binding.js';

/** Every file type the kernel knows, as mode >> 12. */
const TYPES = [0o01, 0o02, 0o04, 0o06, 0o10, 0o12, 0o14] as const;

export interface PresentationMasks {
  /** bit t: type t (mode >> 12) is presented as type | (perms & keep[t]) | or[t] */
  types: number;
  /** keep[ABI.MODE_TYPES] then or[ABI.MODE_TYPES] */
  masks: Uint32Array;
}

const cache = new WeakMap<Profile, PresentationMasks>();

/**
 * The native side never re-derives policy: it gets JS's own presentedMode in
 * the form `type | (perms & keep) | or`, found by evaluating it on all 4096
 * permission values of each type. A type whose presentation is not of that
 * form is not published (the native getattr then hands it to JS).
 */
export function presentationMasks(profile: Profile): PresentationMasks {
  const hit = cache.get(profile);
  if (hit) return hit;
  const masks = new Uint32Array(2 * ABI.MODE_TYPES);
  let types = 0;
  for (const t of TYPES) {
    const type = t << 12;
    const present = (perms: number): number => presentedMode(profile, { mode: BigInt(type | perms) } as BigIntStats);
    const or = present(0) & 0o7777;
    const keep = present(0o7777) & 0o7777 & ~or;
    let ok = true;
    for (let perms = 0; perms <= 0o7777 && ok; perms++) {
      ok = present(perms) === (type | (perms & keep) | or);
    }
    if (!ok) continue;
    types |= 1 << t;
    masks[t] = keep;
    masks[ABI.MODE_TYPES + t] = or;
  }
  const out = { types, masks };
  cache.set(profile, out);
  return out;
}

export interface ChmodMasks {
  /** new mode = asked & m */
  m: number;
  /** nothing is done when the new mode equals current & k */
  k: number;
}

const chmodCache = new WeakMap<Profile, ChmodMasks | null>();
/** Current modes the form is checked against, each with every asked mode: every bit alone, none, all, and a spread. */
const CHMOD_PROBES = [0, 0o7777, 0o777, 0o700, 0o600, 0o644, 0o755, 0o4755, 0o2775, 0o1777, ...Array.from({ length: 12 }, (_, i) => 1 << i)];

/**
 * The native chmod never re-derives policy either: JS's own chmodDecision,
 * when it has the form `apply(asked & m)` unless that equals `current & k`
 * (keep) for both directories and files, checked on every asked mode against
 * a spread of current ones, becomes (m, k); otherwise null and every chmod of
 * the home stays with JS (refusals, forced modes).
 */
export function chmodMasks(profile: Profile): ChmodMasks | null {
  if (chmodCache.has(profile)) return chmodCache.get(profile)!;
  let found: ChmodMasks | null = null;
  // The form's masks, read off the decision itself: what survives of every bit, and what keep compares.
  const probe = chmodDecision(profile, false, 0, 0o7777);
  if (probe.action === 'apply') {
    const m = probe.mode;
    let k = 0;
    for (let bit = 0; bit < 12; bit++) {
      // keep iff (asked & m) === (current & k): a bit is in k when setting it alone in current (asked 0) makes a change
      if (chmodDecision(profile, false, 1 << bit, 0).action === 'apply') k |= 1 << bit;
    }
    const form = (current: number, asked: number) => ((asked & m) === (current & k) ? 'keep' : `apply ${asked & m}`);
    let ok = true;
    for (const isDir of [false, true]) {
      for (const current of CHMOD_PROBES) {
        for (let asked = 0; asked <= 0o7777 && ok; asked++) {
          const d = chmodDecision(profile, isDir, current, asked);
          ok = (d.action === 'keep' ? 'keep' : d.action === 'apply' ? `apply ${d.mode}` : 'refuse') === form(current, asked);
        }
      }
    }
    if (ok) found = { m, k };
  }
  chmodCache.set(profile, found);
  return found;
}

const fileModeCache = new WeakMap<Profile, { m: number; or: number } | null>();

/**
 * A new file's mode in the native create is JS's effectiveFileMode in the
 * form `(asked & m) | or`, checked on every asked mode; null when it has no
 * such form or forces bits beyond the permissions. A create whose mode comes
 * out with setuid or setgid stays with JS in any case (it sets them again
 * after the chown, which clears them, by descriptor).
 */
export function fileModeMasks(profile: Profile): { m: number; or: number } | null {
  if (fileModeCache.has(profile)) return fileModeCache.get(profile)!;
  const or = effectiveFileMode(profile, 0);
  const m = effectiveFileMode(profile, 0o7777) & ~or;
  let ok = (or & ~0o777) === 0 && (m & ~0o7777) === 0;
  for (let asked = 0; asked <= 0o7777 && ok; asked++) ok = effectiveFileMode(profile, asked) === ((asked & m) | or);
  const found = ok ? { m, or } : null;
  fileModeCache.set(profile, found);
  return found;
}

const dirModeCache = new WeakMap<Profile, { m: number; or: number } | null>();

/**
 * A new directory's mode in the native mkdir is JS's effectiveDirMode in the
 * same form, found the same way; a mkdir whose mode comes out with setuid or
 * setgid stays with JS (ownNew sets them again after the chown).
 */
export function dirModeMasks(profile: Profile): { m: number; or: number } | null {
  if (dirModeCache.has(profile)) return dirModeCache.get(profile)!;
  const or = effectiveDirMode(profile, 0);
  const m = effectiveDirMode(profile, 0o7777) & ~or;
  let ok = (or & ~0o7777) === 0 && (m & ~0o7777) === 0;
  for (let asked = 0; asked <= 0o7777 && ok; asked++) ok = effectiveDirMode(profile, asked) === ((asked & m) | or);
  const found = ok ? { m, or } : null;
  dirModeCache.set(profile, found);
  return found;
}

/** Names below a home that only JS answers (the native walk hands them over). */
export const JS_ONLY_NAMES = [RESERVED_DIR, `${HIDDEN_NAME_PREFIX}*`];

/**
 * The control plane of the binding's native getattr/lookup (fastpath_*.c): what
 * the fs layer reports through AttrPublisher becomes the native table, under
 * the binding's write lock, before the reported change is answered.
 */
export class NativeFastPath implements AttrPublisher {
  /** what is published under each path prefix, and by whom */
  private readonly byPrefix = new Map<string, { hs: HomeState; token: number }>();
  private readonly prefixOf = new Map<HomeState, string>();
  private next = 0;

  /** whether the binding does the unlinks of homes the fs layer makes mutable (config fuse.nativeUnlink) */
  readonly unlinks: boolean;
  /** whether the binding answers read-only opens where the fs layer lets it */
  readonly opens: boolean;
  /** whether the binding does UTIMENS and (where chmodMasks has a form) CHMOD by path */
  readonly setattrs: boolean;
  /** whether the binding makes new files where the fs layer lets it */
  readonly creates: boolean;
  /** whether the binding makes new directories where it makes files */
  readonly mkdirs: boolean;
  readonly symlinks: boolean;
  /** whether the binding makes hard links where it makes files (config fuse.nativeLink) */
  readonly links: boolean;
  /** whether the binding removes empty directories where it unlinks (config fuse.nativeRmdir) */
  readonly rmdirs: boolean;
  /** whether the binding renames regular files where it unlinks */
  readonly renames: boolean;
  /** whether the binding decides writes' growth for inodes the fs layer hands over */
  readonly writeDecisions: boolean;

  constructor(
    private readonly native: FastPathNative,
    private readonly log: Logger,
    nativeUnlink = true,
    nativeOpen = true,
    nativeSetattr = true,
    nativeCreate = true,
    nativeWriteDecision = true,
    nativeMkdir = true,
    nativeRmdir = true,
    nativeRename = true,
    nativeSymlink = true,
    nativeLink = true,
    nativeTruncate = true,
    /** directory descriptors kept for GETATTR: only where the backing tree is root's alone (allowOpenBacking off) */
    keptDirs = true,
  ) {
    this.unlinks = nativeUnlink;
    this.opens = nativeOpen;
    this.setattrs = nativeSetattr;
    // A native create opens what it makes: it needs the native opens.
    this.creates = nativeCreate && nativeOpen;
    // A native mkdir charges a create slot's inode: it needs the native creates.
    this.mkdirs = nativeMkdir && this.creates;
    // So does a native symlink.
    this.symlinks = nativeSymlink && this.creates;
    // A native link charges a create slot's inode too.
    this.links = nativeLink && this.creates;
    this.writeDecisions = nativeWriteDecision;
    // A native rmdir releases its inode where native unlinks release theirs: the homes made mutable for them.
    this.rmdirs = nativeRmdir && nativeUnlink;
    // A native rename over a file releases it into the pending pair a native unlink uses: it needs those.
    this.renames = nativeRename && nativeUnlink;
    native.clear();
    native.setReserved(JS_ONLY_NAMES);
    native.setFreeInlineMax(INLINE_FREE_MAX_BYTES);
    native.setRmdir(this.rmdirs);
    native.setDirCache(keptDirs);
    // An ftruncate's growth comes from the same credit as a write's, for the same inodes handed over.
    native.setTruncate(nativeTruncate && nativeWriteDecision);
    native.enable(true);
  }

  publish(hs: HomeState): void {
    // A retired home's descriptor may already be closed: never publish one.
    if (hs.backing.retired) return this.homeGone(hs);
    const prefix = `/${hs.backing.ref.tenant}/${hs.backing.ref.key}`;
    const before = this.prefixOf.get(hs);
    if (before !== undefined && before !== prefix) this.remove(before);
    const { types, masks } = presentationMasks(hs.profile);
    const owner = hs.backing.owner;
    const token = ++this.next;
    try {
      this.native.setHome(prefix, hs.backing.fd, hs.backing.dev, owner.uid, owner.gid, hs.profile.chown === 'allow', hs.profile.maxNameBytes, types, masks, token);
    } catch (err) {
      // Unpublished is always correct: JS answers that home's getattrs.
      this.remove(prefix);
      this.log.warn({ home: hs.backing.id, err: (err as Error).message }, 'native getattr not published for this home');
      return;
    }
    const old = this.byPrefix.get(prefix);
    if (old && old.hs !== hs) this.prefixOf.delete(old.hs);
    this.byPrefix.set(prefix, { hs, token });
    this.prefixOf.set(hs, prefix);
    // A new publication starts immutable in C, opening nothing and with no SETATTR.
    if (hs.nativeUnlink) this.mutable(hs);
    if (hs.nativeOpen !== 0) this.openPolicy(hs);
    if (hs.nativeCreate !== null) this.createPolicy(hs);
    if (hs.nativeRename !== null) this.renamePolicy(hs);
    if (this.setattrs) {
      // UTIMENS needs no decision (attr.ts utimens); CHMOD only where the profile's decision has the masks'
      // form; CHOWN is lchown where the profile allows it, else only the no-op to the published owner.
      const chmod = chmodMasks(hs.profile);
      const chown = hs.profile.chown === 'allow' ? ABI.ATTR_CHOWN_ALLOW : ABI.ATTR_CHOWN_OWNER;
      this.native.setAttrOps(prefix, token, ABI.ATTR_UTIMENS | (chmod ? ABI.ATTR_CHMOD : 0) | chown, chmod?.m ?? 0, chmod?.k ?? 0);
    }
  }

  openPolicy(hs: HomeState): void {
    const prefix = this.prefixOf.get(hs);
    if (prefix === undefined || !this.opens) return;
    const e = this.byPrefix.get(prefix)!;
    this.native.setOpen(prefix, e.token, hs.nativeOpen);
  }

  fileModeMasks(profile: Profile): { m: number; or: number } | null {
    return fileModeMasks(profile);
  }

  dirModeMasks(profile: Profile): { m: number; or: number } | null {
    return dirModeMasks(profile);
  }

  createPolicy(hs: HomeState): void {
    const prefix = this.prefixOf.get(hs);
    if (prefix === undefined || !this.creates) return;
    const c = hs.nativeCreate;
    const token = this.byPrefix.get(prefix)!.token;
    this.native.setCreate(prefix, token, c !== null, c?.m ?? 0, c?.or ?? 0, c?.maxDepth ?? 0, c?.callerOwns ?? false);
    if (this.mkdirs) this.native.setMkdir(prefix, token, (c?.dir ?? null) !== null, c?.dir?.m ?? 0, c?.dir?.or ?? 0);
    if (this.symlinks) this.native.setSymlink(prefix, token, c?.symlinks ?? 0);
    if (this.links) this.native.setLink(prefix, token, c?.link ?? false);
    // Files made there start handed over (FsContext.handSize): their first writes are decided in the binding too.
    if (this.writeDecisions) this.native.setWriteCredit(prefix, token, c !== null && (hs.nativeOpen & NATIVE_OPEN_WRITE) !== 0);
  }

  renamePolicy(hs: HomeState): void {
    const prefix = this.prefixOf.get(hs);
    if (prefix === undefined || !this.renames) return;
    const r = hs.nativeRename;
    this.native.setRename(prefix, this.byPrefix.get(prefix)!.token, r !== null, r?.maxDepth ?? 0);
  }

  wlDelegate(dev: bigint, ino: bigint, size: number, acct: BigInt64Array): boolean {
    return this.writeDecisions && this.native.wlDelegate(dev, ino, size, acct);
  }

  wlRevoke(dev: bigint, ino: bigint): number {
    return this.writeDecisions ? this.native.wlRevoke(dev, ino) : -2;
  }

  wlSize(dev: bigint, ino: bigint): number {
    return this.writeDecisions ? this.native.wlSize(dev, ino) : -1;
  }

  grantCreate(hs: HomeState, fh: number, uid: number): boolean {
    const prefix = this.prefixOf.get(hs);
    if (prefix === undefined || !this.creates) return false;
    return this.native.grantCreate(prefix, this.byPrefix.get(prefix)!.token, fh, uid);
  }

  grant(hs: HomeState, fh: number, uid: number): boolean {
    const prefix = this.prefixOf.get(hs);
    if (prefix === undefined || !this.opens) return false;
    return this.native.grant(prefix, this.byPrefix.get(prefix)!.token, fh, uid);
  }

  reclaim(): void {
    if (this.opens) this.native.reclaim();
  }

  onSlotsLow(fn: () => void): void {
    if (this.creates) this.native.setSettleHandler(fn);
  }

  takeOpens(): BigUint64Array | null {
    return this.opens ? this.native.takeOpens() : null;
  }

  mutable(hs: HomeState): void {
    const prefix = this.prefixOf.get(hs);
    if (prefix === undefined) return;
    const e = this.byPrefix.get(prefix)!;
    this.native.setMutable(prefix, e.token, this.unlinks && hs.nativeUnlink ? hs.pending : null);
  }

  republish(hs: HomeState): void {
    if (this.prefixOf.has(hs)) this.publish(hs);
  }

  homeGone(hs: HomeState): void {
    const prefix = this.prefixOf.get(hs);
    if (prefix !== undefined) this.remove(prefix);
  }

  pathGone(id: string): void {
    this.remove(`/${id}`);
  }

  homeChecked(hs: HomeState, ms: number): void {
    const prefix = this.prefixOf.get(hs);
    if (prefix !== undefined) this.native.homeChecked(prefix, this.byPrefix.get(prefix)!.token, ms);
  }

  inode(dev: bigint, ino: bigint, delta: 1 | -1): void {
    this.native.inode(dev, ino, delta);
  }

  inodeSize(dev: bigint, ino: bigint, size: number): void {
    this.native.inodeSize(dev, ino, size);
  }

  handle(h: FileHandle): void {
    // An orphaned inode's nlink counts a link nobody sees: its fgetattr is JavaScript's (fs/attr.ts).
    if (h.inode.orphaned) return this.native.removeHandle(h.fh);
    const { types, masks } = presentationMasks(h.home.profile);
    const owner = h.home.backing.owner;
    this.native.setHandle(h.fh, h.fd, owner.uid, owner.gid, h.home.profile.chown === 'allow', types, masks);
  }

  handleGone(fh: number): void {
    this.native.removeHandle(fh);
  }

  clear(): void {
    this.byPrefix.clear();
    this.prefixOf.clear();
    this.native.clear();
  }

  stats(): ReturnType<FastPathNative['stats']> {
    return this.native.stats();
  }

  private remove(prefix: string): void {
    const e = this.byPrefix.get(prefix);
    // Removed natively even when JS has no record: a stale entry must never survive.
    this.native.removeHome(prefix, -1);
    if (!e) return;
    this.byPrefix.delete(prefix);
    this.prefixOf.delete(e.hs);
  }
}

/**
 * Work out every profile's masks now (each is a search over all 4096 modes,
 * tens of milliseconds): a successor does it before it asks for the session,
 * so none of it falls inside the pause its first home publication would be in.
 */
export function warmProfileMasks(profiles: Iterable<Profile>): void {
  for (const p of profiles) {
    presentationMasks(p);
    chmodMasks(p);
    fileModeMasks(p);
    dirModeMasks(p);
  }
}
