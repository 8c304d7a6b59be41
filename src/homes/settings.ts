import type { HomeScopeValue, SettingsTarget, SettingsView } from '../control/api.js';
import { HomesError } from '../errors.js';
import { checkSegment, keyFor } from '../paths/names.js';
import { homeId } from '../paths/parse.js';
import { isOrphan, resolveScope } from '../scope/resolve.js';
import type { TenantSettings } from '../statefile/store.js';
import { HomeConcern } from './core.js';

/**
 * A tenant's home-scope settings (tenant default, per project, per user):
 * what is stored and how resolve decides, and changes to them, which refuse
 * to leave project homes unused unless confirmed.
 */
export class HomeSettings extends HomeConcern {
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
}
