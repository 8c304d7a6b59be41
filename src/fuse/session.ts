/**
 * The JavaScript side of the FUSE session (native/src/session/): the session
 * hands a request it does not answer natively to `dispatch(op, id, uid, gid,
 * pid, ...args)`; the op of NativeOps runs and its callback answers through
 * `reply(id, res, ...values)`. Ops keep the dialect the adapter speaks (paths,
 * a negative errno or 0 first, the caller last); this file only converts
 * values: stats to the words the session reads (native/src/session/marshal.c),
 * open options to their bits.
 */
import { ABI } from '../abi.js';
import type { TimeSpec } from '../fs/native-api.js';
import type { Caller } from '../fs/state.js';
import type { FuseInstance, NativeOps, OpenOpts } from './binding.js';

const EIO = -5;
const ENOSYS = -38;

/** The addon's session exports (native/src/session/session.c, bridge.c). */
export interface SessionRaw {
  session_mount(mnt: string, mountOpts: string, lowlevelOpts: string, conf: number[], dispatch: Dispatch): void;
  session_loop_state(): number;
  session_stats(): [number, number, number];
  session_invalidate(kind: number, path: string): number;
  session_inval_stats(): [number, number, number, number, number];
  session_inval_progress(): [number, number];
  session_adopt(fd: number, bufsize: number, init: Buffer, nodes: Buffer, dirs: Buffer, lowlevelOpts: string, conf: number[], dispatch: Dispatch): number;
  session_revive(fd: number, bufsize: number, init: Buffer, epoch: number, lowlevelOpts: string, conf: number[], dispatch: Dispatch): [number, number];
  session_fh_epoch(set?: number): number;
  session_handle_stats(): [number, number, number];
  session_pause(): void;
  session_paused(): boolean;
  session_resume(): void;
  session_handed(withNodes?: boolean): Handed;
  /**
   * The node table's crash journal (native/src/handover/nodes_journal.h):
   * two memfds for the holder to keep ([fd0, fd1], or -errno); a recovery
   * into a fresh table from them (the stored epoch, or -errno); a rebase
   * after a live handover's import (0 or -errno); the stored epoch, set
   * first when given (the epoch, or -ENOENT: no journal).
   */
  handover_journal_open(): [number, number] | number;
  handover_journal_recover(fd0: number, fd1: number): number;
  handover_journal_rebase(fd0: number, fd1: number): number;
  handover_journal_epoch(set?: number): number;
  session_reply(id: number, res: number, ...values: unknown[]): void;
  session_unref(): void;
  session_set_flush_gate(gate: Buffer): void;
}

/** What a successor needs of a paused session (session.c `session_handed`). */
export interface Handed {
  /** the /dev/fuse descriptor (this process's; sent as a copy) */
  fd: number;
  bufsize: number;
  /** the kernel's INIT request, replayed into the successor's libfuse state */
  init: Buffer;
  /** the node table and the open directories, serialised (nodes.c, handover/dirs_handover.c) */
  nodes: Buffer;
  dirs: Buffer;
  /** the epoch in the handles the kernel holds (handles.h); absent from a predecessor that had none: 0 */
  epoch?: number;
}

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

type Dispatch = (op: number, id: number, uid: number, gid: number, pid: number, ...args: unknown[]) => void;

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
  /** a file unlinked while open loses its name at once (no hidden name; handle ops get a null path) */
  hardRemove?: boolean;
  fsname?: string;
  subtype?: string;
  debug?: boolean;
}

// ---- values ---------------------------------------------------------------------

type StatLike = {
  mode?: number | bigint;
  uid?: number | bigint;
  gid?: number | bigint;
  size?: number | bigint;
  dev?: number | bigint;
  nlink?: number | bigint;
  ino?: number | bigint;
  rdev?: number | bigint;
  blksize?: number | bigint;
  blocks?: number | bigint;
  atimeNs?: bigint;
  mtimeNs?: bigint;
  ctimeNs?: bigint;
};

const u32 = (v: unknown): number => (typeof v === 'bigint' ? Number(BigInt.asUintN(32, v)) : typeof v === 'number' && Number.isFinite(v) ? v >>> 0 : 0);

