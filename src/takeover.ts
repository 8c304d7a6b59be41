/**
 * Live upgrade: a daemon started with `--takeover` takes the running one's
 * session (the /dev/fuse connection with its negotiated INIT, the node table,
 * open directories and open files) over a root-only socket, so processes in
 * homes see a pause instead of ENOTCONN. The protocol, step by step, and why
 * each step is safe, is in native-notes/native-layer.md ("Handing the session
 * over").
 *
 *   homesfs reload, before it starts the successor:
 *   LOGS {logs: true} ──────────────▶ ◀─ {logs: true} + its stdout and stderr (then closed)
 *
 *   successor                      serving daemon
 *   HELLO {backing, mount, state} ─▶ checks they are its own, else REFUSED
 *                 ◀─ JOURNAL + the node table's journal (its memfds), if it keeps one
 *   loads the table from it (the serving daemon serves on meanwhile)
 *   GO {followed: its generation} ──▶
 *                                   answers the requests that wait only for a slow free
 *                                   (the free goes on in the background), then, serving on,
 *                                   waits until JavaScript holds no request for long and no
 *                                   control command runs; closes its sockets, pauses the
 *                                   session at a request boundary, waits until no request is
 *                                   left with JavaScript; if that takes more than a moment,
 *                                   resumes, opens its sockets and tries again (all within 5 s)
 *                                   flushes its state file, releases its locks
 *                                   exports its node table unless its journal is still
 *                                   at the generation followed (no compaction since)
 *                 ◀─ STATE {generation, session, fs} + blobs + descriptors
 *   catches the table up with the records since it followed (or imports the export)
 *   takes the locks, builds its context, adopts the files, then the session
 *   READY ──────────────────────────▶ exits 0 without unmounting, once the frees
 *                                   it answered early are done
 *   (a successor that fails or is silent for 30 s before READY: the serving
 *    daemon takes its locks back and resumes, as if nothing had happened)
 *
 * The socket file is removed when its listener closes (a clean stop, a
 * handover), if it is still the one that listener made.
 */
import path from 'node:path';
import type { Config } from './config/schema.js';
import { stateFileOf } from './config/load.js';
import type { Logger } from './log.js';
import { closeSync } from 'node:fs';
import type { HandedFs } from './fs/handover.js';
import { adoptLock, type HeldLock } from './statefile/lock.js';
import { StateStore } from './statefile/store.js';
import { blobFd, HandoverError, handoverConnect, HandoverListener, readBlob, type HandoverConn, type HandoverRaw } from './fuse/handover-channel.js';
import type { Handed } from './fuse/session.js';

export const TAKEOVER_PROTOCOL = 3;
/** A successor of protocol 2 (no journal step) is still served, and served by. */
const PROTOCOL_NO_JOURNAL = 2;
/** How long the serving daemon waits for GO while the successor loads the table from its journal. */
const FOLLOW_WAIT_MS = 30_000;
/** How long the serving daemon waits for the successor's READY before it takes its session back. */
const READY_WAIT_MS = 30_000;
/** How long it waits for the requests JavaScript still answers before it gives up on a handover. */
const DRAIN_WAIT_MS = 5_000;
/**
 * The session is paused only while the oldest request JavaScript holds is
 * younger than this: a pause waits for every request held, and every home
 * waits with it. Until then the daemon serves on, and the wait costs no home
 * anything.
 */
const PAUSE_WHEN_HELD_UNDER_MS = 20;
/**
 * How long one pause waits for the requests JavaScript holds; past it (one
 * of them turned out long) the session resumes and the pause is tried again
 * later: a try that fails costs the other homes this much at most.
 */
const PAUSE_TRY_MS = 50;

export function takeoverSocket(config: Config): string {
  return path.join(path.dirname(config.socket), 'takeover.sock');
}

