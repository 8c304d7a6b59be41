import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Owner } from '../backing/store.js';
import { repairTree } from '../backing/repair.js';
import { TRASH_PREFIX } from '../backing/store.js';
import type { LoadedConfig } from '../config/load.js';
import type {
  BusyDetails,
  DeleteResult,
  DeleteTenantResult,
  Forward,
  HomeFlag,
  HomeInfo,
  LimitSource,
  TenantUsage,
  OwnerArg,
  RenameResult,
  RescanResult,
  ResolveResult,
  SettingsTarget,
  SettingsView,
  HomeScopeValue,
} from '../control/api.js';
import { HomesError } from '../errors.js';
import type { FsContext } from '../fs/context.js';
import { measureTree } from '../fs/scan.js';
import type { OpenInode } from '../fs/state.js';
import type { Logger } from '../log.js';
import { checkSegment, classifyKey, keyFor } from '../paths/names.js';
import { homeId, type HomeRef } from '../paths/parse.js';
import type { Limits } from '../policy/ledger.js';
import { resolveProfileName, softLimitIssues, type Profile, type ProfileSource } from '../policy/profiles.js';
import { checkOwner, existingOwnerProblems, ownerRefusal, type ExistingOwner, type OwnerAssignment, type OwnerHolder, type OwnerVerdict } from '../scope/owner-check.js';
import { allocateOwner } from '../scope/owners.js';
import { isOrphan, resolveScope } from '../scope/resolve.js';
import type { StateStore } from '../state/store.js';
import { ownerUserName, type OwnerRecord } from '../users/names.js';
import type { UserDb } from '../users/userdb.js';
import { getentLookup, withoutOwn, type HostIdLookup, type HostIds } from '../users/hostids.js';
import { cwdCountsByHome, cwdProcessesUnder, holdersOf, processesOfUid, type ProcessRef } from './busy.js';
import type { TenantSettings } from '../state/store.js';

const RENAME_HELPER = fileURLToPath(new URL('../cli/rename-helper.js', import.meta.url));

export function parseHomeArg(arg: string): HomeRef {
  const parts = arg.split('/');
  if (parts.length !== 2) throw new HomesError('INVALID_NAME', `a home is named "<tenant>/<key>", not "${arg}"`);
  const ref = { tenant: parts[0]!, key: parts[1]! };
  checkSegment('tenant', ref.tenant);
  classifyKey(ref.key);
  return ref;
}

/**
 * The life of homes: creation, resolution through the scope cascade, owners,
 * live overrides, rescans, rename and delete. The persistent part lives in the
 * state file; the live part in the fs context. Renames and deletes go through
 * the mount (a helper process, admitted by pid), so the session's node table,
 * open files and working directories follow the home.
 */
export class HomeManager {
  constructor(
    private readonly ctx: FsContext,
    private readonly state: StateStore,
    private loaded: LoadedConfig,
    private readonly log: Logger,
    /** where owner names are published for NSS (null: not published) */
    private readonly users: UserDb | null = null,
    /** what the host's user database knows (injectable: unit tests must not depend on the host's accounts) */
    private readonly hostIds: HostIdLookup = getentLookup(),
  ) {}

  /** Owner decisions one at a time: a host lookup awaits between choosing an id and recording it. */
  private ownerChain: Promise<unknown> = Promise.resolve();

  /** The NSS user record of a home's owner. */
  ownerRecord(ref: HomeRef, owner: Owner): OwnerRecord {
    return { name: ownerUserName(ref.tenant, ref.key), uid: owner.uid, gid: owner.gid, home: homeId(ref), dir: this.mountPath(ref) };
  }

  /** Publish (or re-publish) a home's owner name; a failure is logged, never fatal to the caller. */
  private async publishOwner(ref: HomeRef, owner: Owner): Promise<void> {
    if (!this.users) return;
    await this.users.publish(this.ownerRecord(ref, owner)).catch((err: Error) => this.log.warn({ home: homeId(ref), err: err.message }, 'owner name not published'));
  }

  private async unpublishOwner(ref: HomeRef): Promise<void> {
    if (!this.users) return;
    await this.users.remove(homeId(ref)).catch((err: Error) => this.log.warn({ home: homeId(ref), err: err.message }, 'owner name not removed'));
  }

  /** Profile names that live overrides in the state file use but `loaded` does not define. */
  missingOverrideProfiles(loaded: LoadedConfig): string[] {
    return Object.entries(this.state.state.homes)
      .filter(([, e]) => e.profile !== undefined && !Object.hasOwn(loaded.profiles, e.profile))
      .map(([id, e]) => `${id}: ${e.profile}`);
  }