function put64(w: Uint32Array, at: number, v: unknown): void {
  const b = BigInt.asUintN(64, typeof v === 'bigint' ? v : typeof v === 'number' && Number.isFinite(v) ? BigInt(Math.trunc(v)) : 0n);
  w[at] = Number(b & 0xffffffffn);
  w[at + 1] = Number(b >> 32n);
}

const NS = 1_000_000_000n;

/** A time in ns (default: now) as int64 seconds (floor, so times before 1970 work) and nanoseconds. */
function putTime(w: Uint32Array, at: number, ns: bigint | undefined): void {
  const t = ns ?? BigInt(Date.now()) * 1_000_000n;
  let sec = t / NS;
  let nsec = t % NS;
  if (nsec < 0n) {
    nsec += NS;
    sec -= 1n;
  }
  put64(w, at, sec);
  w[at + 2] = Number(nsec);
}

/** A stat as ABI.STAT_WORDS uint32 (the layout marshal.c reads). */
export function statWords(s: StatLike): Uint32Array {
  const w = new Uint32Array(ABI.STAT_WORDS);
  w[0] = u32(s.mode);
  w[1] = u32(s.uid);
  w[2] = u32(s.gid);
  put64(w, 3, s.size);
  w[5] = u32(s.dev);
  w[6] = s.nlink === undefined ? 1 : u32(s.nlink);
  put64(w, 7, s.ino);
  w[9] = u32(s.rdev);
  w[10] = u32(s.blksize);
  put64(w, 11, s.blocks);
  putTime(w, 13, s.atimeNs);
  putTime(w, 16, s.mtimeNs);
  putTime(w, 19, s.ctimeNs);
  return w;
}

type StatfsLike = Partial<Record<'bsize' | 'frsize' | 'blocks' | 'bfree' | 'bavail' | 'files' | 'ffree' | 'favail' | 'fsid' | 'flag' | 'namemax', number | bigint>>;

export function statfsWords(s: StatfsLike): Uint32Array {
  const keys = ['bsize', 'frsize', 'blocks', 'bfree', 'bavail', 'files', 'ffree', 'favail', 'fsid', 'flag', 'namemax'] as const;
  return Uint32Array.from(keys, (k) => u32(s[k]));
}

const openBits = (o: OpenOpts | undefined): number =>
  (o?.directIo ? ABI.OPEN_OPT_DIRECT_IO : 0) | (o?.keepCache ? ABI.OPEN_OPT_KEEP_CACHE : 0) | (o?.nonseekable ? ABI.OPEN_OPT_NONSEEKABLE : 0);

