import type { FsContext } from '../fs/context.js';
import { holdersUnder, type HomeHolders } from '../homes/busy.js';
import type { Logger } from '../log.js';
import { homeId } from '../paths/parse.js';

/** Homes with open handles (any pid namespace) or visible holders (pids from /proc). */
async function busyHomes(mountPath: string, ctx: FsContext): Promise<Map<string, HomeHolders & { openFiles: number }>> {
  const out = new Map<string, HomeHolders & { openFiles: number }>();
  for (const [home, h] of await holdersUnder(mountPath)) out.set(home, { ...h, openFiles: 0 });
  const states = await Promise.all(ctx.knownHomes().map((p) => p.catch(() => null)));
  for (const hs of states) {
    if (!hs || ctx.openFilesOf(hs) === 0) continue;
    const id = homeId(hs.backing.ref);
    const h = out.get(id) ?? { cwdPids: [], filePids: [], openFiles: 0 };
    h.openFiles = ctx.openFilesOf(hs);
    out.set(id, h);
  }
  return out;
}

/**
 * Before unmounting on SIGTERM: say which homes are in use and by whom, and
 * give their processes `shutdownGraceMs` to finish. Whatever still holds a
 * file or a working directory afterwards gets ENOTCONN from then on.
 */
export async function drain(mountPath: string, ctx: FsContext, graceMs: number, hurry: AbortSignal, log: Logger): Promise<void> {
  const stopLog = log.child({ component: 'shutdown' });
  const deadline = Date.now() + graceMs;
  let announced = false;
  for (;;) {
    const busy = await busyHomes(mountPath, ctx);
    if (busy.size === 0) {
      if (announced) stopLog.info('every home was released: unmounting');
      return;
    }
    if (!announced) {
      announced = true;
      for (const [home, h] of busy) stopLog.warn({ home, openFiles: h.openFiles, filePids: h.filePids, cwdPids: h.cwdPids }, 'home in use at shutdown');
      stopLog.warn({ homes: busy.size, graceMs }, 'waiting for the homes in use before unmounting (a second SIGTERM unmounts at once)');
    }
    if (Date.now() >= deadline || hurry.aborted) {
      stopLog.warn(
        { homes: [...busy.keys()], pids: [...new Set([...busy.values()].flatMap((h) => [...h.filePids, ...h.cwdPids]))].sort((a, b) => a - b) },
        'unmounting with homes still in use: their processes get ENOTCONN and must be restarted',
      );
      return;
    }
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, Math.min(250, Math.max(0, deadline - Date.now())));
      hurry.addEventListener('abort', () => (clearTimeout(t), resolve()), { once: true });
    });
  }
}
