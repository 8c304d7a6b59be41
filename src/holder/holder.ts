/**
 * The holder: a small root-only process that keeps a FUSE session alive
 * through a crash of the daemon serving it (kill -9, OOM), by holding a copy
 * of the session's /dev/fuse descriptor, and hands it to the next daemon
 * that claims it (protocol.ts). While it holds the descriptor the kernel
 * keeps the connection: processes in the mount wait instead of failing with
 * ENOTCONN. It closes it when the session is released (a plain stop), when
 * it is signalled, or when the connection is gone anyway (unmounted,
 * aborted): then processes in the mount get ENOTCONN.
 *
 * Invariants:
 * - The holder never reads the /dev/fuse descriptor (a request read here is a
 *   request no daemon answers); it only polls it with no events, which
 *   returns once the connection is gone (native/src/handover/holder.c).
 * - It holds at most one registration, the latest: a new one's descriptors
 *   are in before the previous one's close, so the session is never unheld.
 * - A claim hands out copies and keeps the holder's own until the claimer
 *   registers: a claimer that dies before it serves loses nothing.
 * - The registered daemon's liveness decides only whether a claim is refused
 *   (a live daemon is taken over, not claimed) and what is logged. It is that
 *   of the process at the other end of the registration's connection (a
 *   pidfd from the socket, holder.c), never of whatever process has the pid
 *   the message names: a registration names its sender or is refused, and a
 *   sender already gone is stored as dead, so the next start resumes.
 * - Only the registered daemon itself ends a kept session (RELEASE): the sender
 *   is the socket's peer (holder.c), never the pid the message names.
 * - A bad message gets an ERROR reply on its connection; the holder serves on.
 */
import { closeSync, readSync, statSync, unlinkSync } from 'node:fs';
import type { Logger } from '../log.js';
import { HandoverError, HandoverListener, type HandoverConn, type HandoverRaw } from '../fuse/handover-channel.js';
import { fdCount, HOLDER_PROTOCOL, parseRequest, sameTree, type HolderStatus, type Registration, type Request } from './protocol.js';
import type { AddonRaw } from '../addon-raw.js';

export type HolderRaw = HandoverRaw & Pick<AddonRaw, 'hs_handover_holder_poll' | 'hs_handover_holder_peer' | 'hs_handover_holder_session'>;

const POLLIN = 0x1;
const POLLERR = 0x8;
const POLLHUP = 0x10;
const POLLNVAL = 0x20;
const ESRCH = 3;
/** How often the session and the daemon are looked at. */
const WATCH_MS = 200;
/** A holder nobody registered with (its spawner died first) leaves after this. */
const IDLE_EXIT_MS = 60_000;

interface Held {
  reg: Registration;
  fuseFd: number;
  initFd: number;
  journalFds: number[];
  pidfd: number | null;
  daemonAlive: boolean;
}

export class Holder {
  private held: Held | null = null;
  private listener: HandoverListener | null = null;
  private watch: NodeJS.Timeout | null = null;
  private socketIno: number | null = null;
  private readonly started = Date.now();

  constructor(
    private readonly raw: HolderRaw,
    private readonly socket: string,
    private readonly log: Logger,
    /** the process leaves with this code (main.ts: process.exit once the log is flushed) */
    private readonly exit: (code: number) => void,
  ) {}

  /** Listen (the socket is 0600, root peers only: handover.c) and watch. */
  start(): void {
    this.listener = HandoverListener.listen(this.raw, this.socket);
    this.socketIno = statSync(this.socket).ino;
    this.listener.start(
      (c) => this.serve(c),
      (errno) => this.log.warn({ errno }, 'a connection that is not root was refused'),
    );
    this.watch = setInterval(() => this.look(), WATCH_MS);
    this.log.info({ socket: this.socket }, 'holder listening');
  }

  /** Close everything and leave (the session's copy closes with it). */
  stop(code: number, why: string): void {
    this.listener?.close();
    this.listener = null;
    if (this.watch) clearInterval(this.watch);
    this.watch = null;
    // Only our own socket file: a holder started after us may have replaced it.
    try {
      if (this.socketIno !== null && statSync(this.socket).ino === this.socketIno) unlinkSync(this.socket);
    } catch {
      // already gone
    }
    if (this.held) this.closeHeld(this.held);
    this.held = null;
    this.log.info({ reason: why }, 'holder exiting');
    this.exit(code);
  }

