/**
 * A serving daemon's tie to the holder process that keeps its session
 * (client.ts, holder.ts): the first registration, then a watch on the holder
 * that took it, and a registration again whenever that holder goes away and
 * one answers on holder.sock again. Under systemd the fd store keeps the
 * session instead and nothing here runs (daemon.ts).
 *
 * Why: the holder the daemon registered with is not always one that lives as
 * long as the session. In Kubernetes a rollout's new daemon registers with the
 * holder that answers then, the old pod's, which goes with that pod; the
 * `holder` container's loop starts a new one about 5 s later. A holder can be
 * killed under a running daemon, too. Without a registration again, a crash
 * of the daemon would end the session until the daemon's next start.
 *
 * How:
 * - The holder that answered is watched through a pidfd from the
 *   registration's own connection (SO_PEERPIDFD: the very process that
 *   listens, in whatever pid namespace it runs; native/src/handover/holder.c),
 *   which becomes readable once it exited (its copy of the session closed
 *   with it): a wait on the event loop (FdWatch), so a registered daemon is
 *   never woken to look.
 * - Lost (or never registered), the daemon asks again every WATCH_MS: in
 *   `holder: 'spawn'` it spawns a holder first when none answers (a shell: no
 *   one else would), in `holder: 'external'` it only registers with one that
 *   answers (a holder spawned from the daemon's container would die with it).
 * - A holder that answered but refused or failed the registration is asked
 *   again once it is gone, or after RETRY_MS (its reason may have passed);
 *   a spawn that failed is tried again after RETRY_MS.
 *
 * Invariants: at most one registration in flight, and none once pause() or
 * stop() has resolved: a daemon handing its session over must not register a
 * session it no longer serves after its successor did (the holder keeps the
 * latest registration). One log line when the holder is lost, one when the
 * session is registered again; a failure is logged once until the next
 * success (not at every WATCH_MS).
 */
import type { Config } from '../config/schema.js';
import type { Logger } from '../log.js';
import { register, RegisterError, type HolderClientRaw, type HolderPeer, type RegisterArgs } from './client.js';
import { holderSocket } from './protocol.js';
import type { AddonRaw } from '../addon-raw.js';
import { FdWatch, type FdWatchRaw } from '../fd-watch.js';

export type HolderLinkRaw = HolderClientRaw & Pick<AddonRaw, 'hs_handover_holder_poll'> & FdWatchRaw;

const POLLIN = 0x1;
/** How often a lost holder's socket is asked (and a holder that refused us looked at). */
const WATCH_MS = 250;
/** A holder that refused us and still runs, or a spawn that failed: asked again after this. */
const RETRY_MS = 30_000;

type State =
  | { kind: 'registered'; holder: HolderPeer; at: number }
  | {
      kind: 'unregistered';
      /** since when: the holder's loss, or the first registration's attempt */
      since: number;
      /** we were registered before (a loss), not yet (the start) */
      lost: boolean;
      /** a holder that answered and refused: asked again once it is gone (or at retryAt) */
      refusedBy: HolderPeer | null;
      retryAt: number;
      /** the failure last logged (logged once until it changes) */
      logged: string | null;
    };

export class HolderLink {
  private state: State = { kind: 'unregistered', since: Date.now(), lost: false, refusedBy: null, retryAt: 0, logged: null };
  /** while unregistered: asks again every WATCH_MS */
  private timer: NodeJS.Timeout | null = null;
  /** while registered with a holder whose pidfd we have: its exit */
  private watch: FdWatch | null = null;
  private inflight: Promise<void> | null = null;
  private running = false;
  private stopped = false;
  private watchFailed = false;

  constructor(
    private readonly raw: HolderLinkRaw,
    private readonly config: Config,
    private readonly args: RegisterArgs,
    private readonly log: Logger,
  ) {}

  /** The first registration (awaited: the daemon says it serves after it), then the watch. */
  async start(): Promise<void> {
    this.inflight = this.attempt().finally(() => (this.inflight = null));
    await this.inflight;
    this.resume();
  }

  /** Registered with a holder that has not gone (as far as the last look saw). */
  get registered(): boolean {
    return this.state.kind === 'registered';
  }

  /** No registration from now on until resume(); one in flight is awaited. */
  async pause(): Promise<void> {
    this.running = false;
    this.schedule();
    await this.inflight;
  }

  resume(): void {
    if (this.stopped) return;
    this.running = true;
    this.schedule();
  }