  /**
   * A new configuration (SIGHUP): profiles, tenant defaults and home entries
   * take effect on every loaded home at once; overrides keep outranking them.
   */
  async reload(next: LoadedConfig): Promise<void> {
    this.loaded = next;
    for (const p of this.ctx.knownHomes()) {
      const hs = await p.catch(() => null);
      if (!hs) continue;
      const ref = hs.backing.ref;
      const owner = this.ownerOf(ref);
      if (owner) hs.backing.owner = { ...owner };
      await this.applyPolicy(ref);
      await this.publishOwner(ref, hs.backing.owner);
    }
    for (const pool of this.ctx.knownPools()) this.ctx.setTenantLimit(pool.tenant, this.tenantBudgetFor(pool.tenant).bytes);
  }

  /** Tenant budget precedence: live override (state file) > the config's `tenants.<t>.maxBytes` > off. */
  tenantBudgetFor(tenant: string): { bytes: number; source: 'override' | 'config' | 'off' } {
    const override = this.state.state.tenants?.[tenant]?.maxBytes;
    if (override !== undefined) return { bytes: override, source: 'override' };
    const configured = this.config.tenants[tenant]?.maxBytes;
    if (configured !== undefined) return { bytes: configured, source: 'config' };
    return { bytes: 0, source: 'off' };
  }

  /** The tenant's total across its loaded homes, its budget and where that comes from. */
  async tenantUsage(tenant: string): Promise<TenantUsage> {
    checkSegment('tenant', tenant);
    if (!(await this.ctx.store.listAllHomes()).some((r) => r.tenant === tenant) && this.ctx.knownPools().every((p) => p.tenant !== tenant)) {
      throw new HomesError('NOT_FOUND', `tenant ${tenant} has no homes`);
    }
    const pool = this.ctx.pool(tenant);
    const homes: TenantUsage['homes'] = [];
    for (const p of this.ctx.knownHomes()) {
      const hs = await p.catch(() => null);
      if (hs && hs.backing.ref.tenant === tenant && hs.ledger.pool === pool) homes.push({ key: hs.backing.ref.key, bytes: hs.ledger.bytes });
    }
    homes.sort((a, b) => a.key.localeCompare(b.key));
    const budget = this.tenantBudgetFor(tenant);
    return { tenant, bytes: pool.bytes, budget: pool.limit, budgetSource: budget.source, homes };
  }

  /** `bytes`: a budget (0 = off), or null to drop the override (back to the config's value). */
  async setTenantBudget(args: { tenant: string; bytes: number | null }): Promise<TenantUsage> {
    checkSegment('tenant', args.tenant);
    if (args.bytes !== null && (!Number.isSafeInteger(args.bytes) || args.bytes < 0)) {
      throw new HomesError('INVALID_ARGUMENT', 'a tenant budget is a non-negative number of bytes');
    }
    const before = this.tenantBudgetFor(args.tenant);
    await this.state.update((s) => {
      if (args.bytes === null) {
        if (s.tenants) delete s.tenants[args.tenant];
        return;
      }
      s.tenants ??= Object.create(null) as NonNullable<typeof s.tenants>;
      s.tenants[args.tenant] = { maxBytes: args.bytes };
    });
    const after = this.tenantBudgetFor(args.tenant);
    this.ctx.setTenantLimit(args.tenant, after.bytes);
    this.log.info({ tenant: args.tenant, before, after }, 'tenant budget set');
    return this.tenantUsage(args.tenant);
  }

  private get config() {
    return this.loaded.config;
  }

  /** Owner precedence: the state file > the config's home entry > (caller falls back to) the backing directory's owner. */
  ownerOf(ref: HomeRef): Owner | undefined {
    return this.state.state.homes[homeId(ref)]?.owner ?? this.config.homes[homeId(ref)]?.owner;
  }

  /**
   * Profile precedence: live override > config entry > tenant default > configured default.
   * Each limit: a live override (set-budget, set-limits) > the profile.
   */
  profileFor(ref: HomeRef): {
    name: string;
    profile: Profile;
    source: ProfileSource;
    limits: Limits;
    limitSources: { budget: LimitSource; inodeCap: LimitSource; fileCap: LimitSource };
    profileLimits: { budget: number; inodeCap: number; fileCap: number };
    softSources: { bytes: LimitSource; inodes: LimitSource };
  } {
    const id = homeId(ref);
    const entry = this.state.state.homes[id];
    const choice = resolveProfileName({
      override: entry?.profile,
      homeEntry: this.config.homes[id]?.profile,
      tenantDefault: this.config.tenants[ref.tenant]?.defaultProfile,
      configDefault: this.config.defaultProfile,
    });
    let profile = this.loaded.profiles[choice.name];
    if (!profile) {
      // An override naming a profile removed from the config: fall back, loudly.
      this.log.warn({ home: id, profile: choice.name }, 'profile override names an unknown profile: using the default');
      profile = this.loaded.profiles[this.config.defaultProfile]!;
    }
    const limits = {
      maxHomeBytes: entry?.budget ?? profile.maxHomeBytes,
      maxInodes: entry?.maxInodes ?? profile.maxInodes,
      maxFileBytes: entry?.maxFileBytes ?? profile.maxFileBytes,
      softHomeBytes: entry?.softBytes ?? profile.softHomeBytes,
      softInodes: entry?.softInodes ?? profile.softInodes,
    };
    const src = (v: number | undefined): LimitSource => (v === undefined ? 'profile' : 'override');
    return {
      name: choice.name,
      profile,
      source: choice.source,
      limits,
      limitSources: { budget: src(entry?.budget), inodeCap: src(entry?.maxInodes), fileCap: src(entry?.maxFileBytes) },
      profileLimits: { budget: profile.maxHomeBytes, inodeCap: profile.maxInodes, fileCap: profile.maxFileBytes },
      softSources: { bytes: src(entry?.softBytes), inodes: src(entry?.softInodes) },
    };
  }

