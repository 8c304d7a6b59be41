import { join } from 'node:path';
import type { Owner } from '../backing/store.js';
import type { LoadedConfig } from '../config/load.js';
import type { HomeFlag, HomeInfo, LimitSource } from '../control/api.js';
import { HomesError } from '../errors.js';
import type { FsContext } from '../fs/context.js';
import type { Logger } from '../log.js';
import { checkSegment, classifyKey } from '../paths/names.js';
import { homeId, type HomeRef } from '../paths/parse.js';
import type { Limits } from '../policy/ledger.js';
import { resolveProfileName, type Profile, type ProfileSource } from '../policy/profiles.js';
import { isOrphan } from '../scope/resolve.js';
import type { StateStore } from '../statefile/store.js';
import { ownerUserName, type OwnerRecord } from '../users/names.js';
import type { UserDb } from '../users/userdb.js';
import { getentLookup, type HostIdLookup } from '../users/hostids.js';
import { cwdProcessesUnder } from './busy.js';

/** "tenant/key" as a home, both names validated (INVALID_NAME…). */
export function parseHomeArg(arg: string): HomeRef {
  const parts = arg.split('/');
  if (parts.length !== 2) throw new HomesError('INVALID_NAME', `a home is named "<tenant>/<key>", not "${arg}"`);
  const ref = { tenant: parts[0]!, key: parts[1]! };
  checkSegment('tenant', ref.tenant);
  classifyKey(ref.key);
  return ref;
}

/**
 * What every part of the home manager shares: the fs context, the state file,
 * the configuration in force, and the lookups all of them make (a home's
 * owner, profile and limits, its path under the mount, its report, the
 * refusals for a name that is missing or reserved). The concern modules
 * (lifecycle.ts, owners.ts, limits.ts, settings.ts) take it; it takes none of them.
 */
export class HomeCore {
  constructor(
    readonly ctx: FsContext,
    readonly state: StateStore,
    /** the configuration in force: replaced by HomeManager.reload only */
    public loaded: LoadedConfig,
    readonly log: Logger,
    /** where owner names are published for NSS (null: not published) */
    readonly users: UserDb | null = null,
    /** what the host's user database knows (injectable: unit tests must not depend on the host's accounts) */
    readonly hostIds: HostIdLookup = getentLookup(),
  ) {}

  /** the configuration's values in force */
  get config(): LoadedConfig['config'] {
    return this.loaded.config;
  }

  /** Owner precedence: the state file > the config's home entry > (caller falls back to) the backing directory's owner. */
  ownerOf(ref: HomeRef): Owner | undefined {
    return this.state.state.homes[homeId(ref)]?.owner ?? this.config.homes[homeId(ref)]?.owner;
  }

  /** The NSS user record of a home's owner. */
  ownerRecord(ref: HomeRef, owner: Owner): OwnerRecord {
    return { name: ownerUserName(ref.tenant, ref.key), uid: owner.uid, gid: owner.gid, home: homeId(ref), dir: this.mountPath(ref) };
  }

  /** Publish (or re-publish) a home's owner name; a failure is logged, never fatal to the caller. */
  async publishOwner(ref: HomeRef, owner: Owner): Promise<void> {
    if (!this.users) return;
    await this.users.publish(this.ownerRecord(ref, owner)).catch((err: Error) => this.log.warn({ home: homeId(ref), err: err.message }, 'owner name not published'));
  }

  async unpublishOwner(ref: HomeRef): Promise<void> {
    if (!this.users) return;
    await this.users.remove(homeId(ref)).catch((err: Error) => this.log.warn({ home: homeId(ref), err: err.message }, 'owner name not removed'));
  }

  mountPath(ref: HomeRef): string {
    return join(this.config.mount, ref.tenant, ref.key);
  }

  /** No home under this name: RENAMED (with the new name) for a reserved old name, else NOT_FOUND. */
  notFound(ref: HomeRef): never {
    this.checkNotForwarded(ref);
    throw new HomesError('NOT_FOUND', `home ${homeId(ref)} does not exist`);
  }

  /** RENAMED when the name is a renamed home's reserved old name. */
  checkNotForwarded(ref: HomeRef): void {
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

  checkProfile(name: string | undefined): void {
    if (name !== undefined && !Object.hasOwn(this.loaded.profiles, name)) {
      throw new HomesError('INVALID_ARGUMENT', `unknown profile "${name}"`, { profiles: Object.keys(this.loaded.profiles) });
    }
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

  /** Tenant budget precedence: live override (state file) > the config's `tenants.<t>.maxBytes` > off. */
  tenantBudgetFor(tenant: string): { bytes: number; source: 'override' | 'config' | 'off' } {
    const override = this.state.state.tenants?.[tenant]?.maxBytes;
    if (override !== undefined) return { bytes: override, source: 'override' };
    const configured = this.config.tenants[tenant]?.maxBytes;
    if (configured !== undefined) return { bytes: configured, source: 'config' };
    return { bytes: 0, source: 'off' };
  }

  /** Re-apply profile and budget to a loaded home after an override changed. */
  async applyPolicy(ref: HomeRef): Promise<void> {
    const p = this.ctx.loadedHome(ref);
    if (!p) return;
    const hs = await p;
    const choice = this.profileFor(ref);
    hs.profile = choice.profile;
    hs.profileName = choice.name;
    hs.ledger.setLimits(choice.limits);
    this.ctx.policyChanged(hs);
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
}

/** The base of each concern module: the core, and its shared parts at hand. */
export abstract class HomeConcern {
  constructor(protected readonly core: HomeCore) {}

  protected get ctx(): FsContext {
    return this.core.ctx;
  }

  protected get state(): StateStore {
    return this.core.state;
  }

  protected get log(): Logger {
    return this.core.log;
  }

  protected get loaded(): LoadedConfig {
    return this.core.loaded;
  }

  protected get config(): LoadedConfig['config'] {
    return this.core.config;
  }
}
