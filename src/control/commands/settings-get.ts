import type { SettingsView } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `settings-get`: the home-scope setting stored for a tenant and a project or user, and what it resolves to. Admin socket only. */
export async function settingsGet(args: ArgsOf<'settings-get'>, ctx: CommandContext): Promise<SettingsView> {
  return ctx.api.settingsGet(args);
}
