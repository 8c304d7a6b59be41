import type { LoadedConfig } from '../config/load.js';
import type { HomeInfo, TenantUsage } from '../control/api.js';
import { HomesError } from '../errors.js';
import { checkSegment } from '../paths/names.js';
import { homeId, type HomeRef } from '../paths/parse.js';
import { softLimitIssues } from '../policy/profiles.js';
import { HomeConcern, parseHomeArg } from './core.js';

/**
 * Limits and profiles: live overrides of a home's budget, caps, soft limits
 * and profile, and of a tenant's total budget, recorded in the state file and
 * applied to the loaded home at once. (What is in force is HomeCore.profileFor
 * and tenantBudgetFor.)
 */
export class HomeLimits extends HomeConcern {
  /** Profile names that live overrides in the state file use but `loaded` does not define. */
  missingOverrideProfiles(loaded: LoadedConfig): string[] {
    return Object.entries(this.state.state.homes)
      .filter(([, e]) => e.profile !== undefined && !Object.hasOwn(loaded.profiles, e.profile))
      .map(([id, e]) => `${id}: ${e.profile}`);
  }

  /** Make sure the home has a state entry (owner pinned) before an override is recorded. */
  private async entryFor(ref: HomeRef): Promise<void> {
    if (this.state.state.homes[homeId(ref)]) return;
    const hs = await this.ctx.home(ref);
    // Without a config entry the owner is the backing directory's: recorded as found, not given.
    const found = this.core.ownerOf(ref) === undefined;
    await this.state.update((s) => {
      s.homes[homeId(ref)] ??= { owner: { ...hs.backing.owner }, ...(found ? { ownerFound: true as const } : {}), createdAt: new Date().toISOString() };
    });
  }

  /** The limits in force and where each comes from, for before/after log lines. */
  private limitsNow(ref: HomeRef) {
    const c = this.core.profileFor(ref);
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
    if (!(await this.ctx.store.homeExists(ref))) this.core.notFound(ref);
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
    await this.core.applyPolicy(ref);
    const after = this.limitsNow(ref);
    this.log.info({ home: homeId(ref), path: this.core.mountPath(ref), before, after }, what);
    return this.core.info(ref);
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
    const profile = this.core.profileFor(ref).profile;
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
    this.core.checkProfile(args.profile ?? undefined);
    if (!(await this.ctx.store.homeExists(ref))) this.core.notFound(ref);
    await this.entryFor(ref);
    const before = this.limitsNow(ref);
    await this.state.update((s) => {
      const e = s.homes[homeId(ref)]!;
      if (args.profile === null) delete e.profile;
      else e.profile = args.profile;
    });
    await this.core.applyPolicy(ref);
    this.log.info({ home: homeId(ref), path: this.core.mountPath(ref), before, after: this.limitsNow(ref) }, args.profile === null ? 'profile override dropped' : 'profile override set');
    return this.core.info(ref);
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
    const budget = this.core.tenantBudgetFor(tenant);
    return { tenant, bytes: pool.bytes, budget: pool.limit, budgetSource: budget.source, homes };
  }

  /** `bytes`: a budget (0 = off), or null to drop the override (back to the config's value). */
  async setTenantBudget(args: { tenant: string; bytes: number | null }): Promise<TenantUsage> {
    checkSegment('tenant', args.tenant);
    if (args.bytes !== null && (!Number.isSafeInteger(args.bytes) || args.bytes < 0)) {
      throw new HomesError('INVALID_ARGUMENT', 'a tenant budget is a non-negative number of bytes');
    }
    const before = this.core.tenantBudgetFor(args.tenant);
    await this.state.update((s) => {
      if (args.bytes === null) {
        if (s.tenants) delete s.tenants[args.tenant];
        return;
      }
      s.tenants ??= Object.create(null) as NonNullable<typeof s.tenants>;
      s.tenants[args.tenant] = { maxBytes: args.bytes };
    });
    const after = this.core.tenantBudgetFor(args.tenant);
    this.ctx.setTenantLimit(args.tenant, after.bytes);
    this.log.info({ tenant: args.tenant, before, after }, 'tenant budget set');
    return this.tenantUsage(args.tenant);
  }
}
