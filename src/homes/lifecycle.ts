import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Owner } from '../backing/store.js';
import { TRASH_PREFIX } from '../backing/store.js';
import type { BusyDetails, DeleteResult, DeleteTenantResult, Forward, HomeInfo, OwnerArg, RenameResult, RescanResult, ResolveResult } from '../control/api.js';
import { HomesError } from '../errors.js';
import { measureTree, repairTree } from '../fs/scan.js';
import type { OpenInode } from '../fs/state.js';
import { checkSegment, keyFor } from '../paths/names.js';
import { nearestNames } from '../paths/nearest.js';
import { homeId, type HomeRef } from '../paths/parse.js';
import { isOrphan, resolveScope } from '../scope/resolve.js';
import { ownerUserName } from '../users/names.js';
import { cwdCountsByHome, cwdProcessesUnder, holdersOf, processesOfUid, type ProcessRef } from './busy.js';
import { HomeConcern, parseHomeArg, type HomeCore } from './core.js';
import type { HomeOwners } from './owners.js';

const RENAME_HELPER = fileURLToPath(new URL('../cli/rename-helper.js', import.meta.url));

/**
 * The life of homes: list and usage, creation (and resolution through the
 * scope cascade, which creates), rescans, rename and delete, and the old
 * names a rename reserves. Renames and deletes go through the mount (a helper
 * process, admitted by pid), so the session's node table, open files and
 * working directories follow the home.
 */
export class HomeLifecycle extends HomeConcern {
  constructor(
    core: HomeCore,
    private readonly owners: HomeOwners,
  ) {
    super(core);
  }

  async list(args: { tenant?: string; orphans?: boolean } = {}): Promise<HomeInfo[]> {
    if (args.tenant !== undefined) checkSegment('tenant', args.tenant);
    const refs = (await this.ctx.store.listAllHomes()).filter(
      (r) =>
        (args.tenant === undefined || r.tenant === args.tenant) &&
        (!args.orphans || isOrphan(this.state.state.settings[r.tenant], r.tenant, r.key)),
    );
    const cwd = await cwdCountsByHome(this.config.mount);
    const out: HomeInfo[] = [];
    for (const ref of refs) {
      try {
        out.push(await this.core.info(ref, cwd.get(homeId(ref)) ?? 0));
      } catch (err) {
        this.log.warn({ home: homeId(ref), err: (err as Error).message }, 'home not listed');
      }
    }
    return out;
  }

  async usage(arg: string): Promise<HomeInfo> {
    const ref = parseHomeArg(arg);
    if (!(await this.ctx.store.homeExists(ref))) this.core.notFound(ref);
    return this.core.info(ref);
  }

  /** Create a home: owner allocated from the configured range unless given; recorded before the directory exists. */
  async create(args: { home: string; profile?: string; budget?: number; owner?: OwnerArg; force?: boolean }): Promise<HomeInfo> {
    const ref = parseHomeArg(args.home);
    this.core.checkProfile(args.profile);
    await this.createHome(ref, args);
    return this.core.info(ref);
  }

  private async createHome(ref: HomeRef, args: { profile?: string; budget?: number; owner?: OwnerArg; force?: boolean }): Promise<Owner> {
    const id = homeId(ref);
    this.core.checkNotForwarded(ref);
    if (args.force && !args.owner) throw new HomesError('INVALID_ARGUMENT', 'force goes with an explicit owner');
    if (await this.ctx.store.homeExists(ref)) throw new HomesError('EXISTS', `home ${id} exists`);
    const { owner, forced } = await this.owners.decide(ref, args);
    let made = { tenantMade: false };
    try {
      made = await this.ctx.store.createHome(ref, owner);
    } finally {
      // Made behind the kernel's back: a name it may remember as missing, a directory it may know without it.
      if (made.tenantMade) this.ctx.daemonNameChanged(ref.tenant);
      this.ctx.daemonNameChanged(homeId(ref));
    }
    await this.core.publishOwner(ref, owner);
    this.log.info({ home: id, owner, profile: args.profile, budget: args.budget, ...(forced ? { forced } : {}) }, 'home created');
    return owner;
  }

