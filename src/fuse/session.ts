/**
 * The JavaScript side of the FUSE session (native/src/session/): the session
 * hands a request it does not answer natively to `dispatch(op, id, uid, gid,
 * pid, ...args)`; the op table (ops.ts) serves it and its answer goes back
 * through `reply(id, res, ...values)`. This file holds the session's life
 * (mount, adopt, revive, pause) and the values the session reads: stats as
 * words (native/src/session/marshal.c), open options as bits.
 */
import { ABI } from '../abi.js';
import type { AddonRaw, Handed } from '../addon-raw.js';
import type { Reply, Serve } from './ops.js';

const EIO = -5;

/** The addon's session exports (native/src/session/session.c, bridge.c). */
export type SessionRaw = Pick<
  AddonRaw,
  | 'hs_session_mount'
  | 'hs_session_loop_state'
  | 'hs_session_adopt'
  | 'hs_session_revive'
  | 'hs_session_fh_epoch'
  | 'hs_session_handle_stats'
  | 'hs_session_pause'
  | 'hs_session_paused'
  | 'hs_session_busy_ms'
  | 'hs_session_resume'
  | 'hs_session_handed'
  | 'hs_session_reply'
  | 'hs_session_unref'
  | 'hs_session_set_flush_gate'
>;

export type { Handed };

/** What a holder kept of a session whose daemon died: enough to serve it again. */
export interface Kept {
  fd: number;
  bufsize: number;
  init: Buffer;
  /** the epoch the reviver's handles carry (resume.ts chose it and stored it in the journal) */
  epoch: number;
}

/** Handle epochs are 16 bits and never 0 once a daemon revived a session (0: a predecessor without epochs). */
export function nextEpoch(epoch: number): number {
  const n = (epoch + 1) & 0xffff;
  return n === 0 ? 1 : n;
}

type Dispatch = Parameters<AddonRaw['hs_session_mount']>[4];

export interface SessionOptions {
  allowOther?: boolean;
  defaultPermissions?: boolean;
  nosuid?: boolean;
  nodev?: boolean;
  maxRead?: number;
  maxWrite?: number;
  bigWrites?: boolean;
  attrTimeout?: number;
  entryTimeout?: number;
  negativeTimeout?: number;
  kernelCache?: boolean;
  /** ask the kernel for READDIRPLUS at INIT: listings carry each entry's attributes and node (session/ops_dirs_plus.c) */
  readdirplus?: boolean;
  /** ask the kernel for passthrough at INIT and pass plain readers through (session/nodes.h, ops_files.c) */
  passthrough?: boolean;
  /** a file unlinked while open loses its name at once (no hidden name; handle ops get a null path) */
  hardRemove?: boolean;
  fsname?: string;
  subtype?: string;
  debug?: boolean;
}

export interface FuseInstance {
  mount(cb: (err: Error | null) => void): void;
  /** serve a session a predecessor handed over (takeover.ts) */
  adopt(h: Handed, cb: (err: Error | null) => void): void;
  /** serve a session whose daemon died, kept by a holder (its node table recovered first) */
  revive(k: Kept, cb: (err: Error | null) => void): void;
  handleStats(): { resent: number; refused: number; reopened: number; epoch: number };
  /** the resend notification's result after a revive: 0, or -errno (a kernel without FUSE_NOTIFY_RESEND) */
  readonly resendResult: number | undefined;
  pause(): void;
  paused(): boolean;
  resume(): void;
  /** how long JavaScript has held the oldest request it has not answered, in ms (0: none) */
  oldestHeldMs(): number;
  handed(withNodes?: boolean): Handed;
  unmount(cb: (err: Error | null) => void): void;
  loopState(): number;
  setFlushGate(gate: Uint16Array): void;
  /** told of each request as it reaches JavaScript; what it returns is called at the answer */
  tracker: ((op: number, args: readonly unknown[]) => (() => void) | undefined) | null;
}

/** The options of the kernel mount (fuse_mount) and of libfuse's low-level session. */
export function sessionOptions(o: SessionOptions): { mount: string; lowlevel: string } {
  const mount: string[] = [];
  if (o.allowOther) mount.push('allow_other');
  if (o.defaultPermissions) mount.push('default_permissions');
  if (o.nosuid) mount.push('nosuid');
  if (o.nodev) mount.push('nodev');
  if (o.maxRead !== undefined) mount.push(`max_read=${o.maxRead}`);
  if (o.fsname) mount.push(`fsname=${o.fsname}`);
  if (o.subtype) mount.push(`subtype=${o.subtype}`);
  const lowlevel: string[] = [];
  if (o.bigWrites) lowlevel.push('big_writes');
  if (o.maxWrite !== undefined) lowlevel.push(`max_write=${o.maxWrite}`);
  if (o.debug) lowlevel.push('debug');
  return { mount: mount.join(','), lowlevel: lowlevel.join(',') };
}

/**
 * The mount of one process (the session's state in C is process-wide).
 * `mount`'s callback fires when the kernel's INIT reached the session: the
 * mount answers from then on.
 */
export class FuseSession implements FuseInstance {
  private mountCb: ((err: Error | null) => void) | null = null;
  /** the requests JavaScript holds: id → when it got them (performance.now()); in the order they came */
  private readonly held = new Map<number, number>();
  /**
   * Told of each request as it reaches JavaScript; what it returns is called
   * once at the request's answer (fs/ledger-area.ts: changes in flight).
   */
  tracker: ((op: number, args: readonly unknown[]) => (() => void) | undefined) | null = null;

  constructor(
    private readonly raw: SessionRaw,
    private readonly mnt: string,
    private readonly serve: Serve,
    private readonly opts: SessionOptions,
    private readonly unmountImpl: (mnt: string, cb: (err: Error | null) => void) => void,
  ) {}