/** What the serving daemon's side needs of the daemon. */
export interface HandingHost {
  readonly config: Config;
  readonly generation: number;
  readonly log: Logger;
  /** stop taking control commands and wait for those in flight; the returned function starts them again */
  quiesceControl(): Promise<() => Promise<void>>;
  pause(): void;
  /** no worker reads and no request waits for JavaScript */
  paused(): boolean;
  resume(): void;
  /** how long JavaScript has held the oldest request of the session it has not answered, in ms (0: none) */
  oldestRequestMs(): number;
  /** a control command runs */
  controlBusy(): boolean;
  /** on: every request that waits only for a slow free (backing/freeing.ts) is answered now, and those to come at once; off: they wait again */
  freesInBackground(on: boolean): void;
  /** `withNodes` false: the successor followed the journal, no node table goes */
  handed(withNodes: boolean): Handed;
  exportFs(): { state: HandedFs; fds: number[] };
  /** the node table journal's memfds (copies go), none when there is no journal */
  journalFds(): number[];
  /** the generation the journal writes now, null when there is none */
  journalGen(): number | null;
  /** the node table's size (as the successor's status counts it) */
  nodeCount(): number;
  /** the state file written whole: the successor reads it once it holds the locks */
  flushState(): Promise<void>;
  /** the locks on the backing tree and the state file: their descriptors go to the successor, which holds them from then on */
  locks(): Array<{ file: string; fd: number }>;
  /** the successor (its pid as it said in HELLO) serves: leave without unmounting (our copies of the locks closed, theirs hold) */
  handedOver(pauseMs: number, successorPid: number | undefined): void;
  /**
   * Resolves once whoever supervises this daemon knows the successor as its
   * main process (systemd: MAINPID=, which the unit's NotifyAccess=exec needs
   * before it takes the successor's READY=1 and fd store entries); at once
   * where nothing supervises. Never rejects.
   */
  successorNamed(successorPid: number | undefined): Promise<void>;
}

export interface Hello {
  hello: number;
  backing: string;
  mount: string;
  state: string;
  pid: number;
  /** protocol 3: the successor follows the node table's journal if there is one */
  journal?: boolean;
}

/**
 * Before `homesfs reload` starts a successor: the serving daemon's stdout and
 * stderr (descriptors 1 and 2) come back with the reply `{logs: true}`. A
 * daemon that predates it refuses it as a HELLO of no protocol.
 */
export interface LogsRequest {
  logs: true;
  pid: number;
}

/**
 * The serving daemon's stdout and stderr, or null when it does not hand them
 * (it predates the request) or no daemon listens; the caller closes them.
 */