  /**
   * The home (tenant, project, user?) resolves to, made when missing unless
   * `create` is false (an admin's `homesctl exec`, where a mistyped name must
   * not make a home): then NOT_FOUND, with the nearest existing names.
   */
  async resolve(args: { tenant: string; project: string; user?: string; create?: boolean }): Promise<ResolveResult> {
    checkSegment('tenant', args.tenant);
    const r = resolveScope(this.state.state.settings[args.tenant], args);
    if (r.warning) this.log.warn({ tenant: args.tenant, project: args.project, user: args.user, reason: r.warning }, 'home-scope setting unusable: project scope');
    const ref = { tenant: args.tenant, key: r.key };
    this.core.checkNotForwarded(ref);
    let created = false;
    if (!(await this.ctx.store.homeExists(ref))) {
      if (args.create === false) await this.notFoundNear(ref);
      try {
        await this.createHome(ref, {});
        created = true;
      } catch (err) {
        // Two resolves racing for one new home: the second finds it made.
        if (!(err instanceof HomesError && err.code === 'EXISTS')) throw err;
      }
    }
    const hs = await this.ctx.home(ref);
    return {
      tenant: args.tenant,
      scope: r.scope,
      key: r.key,
      home: this.core.mountPath(ref),
      owner: { ...hs.backing.owner },
      created,
      source: r.source,
      userName: ownerUserName(ref.tenant, ref.key),
      exec: this.config.exec,
    };
  }

  private async notFoundNear(ref: HomeRef): Promise<never> {
    const all = await this.ctx.store.listAllHomes().catch(() => [] as HomeRef[]);
    const nearest = nearestNames(homeId(ref), all.map(homeId));
    const hint = nearest.length > 0 ? `; did you mean ${nearest.join(' or ')}?` : '';
    throw new HomesError('NOT_FOUND', `home ${homeId(ref)} does not exist (not created: create it with homesctl create, or resolve with create)${hint}`, { home: homeId(ref), nearest });
  }

  /**
   * Rebuild a home's ledger from the disk. Changes to the tree wait (the home's
   * `ready` gate), and the ones already inside it are waited for before the
   * walk starts; writes through handles already open keep going. An open file
   * is counted through its record, read when the walk ends (not when it passes
   * the file), so growth during the walk is neither lost nor counted twice.
   */
  async rescan(args: { home: string }): Promise<RescanResult> {
    const ref = parseHomeArg(args.home);
    if (!(await this.ctx.store.homeExists(ref))) this.core.notFound(ref);
    const hs = await this.ctx.readyHome(ref);
    const gate = this.ctx.closeGate(hs);
    try {
      await this.ctx.drained(hs);
      // Only files open when the walk starts can change size meanwhile (new
      // writable opens wait at the gate): they are charged through their
      // records, read when the walk ends. A record that closes during the walk
      // keeps the final size it had at close, which is what the disk holds.
      const atStart = new Map(hs.inodes);
      const r = await this.ctx.store.useHome(hs.backing, (fd) => measureTree(fd, { exclude: atStart.keys() }));
      const open = new Set<OpenInode>(r.excluded.map((k) => atStart.get(k)!));
      // From here to the swap, nothing awaits: the ledger and the records agree.
      const before = { bytes: hs.ledger.bytes, inodes: hs.ledger.inodes };
      const unlinkedOpen = [...hs.inodes.values()].filter((i) => i.unlinked);
      const bytes = r.bytes + [...open].reduce((a, i) => a + i.size, 0) + unlinkedOpen.reduce((a, i) => a + i.size, 0);
      // An unlinked open file has no name left: its bytes stay charged until its last close, its inode went with its name.
      const inodes = r.inodes;
      this.ctx.replaceLedger(hs, { bytes, inodes });
      const after = { bytes, inodes };
      const drift = { bytes: after.bytes - before.bytes, inodes: after.inodes - before.inodes };
      // Where the profile presents the home's owner, the backing tree says so too (homes from older versions had root-owned files).
      const repaired =
        hs.profile.chown === 'allow'
          ? undefined
          : await this.ctx.store.useHome(hs.backing, (fd) => repairTree(fd, { owner: hs.backing.owner, ownerBitsOnly: hs.profile.chmod !== 'allow' }));
      const changed = drift.bytes || drift.inodes || (repaired && (repaired.owners || repaired.modes));
      // A rescan is asked when the backing tree may have changed behind the daemon (drift, repairs,
      // an admin's hand): the kernel asks every attribute of the home again, whatever was found.
      this.ctx.homePresentationChanged(ref);
      (changed ? this.log.warn.bind(this.log) : this.log.info.bind(this.log))({ home: homeId(ref), before, after, drift, repaired }, 'home rescanned');
      return { home: homeId(ref), before, after, drift, ...(repaired ? { repaired } : {}) };
    } finally {
      gate();
    }
  }

