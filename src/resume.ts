/**
 * Resuming a session a holder kept through a crash (src/holder/): the node
 * table is rebuilt from the journal the dead daemon kept in the holder's
 * memfds (so every node ID the kernel holds names the same file), then the
 * native session serves the kept /dev/fuse descriptor with the kernel's INIT
 * replayed into it, tells its own file handles from the dead daemon's by a
 * new epoch (a dead handle is reopened on first use, session/handles.c), and
 * asks the kernel to send again what the dead daemon read and never answered
 * (FUSE_NOTIFY_RESEND). What is not in the journal is rebuilt as at any
 * start: ledgers by the scan, the fast path's publications, owner names.
 *
 * A resume that fails costs nothing: the holder keeps its own copies until
 * a daemon registers, and the daemon refuses to start (exit HELD) rather
 * than mount a second time over the kept session.
 */
import type { MountManager } from './fuse/mount.js';
import { dropKept, type Kept } from './holder/client.js';
import { nextEpoch } from './fuse/session.js';
import { journalRecovery, recoverJournal, storeEpoch, type JournalRaw, type JournalRecovery } from './journal-fds.js';
import type { AddonRaw } from './addon-raw.js';

export type { Kept } from './holder/client.js';

/**
 * Serve `kept` in place of a fresh mount (called where the daemon would
 * mount). Owns `kept`'s descriptors from the call on, closing them on
 * failure. Resolves once the session serves, as mount.mount() does.
 */
export async function resumeSession(kept: Kept, mount: MountManager, raw: JournalRaw): Promise<{ resend: number | undefined; journal: JournalRecovery; recoverMs: number; reviveMs: number }> {
  let epoch: number;
  const t0 = performance.now();
  try {
    // The journal's header names the last epoch any daemon of this session
    // served with, a resumed one that died before it registered included;
    // the registration's may be older. Ours is the next, stored before the
    // session reads a request: no two daemons of one session share an epoch,
    // whichever of them is killed when.
    epoch = resumeEpoch(recoverJournal(raw, kept.journalFds), kept.epoch);
    storeEpoch(raw, epoch);
  } catch (err) {
    dropKept(kept);
    throw err;
  }
  const t1 = performance.now();
  // From here the session owns the /dev/fuse copy (closed by a revive that fails) and the journal its memfds.
  const r = await mount.revive({ fd: kept.fuseFd, bufsize: kept.bufsize, init: kept.init, epoch });
  const ms = (x: number) => Math.round(x * 10) / 10;
  return { ...r, journal: journalRecovery(raw), recoverMs: ms(t1 - t0), reviveMs: ms(performance.now() - t1) };
}

/** The session's map of dead handles (session/handles.h). */
export type DeadHandlesRaw = Pick<AddonRaw, 'hs_session_dead_handles' | 'hs_session_dead_handles_import'>;

/**
 * A live handover after a crash: the dead handles this daemon reopened, as
 * the handed-over state carries them (base64), or undefined when there are
 * none (a state without them is what every earlier build sends and takes).
 */
export function exportDeadHandles(raw: DeadHandlesRaw): string | undefined {
  const b = raw.hs_session_dead_handles();
  if (typeof b === 'number') throw new Error(`the dead handles' map could not be exported: errno ${-b}`);
  return b.length > 0 ? b.toString('base64') : undefined;
}

/**
 * The successor, after it adopted the predecessor's files (the handles the
 * map names) and before its session serves: a dead handle then goes on
 * meaning the handle reopened for it, which is neither reopened again nor
 * left open after the dead handle's RELEASE.
 */
export function importDeadHandles(raw: DeadHandlesRaw, b64: string): void {
  const r = raw.hs_session_dead_handles_import(Buffer.from(b64, 'base64'));
  if (r !== 0) throw new Error(`the dead handles' map could not be taken over: errno ${-r}`);
}

/** The epoch a resumed daemon serves with: the one after the journal's (the registration's when the journal predates epochs in its header). */
export function resumeEpoch(journal: number, registered: number): number {
  return nextEpoch(journal !== 0 ? journal : registered);
}
