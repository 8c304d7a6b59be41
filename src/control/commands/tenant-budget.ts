import type { TenantUsage } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `tenant-usage`: a tenant's total across its homes and its total budget. Admin socket only. */
export async function tenantUsage(args: ArgsOf<'tenant-usage'>, ctx: CommandContext): Promise<TenantUsage> {
  return ctx.api.tenantUsage(args);
}

/** `set-tenant-budget`: live override of a tenant's total budget (0 = off, null = the config's). Admin socket only. */
export async function setTenantBudget(args: ArgsOf<'set-tenant-budget'>, ctx: CommandContext): Promise<TenantUsage> {
  return ctx.api.setTenantBudget(args);
}