/** An op's result: 0, a negative errno, or a count; anything else is EIO. */
function resultOf(err: unknown): number {
  if (err === undefined || err === null || err === false) return 0;
  if (typeof err === 'number') return Number.isFinite(err) ? err | 0 : EIO;
  return EIO;
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

// ---- the dispatcher ------------------------------------------------------------------

type Reply = (res: number, ...values: unknown[]) => void;
type Handler = (ops: Partial<NativeOps>, reply: Reply, caller: Caller, args: unknown[]) => void;

const plain = (res: unknown): number => resultOf(res);
const P = (a: unknown): string => a as string;
const PN = (a: unknown): string | null => a as string | null;
const N = (a: unknown): number => a as number;

/**
 * A getattr's answer: the stat, and `true` after it when the attributes are
 * volatile (they change with no request the kernel sees, as a status file's
 * size does): the session then lets the kernel keep them for no time at all.
 */
const statReply = (reply: Reply) => (err: unknown, st?: object) => {
  if (resultOf(err) !== 0) return reply(resultOf(err));
  if ((st as { volatile?: boolean }).volatile === true) return reply(0, statWords(st as StatLike), true);
  reply(0, statWords(st as StatLike));
};

/** One handler per request the session hands over, by ABI op code. */
function handlers(onInit: () => void): Handler[] {
  const h: Handler[] = [];
  const errnoOnly = (reply: Reply) => (err: unknown) => reply(plain(err));
  h[ABI.OP_INIT] = (_ops, reply) => {
    onInit();
    reply(0);
  };
  h[ABI.OP_GETATTR] = (ops, reply, caller, [path]) => ops.getattr!(P(path), statReply(reply), caller);
  h[ABI.OP_FGETATTR] = (ops, reply, caller, [path, fh]) => ops.fgetattr!(PN(path), N(fh), statReply(reply), caller);
  h[ABI.OP_ACCESS] = (ops, reply, caller, [path, mask]) => ops.access!(P(path), N(mask), errnoOnly(reply), caller);
  h[ABI.OP_STATFS] = (ops, reply, caller, [path]) =>
    ops.statfs!(P(path), (err, st) => (resultOf(err) === 0 ? reply(0, statfsWords(st as StatfsLike)) : reply(resultOf(err))), caller);
  h[ABI.OP_READDIR] = (ops, reply, caller, [path, offset]) =>
    ops.readdir!(
      PN(path),
      (err, names, stats, offsets) => {
        if (resultOf(err) !== 0) return reply(resultOf(err));
        const words = (stats ?? []).map((s) => (typeof s === 'number' ? s : statWords(s as StatLike)));
        if (Array.isArray(offsets)) reply(0, names ?? [], words, offsets);
        else reply(0, names ?? [], words);
      },
      caller,
      N(offset),
    );
  h[ABI.OP_READLINK] = (ops, reply, caller, [path]) => ops.readlink!(P(path), (err, target) => (resultOf(err) === 0 ? reply(0, target ?? '') : reply(resultOf(err))), caller);
  h[ABI.OP_OPEN] = (ops, reply, caller, [path, flags, reopen]) =>
    ops.open!(P(path), N(flags), (err, fh, o) => (resultOf(err) === 0 ? reply(0, fh ?? 0, openBits(o)) : reply(resultOf(err))), caller, typeof reopen === 'bigint' ? reopen : 0n);
  h[ABI.OP_CREATE] = (ops, reply, caller, [path, mode, flags]) =>
    ops.create!(P(path), N(mode), N(flags), (err, fh, o) => (resultOf(err) === 0 ? reply(0, fh ?? 0, openBits(o)) : reply(resultOf(err))), caller);
  h[ABI.OP_READ] = (ops, reply, caller, [path, fh, len, pos]) => {
    const buf = Buffer.allocUnsafe(N(len));
    ops.read!(PN(path), N(fh), buf, N(len), N(pos), (res) => reply(resultOf(res), buf), caller);
  };
  h[ABI.OP_WRITE] = (ops, reply, caller, [path, fh, data, pos]) => {
    const buf = data as Buffer;
    ops.write!(PN(path), N(fh), buf, buf.length, N(pos), (res) => reply(resultOf(res)), caller);
  };
  h[ABI.OP_FLUSH] = (ops, reply, caller, [path, fh]) => ops.flush!(PN(path), N(fh), errnoOnly(reply), caller);
  h[ABI.OP_FSYNC] = (ops, reply, caller, [path, fh, datasync]) => ops.fsync!(PN(path), N(fh), datasync as boolean, errnoOnly(reply), caller);
  h[ABI.OP_FSYNCDIR] = (ops, reply, caller, [path, datasync]) => ops.fsyncdir!(PN(path), 0, datasync as boolean, errnoOnly(reply), caller);
  h[ABI.OP_RELEASE] = (ops, reply, caller, [path, fh]) => ops.release!(PN(path), N(fh), errnoOnly(reply), caller);
  h[ABI.OP_TRUNCATE] = (ops, reply, caller, [path, size]) => ops.truncate!(P(path), N(size), errnoOnly(reply), caller);
  h[ABI.OP_FTRUNCATE] = (ops, reply, caller, [path, fh, size]) => ops.ftruncate!(PN(path), N(fh), N(size), errnoOnly(reply), caller);
  h[ABI.OP_FALLOCATE] = (ops, reply, caller, [path, fh, mode, offset, length]) =>
    ops.fallocate!(PN(path), N(fh), N(mode), N(offset), N(length), errnoOnly(reply), caller);
  h[ABI.OP_UTIMENS] = (ops, reply, caller, [path, atime, mtime]) => ops.utimens!(P(path), atime as TimeSpec, mtime as TimeSpec, errnoOnly(reply), caller);
  h[ABI.OP_CHMOD] = (ops, reply, caller, [path, mode]) => ops.chmod!(P(path), N(mode), errnoOnly(reply), caller);
  h[ABI.OP_CHOWN] = (ops, reply, caller, [path, uid, gid]) => ops.chown!(P(path), N(uid), N(gid), errnoOnly(reply), caller);
  h[ABI.OP_MKDIR] = (ops, reply, caller, [path, mode]) => ops.mkdir!(P(path), N(mode), errnoOnly(reply), caller);
  h[ABI.OP_RMDIR] = (ops, reply, caller, [path]) => ops.rmdir!(P(path), errnoOnly(reply), caller);
  h[ABI.OP_UNLINK] = (ops, reply, caller, [path, hidden]) => ops.unlink!(P(path), errnoOnly(reply), caller, hidden === 1);
  h[ABI.OP_RENAME] = (ops, reply, caller, [from, to, hide]) => ops.rename!(P(from), P(to), errnoOnly(reply), caller, hide === 1);
  h[ABI.OP_LINK] = (ops, reply, caller, [from, to]) => ops.link!(P(from), P(to), errnoOnly(reply), caller);
  h[ABI.OP_SYMLINK] = (ops, reply, caller, [target, path]) => ops.symlink!(P(target), P(path), errnoOnly(reply), caller);
  h[ABI.OP_MKNOD] = (ops, reply, caller, [path, mode, rdev]) => ops.mknod!(P(path), N(mode), N(rdev), errnoOnly(reply), caller);
  return h;
}

/** The op of NativeOps each request code needs (a request whose op is missing is answered ENOSYS). */
const NEEDS: Partial<Record<number, keyof NativeOps>> = {
  [ABI.OP_GETATTR]: 'getattr',
  [ABI.OP_FGETATTR]: 'fgetattr',
  [ABI.OP_ACCESS]: 'access',
  [ABI.OP_STATFS]: 'statfs',
  [ABI.OP_READDIR]: 'readdir',
  [ABI.OP_READLINK]: 'readlink',
  [ABI.OP_OPEN]: 'open',
  [ABI.OP_CREATE]: 'create',
  [ABI.OP_READ]: 'read',
  [ABI.OP_WRITE]: 'write',
  [ABI.OP_FLUSH]: 'flush',
  [ABI.OP_FSYNC]: 'fsync',
  [ABI.OP_FSYNCDIR]: 'fsyncdir',
  [ABI.OP_RELEASE]: 'release',
  [ABI.OP_TRUNCATE]: 'truncate',
  [ABI.OP_FTRUNCATE]: 'ftruncate',
  [ABI.OP_FALLOCATE]: 'fallocate',
  [ABI.OP_UTIMENS]: 'utimens',
  [ABI.OP_CHMOD]: 'chmod',
  [ABI.OP_CHOWN]: 'chown',
  [ABI.OP_MKDIR]: 'mkdir',
  [ABI.OP_RMDIR]: 'rmdir',
  [ABI.OP_UNLINK]: 'unlink',
  [ABI.OP_RENAME]: 'rename',
  [ABI.OP_LINK]: 'link',
  [ABI.OP_SYMLINK]: 'symlink',
  [ABI.OP_MKNOD]: 'mknod',
};

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
    private readonly ops: Partial<NativeOps>,
    private readonly opts: SessionOptions,
    private readonly unmountImpl: (mnt: string, cb: (err: Error | null) => void) => void,
  ) {}

  mount(cb: (err: Error | null) => void): void {
    this.start(cb, (o, conf, dispatch) => this.raw.session_mount(this.mnt, o.mount, o.lowlevel, conf, dispatch));
  }

  /**
   * Serve a session a predecessor handed over (its descriptor, INIT, nodes
   * and open directories): `cb` fires once the replayed INIT was accepted, as
   * `mount`'s does at the kernel's.
   */
  adopt(h: Handed, cb: (err: Error | null) => void): void {
    this.start(cb, (o, conf, dispatch) => {
      this.raw.session_fh_epoch(h.epoch ?? 0);
      const res = this.raw.session_adopt(h.fd, h.bufsize, h.init, h.nodes, h.dirs, o.lowlevel, conf, dispatch);
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
      const [res, resend] = this.raw.session_revive(k.fd, k.bufsize, k.init, k.epoch, o.lowlevel, conf, dispatch);
      if (res !== 0) throw new Error(`reviving the session failed: errno ${-res}`);
      this.resendResult = resend;
    });
  }

  /** The result of the resend notification of the last revive (0, or -errno: a kernel without FUSE_NOTIFY_RESEND). */
  resendResult: number | undefined;

  /** Requests sent again, of them answered EIO, dead handles reopened (handles.c). */
  handleStats(): { resent: number; refused: number; reopened: number; epoch: number } {
    const [resent, refused, reopened] = this.raw.session_handle_stats();
    return { resent, refused, reopened, epoch: this.raw.session_fh_epoch() };
  }

  /** Stop reading requests at request boundaries (never blocks). */
  pause(): void {
    this.raw.session_pause();
  }

  /**
   * How long JavaScript has held the oldest request it has not answered, in
   * ms (0: none). A handover pauses the session only when this is short: a
   * pause waits for every request held.
   */
  oldestHeldMs(): number {
    for (const since of this.held.values()) return performance.now() - since;
    return 0;
  }

  /** Every worker parked and no request waiting for JavaScript. */
  paused(): boolean {
    return this.raw.session_paused();
  }

  resume(): void {
    this.raw.session_resume();
  }

  /** `withNodes` false: no node table (a successor that followed the journal has it); `nodes` is empty. */
  handed(withNodes = true): Handed {
    return this.raw.session_handed(withNodes);
  }

  private start(cb: (err: Error | null) => void, begin: (o: { mount: string; lowlevel: string }, conf: number[], dispatch: Dispatch) => void): void {
    const raw = this.raw;
    this.mountCb = cb;
    const table = handlers(() => {
      const done = this.mountCb;
      this.mountCb = null;
      if (done) process.nextTick(done, null);
    });
    const ops = this.ops;
    const held = this.held;
    const dispatch: Dispatch = (op, id, uid, gid, pid, ...args) => {
      let answered = false;
      held.set(id, performance.now());
      const untrack = this.tracker?.(op, args);
      const reply: Reply = (res, ...values) => {
        if (answered) return;
        answered = true;
        held.delete(id);
        raw.session_reply(id, res, ...values);
        // After the answer: a crash before it leaves the change marked in flight.
        untrack?.();
      };
      const need = NEEDS[op];
      const handler = table[op];
      if (handler === undefined || (need !== undefined && typeof ops[need] !== 'function')) return reply(ENOSYS);
      try {
        handler(ops, reply, { uid, gid, pid }, args);
      } catch {
        // A throw is a bug of the op; the request is answered, never left waiting.
        reply(EIO);
      }
    };
    const o = sessionOptions(this.opts);
    const conf = [this.opts.attrTimeout ?? 1, this.opts.entryTimeout ?? 1, this.opts.negativeTimeout ?? 0, this.opts.kernelCache ? 1 : 0, this.opts.hardRemove ? 1 : 0];
    try {
      begin(o, conf, dispatch);
    } catch (err) {
      this.mountCb = null;
      process.nextTick(cb, err as Error);
    }
  }

  unmount(cb: (err: Error | null) => void): void {
    this.raw.session_unref();
    this.unmountImpl(this.mnt, cb);
  }

  /** 0 not started, 1 serving, 2 ended (the mount went: an external umount -l) */
  loopState(): number {
    return this.raw.session_loop_state();
  }

  /** slot fh & 0xffff > 0 of the caller's Uint16Array(65536): FLUSH of fh goes to ops.flush; 0: answered natively */
  setFlushGate(gate: Uint16Array): void {
    if (!(gate instanceof Uint16Array) || gate.length !== 65536) throw new TypeError('the flush gate is a Uint16Array(65536)');
    this.raw.session_set_flush_gate(Buffer.from(gate.buffer, gate.byteOffset, gate.byteLength));
  }
}
