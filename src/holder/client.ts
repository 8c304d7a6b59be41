/**
 * The daemon's side of the holder (holder.ts, protocol.ts): find or spawn
 * the holder of this configuration, register the serving session with it,
 * claim a kept session at start, release it at a plain stop, ask its status.
 *
 * A holder is found by its socket only (holderSocket: beside the admin
 * socket, root-only both ways): no socket, or a socket file nobody listens
 * on, is no holder.
 */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Config } from '../config/schema.js';
import { blobFd, HandoverConn, readBlob, type HandoverRaw } from '../fuse/handover-channel.js';
import type { Logger } from '../log.js';
import { fdCount, HOLDER_PROTOCOL, holderLog, holderSocket, MAX_JOURNAL_FDS, Registration, type HolderStatus } from './protocol.js';
import type { AddonRaw } from '../addon-raw.js';

const ENOENT = 2;
const ECONNREFUSED = 111;
const REPLY_MS = 5_000;
/** How long a spawned holder may take to listen. */
const SPAWN_WAIT_MS = 10_000;

/** A session a holder kept through the crash of the daemon that served it: what resume (src/resume.ts) adopts. */
export interface Kept {
  /** a copy of the session's /dev/fuse descriptor (close-on-exec); ours to close */
  fuseFd: number;
  /** the kernel's INIT request as the session read it */
  init: Buffer;
  bufsize: number;
  /** the journal's descriptors (memfds), as the dead daemon registered them; ours to close */
  journalFds: number[];
  epoch: number;
  generation: number;
  backing: string;
  mount: string;
  /** the build of the daemon that registered it (src/build-id.ts) */
  build: string;
  /** the holder's pid, for messages (0: systemd's fd store kept it) */
  holderPid: number;
  /** who kept it: the holder process (client.ts) or systemd's fd store (fdstore.ts) */
  keeper: 'holder' | 'systemd';
}

export type ClaimResult = { kind: 'none' } | { kind: 'kept'; kept: Kept } | { kind: 'refused'; reason: string; holderPid: number | null };

/** What a serving daemon registers (the descriptors are read from the addon and the journal). */
export interface RegisterArgs {
  configPath: string | null;
  generation: number;
  epoch: number;
  build: string;
  /** hs_handover_holder_session: the session's descriptor (ours: copies go) and INIT */
  session: { fd: number; bufsize: number; init: Buffer };
  /** ours: copies go */
  journalFds: number[];
}

/** A connection to the holder listening on `socket`, or null when none does (no file, or nobody behind it). */
function connect(raw: HandoverRaw, socket: string): HandoverConn | null {
  const fd = raw.hs_handover_connect(socket);
  if (fd === -ENOENT || fd === -ECONNREFUSED) return null;
  if (fd < 0) throw new Error(`holder socket ${socket}: errno ${-fd}`);
  return new HandoverConn(raw, fd);
}

async function ask(raw: HandoverRaw, socket: string, msg: object, fds: number[] = []): Promise<{ reply: Record<string, unknown>; fds: number[] } | null> {
  const c = connect(raw, socket);
  if (c === null) return null;
  try {
    await c.send(msg, fds);
    const r = await c.recv(REPLY_MS);
    return { reply: (r.msg ?? {}) as Record<string, unknown>, fds: r.fds };
  } finally {
    c.close();
  }
}

const tree = (config: Config) => ({ backing: path.resolve(config.backing), mount: path.resolve(config.mount), pid: process.pid });

/**
 * At start (not --takeover): a session a holder kept for this configuration,
 * `none` when there is no holder or it holds nothing, or why it refuses
 * (another tree's session, or the daemon serving it still runs).
 */
export async function claim(raw: HandoverRaw, config: Config): Promise<ClaimResult> {
  const got = await ask(raw, holderSocket(config), { op: 'claim', protocol: HOLDER_PROTOCOL, ...tree(config) });
  if (got === null || got.reply.none === true) return closing(got?.fds ?? [], { kind: 'none' });
  const { reply, fds } = got;
  if (typeof reply.refused === 'string') return closing(fds, { kind: 'refused', reason: reply.refused, holderPid: null });
  const reg = Registration.safeParse(reply.kept);
  const journal = reply.journal;
  if (!reg.success || typeof journal !== 'number' || !Number.isSafeInteger(journal) || journal < 0 || journal > MAX_JOURNAL_FDS || fds.length !== fdCount(journal)) {
    closing(fds, null);
    throw new Error(`the holder answered the claim with something else than a kept session: ${JSON.stringify(reply).slice(0, 200)}`);
  }
  const [fuseFd, initFd, ...journalFds] = fds as [number, number, ...number[]];
  let init: Buffer;
  try {
    init = readBlob(initFd, 1 << 20);
  } catch (err) {
    closing([fuseFd, ...journalFds], null);
    throw err;
  }
  const r = reg.data;
  return { kind: 'kept', kept: { fuseFd, init, bufsize: r.bufsize, journalFds, epoch: r.epoch, generation: r.generation, backing: r.backing, mount: r.mount, build: r.build, holderPid: typeof reply.holder === 'number' ? reply.holder : 0, keeper: 'holder' } };
}

function closing<T>(fds: number[], out: T): T {
  for (const fd of fds) closeSync(fd);
  return out;
}

/** The descriptors of a kept session this process will not use (the holder keeps its own). */
export function dropKept(k: Kept): void {
  closing([k.fuseFd, ...k.journalFds], null);
}

/** What client.ts needs beyond the handover channel: the holder's identity from a connection. */
export type HolderClientRaw = HandoverRaw & Pick<AddonRaw, 'hs_handover_holder_peer_pidfd'>;