  private async inUse(ref: HomeRef): Promise<{ openFiles: number; cwdProcesses: number }> {
    const p = this.ctx.loadedHome(ref);
    const hs = p ? await p.catch(() => null) : null;
    const openFiles = hs ? this.ctx.openFilesOf(hs) : 0;
    const cwd = await cwdProcessesUnder(this.core.mountPath(ref));
    return { openFiles, cwdProcesses: cwd.length };
  }

  private async checkBusy(ref: HomeRef, force: boolean | undefined, op: string): Promise<{ openFiles: number; cwdProcesses: number }> {
    const use = await this.inUse(ref);
    if ((use.openFiles > 0 || use.cwdProcesses > 0) && !force) {
      // Who holds it, for the admin deciding between waiting, stopping them and --force.
      const processes = (await holdersOf(this.core.mountPath(ref))).slice(0, 50);
      const who = processes.length > 0 ? `; held by ${processes.slice(0, 5).map((p) => `pid ${p.pid} (uid ${p.uid}, ${p.comm})`).join(', ')}${processes.length > 5 ? ', …' : ''}` : '';
      const details: BusyDetails = { ...use, processes };
      throw new HomesError(
        'BUSY',
        `home ${homeId(ref)} is in use (${use.openFiles} open files, ${use.cwdProcesses} processes working inside${who}): ${op} refused; --force to ${op} anyway`,
        { ...details },
      );
    }
    return use;
  }

  /**
   * Rename a home through the mount: a child process calls rename(2) on the
   * mount, the daemon admits exactly that call (by pid and paths) and moves its
   * own state under the new name before the kernel hears success. The kernel
   * and the session then move their dentries and node names, so open files and
   * working directories follow the home, and the old path is gone at once.
   */
  private async renameThroughMount(tenant: string, fromKey: string, toKey: string, after: () => void): Promise<void> {
    const mnt = this.config.mount;
    const from = `/${tenant}/${fromKey}`;
    const to = `/${tenant}/${toKey}`;
    if (this.ctx.admission) throw new HomesError('BUSY', 'another home rename is in progress');
    await new Promise<void>((resolve, reject) => {
      const child = execFile(
        process.execPath,
        [RENAME_HELPER, mnt + from, mnt + to],
        { timeout: 30_000 },
        (err, _out, stderr) => {
          if (this.ctx.admission?.pid === child.pid) this.ctx.admission = null;
          if (!err) return resolve();
          const code = /\b(E[A-Z]+)\b/.exec(String(stderr))?.[1];
          if (code === 'EEXIST') return reject(new HomesError('RENAME_BLOCKED', `${to.slice(1)} exists`));
          reject(new HomesError('IO', `rename through the mount failed: ${code ?? String(stderr).trim().split('\n')[0]}`));
        },
      );
      if (child.pid === undefined) return reject(new HomesError('IO', 'could not start the rename helper'));
      // Set before the event loop can run the child's FUSE request.
      this.ctx.admission = { pid: child.pid, from, to, onRenamed: after };
    });
  }