export async function askForLogs(raw: HandoverRaw, config: Config): Promise<{ stdout: number; stderr: number } | null> {
  const c = connectToServing(raw, config);
  try {
    const req: LogsRequest = { logs: true, pid: process.pid };
    await c.send(req);
    const { msg, fds } = await c.recv(5_000);
    if ((msg as { logs?: unknown }).logs === true && fds.length === 2) return { stdout: fds[0]!, stderr: fds[1]! };
    for (const fd of fds) raw.hs_handover_close(fd);
    return null;
  } finally {
    c.close();
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The wall clock with a fraction of a millisecond: both daemons' marks on one scale. */
export const clock = (): number => performance.timeOrigin + performance.now();

/**
 * Where a handover's pause goes: each step's end in ms since the pause
 * began, logged by both daemons (debug and the final info line).
 */
export class Marks {
  private readonly at: Array<[string, number]> = [];
  constructor(readonly origin: number) {}
  mark(step: string): void {
    this.at.push([step, Math.round((clock() - this.origin) * 10) / 10]);
  }
  toJSON(): Record<string, number> {
    return Object.fromEntries(this.at);
  }
}

/** The serving daemon: answers successors on its takeover socket. */
export function listenForSuccessors(raw: HandoverRaw, host: HandingHost): HandoverListener {
  const sock = takeoverSocket(host.config);
  const l = HandoverListener.listen(raw, sock);
  l.start(
    (c) => handOver(raw, c, host).catch((err: Error) => host.log.error({ err: err.message }, 'handover failed; serving on')),
    (errno) => host.log.warn({ errno }, 'takeover socket: a connection that is not root was refused'),
  );
  host.log.info({ socket: sock }, 'takeover socket listening');
  return l;
}

async function handOver(raw: HandoverRaw, c: HandoverConn, host: HandingHost): Promise<void> {
  const log = host.log;
  const { msg, fds: stray } = await c.recv(5_000);
  for (const fd of stray) raw.hs_handover_close(fd);
  if ((msg as Partial<LogsRequest>).logs === true) {
    // `homesfs reload` starts the successor with these as its stdout and stderr: it
    // then logs where this daemon logs (the same open files: a pipe, the journal's
    // socket, a file at the same offset), not to the shell that ran the reload.
    log.info({ asker: (msg as Partial<LogsRequest>).pid }, 'takeover: handing my stdout and stderr to the successor about to start');
    return c.send({ logs: true }, [1, 2]);
  }
  const hello = msg as Partial<Hello>;
  const own = { backing: path.resolve(host.config.backing), mount: path.resolve(host.config.mount), state: path.resolve(stateFileOf(host.config)) };
  if (hello.hello !== TAKEOVER_PROTOCOL && hello.hello !== PROTOCOL_NO_JOURNAL) return c.send({ refused: `protocol ${String(hello.hello)} is not ${TAKEOVER_PROTOCOL}` });
  for (const k of ['backing', 'mount', 'state'] as const) {
    if (typeof hello[k] !== 'string' || path.resolve(hello[k]) !== own[k]) {
      log.warn({ successor: hello.pid, [k]: hello[k], ours: own[k] }, 'takeover refused: the successor serves another tree');
      return c.send({ refused: `${k} ${String(hello[k])} is not this daemon's (${own[k]})` });
    }
  }
  // The successor loads the node table from the journal while this daemon serves on:
  // then the pause exports none and the successor imports none.
  let followed: number | null = null;
  if (hello.hello === TAKEOVER_PROTOCOL && hello.journal === true) {
    const fds = host.journalFds();
    await c.send({ journal: fds.length === 2 }, fds.length === 2 ? fds : []);
    const { msg } = await c.recv(FOLLOW_WAIT_MS);
    const go = msg as { go?: unknown; followed?: unknown };
    if (go.go !== true) {
      log.warn({ successor: hello.pid, said: JSON.stringify(msg).slice(0, 200) }, 'takeover: the successor did not go on; serving on');
      return;
    }
    if (typeof go.followed === 'number' && Number.isSafeInteger(go.followed) && go.followed > 0) followed = go.followed;
  }
  log.info({ successor: hello.pid, followed }, 'handing the session over');
  // No request waits for a free from here on: its caller is answered, the ledger has
  // given the bytes back (what the successor is handed is exact), the free goes on here.
  host.freesInBackground(true);
  const until = Date.now() + DRAIN_WAIT_MS;
  const asked = clock();
  let tries = 0;
  let restartControl!: () => Promise<void>;
  let started = 0;
  const refuse = async (why: string) => {
    host.freesInBackground(false);
    await c.send({ refused: why }).catch(() => undefined);
    log.warn({ successor: hello.pid, reason: why, tries }, 'handover abandoned: serving on');
  };
  for (;;) {
    if (Date.now() >= until) return refuse('requests in flight did not finish in time');
    // Serving on meanwhile: a long request (a big listing, a home's queue behind one)
    // is waited for here, where it holds up no other home, not inside the pause.
    while (host.oldestRequestMs() >= PAUSE_WHEN_HELD_UNDER_MS || host.controlBusy()) {
      if (Date.now() >= until) return refuse('requests in flight did not finish in time');
      await sleep(2);
    }
    restartControl = await host.quiesceControl();
    started = clock();
    tries++;
    host.pause();
    const tryUntil = Math.min(until, Date.now() + PAUSE_TRY_MS);
    while (!host.paused() && Date.now() < tryUntil) await sleep(1);
    if (host.paused()) break;
    // A request held turned out long: serve on, and try again once it is answered.
    host.resume();
    await restartControl();
    log.debug({ successor: hello.pid, tries, heldMs: Math.round(host.oldestRequestMs()) }, 'handover: a request held the pause up; serving on, trying again');
  }
  const restart = restartControl;
  const marks = new Marks(started);
  // The locks are never given up: the successor gets copies of their descriptors, and
  // ours keep them until we exit, so a successor that fails leaves them with us.
  const takeBack = async (why: string) => {
    host.resume();
    host.freesInBackground(false);
    await restart();
    log.warn({ successor: hello.pid, reason: why }, 'handover abandoned: serving on');
  };
  try {
    marks.mark('drained');
    // Paused, the journal gets no record: at the generation followed, the successor's
    // table plus the records it has yet to read is this one (nodes_journal_replay.c).
    const fromJournal = followed !== null && host.journalGen() === followed;
    const session = host.handed(!fromJournal);
    const nodesHanded = host.nodeCount();
    marks.mark('sessionExported');
    const fs = host.exportFs();
    marks.mark('filesExported');
    await host.flushState();
    marks.mark('stateFlushed');
    const locks = host.locks();
    const blobs: number[] = [];
    try {
      for (const b of [session.init, session.nodes, session.dirs, Buffer.from(JSON.stringify(fs.state))]) blobs.push(blobFd(raw, b));
      marks.mark('blobsMade');
      await c.send({
        state: hello.hello,
        generation: host.generation + 1,
        pausedAt: started,
        bufsize: session.bufsize,
        epoch: session.epoch ?? 0,
        locks: locks.map((l) => l.file),
        files: fs.fds.length,
        nodes: fromJournal ? 'journal' : 'handed',
      });
      await c.sendFds([session.fd, ...locks.map((l) => l.fd), ...blobs, ...fs.fds]);
    } finally {
      for (const fd of blobs) raw.hs_handover_close(fd);
    }
    marks.mark('sent');
    log.debug({ successor: hello.pid, steps: marks, nodes: session.nodes.length, files: fs.fds.length }, 'handover: sent, waiting for READY');
    const { msg: ready } = await c.recv(READY_WAIT_MS);
    if ((ready as { ready?: unknown }).ready !== true) return await takeBack(`the successor said ${JSON.stringify(ready).slice(0, 200)}`);
    marks.mark('ready');
    const pauseMs = (ready as { pauseMs?: number }).pauseMs ?? Math.round(clock() - started);
    // Counted while paused: the table the successor has now, exported or followed.
    const nodes = nodesHanded;
    const drainMs = Math.round(started - asked);
    log.info({ successor: hello.pid, pauseMs, drainMs, tries, files: fs.fds.length, nodes, nodesFrom: fromJournal ? 'journal' : 'handed', steps: marks }, 'session handed over: exiting without unmounting');
    host.handedOver(pauseMs, hello.pid);
  } catch (err) {
    await takeBack(err instanceof HandoverError ? err.message : String(err));
    return;
  }
  // The successor tells systemd nothing (READY=1, its fd store entries) until this end
  // closes: systemd must know it as the main process first. Closed then, not at this
  // process's exit, which may wait for the frees answered early (SlowFrees.letGo).
  await host.successorNamed(hello.pid).catch(() => undefined);
  c.close();
}

/**
 * The successor's locks: the ones the serving daemon handed over, which must
 * be the ones this configuration names (the same backing tree and state file
 * were checked at HELLO). Every received lock descriptor is either adopted
 * into `into` or closed.
 */
export function adoptLocks(received: Received, files: readonly string[], into: HeldLock[]): void {
  const got = received.locks.splice(0);
  try {
    const want = files.map((f) => path.resolve(f));
    if (got.length !== want.length || got.some((l, i) => path.resolve(l.file) !== want[i])) {
      throw new Error(`the serving daemon handed over the locks ${got.map((l) => l.file).join(', ')}, not ${want.join(', ')}`);
    }
    while (got.length > 0) {
      const l = got[0]!;
      into.push(adoptLock(l.file, l.fd));
      got.shift();
    }
  } finally {
    for (const l of got) closeSync(l.fd);
  }
}

/**
 * Before a successor asks for the session: the owner check it runs while the
 * mount is paused asks the host's user database (a getent(1) process) about
 * the owners of the configuration and of the state file as it reads now; ask
 * now instead. Any owner added meanwhile is asked about then.
 */
export async function warmOwnerCheck(hostIds: { warm(uids: readonly number[], gids: readonly number[]): Promise<void> }, config: Config, stateFile: string): Promise<void> {
  const owners = Object.values(config.homes).flatMap((h) => (h.owner ? [h.owner] : []));
  const state = await StateStore.peek(stateFile);
  if (state) owners.push(...Object.values(state.homes).map((r) => r.owner));
  await hostIds.warm(
    owners.map((o) => o.uid),
    owners.map((o) => o.gid),
  ).catch(() => undefined);
}

/** What the successor receives. */
export interface Received {
  generation: number;
  pausedAt: number;
  /** the successor's steps, in ms since the serving daemon paused */
  marks: Marks;
  session: Handed;
  /** the serving daemon's locks (copies of its descriptors: the same flocks), to adopt */
  locks: Array<{ file: string; fd: number }>;
  fs: HandedFs;
  fsFds: number[];
  /** tell the old daemon the session is served here; resolves once it is gone */
  ready(pauseMs: number): Promise<void>;
  /** a failure before ready: the old daemon goes on serving */
  abandon(why: string): void;
}

/**
 * The successor's side, before it takes the locks. Throws (with the old
 * daemon serving on) when there is none, it refuses, or the exchange fails.
 */
/** The successor's node table loaded from the serving daemon's journal (journal-fds.ts followJournal). */
export interface Follower {
  /** load the table from the journal's memfds (they are closed): the generation followed, or null */
  start(fds: number[]): number | null;
  /** in the pause: the records since applied; null, or why not */
  finish(): string | null;
  /** the table was handed over after all: back to fresh */
  drop(): void;
}

/** A serving daemon of protocol 2 refuses 3: asked again without the journal step. */
class ProtocolRefused extends HandoverError {}

type TakeoverArgs = [
  raw: HandoverRaw,
  config: Config,
  log: Logger,
  parseFs: (v: unknown) => HandedFs,
  /** the node table as soon as it is read (its import may start while the rest is parsed and adopted) */
  nodesRead?: (nodes: Buffer) => void,
  /** loads the node table from the serving daemon's journal before the pause, when it keeps one */
  follow?: Follower,
];

export async function takeOverFrom(...args: TakeoverArgs): Promise<Received> {
  try {
    return await takeOverWith(TAKEOVER_PROTOCOL, ...args);
  } catch (err) {
    if (!(err instanceof ProtocolRefused)) throw err;
    args[2].info({ refused: err.message }, 'the serving daemon speaks protocol 2: the node table is handed over');
    return await takeOverWith(PROTOCOL_NO_JOURNAL, ...args.slice(0, 5) as TakeoverArgs);
  }
}

const ENOENT = 2;
const ECONNREFUSED = 111;

/**
 * The serving daemon's takeover socket, or a HandoverError that says no
 * daemon serves: no socket there (a clean stop removes it), or a file nobody
 * listens on (a daemon that was killed left it).
 */
export function connectToServing(raw: HandoverRaw, config: Config): HandoverConn {
  const sock = takeoverSocket(config);
  try {
    return handoverConnect(raw, sock);
  } catch (err) {
    const errno = err instanceof HandoverError ? err.errno : undefined;
    if (errno !== ENOENT && errno !== ECONNREFUSED) throw err;
    const what = errno === ENOENT ? `no socket at ${sock}` : `nothing listens on ${sock}`;
    throw new HandoverError(`no daemon serves ${path.resolve(config.mount)} (${what}): start it with \`homesfs serve\``, errno);
  }
}

async function takeOverWith(version: number, ...[raw, config, log, parseFs, nodesRead, follow]: TakeoverArgs): Promise<Received> {
  const c = connectToServing(raw, config);
  let followed: number | null = null;
  try {
    // The descriptors come inside the pause; a table grown for them then waits
    // out an RCU grace period at each doubling (handover.c hs_ho_reserve_fds).
    const table = raw.hs_handover_reserve_fds(c.fd);
    if (table < 0) log.debug({ errno: -table }, "descriptor table not grown to the serving daemon's: grown as the descriptors come");
    const hello: Hello = { hello: version, backing: path.resolve(config.backing), mount: path.resolve(config.mount), state: path.resolve(stateFileOf(config)), pid: process.pid };
    if (version === TAKEOVER_PROTOCOL) hello.journal = follow !== undefined;
    await c.send(hello);
    let { msg, fds: sent } = await c.recv(DRAIN_WAIT_MS + 5_000);
    const offer = msg as { journal?: unknown; refused?: unknown };
    if (offer.journal !== undefined) {
      // Before the pause: the serving daemon serves on while the table is loaded.
      const t0 = clock();
      if (offer.journal === true && follow !== undefined && sent.length === 2) followed = follow.start(sent);
      else for (const fd of sent) raw.hs_handover_close(fd);
      log.info({ followed, ms: Math.round(clock() - t0) }, followed !== null ? "node table loaded from the serving daemon's journal" : 'node table to be handed over');
      await c.send({ go: true, followed });
      ({ msg } = await c.recv(DRAIN_WAIT_MS + 5_000));
    } else {
      for (const fd of sent) raw.hs_handover_close(fd);
    }
    const head = msg as { refused?: string; state?: number; generation?: number; pausedAt?: number; bufsize?: number; epoch?: number; locks?: unknown; files?: number; nodes?: unknown };
    if (head.refused !== undefined) {
      if (version !== PROTOCOL_NO_JOURNAL && String(head.refused).startsWith(`protocol ${version} `)) throw new ProtocolRefused(head.refused);
      throw new HandoverError(`the serving daemon refused the takeover: ${head.refused}`);
    }
    const lockFiles = head.locks;
    if (head.state !== version || typeof head.bufsize !== 'number' || typeof head.files !== 'number' || !Array.isArray(lockFiles) || !lockFiles.every((f) => typeof f === 'string')) {
      throw new HandoverError('the serving daemon answered something else than its state');
    }
    const marks = new Marks(head.pausedAt ?? clock());
    marks.mark('headReceived');
    const fromJournal = head.nodes === 'journal';
    if (fromJournal && followed === null) throw new HandoverError('the serving daemon sent no node table, and none was loaded from its journal');
    if (!fromJournal && followed !== null) {
      // Compacted since it was followed: the export that came instead is imported.
      follow!.drop();
      followed = null;
    }
    // The session's descriptor, the locks', the four values', then the open files'.
    const fds = await c.recvFds(5_000);
    const nl = lockFiles.length;
    if (fds.length !== 1 + nl + 4 + head.files) {
      for (const fd of fds) raw.hs_handover_close(fd);
      throw new HandoverError('the serving daemon sent another number of descriptors than it announced');
    }
    marks.mark('fdsReceived');
    if (fromJournal) {
      const why = follow!.finish();
      followed = null;
      if (why !== null) {
        for (const fd of fds) raw.hs_handover_close(fd);
        throw new HandoverError(`the node table could not be caught up from the journal: ${why}`);
      }
      marks.mark('nodesCaughtUp');
    }
    const blobs = fds.slice(1 + nl, 1 + nl + 4);
    let values: Buffer[];
    let fs: HandedFs;
    try {
      values = blobs.map((fd) => readBlob(fd));
      if (!fromJournal) nodesRead?.(values[1]!);
      fs = parseFs(JSON.parse(values[3]!.toString('utf8')));
    } catch (err) {
      for (const fd of [fds[0]!, ...fds.slice(1, 1 + nl), ...fds.slice(1 + nl + 4)]) raw.hs_handover_close(fd);
      throw err;
    }
    const [init, nodes, dirs] = values as [Buffer, Buffer, Buffer];
    marks.mark('stateRead');
    log.info({ generation: head.generation, files: head.files, nodesFrom: fromJournal ? 'journal' : 'handed' }, 'session received');
    let done = false;
    return {
      generation: head.generation ?? 1,
      pausedAt: marks.origin,
      marks,
      session: { fd: fds[0]!, bufsize: head.bufsize, init, nodes, dirs, epoch: typeof head.epoch === 'number' ? head.epoch : 0 },
      locks: fds.slice(1, 1 + nl).map((fd, i) => ({ file: lockFiles[i] as string, fd })),
      fs,
      fsFds: fds.slice(1 + nl + 4),
      ready: async (pauseMs) => {
        done = true;
        await c.send({ ready: true, pauseMs });
        // The old daemon exits (its end closes) once it read READY.
        await c.gone(30_000);
        c.close();
      },
      abandon: (why) => {
        if (done) return;
        done = true;
        void c.send({ ready: false, why }).finally(() => c.close());
      },
    };
  } catch (err) {
    if (followed !== null) follow?.drop();
    c.close();
    throw err;
  }
}
