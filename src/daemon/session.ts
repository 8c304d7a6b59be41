import { EXIT } from '../cli/exitcodes.js';
import type { Config } from '../config/schema.js';
import type { LoadedConfig } from '../config/load.js';
import { warmProfileMasks } from '../fuse/fastpath.js';
import type { loadFuse } from '../fuse/binding.js';
import type { HandoverRaw } from '../fuse/handover-channel.js';
import { HandedFs, warmHandedFs } from '../fs/handover.js';
import { claim, dropKept, type ClaimResult, type Kept } from '../holder/client.js';
import { takeStored, type SdStoreRaw } from '../holder/fdstore.js';
import type { HolderRaw } from '../holder/holder.js';
import type { HolderLinkRaw } from '../holder/link.js';
import { holderSocket } from '../holder/protocol.js';
import { followJournal } from '../journal-fds.js';
import type { Logger } from '../log.js';
import { takeOverFrom, warmOwnerCheck, type Follower, type Received } from '../takeover.js';
import type { warmedLookup } from '../users/hostids.js';
import { DaemonError } from './error.js';

/**
 * Where the session comes from, the first phase of a start: a fresh mount
 * (none of these), a session kept through the crash of the daemon that served
 * it (systemd's fd store or the holder process: resumed, never mounted over),
 * or the live session of the daemon serving this configuration (a successor's
 * takeover).
 */

type Fuse = ReturnType<typeof loadFuse>;
export type SessionRaw = HandoverRaw & HolderRaw & HolderLinkRaw & SdStoreRaw;

/**
 * What systemd passed back from its fd store (a session kept through a
 * crash): taken before anything spawns a child, which would inherit the
 * descriptors and LISTEN_*. A successor takes the live session instead (and
 * drops what was stored).
 */
export function takeStoredSession(Fuse: Fuse, config: Config, takeover: boolean): ClaimResult {
  let stored: ClaimResult;
  try {
    stored = takeStored(Fuse.native, config);
  } catch (err) {
    stored = { kind: 'refused', reason: (err as Error).message, holderPid: null };
  }
  if (takeover && stored.kind === 'kept') dropKept(stored.kept);
  return stored;
}

/**
 * A session a holder kept through the crash of the daemon that served it
 * is resumed, never mounted over (its processes wait in the mount; a stat
 * of the mount point would wait with them). Asked even when crashSurvival
 * is off: an earlier run's holder may keep one. Null: mount afresh.
 */
export async function keptSession(stored: ClaimResult, raw: SessionRaw, config: Config, log: Logger): Promise<Kept | null> {
  if (stored.kind === 'refused') {
    throw new DaemonError(
      `systemd's fd store keeps a session this daemon refuses: ${stored.reason}. It will not mount over it; \`systemctl stop\` the unit to drop the stored session (processes in the mount then get ENOTCONN) and start again`,
      EXIT.HELD,
    );
  }
  const held = stored.kind === 'kept' ? stored : await claim(raw, config).catch((err: Error) => ({ kind: 'refused' as const, reason: err.message, holderPid: null }));
  if (held.kind === 'refused') {
    throw new DaemonError(`the session holder at ${holderSocket(config)} refused this daemon: ${held.reason}`, EXIT.HELD);
  }
  if (held.kind !== 'kept') return null;
  const kept = held.kept;
  log.warn({ keeper: kept.keeper, holder: kept.holderPid || undefined, generation: kept.generation, build: kept.build, journal: kept.journalFds.length }, 'the session of a daemon that died was kept: resuming it');
  return kept;
}

/**
 * A successor does everything it can before it asks for the session (the
 * serving daemon pauses from then until the successor serves): then it
 * asks, and receives the session, the locks (copies of the serving
 * daemon's descriptors) and the state.
 */
export async function takeOverSession(
  Fuse: Fuse,
  raw: SessionRaw,
  loaded: LoadedConfig,
  hostIds: ReturnType<typeof warmedLookup>,
  stateFile: string,
  log: Logger,
): Promise<Received> {
  const { config } = loaded;
  const journalRaw = Fuse.native;
  warmProfileMasks(Object.values(loaded.profiles));
  warmHandedFs();
  await warmOwnerCheck(hostIds, config, stateFile);
  try {
    const tlog = log.child({ component: 'takeover' });
    const follower: Follower = {
      start: (fds) => {
        const r = followJournal(journalRaw, fds);
        if ('gen' in r) return r.gen;
        tlog.warn({ errno: r.errno }, "the serving daemon's journal could not be followed: its node table is handed over");
        return null;
      },
      finish: () => {
        const r = journalRaw.hs_handover_journal_follow_finish();
        return r === 0 ? null : `errno ${-r}`;
      },
      drop: () => journalRaw.hs_handover_journal_follow_drop(),
    };
    return await takeOverFrom(
      raw,
      config,
      tlog,
      (v) => HandedFs.parse(v),
      (nodes) => {
        // On failure the session's adopt imports the table itself.
        const res = Fuse.preimportNodes(nodes);
        if (res !== 0) tlog.warn({ errno: -res }, 'the node table could not be imported early: imported when the session is adopted');
      },
      follower,
    );
  } catch (err) {
    throw new DaemonError(`takeover: ${(err as Error).message}`, EXIT.TAKEOVER);
  }
}

/** A successor's failure once it holds the session: the serving daemon serves on. */
export function takeoverFailed(why: string): never {
  throw new DaemonError(`takeover: ${why}; the serving daemon serves on`, EXIT.TAKEOVER);
}