  /**
   * Rename a project's or a user's home; the name's home-scope setting moves
   * with it (a setting belongs to the name, as the home does).
   */
  private async renameHome(kind: 'project' | 'user', args: { tenant: string; from: string; to: string; force?: boolean }): Promise<RenameResult> {
    const { tenant, force } = args;
    checkSegment('tenant', tenant);
    const from = { tenant, key: keyFor(kind, args.from) };
    const to = { tenant, key: keyFor(kind, args.to) };
    const level = kind === 'project' ? 'projects' : 'users';
    if (!(await this.ctx.store.homeExists(from))) this.core.notFound(from);
    if (await this.ctx.store.homeExists(to)) {
      throw new HomesError('RENAME_BLOCKED', `home ${homeId(to)} exists: homes are never merged`, { renameBlocker: homeId(to) });
    }
    // A reserved old name is free only for the home it forwards to (renaming back).
    const fwd = this.state.state.forwards?.[homeId(to)];
    if (fwd && Object.hasOwn(this.state.state.forwards!, homeId(to)) && fwd.to !== homeId(from)) this.core.checkNotForwarded(to);
    const use = await this.checkBusy(from, force, 'rename');
    await this.renameThroughMount(tenant, from.key, to.key, () => this.ctx.rekeyHome(from, to));
    await this.state.update((s) => {
      const e = s.homes[homeId(from)];
      if (e) {
        s.homes[homeId(to)] = e;
        delete s.homes[homeId(from)];
      }
      const st = s.settings[tenant];
      const value = st?.[level][args.from];
      if (st && value !== undefined) {
        st[level][args.to] = value;
        delete st[level][args.from];
      }
      // The old name stays reserved with a forward; older forwards follow the home.
      const fw = (s.forwards ??= {});
      delete fw[homeId(to)];
      for (const f of Object.values(fw)) if (f.to === homeId(from)) f.to = homeId(to);
      fw[homeId(from)] = { to: homeId(to), at: new Date().toISOString() };
    });
    await this.core.unpublishOwner(from);
    const moved = this.ctx.loadedHome(to);
    const owner = (moved ? await moved.catch(() => null) : null)?.backing.owner ?? this.core.ownerOf(to);
    if (owner) await this.core.publishOwner(to, owner);
    this.log.info({ from: homeId(from), to: homeId(to), fromPath: this.core.mountPath(from), toPath: this.core.mountPath(to), reserved: homeId(from), ...use }, 'home renamed');
    return { from: homeId(from), to: homeId(to), ...use };
  }

  renameProject(args: { tenant: string; from: string; to: string; force?: boolean }): Promise<RenameResult> {
    return this.renameHome('project', args);
  }

  renameUser(args: { tenant: string; from: string; to: string; force?: boolean }): Promise<RenameResult> {
    return this.renameHome('user', args);
  }

