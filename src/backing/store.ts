import { realpath } from 'node:fs/promises';
import { HomesError } from '../errors.js';
import type { Logger } from '../log.js';
import { checkSegment, classifyKey, DAEMON_DIR, decodeBackingName, TRASH_PREFIX } from '../paths/names.js';
import { isOrphanName } from '../paths/hidden-names.js';
import { homeId, type HomeRef } from '../paths/parse.js';
import { DirCache } from './dircache.js';
import * as sys from './sys.js';
import { entryPath, pooledIo, runWalk, walkSteps } from './walk.js';

export interface Owner {
  uid: number;
  gid: number;
}

export interface BackingHome {
  /** changes when the home is renamed through the control socket */
  ref: HomeRef;
  id: string;
  /** O_PATH descriptor of the home's backing directory: the anchor of every access below it. */
  readonly fd: number;
  readonly dev: bigint;
  readonly ino: bigint;
  /** the directory's birth time (ns, 0 where the file system keeps none): with dev and ino, this very directory (ledger-area.ts) */
  readonly birth: bigint;
  /** changes when an admin sets the owner through the control socket */
  owner: Owner;
  /** when the backing directory was last found still in place (ms since epoch) */
  checkedAt: number;
  /** operations using `fd` right now */
  uses: number;
  /** replaced, deleted or shut down: close `fd` when the last use ends */
  retired: boolean;
  /** bumped after every directory rename or rmdir through the mount (DirCache) */
  dirGen: number;
}

const DIR_FLAGS = sys.O_PATH | sys.C.O_DIRECTORY | sys.C.O_NOFOLLOW;
export { TRASH_PREFIX };
const NODE_FLAGS = sys.O_PATH | sys.C.O_NOFOLLOW;
const DAEMON_DIR_NAME = Buffer.from(DAEMON_DIR);

/**
 * The only owner of backing-tree access below the root. Nothing is reached by a
 * path string that the kernel could resolve through a symlink: every directory
 * is opened one validated component at a time with O_NOFOLLOW|O_DIRECTORY,
 * starting from a descriptor, and operations then address `/proc/self/fd/<dir>/<name>`
 * where `name` is a single checked component (QEMU 9p CVE-2016-9602 is what
 * happens otherwise).
 */
export class BackingStore {
  private rootFd = -1;
  private rootPath = '';
  /** every tenant and home must be on this device: inode numbers are then unique across the mount */
  private rootDev = -1n;
  private readonly warnedNames = new Set<string>();
  private readonly dirs = new DirCache();

  constructor(
    private readonly configuredRoot: string,
    private readonly log: Logger,
    private readonly ownerOverride: (ref: HomeRef) => Owner | undefined,
  ) {}

  get root(): string {
    return this.rootPath;
  }

  async init(): Promise<void> {
    // The configured root is the admin's choice and may itself sit behind a
    // symlink (/var/lib → /data); everything below it is never followed.
    this.rootPath = await realpath(this.configuredRoot);
    this.rootFd = await sys.open(this.rootPath, DIR_FLAGS);
    this.rootDev = (await sys.fstat(this.rootFd)).dev;
  }

  /** The one device of the whole presented tree. */
  get dev(): bigint {
    return this.rootDev;
  }

  private sameDevice(st: import('node:fs').BigIntStats, what: string): void {
    if (st.dev !== this.rootDev) throw new HomesError('CROSS_DEVICE', `${what} is on another device than the backing root`);
  }

  /** Closes the root and the directory cache; homes are retired by their owner (the fs context). */
  async close(): Promise<void> {
    this.dirs.clear();
    if (this.rootFd >= 0) await sys.close(this.rootFd).catch(() => undefined);
    this.rootFd = -1;
  }

  /**
   * Where a non-root uid could get into the backing tree other than through
   * the mount: the root or a tenant directory not owned by root, or with any
   * group/other permission bit. Below them the homes belong to their owners,
   * so these two levels are the only wall. One line per problem.
   */
  async openings(): Promise<string[]> {
    const problems: string[] = [];
    const check = (what: string, st: import('node:fs').BigIntStats): void => {
      const mode = Number(st.mode) & 0o7777;
      if (st.uid !== 0n) problems.push(`${what} is owned by uid ${st.uid}, not root`);
      if (mode & 0o077) problems.push(`${what} has mode ${mode.toString(8).padStart(4, '0')}: group/other can reach it (want 0700)`);
    };
    check(`backing root ${this.rootPath}`, await sys.fstat(this.rootFd));
    for (const e of await sys.readdirRaw(sys.fdPath(this.rootFd))) {
      if (!e.isDirectory()) continue;
      const st = await sys.lstat(Buffer.concat([Buffer.from(`${sys.fdPath(this.rootFd)}/`), e.name])).catch(() => null);
      if (st) check(`tenant directory ${this.rootPath}/${e.name.toString('latin1')}`, st);
    }
    return problems;
  }

