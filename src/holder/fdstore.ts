/**
 * Crash survival under systemd: its file descriptor store instead of the
 * holder process (holder.ts). A holder spawned by a service runs in the
 * unit's cgroup, and systemd kills it with the crashed daemon before the
 * restart (KillMode=); descriptors stored with FDSTORE=1 on $NOTIFY_SOCKET
 * survive the restart instead, and systemd passes them to the next start
 * (LISTEN_FDS from descriptor 3, LISTEN_FDNAMES naming each, LISTEN_PID its
 * pid). A full stop of the unit drops them (FileDescriptorStoreMax= in the
 * unit allows them at all).
 *
 * What is stored, each under its own FDNAME (one notification each; a name
 * applies to every descriptor of its message):
 *   homesfs-fuse          the session's /dev/fuse descriptor
 *   homesfs-registration  a sealed memfd: the holder's registration (protocol.ts) and INIT
 *   homesfs-journal0..N   the node table's journal (journal-fds.ts)
 * Every registration first removes the names (FDSTOREREMOVE=1): a successor
 * or a resumed daemon replaces its predecessor's, and a plain stop removes
 * them before it unmounts, so the store never outlives the mount.
 *
 * The daemon only sends; systemd attributes a message by the sender's pid
 * (SCM_CREDENTIALS, sdstore.c). The unit's NotifyAccess=exec accepts it from
 * the main process only (a live upgrade's successor once the old daemon named
 * it MAINPID), so no other process of the unit can replace what is stored.
 */
import { closeSync } from 'node:fs';
import path from 'node:path';
import type { Config } from '../config/schema.js';
import { blobFd, readBlob, type HandoverRaw } from '../fuse/handover-channel.js';
import type { ClaimResult, RegisterArgs } from './client.js';
import { MAX_JOURNAL_FDS, Registration, sameTree } from './protocol.js';
import type { AddonRaw } from '../addon-raw.js';

/** The addon's notify-with-descriptors exports (native/src/handover/sdstore.c). */
export type SdStoreRaw = Pick<AddonRaw, 'hs_handover_sd_notify_fds' | 'hs_handover_sd_cloexec'>;

export const FDNAME_FUSE = 'homesfs-fuse';
export const FDNAME_REGISTRATION = 'homesfs-registration';
export const journalName = (i: number) => `homesfs-journal${i}`;
/**
 * What FileDescriptorStoreMax= must allow: the session's, the registration's,
 * the journal's two and the ledgers' area (stored as the third "journal"
 * descriptor: a build that knows no area replays the first two only).
 */
export const STORED_FDS = 5;
const SD_LISTEN_FDS_START = 3;
const MAX_REGISTRATION = 1 << 20;

/** systemd's notify socket when this process runs as a Type=notify service, else null. */
export function notifySocket(env: NodeJS.ProcessEnv = process.env): string | null {
  const s = env.NOTIFY_SOCKET;
  return s && (s.startsWith('/') || s.startsWith('@')) ? s : null;
}

function notify(raw: SdStoreRaw, socket: string, message: string, fds: number[] = []): void {
  const r = raw.hs_handover_sd_notify_fds(socket, message, fds);
  if (r < 0) throw new Error(`the notify socket ${socket} refused ${message.split('\n').join(' ')}: errno ${-r}`);
}

/** Drops every descriptor this daemon (or a predecessor) stored. */
export function removeStored(raw: SdStoreRaw, socket: string, journal = STORED_FDS - 2): void {
  for (const name of [FDNAME_FUSE, FDNAME_REGISTRATION, ...Array.from({ length: Math.max(journal, STORED_FDS - 2) }, (_, i) => journalName(i))]) {
    notify(raw, socket, `FDSTOREREMOVE=1\nFDNAME=${name}`);
  }
}

/**
 * Once the session serves: hand systemd copies of its descriptors, replacing
 * what an earlier daemon of the unit stored. Throws when a message is
 * refused (the caller serves on, without crash survival).
 */