  /**
   * Move the home to a trash name through the mount (the path is gone at once),
   * retire its owner id, then remove the backing tree. Processes still running
   * as that uid are reported (reply and log): the uid keeps them, but no home
   * will ever be given that uid again.
   */
  private async removeHome(
    ref: HomeRef,
    force: boolean | undefined,
  ): Promise<{ bytes: number; ownerUid: number; ownerProcesses: ProcessRef[]; releasedNames?: string[]; deleteNote?: string }> {
    await this.checkBusy(ref, force, 'delete');
    const loaded = this.ctx.loadedHome(ref);
    const hs = loaded ? await loaded.catch(() => null) : null;
    const bytes = hs?.ledger.bytes ?? 0;
    const owner = this.core.ownerOf(ref) ?? hs?.backing.owner ?? (await this.ctx.home(ref)).backing.owner;
    const trash = `${TRASH_PREFIX}${randomBytes(6).toString('hex')}`;
    await this.renameThroughMount(ref.tenant, ref.key, trash, () => this.ctx.forgetHome(ref));
    // Old names that forwarded here are released with the home: a forward never
    // points at a home that is gone (renames keep every forward pointing at the
    // home itself, so there are no chains to follow).
    const releasedNames = Object.entries(this.state.state.forwards ?? {})
      .filter(([, f]) => f.to === homeId(ref))
      .map(([from]) => from)
      .sort();
    await this.state.update((s) => {
      delete s.homes[homeId(ref)];
      for (const id of new Set([owner.uid, owner.gid])) if (id !== 0 && !s.owners.retired.includes(id)) s.owners.retired.push(id);
      for (const from of releasedNames) delete s.forwards![from];
    });
    // The home is gone for everyone from here on: a tree that cannot be removed now
    // (a mount inside it, an immutable file) is unreachable trash, purged at a later start.
    let leftover: string | undefined;
    try {
      await this.ctx.store.removeTenantEntry(ref.tenant, trash);
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      leftover = `its backing tree could not be removed entirely (${why}): it is unreachable and is removed at a later start`;
      this.log.warn({ home: homeId(ref), trash, err: why }, 'could not remove a deleted home\'s backing tree; it stays (unreachable through the mount) until a later start');
    } finally {
      // The kernel still names the tree under its trash name (the rename through the mount moved it there).
      this.ctx.daemonNameChanged(`${ref.tenant}/${trash}`);
    }
    await this.core.unpublishOwner(ref);
    const ownerProcesses = owner.uid === 0 ? [] : await processesOfUid(owner.uid);
    if (ownerProcesses.length > 0) {
      this.log.warn(
        { home: homeId(ref), ownerUid: owner.uid, processes: ownerProcesses.slice(0, 50), count: ownerProcesses.length },
        'home deleted while processes still run as its owner uid (the uid is retired, never reused)',
      );
    }
    this.log.info({ home: homeId(ref), path: this.core.mountPath(ref), bytes, ownerUid: owner.uid, ...(releasedNames.length > 0 ? { releasedNames } : {}) }, 'home deleted');
    return {
      bytes,
      ownerUid: owner.uid,
      ownerProcesses: ownerProcesses.slice(0, 50),
      ...(releasedNames.length > 0 ? { releasedNames } : {}),
      ...(leftover ? { deleteNote: leftover } : {}),
    };
  }

  async deleteProject(args: { tenant: string; project: string; force?: boolean }): Promise<DeleteResult> {
    checkSegment('tenant', args.tenant);
    const key = keyFor('project', args.project);
    const r = resolveScope(this.state.state.settings[args.tenant], { tenant: args.tenant, project: args.project });
    const ref = { tenant: args.tenant, key };
    const shared = r.scope !== 'project' ? `project ${args.project} uses the shared home ${homeId({ tenant: args.tenant, key: r.key })} (${r.scope} scope): it stays` : undefined;
    if (!(await this.ctx.store.homeExists(ref))) {
      this.core.checkNotForwarded(ref);
      if (shared) return { deleted: null, deleteNote: shared };
      this.core.notFound(ref);
    }
    const gone = await this.removeHome(ref, args.force);
    await this.state.update((s) => {
      delete s.settings[args.tenant]?.projects[args.project];
    });
    const note = [shared, gone.deleteNote].filter(Boolean).join('; ');
    return { deleted: homeId(ref), ...gone, ...(note ? { deleteNote: note } : {}) };
  }

  async deleteUser(args: { tenant: string; login: string; force?: boolean }): Promise<DeleteResult> {
    checkSegment('tenant', args.tenant);
    const ref = { tenant: args.tenant, key: keyFor('user', args.login) };
    if (!(await this.ctx.store.homeExists(ref))) this.core.notFound(ref);
    const gone = await this.removeHome(ref, args.force);
    await this.state.update((s) => {
      delete s.settings[args.tenant]?.users[args.login];
    });
    return { deleted: homeId(ref), ...gone };
  }

  /** Delete any home by "tenant/key": an orphan, a leftover. Settings stay (they belong to names, not homes). */
  async deleteHome(args: { home: string; force?: boolean }): Promise<DeleteResult> {
    const ref = parseHomeArg(args.home);
    if (!(await this.ctx.store.homeExists(ref))) this.core.notFound(ref);
    const gone = await this.removeHome(ref, args.force);
    return { deleted: homeId(ref), ...gone };
  }

