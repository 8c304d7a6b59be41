/**
 * The context every FUSE-independent operation (attr.ts, dir.ts, file.ts)
 * takes: the facade over the layers below it (home-registry.ts, inodes.ts,
 * open-slots.ts, publication.ts, each a base class of the next), plus what
 * the operations share that needs no binding: virtual-path parsing, the rules
 * for a new entry (name shape, reserved `.homesfs`, owner on disk, link
 * targets), files hidden while unlinked, the turns of big listings, the
 * admission of a home rename. Rules here read the home's profile as it is at
 * the call: a profile switch applies at once.
 */
import type { Dirent } from 'node:fs';
import { posix } from 'node:path';
import { LRUCache } from 'lru-cache';
import type { Owner } from '../backing/store.js';
import * as sys from '../backing/sys.js';
import { HomesError } from '../errors.js';
import { checkComponent } from '../paths/names.js';
import { parseVirtualPath, splitLast, type HomeRef, type VirtualPath } from '../paths/parse.js';
import { isReservedDir, isStatusPath, RESERVED_DIR, STATUS_NAME } from '../paths/reserved.js';
import { symlinkTargetInsideHome } from '../policy/profiles.js';
import { Turns } from '../policy/turns.js';
import type { HiddenNode } from './hidden.js';
import { NativePublication } from './publication.js';
import type { Caller, HomeState } from './state.js';

/**
 * A one-shot permission for the control socket's helper process to rename a
 * home (or move it to a trash name) through the mount: renames at the home
 * level are otherwise refused. Matched on the caller's pid and both paths.
 */
export interface HomeRenameAdmission {
  pid: number;
  from: string;
  to: string;
  /** the daemon's own bookkeeping, run before the kernel hears success */
  onRenamed(): void;
}

export type HomePath = { kind: 'home'; home: HomeRef; rel: readonly string[] };

/**
 * Shared state of the FUSE-independent operations: the backing store, the
 * per-home ledgers and the handle table. Operations live in attr.ts, dir.ts and
 * file.ts and take this context.
 */
export class FsContext extends NativePublication {
  /** files unlinked while open, under the hidden name the session gave them (see hidden.ts) */
  readonly hidden = new Map<string, HiddenNode>();
  /** listings of big directories: one per home at a time, four in all (dir.ts) */
  readonly listings = new Turns(1, 4);
  /** the names of the big directories being streamed, as read (dir.ts streamDir): a few, whatever the directories' sizes */
  readonly streamedNames = new LRUCache<string, { version: string; names: Dirent<Buffer>[] }>({ max: 4 });
  admission: HomeRenameAdmission | null = null;

  parse(path: string): VirtualPath {
    return parseVirtualPath(path);
  }

  /** A path that must lie inside a home (anything else is the daemon's tree). */
  parseHomePath(path: string, op: string): HomePath {
    const vp = parseVirtualPath(path);
    if (vp.kind !== 'home') throw new HomesError('DAEMON_TREE', `${op} on the daemon's tenant/home levels is not allowed`);
    if (op !== 'open' && isStatusPath(vp.rel)) {
      throw new HomesError('OP_REFUSED', `${RESERVED_DIR}/${STATUS_NAME} is presented by the daemon: it can only be read`);
    }
    return vp;
  }

  /** As parseHomePath, but the home directory itself is also refused. */
  parseInHome(path: string, op: string): HomePath & { dir: readonly string[]; name: string } {
    const vp = this.parseHomePath(path, op);
    const last = splitLast(vp.rel);
    if (last === null) throw new HomesError('DAEMON_TREE', `${op} of a home itself is done through the control socket`);
    return { ...vp, ...last };
  }

  /** Name-shape rules of the profile for a new entry (length, depth, entries per directory). */
  async checkNewEntry(hs: HomeState, dirFd: number, dir: readonly string[], name: string): Promise<void> {
    checkComponent(name, hs.profile.maxNameBytes);
    if (hs.profile.maxDepth > 0 && dir.length + 1 > hs.profile.maxDepth) {
      throw new HomesError('OP_REFUSED', `nesting deeper than ${hs.profile.maxDepth} levels is not allowed in profile ${hs.profileName}`);
    }
    if (hs.profile.maxEntriesPerDir > 0) {
      const n = (await sys.readdirRaw(sys.fdPath(dirFd))).length;
      if (n >= hs.profile.maxEntriesPerDir) {
        throw new HomesError('OP_REFUSED', `a directory holds at most ${hs.profile.maxEntriesPerDir} entries in profile ${hs.profileName}`);
      }
    }
  }