  status(): HolderStatus {
    const h = this.held;
    return { holder: process.pid, registered: h !== null, daemonPid: h?.reg.pid ?? null, daemonAlive: h ? h.daemonAlive : null, generation: h?.reg.generation ?? null, mount: h?.reg.mount ?? null };
  }

  private look(): void {
    const h = this.held;
    if (!h) {
      if (Date.now() - this.started > IDLE_EXIT_MS) this.stop(0, 'nothing was registered');
      return;
    }
    const r = this.raw.hs_handover_holder_poll(h.fuseFd, 0);
    if (r < 0 || (r & (POLLERR | POLLHUP | POLLNVAL)) !== 0) return this.stop(0, 'the session is gone (unmounted or aborted)');
    if (h.daemonAlive && h.pidfd !== null && (this.raw.hs_handover_holder_poll(h.pidfd, POLLIN) & POLLIN) !== 0) {
      h.daemonAlive = false;
      this.log.warn({ daemon: h.reg.pid, mount: h.reg.mount, generation: h.reg.generation }, 'the daemon died: its session is kept for the next serve --config of this configuration');
    }
  }

  private async serve(c: HandoverConn): Promise<void> {
    let msg: unknown;
    let fds: number[];
    try {
      ({ msg, fds } = await c.recv(5_000));
    } catch (err) {
      // Garbage (not JSON), a cut message, a silent peer: told, if it still listens.
      await c.send({ error: err instanceof HandoverError ? err.message : String(err) }).catch(() => undefined);
      return;
    }
    const req = parseRequest(msg);
    if ('error' in req) {
      this.closeAll(fds);
      this.log.warn({ error: req.error }, 'a bad request was refused');
      return void (await c.send({ error: req.error }).catch(() => undefined));
    }
    if (req.op !== 'register' && fds.length > 0) {
      this.closeAll(fds);
      return void (await c.send({ error: `${req.op} carries no descriptors` }).catch(() => undefined));
    }
    try {
      await this.answer(c, req, fds);
    } catch (err) {
      this.log.warn({ op: req.op, err: (err as Error).message }, 'a request failed');
    }
  }

  private async answer(c: HandoverConn, req: Request, fds: number[]): Promise<void> {
    switch (req.op) {
      case 'status':
        return c.send({ protocol: HOLDER_PROTOCOL, ...this.status() });
      case 'register':
        return c.send(this.register(c.fd, req.reg, req.journal, fds));
      case 'claim':
        return this.claim(c, req);
      case 'release': {
        const h = this.held;
        const why = h === null ? null : (sameTree(req, h.reg) ?? this.notTheDaemon(c.fd, h));
        if (why !== null) {
          this.log.warn({ named: req.pid, daemon: h?.reg.pid, reason: why }, 'a release was refused');
          return c.send({ refused: why });
        }
        await c.send({ ok: true });
        return this.stop(0, `released by the daemon (pid ${h?.reg.pid ?? req.pid}) at its stop`);
      }
    }
  }

  /**
   * Why the process at the other end of `conn` is not the registered daemon (null: it is).
   * Decided by the socket's peer, never by the pid the message names (any root process can
   * name one): its pid as the kernel recorded it at connect(), and the registered daemon
   * alive now (its pidfd not readable), so that pid was never freed in between and the peer
   * is that very process. A dead daemon releases nothing: its session is kept for the next start.
   */
  private notTheDaemon(conn: number, h: Held): string | null {
    const peer = this.raw.hs_handover_holder_peer(conn);
    if (typeof peer === 'number') return `the releasing process cannot be identified: errno ${-peer}`;
    if (peer.pidfd >= 0) this.closeAll([peer.pidfd]);
    if (h.pidfd !== null && (this.raw.hs_handover_holder_poll(h.pidfd, POLLIN) & POLLIN) !== 0) h.daemonAlive = false;
    if (!h.daemonAlive) return `the registered daemon (pid ${h.reg.pid}) is gone: its session is kept for the next start`;
    if (peer.pid !== h.reg.pid) return `pid ${peer.pid} is not the registered daemon (${h.reg.pid})`;
    return null;
  }

