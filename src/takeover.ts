/**
 * Live upgrade: a daemon started with `--takeover` takes the running one's
 * session (the /dev/fuse connection with its negotiated INIT, the node table,
 * open directories and open files) over a root-only socket, so processes in
 * homes see a pause instead of ENOTCONN. The protocol, step by step, and why
 * each step is safe, is in native-notes/fuse-native.md ("Handing the session
 * over").
 *
 *   successor                      serving daemon
 *   HELLO {backing, mount, state} ─▶ checks they are its own, else REFUSED
 *                                   waits for control commands in flight, closes its sockets
 *                                   pauses the session at a request boundary, waits until
 *                                   no request is left with JavaScript
 *                                   flushes its state file, releases its locks
 *                 ◀─ STATE {generation, session, fs} + blobs + descriptors
 *   takes the locks, builds its context, adopts the files, then the session
 *   READY ──────────────────────────▶ exits 0 without unmounting
 *   (a successor that fails or is silent for 30 s before READY: the serving
 *    daemon takes its locks back and resumes, as if nothing had happened)
 */
import path from 'node:path';
import type { Config } from './config/schema.js';
import { stateFileOf } from './config/load.js';
import type { Logger } from './log.js';
import type { HandedFs } from './fs/handover.js';
import { HandoverError, handoverConnect, HandoverListener, type HandoverConn, type HandoverRaw } from './fuse/handover-channel.js';
import type { Handed } from './fuse/session.js';

export const TAKEOVER_PROTOCOL = 1;
/** How long the serving daemon waits for the successor's READY before it takes its session back. */
const READY_WAIT_MS = 30_000;
/** How long it waits for the requests JavaScript still answers before it gives up on a handover. */
const DRAIN_WAIT_MS = 5_000;

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
  handed(): Handed;
  exportFs(): { state: HandedFs; fds: number[] };
  releaseLocks(): Promise<void>;
  retakeLocks(): void;
  /** the successor (its pid as it said in HELLO) serves: leave without unmounting */
  handedOver(pauseMs: number, successorPid: number | undefined): void;
}

export interface Hello {
  hello: number;
  backing: string;
  mount: string;
  state: string;
  pid: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The serving daemon: answers successors on its takeover socket. */
export function listenForSuccessors(raw: HandoverRaw, host: HandingHost): HandoverListener {
  const sock = takeoverSocket(host.config);
  const l = HandoverListener.listen(raw, sock);
  l.start(
    (c) => handOver(c, host).catch((err: Error) => host.log.error({ err: err.message }, 'handover failed; serving on')),
    (errno) => host.log.warn({ errno }, 'takeover socket: a connection that is not root was refused'),
  );
  host.log.info({ socket: sock }, 'takeover socket listening');
  return l;
}

async function handOver(c: HandoverConn, host: HandingHost): Promise<void> {
  const log = host.log;
  const { msg } = await c.recv(5_000);
  const hello = msg as Partial<Hello>;
  const own = { backing: path.resolve(host.config.backing), mount: path.resolve(host.config.mount), state: path.resolve(stateFileOf(host.config)) };
  if (hello.hello !== TAKEOVER_PROTOCOL) return c.send({ refused: `protocol ${String(hello.hello)} is not ${TAKEOVER_PROTOCOL}` });
  for (const k of ['backing', 'mount', 'state'] as const) {
    if (typeof hello[k] !== 'string' || path.resolve(hello[k]) !== own[k]) {
      log.warn({ successor: hello.pid, [k]: hello[k], ours: own[k] }, 'takeover refused: the successor serves another tree');
      return c.send({ refused: `${k} ${String(hello[k])} is not this daemon's (${own[k]})` });
    }
  }
  log.info({ successor: hello.pid }, 'handing the session over');
  const restartControl = await host.quiesceControl();
  const started = Date.now();
  host.pause();
  let locksGiven = false;
  const takeBack = async (why: string) => {
    if (locksGiven) host.retakeLocks();
    host.resume();
    await restartControl();
    log.warn({ successor: hello.pid, reason: why }, 'handover abandoned: serving on');
  };
  try {
    for (const until = Date.now() + DRAIN_WAIT_MS; !host.paused(); await sleep(1)) {
      if (Date.now() >= until) {
        await c.send({ refused: 'requests in flight did not finish in time' }).catch(() => undefined);
        return await takeBack('requests in flight did not finish in time');
      }
    }
    const session = host.handed();
    const fs = host.exportFs();
    await host.releaseLocks();
    locksGiven = true;
    await c.send({ state: TAKEOVER_PROTOCOL, generation: host.generation + 1, pausedAt: started, bufsize: session.bufsize, files: fs.fds.length });
    await c.sendBlob(session.init);
    await c.sendBlob(session.nodes);
    await c.sendBlob(session.dirs);
    await c.sendBlob(Buffer.from(JSON.stringify(fs.state)));
    await c.sendFds([session.fd, ...fs.fds]);
    const { msg: ready } = await c.recv(READY_WAIT_MS);
    if ((ready as { ready?: unknown }).ready !== true) return await takeBack(`the successor said ${JSON.stringify(ready).slice(0, 200)}`);
    const pauseMs = (ready as { pauseMs?: number }).pauseMs ?? Date.now() - started;
    log.info({ successor: hello.pid, pauseMs, files: fs.fds.length }, 'session handed over: exiting without unmounting');
    host.handedOver(pauseMs, hello.pid);
  } catch (err) {
    await takeBack(err instanceof HandoverError ? err.message : String(err));
  }
}

/** What the successor receives. */
export interface Received {
  generation: number;
  pausedAt: number;
  session: Handed;
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
export async function takeOverFrom(raw: HandoverRaw, config: Config, log: Logger, parseFs: (v: unknown) => HandedFs): Promise<Received> {
  const c = handoverConnect(raw, takeoverSocket(config));
  try {
    const hello: Hello = { hello: TAKEOVER_PROTOCOL, backing: path.resolve(config.backing), mount: path.resolve(config.mount), state: path.resolve(stateFileOf(config)), pid: process.pid };
    await c.send(hello);
    const { msg } = await c.recv(DRAIN_WAIT_MS + 5_000);
    const head = msg as { refused?: string; state?: number; generation?: number; pausedAt?: number; bufsize?: number; files?: number };
    if (head.refused !== undefined) throw new HandoverError(`the serving daemon refused the takeover: ${head.refused}`);
    if (head.state !== TAKEOVER_PROTOCOL || typeof head.bufsize !== 'number' || typeof head.files !== 'number') throw new HandoverError('the serving daemon answered something else than its state');
    const init = await c.recvBlob(5_000);
    const nodes = await c.recvBlob(5_000);
    const dirs = await c.recvBlob(5_000);
    const fs = parseFs(JSON.parse((await c.recvBlob(5_000)).toString('utf8')));
    const fds = await c.recvFds(5_000);
    if (fds.length !== head.files + 1) throw new HandoverError('the serving daemon sent another number of descriptors than it announced');
    log.info({ generation: head.generation, files: head.files }, 'session received');
    let done = false;
    return {
      generation: head.generation ?? 1,
      pausedAt: head.pausedAt ?? Date.now(),
      session: { fd: fds[0]!, bufsize: head.bufsize, init, nodes, dirs },
      fs,
      fsFds: fds.slice(1),
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
    c.close();
    throw err;
  }
}