  rootStat(): Promise<import('node:fs').BigIntStats> {
    return sys.fstat(this.rootFd);
  }

  private warnOnce(kind: string, raw: Buffer | string, why: string): void {
    const key = `${kind}:${raw.toString('hex' as BufferEncoding)}`;
    if (this.warnedNames.has(key) || this.warnedNames.size > 10_000) return;
    this.warnedNames.add(key);
    this.log.warn({ kind, name: typeof raw === 'string' ? raw : raw.toString('latin1'), reason: why }, 'backing name skipped, never served');
  }

  async listTenants(): Promise<string[]> {
    return (await this.tenantEntries(false)).map((e) => e.name);
  }

  /**
   * Tenants with their lstat (for readdir's d_ino). A tenant on another device
   * than the root is left out of listings, as it is refused on lookup.
   */
  listTenantsWithStats(): Promise<Array<{ name: string; st: import('node:fs').BigIntStats }>> {
    return this.tenantEntries(true) as Promise<Array<{ name: string; st: import('node:fs').BigIntStats }>>;
  }

  private async tenantEntries(withStats: boolean): Promise<Array<{ name: string; st?: import('node:fs').BigIntStats }>> {
    const entries = await sys.readdirRaw(sys.fdPath(this.rootFd));
    const out: Array<{ name: string; st?: import('node:fs').BigIntStats }> = [];
    for (const e of entries) {
      if (!e.isDirectory()) continue;
      // the daemon's own state and lock (config DAEMON_DIR): not a tenant, not worth a warning
      if (e.name.equals(DAEMON_DIR_NAME)) continue;
      const name = decodeBackingName(e.name);
      if (name === null) {
        this.warnOnce('tenant', e.name, 'not a valid UTF-8 name');
        continue;
      }
      try {
        checkSegment('tenant', name);
      } catch (err) {
        this.warnOnce('tenant', name, (err as Error).message);
        continue;
      }
      if (!withStats) {
        out.push({ name });
        continue;
      }
      const st = await sys.lstat(sys.fdPath(this.rootFd, name)).catch(() => null);
      if (st && st.isDirectory() && st.dev === this.rootDev) out.push({ name, st });
    }
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  private async openTenant(tenant: string): Promise<number> {
    checkSegment('tenant', tenant);
    return sys.open(sys.fdPath(this.rootFd, tenant), DIR_FLAGS).catch((err) => {
      throw notFoundIfMissing(err, `tenant ${tenant}`);
    });
  }

  async withTenant<T>(tenant: string, fn: (tenantFd: number) => Promise<T>): Promise<T> {
    const fd = await this.openTenant(tenant);
    try {
      return await fn(fd);
    } finally {
      await sys.close(fd);
    }
  }

  async statTenant(tenant: string): Promise<import('node:fs').BigIntStats> {
    const fd = await this.openTenant(tenant);
    try {
      const st = await sys.fstat(fd);
      this.sameDevice(st, `tenant ${tenant}`);
      return st;
    } finally {
      await sys.close(fd);
    }
  }

  async listHomes(tenant: string): Promise<string[]> {
    return (await this.homeEntries(tenant, false)).map((e) => e.name);
  }

  /** Homes of a tenant with their lstat (for readdir's d_ino); homes on another device are left out. */
  listHomesWithStats(tenant: string): Promise<Array<{ name: string; st: import('node:fs').BigIntStats }>> {
    return this.homeEntries(tenant, true) as Promise<Array<{ name: string; st: import('node:fs').BigIntStats }>>;
  }

  private async homeEntries(tenant: string, withStats: boolean): Promise<Array<{ name: string; st?: import('node:fs').BigIntStats }>> {
    const fd = await this.openTenant(tenant);
    try {
      const entries = await sys.readdirRaw(sys.fdPath(fd));
      const out: Array<{ name: string; st?: import('node:fs').BigIntStats }> = [];
      for (const e of entries) {
        if (!e.isDirectory()) continue;
        if (e.name.subarray(0, TRASH_PREFIX.length).equals(Buffer.from(TRASH_PREFIX))) continue;
        const name = decodeBackingName(e.name);
        if (name === null) {
          this.warnOnce('home', e.name, 'not a valid UTF-8 name');
          continue;
        }
        try {
          classifyKey(name);
        } catch (err) {
          this.warnOnce('home', `${tenant}/${name}`, (err as Error).message);
          continue;
        }
        if (!withStats) {
          out.push({ name });
          continue;
        }
        const st = await sys.lstat(sys.fdPath(fd, name)).catch(() => null);
        if (st && st.isDirectory() && st.dev === this.rootDev) out.push({ name, st });
      }
      return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    } finally {
      await sys.close(fd);
    }
  }

  /**
   * Trash left by a delete that a crash interrupted: nobody can reach it any more.
   * A tree that cannot be removed (a mount inside it, an immutable file, too deep
   * for the descriptor limit) is left for a later start and reported: the daemon
   * must still come up, or one bad tree would keep every home offline.
   */
  async purgeTrash(): Promise<{ purged: number; left: { tenant: string; name: string; error: string }[] }> {
    let purged = 0;
    const left: { tenant: string; name: string; error: string }[] = [];
    for (const tenant of await this.listTenants()) {
      const fd = await this.openTenant(tenant).catch(() => -1);
      if (fd < 0) continue;
      try {
        for (const e of await sys.readdirRaw(sys.fdPath(fd))) {
          if (!e.name.subarray(0, TRASH_PREFIX.length).equals(Buffer.from(TRASH_PREFIX))) continue;
          try {
            await removeTree(fd, e.name);
            purged++;
          } catch (err) {
            left.push({ tenant, name: e.name.toString('utf8'), error: err instanceof Error ? err.message : String(err) });
          }
        }
      } finally {
        await sys.close(fd);
      }
    }
    return { purged, left };
  }

  /**
   * Orphans (files unlinked while open, kept at their home's root under a
   * name no path reaches: fs/hidden.ts) that no session will release: at a start
   * that neither resumes nor takes over a session, every one of them. A
   * failure is reported, never fatal (the orphan stays, unlisted, counted in
   * its home's ledger, until a later start).
   */
  async purgeOrphans(): Promise<{ purged: number; left: { home: string; name: string; error: string }[] }> {
    let purged = 0;
    const left: { home: string; name: string; error: string }[] = [];
    for (const ref of await this.listAllHomes()) {
      const fd = await this.withTenant(ref.tenant, (tfd) => sys.open(sys.fdPath(tfd, ref.key), DIR_FLAGS)).catch(() => -1);
      if (fd < 0) continue;
      try {
        for (const e of await sys.readdirRaw(sys.fdPath(fd))) {
          if (!isOrphanName(e.name) || !e.isFile()) continue;
          try {
            await sys.unlink(sys.fdPathRaw(fd, e.name));
            purged++;
          } catch (err) {
            left.push({ home: homeId(ref), name: e.name.subarray(1).toString('latin1'), error: err instanceof Error ? err.message : String(err) });
          }
        }
      } finally {
        await sys.close(fd);
      }
    }
    return { purged, left };
  }

  /** Whether the home keeps an orphan (a file unlinked while open, hidden.ts) at its root. */
  async hasOrphans(home: BackingHome): Promise<boolean> {
    const entries = await sys.readdirRaw(sys.fdPath(home.fd));
    return entries.some((e) => isOrphanName(e.name));
  }

  /** Every home currently present in the backing tree. */
  async listAllHomes(): Promise<HomeRef[]> {
    const out: HomeRef[] = [];
    for (const tenant of await this.listTenants()) {
      const keys = await this.listHomes(tenant).catch(() => []);
      for (const key of keys) out.push({ tenant, key });
    }
    return out;
  }

  /**
   * Is the home's backing directory still the one that was opened (same inode
   * at <tenant>/<key>)? False when it was removed or replaced behind the daemon.
   */
  async stillInPlace(home: BackingHome): Promise<boolean> {
    const tfd = await this.openTenant(home.ref.tenant).catch(() => -1);
    if (tfd < 0) return false;
    try {
      const st = await sys.lstat(sys.fdPath(tfd, home.ref.key));
      return st.isDirectory() && st.ino === home.ino && st.dev === home.dev;
    } catch {
      return false;
    } finally {
      await sys.close(tfd);
    }
  }

  /**
   * The home's descriptor is no longer to be used. It is closed only once no
   * operation holds it: closing it under a running operation could let the
   * number be reused for another directory, and that operation would then act
   * there.
   */
  retire(home: BackingHome): void {
    home.retired = true;
    if (home.uses === 0) void sys.close(home.fd).catch(() => undefined);
  }

  /** Run `fn` with the home's own descriptor, counted as a use (see `retire`). */
  async useHome<T>(home: BackingHome, fn: (fd: number) => Promise<T>): Promise<T> {
    // Checked and counted synchronously: no retire can slip in between.
    if (home.retired) throw new HomesError('NOT_FOUND', `home ${home.id} is gone`);
    home.uses++;
    try {
      return await fn(home.fd);
    } finally {
      home.uses--;
      if (home.retired && home.uses === 0) void sys.close(home.fd).catch(() => undefined);
    }
  }

  /** Is there a directory entry (of any type) at <tenant>/<key>? */
  async homeExists(ref: HomeRef): Promise<boolean> {
    try {
      return await this.withTenant(ref.tenant, async (tfd) => {
        try {
          await sys.lstat(sys.fdPath(tfd, ref.key));
          return true;
        } catch (err) {
          if (sys.sysCode(err) === 'ENOENT') return false;
          throw err;
        }
      });
    } catch (err) {
      if (err instanceof HomesError && err.code === 'NOT_FOUND') return false;
      throw err;
    }
  }

  /** Create <tenant>/<key> (and the tenant directory) in the backing tree. */
  /** Make the home's directory (and its tenant's if need be): whether the tenant's was made. */
  async createHome(ref: HomeRef, owner: Owner): Promise<{ tenantMade: boolean }> {
    checkSegment('tenant', ref.tenant);
    classifyKey(ref.key);
    // root-only: the backing homes below are owned by their owners, and only this keeps them out
    const tenantMade = await sys.mkdir(sys.fdPath(this.rootFd, ref.tenant), 0o700).then(
      () => true,
      (err) => {
        if (sys.sysCode(err) !== 'EEXIST') throw err;
        return false;
      },
    );
    await this.withTenant(ref.tenant, async (tfd) => {
      await sys.mkdir(sys.fdPath(tfd, ref.key), 0o700).catch((err) => {
        if (sys.sysCode(err) === 'EEXIST') throw new HomesError('EXISTS', `home ${homeId(ref)} exists`);
        throw err;
      });
      await sys.lchown(sys.fdPath(tfd, ref.key), owner.uid, owner.gid);
    });
    return { tenantMade };
  }

  /**
   * Remove a tree below a tenant directory entry (a home moved to a trash name).
   * Every directory is opened by descriptor without following anything, so a
   * symlink inside is removed, never its target.
   */
  async removeTenantEntry(tenant: string, rawName: string): Promise<void> {
    const tfd = await this.openTenant(tenant);
    try {
      await removeTree(tfd, Buffer.from(rawName));
    } finally {
      await sys.close(tfd);
    }
  }

  /**
   * Remove an empty tenant's directory: trash left by earlier deletes goes
   * first, then rmdir(2), which fails with ENOTEMPTY (NOT_EMPTY) if a home or
   * anything else is there, however it got there meanwhile.
   */
  async removeTenant(tenant: string): Promise<void> {
    const fd = await this.openTenant(tenant);
    try {
      for (const e of await sys.readdirRaw(sys.fdPath(fd))) {
        if (e.name.subarray(0, TRASH_PREFIX.length).equals(Buffer.from(TRASH_PREFIX))) await removeTree(fd, e.name);
      }
    } finally {
      await sys.close(fd);
    }
    await sys.rmdir(sys.fdPath(this.rootFd, tenant)).catch((err) => {
      if (sys.sysCode(err) === 'ENOTEMPTY' || sys.sysCode(err) === 'EEXIST') throw new HomesError('NOT_EMPTY', `tenant ${tenant}'s directory is not empty`);
      throw notFoundIfMissing(err, `tenant ${tenant}`);
    });
  }

  /** Open a home's backing directory; the caller owns the result and retires it. */
  async openHome(ref: HomeRef): Promise<BackingHome> {
    classifyKey(ref.key);
    const tfd = await this.openTenant(ref.tenant);
    try {
      const fd = await sys.open(sys.fdPath(tfd, ref.key), DIR_FLAGS).catch((err) => {
        throw notFoundIfMissing(err, `home ${homeId(ref)}`);
      });
      try {
        const [st, tst] = await Promise.all([sys.fstat(fd), sys.fstat(tfd)]);
        if (st.dev !== tst.dev) {
          throw new HomesError('CROSS_DEVICE', `home ${homeId(ref)} is on another device than its tenant directory`);
        }
        this.sameDevice(tst, `tenant ${ref.tenant}`);
        const owner = this.ownerOverride(ref) ?? { uid: Number(st.uid), gid: Number(st.gid) };
        return { ref, id: homeId(ref), fd, dev: st.dev, ino: st.ino, birth: st.birthtimeNs ?? 0n, owner, checkedAt: Date.now(), uses: 0, retired: false, dirGen: 0 };
      } catch (err) {
        await sys.close(fd);
        throw err;
      }
    } finally {
      await sys.close(tfd);
    }
  }

  /**
   * Open one component below a directory of the home. A component that is a
   * symlink (planted, or swapped in by a race) fails with ENOTDIR instead of
   * being followed.
   */
  private openStep = (dirFd: number, comp: string): Promise<number> =>
    sys.open(sys.fdPath(dirFd, comp), DIR_FLAGS).catch((err) => {
      throw sys.sysCode(err) === 'ELOOP' ? Object.assign(new Error('symlink in path'), { code: 'ENOTDIR' }) : err;
    });

  /**
   * Run `fn` with a descriptor of the directory `rel` below the home, opened
   * one component at a time (never following a symlink) or taken from the
   * directory cache after it proved to still be there (see DirCache).
   */
  async withDir<T>(home: BackingHome, rel: readonly string[], fn: (dirFd: number) => Promise<T>): Promise<T> {
    // The home's own descriptor lives as long as the home: no copy needed for its top level.
    if (rel.length === 0) return this.useHome(home, fn);
    const base = `${this.rootPath}/${home.ref.tenant}/${home.ref.key}`;
    const lease = await this.useHome(home, () => this.dirs.acquire(home, base, rel, this.openStep));
    try {
      return await fn(lease.fd);
    } finally {
      lease.release();
    }
  }

  /**
   * A directory of the home was renamed or removed (call right after the
   * syscall): cached descriptors too deep for procfs to verify are no longer
   * trusted (see DirCache).
   */
  dirsChanged(home: BackingHome): void {
    home.dirGen++;
  }

  /** An O_PATH descriptor of the node itself (not followed if it is a symlink). */
  openNode(dirFd: number, name: string): Promise<number> {
    return sys.open(sys.fdPath(dirFd, name), NODE_FLAGS);
  }

  /** openNode of an entry's path below a descriptor (an fdPath or fdPathRaw). */
  openNodeAt(entry: string | Buffer): Promise<number> {
    return sys.open(entry, NODE_FLAGS);
  }
}

/**
 * Remove `name` below `parentFd` and everything in it, on the threadpool (a
 * whole tree must not hold the JS thread), iteratively with a bounded number
 * of descriptors whatever the depth (walk.ts). A symlink is removed, never
 * followed.
 */
export async function removeTree(parentFd: number, name: Buffer): Promise<void> {
  const path = entryPath(parentFd, name);
  let fd: number;
  try {
    fd = await sys.pooled.open(path, sys.O_PATH | sys.C.O_DIRECTORY | sys.C.O_NOFOLLOW);
  } catch (err) {
    const code = sys.sysCode(err);
    if (code === 'ENOTDIR' || code === 'ELOOP') return sys.pooled.unlink(path);
    if (code === 'ENOENT') return;
    throw err;
  }
  try {
    await runWalk(
      walkSteps(fd, { leave: true }),
      pooledIo({
        visit: async (dirFd, e) => {
          if (e.isDirectory()) return true;
          await sys.pooled.unlink(entryPath(dirFd, e.name));
          return false;
        },
        leave: (pfd, child) => sys.pooled.rmdir(entryPath(pfd, child)),
      }),
    );
  } finally {
    await sys.pooled.close(fd);
  }
  await sys.pooled.rmdir(path);
}

function notFoundIfMissing(err: unknown, what: string): unknown {
  const code = sys.sysCode(err);
  if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'ELOOP') {
    return new HomesError('NOT_FOUND', `${what} does not exist`);
  }
  return err;
}