  private register(conn: number, reg: Registration, journal: number, fds: number[]): object {
    if (fds.length !== fdCount(journal)) {
      this.closeAll(fds);
      return { error: `a registration carries ${fdCount(journal)} descriptors (the session's, INIT's, ${journal} of the journal), not ${fds.length}` };
    }
    const prev = this.held;
    if (prev !== null && sameTree(reg, prev.reg) !== null) {
      this.closeAll(fds);
      return { refused: `this holder keeps the session of another tree: ${sameTree(reg, prev.reg)}` };
    }
    const peer = this.raw.hs_handover_holder_peer(conn);
    if (typeof peer === 'number') {
      this.closeAll(fds);
      return { error: `the registering process cannot be identified: errno ${-peer}` };
    }
    if (peer.pid !== reg.pid) {
      this.closeAll(peer.pidfd >= 0 ? [...fds, peer.pidfd] : fds);
      this.log.warn({ named: reg.pid, sender: peer.pid }, 'a registration for another process was refused');
      return { refused: `the registration names pid ${reg.pid} but comes from pid ${peer.pid}: a daemon registers itself` };
    }
    // Gone already (killed between its send and now): kept for the next start to resume, not
    // taken for a daemon that runs (which would refuse every start until the holder is killed).
    const gone = peer.pidfd === -ESRCH || (peer.pidfd >= 0 && (this.raw.hs_handover_holder_poll(peer.pidfd, POLLIN) & POLLIN) !== 0);
    let pidfd: number | null = peer.pidfd >= 0 ? peer.pidfd : null;
    if (gone && pidfd !== null) {
      this.closeAll([pidfd]);
      pidfd = null;
    }
    // Not known (no descriptor left?): taken for alive, as two daemons reading one session is the worse error.
    if (!gone && pidfd === null) this.log.warn({ daemon: reg.pid, errno: -peer.pidfd }, 'no pidfd for the registered daemon: its death will not be noticed');
    const [fuseFd, initFd, ...journalFds] = fds as [number, number, ...number[]];
    // The new descriptors are in before the old ones close: the session is held throughout.
    this.held = { reg, fuseFd, initFd, journalFds, pidfd, daemonAlive: !gone };
    if (prev) this.closeHeld(prev);
    this.log.info({ daemon: reg.pid, mount: reg.mount, generation: reg.generation, epoch: reg.epoch, journal: journalFds.length, initBytes: this.initSize(initFd) }, 'session registered');
    if (gone) this.log.warn({ daemon: reg.pid, mount: reg.mount, generation: reg.generation }, 'the registering daemon is already gone: its session is kept for the next serve --config of this configuration');
    return { ok: true };
  }

  private async claim(c: HandoverConn, req: Extract<Request, { op: 'claim' }>): Promise<void> {
    const h = this.held;
    if (h === null) return c.send({ none: true });
    const other = sameTree(req, h.reg);
    if (other !== null) {
      this.log.warn({ claimer: req.pid, reason: other }, 'claim refused');
      return c.send({ refused: other });
    }
    if (h.daemonAlive) {
      this.look();
      if (h.daemonAlive) {
        const why = `the daemon serving this session (pid ${h.reg.pid}) still runs: stop it, or take its session over with serve --takeover`;
        this.log.warn({ claimer: req.pid, daemon: h.reg.pid }, 'claim refused: the registered daemon runs');
        return c.send({ refused: why });
      }
    }
    // Copies go (SCM_RIGHTS); ours stay until the claimer registers.
    await c.send({ kept: h.reg, journal: h.journalFds.length, holder: process.pid }, [h.fuseFd, h.initFd, ...h.journalFds]);
    this.log.info({ claimer: req.pid, generation: h.reg.generation }, 'session handed to a claimer (kept here until it registers)');
  }

  /** INIT's size, for the log; read with pread (the claimer shares the file offset). */
  private initSize(fd: number): number {
    try {
      const b = Buffer.alloc(8);
      return readSync(fd, b, 0, 8, 0) >= 4 ? b.readUInt32LE(0) : 0;
    } catch {
      return -1;
    }
  }

  private closeHeld(h: Held): void {
    this.closeAll([h.fuseFd, h.initFd, ...h.journalFds, ...(h.pidfd !== null ? [h.pidfd] : [])]);
  }

  private closeAll(fds: number[]): void {
    for (const fd of fds) {
      try {
        closeSync(fd);
      } catch {
        // not ours any more
      }
    }
  }
}