/** The holder process that answered a registration, as this process can watch it. */
export interface HolderPeer {
  /** its pid in our pid namespace (0: it has none here, e.g. another container's namespace) */
  pid: number;
  /** a pidfd of it (POLLIN once it exited; ours to close), or null when none could be had */
  pidfd: number | null;
}

/**
 * A registration that failed: `none`, no holder answered (and none was to be
 * spawned); else the holder that answered and refused or failed it (its
 * pidfd ours to close), or null when it failed before one answered.
 */
export class RegisterError extends Error {
  constructor(
    message: string,
    readonly holder: HolderPeer | null,
    readonly none = false,
  ) {
    super(message);
  }
}

/**
 * Once the session serves: hand the holder copies of its descriptors,
 * spawning a holder first when none answers and `spawn` says so. Returns the
 * holder that took them (its pidfd ours to close); throws a RegisterError
 * when that fails (the caller serves on, without crash survival until a
 * registration succeeds).
 */
export async function register(raw: HolderClientRaw, config: Config, a: RegisterArgs, log: Logger, opts: { spawn: boolean } = { spawn: true }): Promise<HolderPeer> {
  if (a.journalFds.length > MAX_JOURNAL_FDS) throw new RegisterError(`${a.journalFds.length} journal descriptors: at most ${MAX_JOURNAL_FDS} travel in one message`, null);
  const socket = holderSocket(config);
  if (opts.spawn && connectable(raw, socket) === false) {
    try {
      await spawnHolder(raw, config, log);
    } catch (err) {
      throw new RegisterError((err as Error).message, null);
    }
  }
  const reg: Registration = { ...tree(config), configPath: a.configPath, generation: a.generation, epoch: a.epoch, bufsize: a.session.bufsize, build: a.build };
  const c = connect(raw, socket);
  if (c === null) throw new RegisterError(`no holder answers on ${socket}`, null, true);
  let holder: HolderPeer | null = null;
  let initFd = -1;
  try {
    // Who answered, taken before anything is sent: the holder that will hold our copies.
    const peer = raw.hs_handover_holder_peer_pidfd(c.fd);
    holder = typeof peer === 'number' ? { pid: 0, pidfd: null } : { pid: peer.pid, pidfd: peer.pidfd >= 0 ? peer.pidfd : null };
    initFd = blobFd(raw, a.session.init);
    await c.send({ op: 'register', protocol: HOLDER_PROTOCOL, reg, journal: a.journalFds.length }, [a.session.fd, initFd, ...a.journalFds]);
    const r = await c.recv(REPLY_MS);
    closing(r.fds, null);
    const reply = (r.msg ?? {}) as Record<string, unknown>;
    if (reply.ok !== true) throw new Error(`the holder refused the registration: ${String(reply.refused ?? reply.error ?? JSON.stringify(reply))}`);
    return holder;
  } catch (err) {
    throw new RegisterError((err as Error).message, holder);
  } finally {
    if (initFd >= 0) raw.hs_handover_close(initFd);
    c.close();
  }
}

function connectable(raw: HandoverRaw, socket: string): boolean {
  const c = connect(raw, socket);
  c?.close();
  return c !== null;
}

/**
 * A holder of its own: its own session and process group (detached), stdio
 * on /dev/null (it logs to holder.log beside its socket), working directory
 * `/`, and no descriptor of ours (every one the daemon opens is
 * close-on-exec, the session's included: session.c), so nothing of the
 * mount is held by it but what it is sent.
 */
async function spawnHolder(raw: HandoverRaw, config: Config, log: Logger): Promise<void> {
  const main = fileURLToPath(new URL('./main.js', import.meta.url));
  const socket = holderSocket(config);
  // Its stderr goes to its log too: a holder that fails before its logger exists says why there.
  const errFd = openSync(holderLog(config), 'a', 0o600);
  const child = spawn(process.execPath, [main, '--socket', socket, '--log', holderLog(config)], {
    detached: true,
    stdio: ['ignore', 'ignore', errFd],
    cwd: '/',
    // Not NOTIFY_SOCKET: the holder is no service's main process.
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
  });
  closeSync(errFd);
  child.unref();
  let exited: number | null = null;
  child.once('exit', (code) => (exited = code ?? -1));
  log.info({ holder: child.pid, socket }, 'holder started');
  for (const until = Date.now() + SPAWN_WAIT_MS; Date.now() < until; await new Promise((r) => setTimeout(r, 20))) {
    if (existsSync(socket) && connectable(raw, socket)) return;
    if (exited !== null && exited !== 0) throw new Error(`the holder exited with ${exited} before it listened (see ${holderLog(config)})`);
  }
  throw new Error(`the holder did not listen on ${socket} within ${SPAWN_WAIT_MS} ms`);
}

/** At a plain stop, before the unmount: the holder closes the session's copy and exits. */
export async function release(raw: HandoverRaw, config: Config): Promise<void> {
  const got = await ask(raw, holderSocket(config), { op: 'release', protocol: HOLDER_PROTOCOL, ...tree(config) });
  if (got === null) return;
  closing(got.fds, null);
  if (got.reply.ok !== true) throw new Error(`the holder refused the release: ${String(got.reply.refused ?? got.reply.error)}`);
}

/** The holder's status, or null when none answers. */
export async function holderStatus(raw: HandoverRaw, config: Config): Promise<HolderStatus | null> {
  const got = await ask(raw, holderSocket(config), { op: 'status', protocol: HOLDER_PROTOCOL });
  if (got === null) return null;
  closing(got.fds, null);
  return got.reply as unknown as HolderStatus;
}