  mount(cb: (err: Error | null) => void): void {
    this.start(cb, (o, conf, dispatch) => this.raw.hs_session_mount(this.mnt, o.mount, o.lowlevel, conf, dispatch));
  }

  /**
   * Serve a session a predecessor handed over (its descriptor, INIT, nodes
   * and open directories): `cb` fires once the replayed INIT was accepted, as
   * `mount`'s does at the kernel's.
   */
  adopt(h: Handed, cb: (err: Error | null) => void): void {
    this.start(cb, (o, conf, dispatch) => {
      this.raw.hs_session_fh_epoch(h.epoch ?? 0);
      const res = this.raw.hs_session_adopt(h.fd, h.bufsize, h.init, h.nodes, h.dirs, o.lowlevel, conf, dispatch);
      if (res !== 0) throw new Error(`adopting the session failed: errno ${-res}`);
    });
  }

  /**
   * Serve a session whose daemon died (kept by a holder), on the node table
   * recovered from its journal before this: the kernel sends again what the
   * dead daemon read and never answered. `cb` fires once the replayed INIT
   * was accepted. Returns nothing; a resend the kernel refused is logged by
   * the caller from `resendResult`.
   */
  revive(k: Kept, cb: (err: Error | null) => void): void {
    this.start(cb, (o, conf, dispatch) => {
      const [res, resend] = this.raw.hs_session_revive(k.fd, k.bufsize, k.init, k.epoch, o.lowlevel, conf, dispatch);
      if (res !== 0) throw new Error(`reviving the session failed: errno ${-res}`);
      this.resendResult = resend;
    });
  }

  /** The result of the resend notification of the last revive (0, or -errno: a kernel without FUSE_NOTIFY_RESEND). */
  resendResult: number | undefined;

  /** Requests sent again, of them answered EIO, dead handles reopened (handles.c). */
  handleStats(): { resent: number; refused: number; reopened: number; epoch: number } {
    const [resent, refused, reopened] = this.raw.hs_session_handle_stats();
    return { resent, refused, reopened, epoch: this.raw.hs_session_fh_epoch() };
  }

  /** Stop reading requests at request boundaries (never blocks). */
  pause(): void {
    this.raw.hs_session_pause();
  }

  /**
   * How long the oldest request not yet answered has been held, in ms (0:
   * none): by JavaScript, or by a worker that answers it itself (a native
   * cut of a big file frees its blocks for seconds on the worker). A handover
   * pauses the session only when this is short: a pause waits for every
   * request held.
   */
  oldestHeldMs(): number {
    let js = 0;
    for (const since of this.held.values()) {
      js = performance.now() - since;
      break;
    }
    return Math.max(js, this.raw.hs_session_busy_ms());
  }

  /** Every worker parked and no request waiting for JavaScript. */
  paused(): boolean {
    return this.raw.hs_session_paused();
  }

  resume(): void {
    this.raw.hs_session_resume();
  }

  /** `withNodes` false: no node table (a successor that followed the journal has it); `nodes` is empty. */
  handed(withNodes = true): Handed {
    return this.raw.hs_session_handed(withNodes);
  }

  private start(cb: (err: Error | null) => void, begin: (o: { mount: string; lowlevel: string }, conf: number[], dispatch: Dispatch) => void): void {
    const raw = this.raw;
    this.mountCb = cb;
    const serve = this.serve;
    const held = this.held;
    const dispatch: Dispatch = (op, id, uid, gid, pid, ...args) => {
      let answered = false;
      held.set(id, performance.now());
      const untrack = this.tracker?.(op, args);
      const reply: Reply = (res, ...values) => {
        if (answered) return;
        answered = true;
        held.delete(id);
        raw.hs_session_reply(id, res, ...values);
        // After the answer: a crash before it leaves the change marked in flight.
        untrack?.();
      };
      try {
        if (op !== ABI.OP_INIT) return serve(op, args, { uid, gid, pid }, reply);
        // The kernel's INIT (or the replayed one) reached the session: the mount answers from here on.
        const done = this.mountCb;
        this.mountCb = null;
        if (done) process.nextTick(done, null);
        reply(0);
      } catch {
        // A throw is a bug of the op; the request is answered, never left waiting.
        reply(EIO);
      }
    };
    const o = sessionOptions(this.opts);
    const conf = [this.opts.attrTimeout ?? 1, this.opts.entryTimeout ?? 1, this.opts.negativeTimeout ?? 0, this.opts.kernelCache ? 1 : 0, this.opts.hardRemove ? 1 : 0, this.opts.readdirplus ? 1 : 0, this.opts.passthrough ? 1 : 0];
    try {
      begin(o, conf, dispatch);
    } catch (err) {
      this.mountCb = null;
      process.nextTick(cb, err as Error);
    }
  }

  unmount(cb: (err: Error | null) => void): void {
    this.raw.hs_session_unref();
    this.unmountImpl(this.mnt, cb);
  }

  /** 0 not started, 1 serving, 2 ended (the mount went: an external umount -l) */
  loopState(): number {
    return this.raw.hs_session_loop_state();
  }

  /** slot fh & 0xffff > 0 of the caller's Uint16Array(65536): FLUSH of fh goes to ops.flush; 0: answered natively */
  setFlushGate(gate: Uint16Array): void {
    if (!(gate instanceof Uint16Array) || gate.length !== 65536) throw new TypeError('the flush gate is a Uint16Array(65536)');
    this.raw.hs_session_set_flush_gate(Buffer.from(gate.buffer, gate.byteOffset, gate.byteLength));
  }
}
