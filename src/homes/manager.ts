import type { LoadedConfig } from '../config/load.js';
import type { FsContext } from '../fs/context.js';
import type { Logger } from '../log.js';
import type { StateStore } from '../statefile/store.js';
import type { UserDb } from '../users/userdb.js';
import type { HostIdLookup } from '../users/hostids.js';
import { HomeCore } from './core.js';
import { HomeLifecycle } from './lifecycle.js';
import { HomeLimits } from './limits.js';
import { HomeOwners } from './owners.js';
import { HomeSettings } from './settings.js';

/**
 * The homes: creation, resolution through the scope cascade, owners, live
 * overrides, rescans, rename and delete. The persistent part lives in the
 * state file; the live part in the fs context. One module per concern, each
 * taking the core (core.ts) and none the manager:
 *
 *   core       shared state and lookups: owner, profile, limits, path, report
 *   owners     owner checks and allocation          (core)
 *   limits     live overrides, profiles, tenant budgets (core)
 *   settings   home-scope settings                  (core)
 *   lifecycle  list, create, resolve, rescan, rename, delete, reserved names (core, owners)
 *
 * The control socket's commands call these directly (control/commands.ts).
 */
export class HomeManager {
  readonly core: HomeCore;
  readonly owners: HomeOwners;
  readonly limits: HomeLimits;
  readonly settings: HomeSettings;
  readonly lifecycle: HomeLifecycle;

  constructor(
    ctx: FsContext,
    state: StateStore,
    loaded: LoadedConfig,
    log: Logger,
    /** where owner names are published for NSS (null: not published) */
    users: UserDb | null = null,
    /** what the host's user database knows (injectable: unit tests must not depend on the host's accounts) */
    hostIds?: HostIdLookup,
  ) {
    this.core = new HomeCore(ctx, state, loaded, log, users, hostIds);
    this.owners = new HomeOwners(this.core);
    this.limits = new HomeLimits(this.core);
    this.settings = new HomeSettings(this.core);
    this.lifecycle = new HomeLifecycle(this.core, this.owners);
  }

  /**
   * A new configuration (SIGHUP): profiles, tenant defaults and home entries
   * take effect on every loaded home at once; overrides keep outranking them.
   */
  async reload(next: LoadedConfig): Promise<void> {
    this.core.loaded = next;
    for (const p of this.core.ctx.knownHomes()) {
      const hs = await p.catch(() => null);
      if (!hs) continue;
      const ref = hs.backing.ref;
      const owner = this.core.ownerOf(ref);
      if (owner) hs.backing.owner = { ...owner };
      await this.core.applyPolicy(ref);
      await this.core.publishOwner(ref, hs.backing.owner);
    }
    for (const pool of this.core.ctx.knownPools()) this.core.ctx.setTenantLimit(pool.tenant, this.core.tenantBudgetFor(pool.tenant).bytes);
  }
}