export function storeRegistration(raw: SdStoreRaw & HandoverRaw, socket: string, config: Config, a: RegisterArgs): void {
  if (a.journalFds.length > STORED_FDS - 2) throw new Error(`${a.journalFds.length} journal descriptors: the unit stores ${STORED_FDS - 2}`);
  const reg: Registration = {
    backing: path.resolve(config.backing),
    mount: path.resolve(config.mount),
    pid: process.pid,
    configPath: a.configPath,
    generation: a.generation,
    epoch: a.epoch,
    bufsize: a.session.bufsize,
    build: a.build,
  };
  removeStored(raw, socket);
  const blob = blobFd(raw, Buffer.from(JSON.stringify({ reg, journal: a.journalFds.length, init: a.session.init.toString('base64') })));
  try {
    // The session last: a crash between these messages leaves a store without it, which a start ignores
    // (nobody holds the session then: its mount is dead and cleared as after any crash).
    a.journalFds.forEach((fd, i) => notify(raw, socket, `FDSTORE=1\nFDNAME=${journalName(i)}`, [fd]));
    notify(raw, socket, `FDSTORE=1\nFDNAME=${FDNAME_REGISTRATION}`, [blob]);
    notify(raw, socket, `FDSTORE=1\nFDNAME=${FDNAME_FUSE}`, [a.session.fd]);
  } finally {
    raw.hs_handover_close(blob);
  }
}

/**
 * At start (not --takeover): the session systemd passed back from the fd
 * store, `none` when it passed nothing of ours, or why this daemon refuses it
 * (another tree's session). Reads and unsets LISTEN_* (no child may see
 * them), makes every passed descriptor close-on-exec and closes those not
 * used.
 */
export function takeStored(raw: SdStoreRaw, config: Config, env: NodeJS.ProcessEnv = process.env): ClaimResult {
  const pid = env.LISTEN_PID;
  const count = env.LISTEN_FDS;
  const names = (env.LISTEN_FDNAMES ?? '').split(':');
  delete env.LISTEN_PID;
  delete env.LISTEN_FDS;
  delete env.LISTEN_FDNAMES;
  if (pid === undefined || Number(pid) !== process.pid) return { kind: 'none' };
  const n = Number(count);
  if (!Number.isSafeInteger(n) || n <= 0 || n > 1024) return { kind: 'none' };
  const byName = new Map<string, number[]>();
  for (let i = 0; i < n; i++) {
    const fd = SD_LISTEN_FDS_START + i;
    raw.hs_handover_sd_cloexec(fd);
    const name = names[i] ?? 'unknown';
    byName.set(name, [...(byName.get(name) ?? []), fd]);
  }
  const one = (name: string): number | null => byName.get(name)?.[0] ?? null;
  const closeAll = () => {
    for (const fds of byName.values()) for (const fd of fds) closeSync(fd);
  };
  const fuseFd = one(FDNAME_FUSE);
  const regFd = one(FDNAME_REGISTRATION);
  if (fuseFd === null) {
    closeAll();
    return { kind: 'none' };
  }
  if (regFd === null) {
    // Never mount over a session something holds: systemd keeps its copy until the unit stops.
    closeAll();
    return { kind: 'refused', reason: 'systemd passed back a session without its registration', holderPid: null };
  }
  let parsed: { reg: Registration; journal: number; init: Buffer };
  try {
    const j = JSON.parse(readBlob(regFd, MAX_REGISTRATION).toString('utf8')) as { reg?: unknown; journal?: unknown; init?: unknown };
    byName.delete(FDNAME_REGISTRATION);
    const reg = Registration.parse(j.reg);
    if (typeof j.journal !== 'number' || !Number.isSafeInteger(j.journal) || j.journal < 0 || j.journal > MAX_JOURNAL_FDS || typeof j.init !== 'string') throw new Error('no journal count or INIT');
    parsed = { reg, journal: j.journal, init: Buffer.from(j.init, 'base64') };
  } catch (err) {
    closeAll();
    throw new Error(`systemd passed back a registration that is not one: ${(err as Error).message}`);
  }
  const differs = sameTree(config, parsed.reg);
  const journalFds = Array.from({ length: parsed.journal }, (_, i) => one(journalName(i)));
  if (differs !== null || journalFds.some((fd) => fd === null)) {
    closeAll();
    return { kind: 'refused', reason: differs ?? `systemd passed back ${journalFds.filter((fd) => fd !== null).length} of the ${parsed.journal} journal descriptors`, holderPid: null };
  }
  // Everything but the session and its journal is closed: ours are now the Kept's.
  const used = new Set([fuseFd, ...(journalFds as number[])]);
  for (const fds of byName.values()) for (const fd of fds) if (!used.has(fd)) closeSync(fd);
  const r = parsed.reg;
  return {
    kind: 'kept',
    kept: { fuseFd, init: parsed.init, bufsize: r.bufsize, journalFds: journalFds as number[], epoch: r.epoch, generation: r.generation, backing: r.backing, mount: r.mount, build: r.build, holderPid: 0, keeper: 'systemd' },
  };
}
