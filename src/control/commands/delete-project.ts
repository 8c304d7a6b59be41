import type { DeleteResult } from '../api.js';
import type { CommandContext } from '../registry.js';
import type { ArgsOf } from '../protocol.js';

/** `delete-project`: delete exactly the project-scoped home; a shared home stays (`deleteNote`). BUSY while in use unless `force`. Admin socket only. */
export async function deleteProject(args: ArgsOf<'delete-project'>, ctx: CommandContext): Promise<DeleteResult> {
  return ctx.api.deleteProject(args);
}
