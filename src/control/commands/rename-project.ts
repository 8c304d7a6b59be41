import type { RenameResult } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `rename-project`: move a project's home to a new project name (RENAME_BLOCKED if the target exists, BUSY while in use unless `force`). Admin socket only. */
export async function renameProject(args: ArgsOf<'rename-project'>, ctx: CommandContext): Promise<RenameResult> {
  return ctx.api.renameProject(args);
}