  /**
   * Does a symlink standing in `dir` with this target stay in the home, under
   * the home's profile? Asked at creation and at every follow: the home's
   * path is taken as it is now (a renamed home's old absolute links lead out).
   * A profile that denies links still judges planted relative ones, so they
   * can be read.
   */
  linkStaysInside(hs: HomeState, dir: readonly string[], target: string): boolean {
    const rule = hs.profile.symlinks;
    if (rule === 'any') return true;
    if (rule === 'deny') return symlinkTargetInsideHome([...dir], target);
    const { tenant, key } = hs.backing.ref;
    return symlinkTargetInsideHome([...dir], target, {
      homePaths: [`${posix.resolve(this.deps.mountRoot)}/${tenant}/${key}`, ...hs.profile.homeAliases],
      systemPrefixes: hs.profile.symlinkSystemPrefixes,
    });
  }

  /**
   * Who owns a new backing node on disk: whom the profile presents. The home's
   * owner, or the creating caller where real ownership is shown (`chown:
   * allow`). The backing tree then says who owns what without the daemon, and
   * a profile switch never locks the owner out.
   */
  diskOwner(hs: HomeState, caller: Caller): Owner {
    return hs.profile.chown === 'allow' ? { uid: caller.uid, gid: caller.gid } : hs.backing.owner;
  }

  /**
   * Give a new backing node its owner on disk (diskOwner). Where real ownership
   * is shown (chown 'allow'), a setgid parent directory's group stays (the
   * backing create as root already inherited it, as a local filesystem does).
   * chown clears setuid/setgid on files, so a mode asked with them is applied
   * again after it, by descriptor (the open file, or an O_PATH descriptor).
   */
  async ownNew(hs: HomeState, dirFd: number, name: string, caller: Caller, mode: number, fileFd?: number): Promise<void> {
    const owner = this.diskOwner(hs, caller);
    const setgidParent = hs.profile.chown === 'allow' && (Number((await sys.fstat(dirFd)).mode) & 0o2000) !== 0;
    const gid = setgidParent ? -1 : owner.gid;
    if (fileFd !== undefined) await sys.fchown(fileFd, owner.uid, gid);
    else await sys.lchown(sys.fdPath(dirFd, name), owner.uid, gid);
    if ((mode & 0o6000) === 0) return;
    if (fileFd !== undefined) return void (await sys.fchmod(fileFd, mode & 0o7777));
    const fd = await this.store.openNode(dirFd, name);
    try {
      if (!(await sys.fstat(fd)).isSymbolicLink()) await sys.chmod(sys.fdPath(fd), mode & 0o7777);
    } finally {
      await sys.close(fd);
    }
  }

  /**
   * Before a new entry `dir/name` is made: `.homesfs` at the home root may only
   * be a directory (its `status` must stay reachable), and a `.homesfs` the
   * daemon presents without a backing directory is created first (one inode).
   */
  async prepareNewEntry(hs: HomeState, dir: readonly string[], name: string, isDir: boolean): Promise<void> {
    if (dir.length === 0 && name === RESERVED_DIR && !isDir) {
      throw new HomesError('OP_REFUSED', `${RESERVED_DIR} at the root of a home is reserved for a directory`);
    }
    if (!isReservedDir(dir)) return;
    await this.store.withDir(hs.backing, [], async (rootFd) => {
      const path = sys.fdPath(rootFd, RESERVED_DIR);
      const exists = await sys.lstat(path).then(
        () => true,
        (err) => (sys.sysCode(err) === 'ENOENT' ? false : Promise.reject(err)),
      );
      if (exists) return;
      const undo = this.addInode(hs);
      try {
        await sys.mkdir(path, 0o700);
      } catch (err) {
        undo();
        if (sys.sysCode(err) === 'EEXIST') return;
        throw err;
      }
      try {
        // Owned on disk by whom the profile presents: the home's owner (the daemon made it for them).
        await sys.lchown(path, hs.backing.owner.uid, hs.backing.owner.gid);
      } finally {
        // The kernel knows the daemon's stand-in (another inode): it looks the name up again.
        this.daemonNameChanged(`${hs.backing.id}/${RESERVED_DIR}`);
      }
    });
  }

  /** Open an O_PATH descriptor for `name` in `dirFd` if it exists. */
  async probeNode(dirFd: number, name: string): Promise<number | null> {
    try {
      return await this.store.openNode(dirFd, name);
    } catch (err) {
      if (sys.sysCode(err) === 'ENOENT') return null;
      throw err;
    }
  }
}