  /**
   * Remove an empty tenant: its backing directory (trash of earlier deletes
   * first) and what the state file keeps for it (home-scope settings, the
   * tenant budget override, reserved names). NOT_EMPTY while it has a home (the
   * rmdir itself refuses one made meanwhile), BUSY while a process works in its
   * directory. The config's `tenants.<t>` entry is the admin's and stays.
   */
  async deleteTenant(args: { tenant: string }): Promise<DeleteTenantResult> {
    const { tenant } = args;
    checkSegment('tenant', tenant);
    const keys = await this.ctx.store.listHomes(tenant).catch((err: unknown) => {
      if (err instanceof HomesError && err.code === 'NOT_FOUND') return null;
      throw err;
    });
    if (keys !== null && keys.length > 0) {
      const homes = keys.map((key) => homeId({ tenant, key }));
      throw new HomesError('NOT_EMPTY', `tenant ${tenant} still has ${homes.length} home${homes.length === 1 ? '' : 's'} (${homes.slice(0, 10).join(', ')}${homes.length > 10 ? ', …' : ''}): delete them first (delete-home)`, {
        homes,
      });
    }
    const st = this.state.state;
    const prefix = `${tenant}/`;
    const forwards = Object.keys(st.forwards ?? {}).filter((id) => id.startsWith(prefix)).sort();
    const settings = Object.hasOwn(st.settings, tenant);
    const budget = st.tenants !== undefined && Object.hasOwn(st.tenants, tenant);
    if (keys === null && !settings && !budget && forwards.length === 0) throw new HomesError('NOT_FOUND', `tenant ${tenant} does not exist`);
    if (keys !== null) {
      const dir = join(this.config.mount, tenant);
      const processes = (await holdersOf(dir)).slice(0, 50);
      if (processes.length > 0) {
        const details: BusyDetails = { openFiles: processes.reduce((a, p) => a + p.openFiles, 0), cwdProcesses: processes.filter((p) => p.cwd).length, processes };
        throw new HomesError('BUSY', `tenant ${tenant} is in use (${processes.map((p) => `pid ${p.pid} (uid ${p.uid}, ${p.comm})`).join(', ')} in ${dir}): delete-tenant refused`, { ...details });
      }
      try {
        await this.ctx.store.removeTenant(tenant);
      } finally {
        this.ctx.daemonNameChanged(tenant);
      }
    }
    await this.state.update((s) => {
      delete s.settings[tenant];
      if (s.tenants) delete s.tenants[tenant];
      for (const id of forwards) delete s.forwards![id];
    });
    this.ctx.forgetPool(tenant);
    const result: DeleteTenantResult = { tenant, removedDir: keys !== null, dropped: { settings, budget, forwards } };
    this.log.info({ path: join(this.config.mount, tenant), ...result }, 'tenant deleted');
    return result;
  }

  /**
   * Forwards whose home is gone (deleted behind the daemon, or by a version
   * that kept them): dropped at start, so none points at a home that no
   * longer exists.
   */
  async pruneForwards(): Promise<string[]> {
    const gone: string[] = [];
    for (const [from, f] of Object.entries(this.state.state.forwards ?? {})) {
      const to = parseHomeArg(f.to);
      if (!(await this.ctx.store.homeExists(to))) gone.push(from);
    }
    if (gone.length === 0) return gone;
    await this.state.update((s) => {
      for (const from of gone) delete s.forwards![from];
    });
    this.log.warn({ released: gone }, 'reserved names whose home is gone were released');
    return gone;
  }

  forwards(): Forward[] {
    return Object.entries(this.state.state.forwards ?? {})
      .map(([from, f]) => ({ from, to: f.to, at: f.at }))
      .sort((a, b) => a.from.localeCompare(b.from));
  }

  async releaseName(args: { home: string }): Promise<Forward> {
    const ref = parseHomeArg(args.home);
    const id = homeId(ref);
    const f = this.state.state.forwards;
    if (!f || !Object.hasOwn(f, id)) throw new HomesError('NOT_FOUND', `${id} is not a reserved name (see homesctl forwards)`);
    const released = { from: id, to: f[id]!.to, at: f[id]!.at };
    await this.state.update((s) => {
      delete s.forwards![id];
    });
    this.log.info({ home: id, before: { forward: released.to }, after: { forward: null } }, 'reserved name released');
    return released;
  }
}
