import type { Profile } from '../policy/profiles.js';
import { formatBytes } from '../policy/size.js';
import type { Config } from './schema.js';

/**
 * What a valid configuration most likely did not mean: a home whose own byte
 * budget is larger than its tenant's total. Nothing is refused (the tenant's
 * budget is checked on every write and is reached first), but the home's
 * budget can then never be reached, and `list` and `.homesfs/status` show
 * room the home does not have. Tenants have a byte budget only, so inode caps
 * have nothing to exceed. A home budget of 0 (off) is not warned about: the
 * tenant's budget is then the only one, as meant. PURE.
 */
export interface ConfigWarning {
  /** where in the configuration, named as issues are */
  path: string;
  message: string;
  tenant: string;
  /** set when the warning is about one configured home, not the tenant's default */
  home?: string;
  profile: string;
  /** the profile's maxHomeBytes */
  budget: number;
  /** tenants.<t>.maxBytes */
  tenantBudget: number;
}

export function configWarnings(config: Pick<Config, 'defaultProfile' | 'tenants' | 'homes'>, profiles: Readonly<Record<string, Profile>>): ConfigWarning[] {
  const out: ConfigWarning[] = [];
  const over = (profile: string, tenantBudget: number): number | null => {
    const budget = profiles[profile]?.maxHomeBytes ?? 0;
    return budget > 0 && budget > tenantBudget ? budget : null;
  };
  const tenantLimit = (tenantBudget: number, whose: string) => `${whose} budget of ${formatBytes(tenantBudget)} (${tenantBudget} bytes)`;
  for (const [tenant, t] of Object.entries(config.tenants)) {
    const tenantBudget = t.maxBytes ?? 0;
    if (tenantBudget === 0) continue;
    const fallback = t.defaultProfile || config.defaultProfile;
    const budget = over(fallback, tenantBudget);
    if (budget !== null) {
      out.push({
        path: `tenants.${tenant}`,
        message: `homes of this tenant get profile "${fallback}" by default, whose budget of ${formatBytes(budget)} (${budget} bytes) exceeds ${tenantLimit(tenantBudget, "the tenant's")} (tenants.${tenant}.maxBytes): the tenant's budget is reached first`,
        tenant,
        profile: fallback,
        budget,
        tenantBudget,
      });
    }
    for (const [home, h] of Object.entries(config.homes)) {
      // the tenant's default is warned about once above, not for every home that uses it
      if (home.slice(0, home.indexOf('/')) !== tenant || !h.profile || h.profile === fallback) continue;
      const own = over(h.profile, tenantBudget);
      if (own === null) continue;
      out.push({
        path: `homes.${home}`,
        message: `profile "${h.profile}" gives this home a budget of ${formatBytes(own)} (${own} bytes), which exceeds ${tenantLimit(tenantBudget, "its tenant's")} (tenants.${tenant}.maxBytes): the tenant's budget is reached first`,
        tenant,
        home,
        profile: h.profile,
        budget: own,
        tenantBudget,
      });
    }
  }
  return out;
}