  /** Re-apply profile and budget to a loaded home after an override changed. */
  private async applyPolicy(ref: HomeRef): Promise<void> {
    const p = this.ctx.loadedHome(ref);
    if (!p) return;
    const hs = await p;
    const choice = this.profileFor(ref);
    hs.profile = choice.profile;
    hs.profileName = choice.name;
    hs.ledger.setLimits(choice.limits);
    this.ctx.policyChanged(hs);
  }

  private mountPath(ref: HomeRef): string {
    return join(this.config.mount, ref.tenant, ref.key);
  }

  /** `cwd`: processes working inside, when the caller already counted them (list); else counted here. */
  async info(ref: HomeRef, cwd?: number): Promise<HomeInfo> {
    const hs = await this.ctx.home(ref);
    const choice = this.profileFor(ref);
    const snap = hs.ledger.snapshot();
    const soft = hs.ledger.soft();
    const scope = classifyKey(ref.key).scope;
    const cwdProcesses = cwd ?? (await cwdProcessesUnder(this.mountPath(ref))).length;
    const orphan = isOrphan(this.state.state.settings[ref.tenant], ref.tenant, ref.key);
    const { maxHomeBytes: budget, maxInodes: inodeCap } = snap.limits;
    const flags: HomeFlag[] = [];
    if ((budget > 0 && snap.bytes > budget) || (inodeCap > 0 && snap.inodes > inodeCap)) flags.push('OVER');
    else if (soft.bytes.over || soft.inodes.over) flags.push('SOFT');
    if (orphan) flags.push('ORPHAN');
    if (hs.scan === 'pending' || hs.scan === 'scanning') flags.push('SCANNING');
    if (hs.scan === 'failed') flags.push('SCAN_FAILED');
    if (this.ctx.openFilesOf(hs) > 0 || cwdProcesses > 0) flags.push('BUSY');
    return {
      tenant: ref.tenant,
      key: ref.key,
      scope,
      path: this.mountPath(ref),
      owner: { ...hs.backing.owner },
      profile: choice.name,
      profileSource: choice.source,
      bytes: snap.bytes,
      budget: snap.limits.maxHomeBytes,
      fileCap: snap.limits.maxFileBytes,
      inodes: snap.inodes,
      inodeCap: snap.limits.maxInodes,
      percent: budget > 0 ? Math.round((snap.bytes / budget) * 1000) / 10 : null,
      limitSources: choice.limitSources,
      profileLimits: choice.profileLimits,
      soft: {
        bytes: soft.bytes.soft,
        inodes: soft.inodes.soft,
        overBytes: soft.bytes.over,
        overInodes: soft.inodes.over,
        sources: choice.softSources,
        profile: { bytes: choice.profile.softHomeBytes, inodes: choice.profile.softInodes },
      },
      openHandles: this.ctx.openFilesOf(hs),
      maxOpenFiles: hs.profile.maxOpenFiles,
      cwdProcesses,
      tenantBytes: hs.ledger.pool?.bytes ?? 0,
      tenantBudget: hs.ledger.pool?.limit ?? 0,
      scan: hs.scan,
      orphan,
      flags,
    };
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
        out.push(await this.info(ref, cwd.get(homeId(ref)) ?? 0));
      } catch (err) {
        this.log.warn({ home: homeId(ref), err: (err as Error).message }, 'home not listed');
      }
    }
    return out;
  }

  async usage(arg: string): Promise<HomeInfo> {
    const ref = parseHomeArg(arg);
    if (!(await this.ctx.store.homeExists(ref))) this.notFound(ref);
    return this.info(ref);
  }

  /** uids and gids already given out (gid = uid for allocated owners, but an explicit owner may differ), and retired ones. */
  private usedIds(): number[] {
    const ids = Object.values(this.state.state.homes).flatMap((h) => [h.owner.uid, h.owner.gid]);
    for (const h of Object.values(this.config.homes)) if (h.owner) ids.push(h.owner.uid, h.owner.gid);
    ids.push(...this.state.state.owners.retired);
    return ids;
  }

  /**
   * Where allocation continues: the recorded mark, or (a state file written
   * before there was one) the highest id of the range already in use.
   */
  private highWater(): number | undefined {
    const { from, to } = this.config.owners;
    let mark = this.state.state.owners.highWater;
    for (const id of this.usedIds()) if (id >= from && id <= to && (mark === undefined || id > mark)) mark = id;
    return mark;
  }

  private checkProfile(name: string | undefined): void {
    if (name !== undefined && !Object.hasOwn(this.loaded.profiles, name)) {
      throw new HomesError('INVALID_ARGUMENT', `unknown profile "${name}"`, { profiles: Object.keys(this.loaded.profiles) });
    }
  }

  /**
   * Every home's owner as far as `cfgHomes` and the state file say (state
   * records win, as in ownerOf), and, with `live`, the homes loaded now (homes
   * found in the backing tree without a record keep their directory's owner).
   */
  private async ownerHolders(cfgHomes: LoadedConfig['config']['homes'], live: boolean): Promise<OwnerHolder[]> {
    const out = new Map<string, OwnerHolder>();
    if (live) {
      for (const p of this.ctx.knownHomes()) {
        const hs = await p.catch(() => null);
        if (hs) out.set(hs.backing.id, { home: hs.backing.id, owner: { ...hs.backing.owner } });
      }
    }
    for (const [id, e] of Object.entries(cfgHomes)) if (e.owner) out.set(id, { home: id, owner: { ...e.owner } });
    for (const [id, r] of Object.entries(this.state.state.homes)) out.set(id, { home: id, owner: { ...r.owner } });
    return [...out.values()];
  }

  /** The host's accounts and groups among these ids, the records homesfs publishes for its own homes left out. */
  private async hostAccounts(owners: readonly Owner[], homes: ReadonlyArray<{ home: string; owner: Owner }>): Promise<HostIds> {
    let found: HostIds;
    try {
      found = await this.hostIds(
        owners.map((o) => o.uid),
        owners.map((o) => o.gid),
      );
    } catch (err) {
      throw new HomesError('IO', `the host's user database could not be asked whether the owner is taken: ${(err as Error).message}`);
    }
    const own = homes.map((h) => {
      const slash = h.home.indexOf('/');
      return { name: ownerUserName(h.home.slice(0, slash), h.home.slice(slash + 1)), uid: h.owner.uid, gid: h.owner.gid };
    });
    return withoutOwn(found, own);
  }

  /** Refuse an owner (INVALID_ARGUMENT naming every conflict), or log what `force` took. */
  private async vetOwner(a: OwnerAssignment, holders: OwnerHolder[]): Promise<OwnerVerdict> {
    const host = await this.hostAccounts([a.owner], [...holders, a]);
    const v = checkOwner(a, { range: this.config.owners, holders, retired: new Set(this.state.state.owners.retired), hostUsers: host.users, hostGroups: host.groups });
    if (v.refused.length > 0) {
      this.log.warn({ home: a.home, owner: a.owner, conflicts: v.refused.map((c) => c.message) }, 'owner refused');
      throw ownerRefusal(a.home, a.owner, v.refused);
    }
    if (v.forced.length > 0) this.log.warn({ home: a.home, owner: a.owner, forced: v.forced.map((c) => c.message) }, 'owner taken with --force');
    return v;
  }

  /**
   * A new owner from the range: the allocator's next ids, asked of the host in
   * batches, the first one the host does not know (as uid and as gid).
   */
  private async allocateChecked(holders: OwnerHolder[]): Promise<Owner> {
    const taken = new Set(this.usedIds());
    for (const h of holders) taken.add(h.owner.uid).add(h.owner.gid);
    let mark = this.highWater();
    let skipped = 0;
    for (let round = 0; round < 64; round++) {
      const batch: Owner[] = [];
      for (let i = 0; i < 16; i++) {
        let o: Owner;
        try {
          o = allocateOwner(this.config.owners, taken, mark);
        } catch (err) {
          if (batch.length === 0) throw err;
          break;
        }
        batch.push(o);
        taken.add(o.uid);
        mark = o.uid;
      }
      const host = await this.hostAccounts(batch, holders);
      const free = batch.find((o) => !host.users.has(o.uid) && !host.groups.has(o.gid));
      skipped += free ? batch.indexOf(free) : batch.length;
      if (free) {
        if (skipped > 0) this.log.info({ owner: free, skipped }, 'owner ids the host already knows were skipped');
        return free;
      }
    }
    throw new HomesError('INVALID_ARGUMENT', `the next ${skipped} ids of the owner range ${this.config.owners.from}..${this.config.owners.to} are all host accounts or groups: move the range`, {
      reason: 'owner-range-exhausted',
      skipped,
    });
  }

  /**
   * Owners already in force (state records, configuration entries) that the
   * owner rule refuses: one line per problem, empty when all is well. Checked
   * at start-up (exit code 9) and on reload with the new configuration.
   * Records of homes found without one (`ownerFound`) are what the backing
   * tree says, not an assignment, and are not checked.
   */
  async ownerProblems(loaded: LoadedConfig = this.loaded): Promise<string[]> {
    const cfgHomes = loaded.config.homes;
    const records = this.state.state.homes;
    const holders = (await this.ownerHolders(cfgHomes, false)).filter((h) => !(Object.hasOwn(records, h.home) && records[h.home]!.ownerFound));
    const owners: ExistingOwner[] = holders.map((h) => {
      const r = Object.hasOwn(records, h.home) ? records[h.home]! : undefined;
      return { ...h, force: r?.ownerForced === true, from: r ? 'state file' : `configuration homes["${h.home}"].owner` };
    });
    if (owners.length === 0) return [];
    const host = await this.hostAccounts(
      owners.map((a) => a.owner),
      holders,
    );
    return existingOwnerProblems(owners, { range: loaded.config.owners, holders, retired: new Set(this.state.state.owners.retired), hostUsers: host.users, hostGroups: host.groups });
  }

  /** Create a home: owner allocated from the configured range unless given; recorded before the directory exists. */
  async create(args: { home: string; profile?: string; budget?: number; owner?: OwnerArg; force?: boolean }): Promise<HomeInfo> {
    const ref = parseHomeArg(args.home);
    this.checkProfile(args.profile);
    await this.createHome(ref, args);
    return this.info(ref);
  }

  private async createHome(ref: HomeRef, args: { profile?: string; budget?: number; owner?: OwnerArg; force?: boolean }): Promise<Owner> {
    const id = homeId(ref);
    this.checkNotForwarded(ref);
    if (args.force && !args.owner) throw new HomesError('INVALID_ARGUMENT', 'force goes with an explicit owner');
    if (await this.ctx.store.homeExists(ref)) throw new HomesError('EXISTS', `home ${id} exists`);
    const decided = this.ownerChain.then(() => this.decideOwner(ref, args));
    this.ownerChain = decided.catch(() => undefined);
    const { owner, forced } = await decided;
    let made = { tenantMade: false };
    try {
      made = await this.ctx.store.createHome(ref, owner);
    } finally {
      // Made behind the kernel's back: a name it may remember as missing, a directory it may know without it.
      if (made.tenantMade) this.ctx.daemonNameChanged(ref.tenant);
      this.ctx.daemonNameChanged(homeId(ref));
    }
    await this.publishOwner(ref, owner);
    this.log.info({ home: id, owner, profile: args.profile, budget: args.budget, ...(forced ? { forced } : {}) }, 'home created');
    return owner;
  }

  /** The new home's owner, checked (or allocated) and recorded: one decision at a time. */
  private async decideOwner(ref: HomeRef, args: { profile?: string; budget?: number; owner?: OwnerArg; force?: boolean }): Promise<{ owner: Owner; forced: boolean }> {
    const id = homeId(ref);
    // Another create of this home may have recorded it while this one waited its turn.
    if (await this.ctx.store.homeExists(ref)) throw new HomesError('EXISTS', `home ${id} exists`);
    const holders = await this.ownerHolders(this.config.homes, true);
    const pinned = this.ownerOf(ref);
    const given = args.owner ?? pinned;
    let forced = false;
    if (args.owner) {
      const v = await this.vetOwner({ home: id, owner: args.owner, kind: 'new', force: args.force === true }, holders);
      forced = v.forced.length > 0;
    } else if (pinned) {
      const rec = Object.hasOwn(this.state.state.homes, id) ? this.state.state.homes[id] : undefined;
      await this.vetOwner({ home: id, owner: pinned, kind: 'existing', force: rec?.ownerForced === true }, holders);
    }
    const owner = given ?? (await this.allocateChecked(holders));
    await this.state.update((s) => {
      if (!given) s.owners.highWater = Math.max(s.owners.highWater ?? 0, owner.uid);
      s.homes[id] = {
        owner: { uid: owner.uid, gid: owner.gid },
        ...(forced ? { ownerForced: true as const } : {}),
        ...(args.profile !== undefined ? { profile: args.profile } : {}),
        ...(args.budget !== undefined ? { budget: args.budget } : {}),
        createdAt: new Date().toISOString(),
      };
    });
    return { owner, forced };
  }

  /** Make sure the home has a state entry (owner pinned) before an override is recorded. */
  private async entryFor(ref: HomeRef): Promise<void> {
    if (this.state.state.homes[homeId(ref)]) return;
    const hs = await this.ctx.home(ref);
    // Without a config entry the owner is the backing directory's: recorded as found, not given.
    const found = this.ownerOf(ref) === undefined;
    await this.state.update((s) => {
      s.homes[homeId(ref)] ??= { owner: { ...hs.backing.owner }, ...(found ? { ownerFound: true as const } : {}), createdAt: new Date().toISOString() };
    });
  }

  /** The limits in force and where each comes from, for before/after log lines. */
  private limitsNow(ref: HomeRef) {
    const c = this.profileFor(ref);
    return {
      profile: c.name,
      budget: { bytes: c.limits.maxHomeBytes, source: c.limitSources.budget },
      inodes: { count: c.limits.maxInodes, source: c.limitSources.inodeCap },
      fileBytes: { bytes: c.limits.maxFileBytes, source: c.limitSources.fileCap },
      softBytes: { bytes: c.limits.softHomeBytes, source: c.softSources.bytes },
      softInodes: { count: c.limits.softInodes, source: c.softSources.inodes },
    };
  }

  /**
   * Set or drop per-home limit overrides. A value of 0 means off; null drops
   * the override (the profile decides again); undefined leaves it alone.
   */
  private async setOverrides(
    home: string,
    o: { budget?: number | null; maxInodes?: number | null; maxFileBytes?: number | null; softBytes?: number | null; softInodes?: number | null },
    what: string,
  ): Promise<HomeInfo> {
    const ref = parseHomeArg(home);
    for (const v of Object.values(o)) {
      if (v !== null && v !== undefined && (!Number.isSafeInteger(v) || v < 0)) throw new HomesError('INVALID_ARGUMENT', 'a limit is a non-negative whole number (0 = off), or null for the profile\'s');
    }
    if (!(await this.ctx.store.homeExists(ref))) this.notFound(ref);
    await this.entryFor(ref);
    const before = this.limitsNow(ref);
    if (o.softBytes !== undefined || o.softInodes !== undefined) this.checkSoft(ref, o);
    await this.state.update((s) => {
      const e = s.homes[homeId(ref)]!;
      for (const k of ['budget', 'maxInodes', 'maxFileBytes', 'softBytes', 'softInodes'] as const) {
        const v = o[k];
        if (v === null) delete e[k];
        else if (v !== undefined) e[k] = v;
      }
    });
    await this.applyPolicy(ref);
    const after = this.limitsNow(ref);
    this.log.info({ home: homeId(ref), path: this.mountPath(ref), before, after }, what);
    return this.info(ref);
  }

  setBudget(args: { home: string; bytes: number | null }): Promise<HomeInfo> {
    return this.setOverrides(args.home, { budget: args.bytes }, args.bytes === null ? 'budget override dropped' : 'budget set');
  }

  /**
   * A soft limit being set must be at most the hard limit in force after the
   * same request. Dropping one (back to the profile's) and lowering a hard
   * limit under one are never refused: the soft limit is then clamped to
   * the hard one (ledger.effectiveSoft).
   */
  private checkSoft(ref: HomeRef, o: { maxInodes?: number | null; softBytes?: number | null; softInodes?: number | null }): void {
    const entry = this.state.state.homes[homeId(ref)];
    const profile = this.profileFor(ref).profile;
    const maxInodes = o.maxInodes === null ? profile.maxInodes : (o.maxInodes ?? entry?.maxInodes ?? profile.maxInodes);
    const issues = softLimitIssues({
      maxHomeBytes: entry?.budget ?? profile.maxHomeBytes,
      softHomeBytes: o.softBytes ?? 0,
      maxInodes,
      softInodes: o.softInodes ?? 0,
    });
    if (issues.length > 0) {
      throw new HomesError('INVALID_ARGUMENT', `a soft limit must be at most its hard limit: ${issues.map((i) => i.message.replace('softHomeBytes', 'softBytes')).join('; ')}`);
    }
  }

  setLimits(args: { home: string; inodes?: number | null; fileBytes?: number | null; softBytes?: number | null; softInodes?: number | null }): Promise<HomeInfo> {
    if (args.inodes === undefined && args.fileBytes === undefined && args.softBytes === undefined && args.softInodes === undefined) {
      return Promise.reject(new HomesError('INVALID_ARGUMENT', 'give at least one of inodes, fileBytes, softBytes, softInodes'));
    }
    return this.setOverrides(args.home, { maxInodes: args.inodes, maxFileBytes: args.fileBytes, softBytes: args.softBytes, softInodes: args.softInodes }, 'limits set');
  }

  async setProfile(args: { home: string; profile: string | null }): Promise<HomeInfo> {
    const ref = parseHomeArg(args.home);
    this.checkProfile(args.profile ?? undefined);
    if (!(await this.ctx.store.homeExists(ref))) this.notFound(ref);
    await this.entryFor(ref);
    const before = this.limitsNow(ref);
    await this.state.update((s) => {
      const e = s.homes[homeId(ref)]!;
      if (args.profile === null) delete e.profile;
      else e.profile = args.profile;
    });
    await this.applyPolicy(ref);
    this.log.info({ home: homeId(ref), path: this.mountPath(ref), before, after: this.limitsNow(ref) }, args.profile === null ? 'profile override dropped' : 'profile override set');
    return this.info(ref);
  }

  /** What is stored for the target and, with a project, how resolve decides (the whole cascade). */
  private settingsView(t: SettingsTarget, st: Readonly<TenantSettings> | undefined = this.state.state.settings[t.tenant]): SettingsView {
    const own = (r: Readonly<Record<string, string>> | undefined, k: string): string | null => (r && Object.hasOwn(r, k) ? r[k]! : null);
    const view: SettingsView = { tenant: t.tenant, tenantDefault: st?.tenantDefault ?? null };
    if (t.project !== undefined) view.project = { name: t.project, value: own(st?.projects, t.project) };
    if (t.user !== undefined) view.user = { login: t.user, value: own(st?.users, t.user) };
    if (t.project !== undefined) {
      const r = resolveScope(st, { tenant: t.tenant, project: t.project, ...(t.user !== undefined ? { user: t.user } : {}) });
      view.resolved = { scope: r.scope, source: r.source, key: r.key };
      const levels: Array<[NonNullable<SettingsView['cascade']>[number]['level'], string | null]> = [];
      if (t.user !== undefined) levels.push(['user', view.user!.value]);
      levels.push(['project', view.project!.value], ['tenant', view.tenantDefault], ['default', 'project']);
      view.cascade = levels.map(([level, value]) => ({ level, value, decides: level === r.source }));
    }
    return view;
  }

  /** Project homes of a tenant that `next` would orphan and the current settings do not. */
  private async newlyOrphaned(tenant: string, next: TenantSettings): Promise<Array<{ home: string; bytes: number }>> {
    const cur = this.state.state.settings[tenant];
    const refs = (await this.ctx.store.listAllHomes()).filter((r) => r.tenant === tenant && !isOrphan(cur, tenant, r.key) && isOrphan(next, tenant, r.key));
    const out: Array<{ home: string; bytes: number }> = [];
    for (const ref of refs) {
      const hs = await this.ctx.home(ref).catch(() => null);
      out.push({ home: homeId(ref), bytes: hs ? hs.ledger.bytes : 0 });
    }
    return out;
  }

  private checkTarget(t: SettingsTarget): void {
    checkSegment('tenant', t.tenant);
    if (t.project !== undefined) keyFor('project', t.project);
    if (t.user !== undefined) checkSegment('login', t.user);
  }

  async settingsGet(t: SettingsTarget): Promise<SettingsView> {
    this.checkTarget(t);
    return this.settingsView(t);
  }

  async settingsSet(args: SettingsTarget & { homeScope: HomeScopeValue | null; dryRun?: boolean; yes?: boolean }): Promise<SettingsView> {
    this.checkTarget(args);
    if (args.project !== undefined && args.user !== undefined) {
      throw new HomesError('INVALID_ARGUMENT', 'a setting belongs to the tenant, one project or one user, not both');
    }
    if (args.homeScope !== null && !['project', 'tenant', 'user'].includes(args.homeScope)) {
      throw new HomesError('INVALID_ARGUMENT', 'home-scope is project, tenant or user');
    }
    const apply = (st: TenantSettings): void => {
      if (args.project !== undefined) {
        if (args.homeScope === null) delete st.projects[args.project];
        else st.projects[args.project] = args.homeScope;
      } else if (args.user !== undefined) {
        if (args.homeScope === null) delete st.users[args.user];
        else st.users[args.user] = args.homeScope;
      } else if (args.homeScope === null) delete st.tenantDefault;
      else st.tenantDefault = args.homeScope;
    };
    const cur = this.state.state.settings[args.tenant];
    const next: TenantSettings = structuredClone(cur ?? { projects: {}, users: {} }) as TenantSettings;
    apply(next);
    const orphaned = await this.newlyOrphaned(args.tenant, next);
    const target: SettingsTarget = { tenant: args.tenant, ...(args.project !== undefined ? { project: args.project } : {}), ...(args.user !== undefined ? { user: args.user } : {}) };
    if (args.dryRun) return { ...this.settingsView(target, next), orphaned, dryRun: true };
    if (orphaned.length > 0 && !args.yes) {
      const bytes = orphaned.reduce((a, o) => a + o.bytes, 0);
      throw new HomesError(
        'CONFIRM_REQUIRED',
        `this change leaves ${orphaned.length} project home${orphaned.length === 1 ? '' : 's'} unused (${bytes} bytes): ${orphaned.map((o) => o.home).join(', ')}; nothing changed (confirm with yes, preview with dryRun)`,
        { homes: orphaned, bytes },
      );
    }
    const level = args.project !== undefined ? `project ${args.project}` : args.user !== undefined ? `user ${args.user}` : 'tenant default';
    const valueAt = (st: Readonly<TenantSettings> | undefined): string | null => {
      if (!st) return null;
      if (args.project !== undefined) return Object.hasOwn(st.projects, args.project) ? st.projects[args.project]! : null;
      if (args.user !== undefined) return Object.hasOwn(st.users, args.user) ? st.users[args.user]! : null;
      return st.tenantDefault ?? null;
    };
    const before = valueAt(cur);
    await this.state.update((s) => {
      apply((s.settings[args.tenant] ??= { projects: {}, users: {} }));
    });
    this.log.info(
      { tenant: args.tenant, level, before, after: valueAt(this.state.state.settings[args.tenant]), ...(orphaned.length > 0 ? { orphaned } : {}) },
      'home-scope setting changed',
    );
    return { ...this.settingsView(target), ...(orphaned.length > 0 ? { orphaned } : {}) };
  }

  /** No home under this name: RENAMED (with the new name) for a reserved old name, else NOT_FOUND. */
  private notFound(ref: HomeRef): never {
    this.checkNotForwarded(ref);
    throw new HomesError('NOT_FOUND', `home ${homeId(ref)} does not exist`);
  }

  /** RENAMED when the name is a renamed home's reserved old name. */
  private checkNotForwarded(ref: HomeRef): void {
    const id = homeId(ref);
    const f = this.state.state.forwards;
    if (f && Object.hasOwn(f, id)) {
      const to = f[id]!.to;
      const toRef = parseHomeArg(to);
      throw new HomesError('RENAMED', `home ${id} was renamed to ${to} (${f[id]!.at}), now at ${this.mountPath(toRef)}; the old name stays reserved until an admin runs release-name ${id}`, {
        from: id,
        to,
        at: f[id]!.at,
        path: this.mountPath(toRef),
      });
    }
  }

  async resolve(args: { tenant: string; project: string; user?: string }): Promise<ResolveResult> {
    checkSegment('tenant', args.tenant);
    const r = resolveScope(this.state.state.settings[args.tenant], args);
    if (r.warning) this.log.warn({ tenant: args.tenant, project: args.project, user: args.user, reason: r.warning }, 'home-scope setting unusable: project scope');
    const ref = { tenant: args.tenant, key: r.key };
    this.checkNotForwarded(ref);
    let created = false;
    if (!(await this.ctx.store.homeExists(ref))) {
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
      home: this.mountPath(ref),
      owner: { ...hs.backing.owner },
      created,
      source: r.source,
      userName: ownerUserName(ref.tenant, ref.key),
      exec: this.config.exec,
    };
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
    if (!(await this.ctx.store.homeExists(ref))) this.notFound(ref);
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
    const cwd = await cwdProcessesUnder(this.mountPath(ref));
    return { openFiles, cwdProcesses: cwd.length };
  }

  private async checkBusy(ref: HomeRef, force: boolean | undefined, op: string): Promise<{ openFiles: number; cwdProcesses: number }> {
    const use = await this.inUse(ref);
    if ((use.openFiles > 0 || use.cwdProcesses > 0) && !force) {
      // Who holds it, for the admin deciding between waiting, stopping them and --force.
      const processes = (await holdersOf(this.mountPath(ref))).slice(0, 50);
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
    if (!(await this.ctx.store.homeExists(from))) this.notFound(from);
    if (await this.ctx.store.homeExists(to)) {
      throw new HomesError('RENAME_BLOCKED', `home ${homeId(to)} exists: homes are never merged`, { renameBlocker: homeId(to) });
    }
    // A reserved old name is free only for the home it forwards to (renaming back).
    const fwd = this.state.state.forwards?.[homeId(to)];
    if (fwd && Object.hasOwn(this.state.state.forwards!, homeId(to)) && fwd.to !== homeId(from)) this.checkNotForwarded(to);
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
    await this.unpublishOwner(from);
    const moved = this.ctx.loadedHome(to);
    const owner = (moved ? await moved.catch(() => null) : null)?.backing.owner ?? this.ownerOf(to);
    if (owner) await this.publishOwner(to, owner);
    this.log.info({ from: homeId(from), to: homeId(to), fromPath: this.mountPath(from), toPath: this.mountPath(to), reserved: homeId(from), ...use }, 'home renamed');
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
    const owner = this.ownerOf(ref) ?? hs?.backing.owner ?? (await this.ctx.home(ref)).backing.owner;
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
    await this.unpublishOwner(ref);
    const ownerProcesses = owner.uid === 0 ? [] : await processesOfUid(owner.uid);
    if (ownerProcesses.length > 0) {
      this.log.warn(
        { home: homeId(ref), ownerUid: owner.uid, processes: ownerProcesses.slice(0, 50), count: ownerProcesses.length },
        'home deleted while processes still run as its owner uid (the uid is retired, never reused)',
      );
    }
    this.log.info({ home: homeId(ref), path: this.mountPath(ref), bytes, ownerUid: owner.uid, ...(releasedNames.length > 0 ? { releasedNames } : {}) }, 'home deleted');
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
      this.checkNotForwarded(ref);
      if (shared) return { deleted: null, deleteNote: shared };
      this.notFound(ref);
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
    if (!(await this.ctx.store.homeExists(ref))) this.notFound(ref);
    const gone = await this.removeHome(ref, args.force);
    await this.state.update((s) => {
      delete s.settings[args.tenant]?.users[args.login];
    });
    return { deleted: homeId(ref), ...gone };
  }

  /** Delete any home by "tenant/key": an orphan, a leftover. Settings stay (they belong to names, not homes). */
  async deleteHome(args: { home: string; force?: boolean }): Promise<DeleteResult> {
    const ref = parseHomeArg(args.home);
    if (!(await this.ctx.store.homeExists(ref))) this.notFound(ref);
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