  /**
   * The wait the state calls for: the holder's exit while registered, the
   * timer while not, nothing while paused. A pidfd the event loop cannot
   * watch is looked at on the timer instead.
   */
  private schedule(): void {
    const s = this.state;
    const on = this.running && !this.stopped;
    const pidfd = on && s.kind === 'registered' ? s.holder.pidfd : null;
    if (pidfd === null) {
      this.watch?.close();
      this.watch = null;
    } else if (this.watch === null && !this.watchFailed) {
      try {
        this.watch = new FdWatch(this.raw, pidfd, () => this.tick());
      } catch (err) {
        this.watchFailed = true;
        this.log.warn({ err: (err as Error).message, holder: s.kind === 'registered' ? s.holder.pid || undefined : undefined }, `the holder's exit cannot be waited for: it is looked for every ${WATCH_MS} ms`);
      }
    }
    const poll = on && (s.kind === 'unregistered' || (pidfd !== null && this.watch === null));
    if (poll && this.timer === null) {
      this.timer = setInterval(() => this.tick(), WATCH_MS);
      this.timer.unref();
    } else if (!poll && this.timer !== null) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }

  /** For good (a stop, a handover): paused, and the watched holder's pidfd closed. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.pause();
    const s = this.state;
    this.close(s.kind === 'registered' ? s.holder : s.refusedBy);
  }

  private tick(): void {
    if (this.inflight !== null || this.stopped || !this.running) return;
    const s = this.state;
    const now = Date.now();
    if (s.kind === 'registered') {
      if (!this.exited(s.holder)) return this.watch?.arm();
      this.watch?.close();
      this.watch = null;
      this.close(s.holder);
      this.state = { kind: 'unregistered', since: now, lost: true, refusedBy: null, retryAt: now, logged: null };
      this.log.warn(
        { holder: s.holder.pid || undefined, registeredMs: now - s.at, socket: holderSocket(this.config) },
        this.config.holder === 'spawn'
          ? 'the holder keeping the session is gone: a crash of this daemon would end the session; spawning another'
          : 'the holder keeping the session is gone: a crash of this daemon would end the session until a holder answers again',
      );
    } else if (s.refusedBy !== null && this.exited(s.refusedBy)) {
      this.close(s.refusedBy);
      s.refusedBy = null;
      s.retryAt = now;
    }
    if (this.state.kind === 'unregistered' && now >= this.state.retryAt) {
      this.inflight = this.attempt().finally(() => {
        this.inflight = null;
        this.schedule();
      });
    }
    this.schedule();
  }

  private async attempt(): Promise<void> {
    const before = this.state;
    if (before.kind !== 'unregistered') return;
    const socket = holderSocket(this.config);
    try {
      const holder = await register(this.raw, this.config, this.args, this.log, { spawn: this.config.holder === 'spawn' });
      this.close(before.refusedBy);
      const now = Date.now();
      this.state = { kind: 'registered', holder, at: now };
      const fields = { socket, holder: holder.pid || undefined, generation: this.args.generation };
      if (!before.lost) this.log.info(before.logged === null ? fields : { ...fields, unregisteredMs: now - before.since }, 'session registered with the holder');
      else this.log.info({ ...fields, unregisteredMs: now - before.since }, 'session registered with the holder again');
    } catch (err) {
      const e = err instanceof RegisterError ? err : new RegisterError((err as Error).message, null);
      this.close(before.refusedBy);
      // Nobody answers (external): asked again at the next look. A holder that refused: once it
      // is gone, or after RETRY_MS. A spawn or anything else that failed: after RETRY_MS.
      const refusedBy = e.holder !== null && e.holder.pidfd !== null ? e.holder : null;
      const retryAt = Date.now() + (e.none ? 0 : RETRY_MS);
      if (before.logged !== e.message) {
        const fields = { err: e.message, socket, holder: e.holder?.pid || undefined, retryMs: e.none ? WATCH_MS : RETRY_MS, retryWhenGone: refusedBy !== null || undefined };
        if (!before.lost && before.logged === null) this.log.error(fields, "the session is not registered with a holder or systemd's fd store: a crash of this daemon ends it");
        else this.log.warn(fields, 'the session is still not registered with a holder');
      }
      this.state = { kind: 'unregistered', since: before.since, lost: before.lost, refusedBy, retryAt, logged: e.message };
    }
  }

  private exited(h: HolderPeer): boolean {
    // No pidfd: its exit cannot be seen (taken for alive; `homesctl status` asks the holder itself).
    if (h.pidfd === null) return false;
    // A pidfd that cannot be polled any more is taken for gone: asking again costs one registration.
    const r = this.raw.hs_handover_holder_poll(h.pidfd, POLLIN);
    return r < 0 || (r & POLLIN) !== 0;
  }

  private close(h: HolderPeer | null): void {
    if (h === null || h.pidfd === null) return;
    this.raw.hs_handover_close(h.pidfd);
    h.pidfd = null;
  }
}
