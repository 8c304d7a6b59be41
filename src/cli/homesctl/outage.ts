/**
 * `homesctl status` when the control socket does not answer: is the daemon
 * gone with its session, or did it die with the session kept for the next
 * start (crash survival)? Asked of whoever keeps it:
 *
 *   - the holder process (src/holder/), found by its socket beside the admin
 *     socket (holderSocket), root only: it says whether a daemon registered
 *     the session, which, and whether that daemon still runs;
 *   - under systemd, the fd store cannot be asked what it holds (systemd 252
 *     has no NFileDescriptorStore): the unit's state says whether systemd
 *     will start the daemon again with what is stored (`auto-restart`) or
 *     dropped the store with the unit (`failed`, `inactive`).
 *
 * Nothing here changes anything: the holder's STATUS and `systemctl show`.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { Config } from '../../config/schema.js';
import type { HolderStatus } from '../../holder/protocol.js';

/** The unit the README installs (systemd/homesfs.service). */
export const UNIT = 'homesfs.service';

export type Outage =
  /** a holder keeps the session of a daemon that died: the next `homesfs serve` resumes it */
  | { kind: 'kept'; keeper: 'holder'; holder: number; generation: number | null; mount: string | null; daemonPid: number | null; message: string }
  /** the registered daemon still runs (its control socket is closed for a moment, e.g. a live upgrade's pause) */
  | { kind: 'alive'; keeper: 'holder'; holder: number; daemonPid: number | null; message: string }
  /** systemd will start the daemon again: whatever it stored in the unit's fd store is resumed then */
  | { kind: 'restarting'; keeper: 'systemd'; unit: string; activeState: string; subState: string; message: string }
  /** systemd starts the unit, not after a crash: nothing was kept, the daemon is on its way */
  | { kind: 'starting'; keeper: 'systemd'; unit: string; activeState: string; subState: string; message: string }
  /** systemd knows the unit and will not start it by itself: no session is kept there */
  | { kind: 'stopped'; keeper: 'systemd'; unit: string; activeState: string; subState: string; message: string };

/** What the holder beside `socket` says, or null when none answers (or it cannot be asked: not root, no addon). */
async function askHolder(socket: string): Promise<HolderStatus | null> {
  try {
    // Loaded only here: every other homesctl command runs without the native addon.
    const [{ loadFuse }, { holderStatus }] = await Promise.all([import('../../fuse/binding.js'), import('../../holder/client.js')]);
    const raw = loadFuse().native as unknown as Parameters<typeof holderStatus>[0];
    // holderStatus reads only the socket's path from the configuration.
    return await holderStatus(raw, { socket } as Config);
  } catch {
    // EACCES for a non-root caller, a missing addon, a holder gone mid-reply: nothing known from it
    return null;
  }
}

/**
 * The holder learns that its daemon died on its next look (a poll of the
 * daemon's pidfd); a pid that no longer runs (or is a zombie) is dead now.
 */
function gone(pid: number | null): boolean {
  if (pid === null) return false;
  try {
    return /^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    return true;
  }
}

/** `systemctl show` of the unit, or null when systemd cannot be asked or does not know the unit. */
function askSystemd(env: NodeJS.ProcessEnv): Promise<{ activeState: string; subState: string; restarts: number } | null> {
  return new Promise((resolve) => {
    execFile(
      'systemctl',
      ['show', UNIT, '--property=LoadState,ActiveState,SubState,NRestarts'],
      { timeout: 3_000, env: { PATH: env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C' } },
      (err, stdout) => {
        if (err) return resolve(null);
        const p = Object.fromEntries(
          String(stdout)
            .split('\n')
            .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
        ) as Record<string, string | undefined>;
        if (p.LoadState !== 'loaded' || !p.ActiveState || !p.SubState) return resolve(null);
        resolve({ activeState: p.ActiveState, subState: p.SubState, restarts: Number(p.NRestarts ?? 0) || 0 });
      },
    );
  });
}

/**
 * Who keeps the session while the daemon behind `socket` does not answer,
 * or null when nothing is known (no holder answers, no unit).
 */
export async function explainOutage(socket: string, env: NodeJS.ProcessEnv): Promise<Outage | null> {
  const h = await askHolder(socket);
  if (h !== null && h.registered) {
    if (h.daemonAlive === false || gone(h.daemonPid)) {
      return {
        kind: 'kept',
        keeper: 'holder',
        holder: h.holder,
        generation: h.generation,
        mount: h.mount,
        daemonPid: h.daemonPid,
        message: `the daemon is not running; its session is kept by the holder (pid ${h.holder}), generation ${h.generation ?? '?'}: start \`homesfs serve\` to resume it`,
      };
    }
    return {
      kind: 'alive',
      keeper: 'holder',
      holder: h.holder,
      daemonPid: h.daemonPid,
      message: `the daemon (pid ${h.daemonPid ?? '?'}) runs and its session is registered with the holder (pid ${h.holder}), but its control socket does not answer: a live upgrade closes it during its pause; try again, or see its log`,
    };
  }
  const found = await askSystemd(env);
  if (found === null) return null;
  const { restarts, ...unit } = found;
  const state = `${unit.activeState} (${unit.subState})`;
  // Waiting to restart after the daemon died, or starting again after that (NRestarts counts
  // the restarts Restart= made): what the fd store kept comes back. A start that is no
  // restart has no earlier session to keep (systemd drops the store of a unit that is down).
  if (unit.subState === 'auto-restart' || (unit.activeState === 'activating' && restarts > 0)) {
    return {
      kind: 'restarting',
      keeper: 'systemd',
      unit: UNIT,
      ...unit,
      message: `the daemon is not running; systemd is starting it again (${UNIT}: ${state}): a session it stored in the unit's fd store is resumed then (systemd cannot be asked whether one is stored)`,
    };
  }
  if (unit.activeState === 'activating') {
    return {
      kind: 'starting',
      keeper: 'systemd',
      unit: UNIT,
      ...unit,
      message: `the daemon is not serving yet: systemd is starting it (${UNIT}: ${state}); its control socket opens once it serves`,
    };
  }
  if (unit.activeState === 'failed' || unit.activeState === 'inactive') {
    return {
      kind: 'stopped',
      keeper: 'systemd',
      unit: UNIT,
      ...unit,
      message: `the daemon is not running, no holder answers${process.getuid?.() === 0 ? '' : ' (only root can ask it)'}, and ${UNIT} is ${state}: systemd keeps no fd store for a unit that is down, so no session is kept there (processes in the mount get ENOTCONN); \`systemctl start homesfs\` mounts afresh`,
    };
  }
  return null;
}
