import { mkdir, readFile, statfs } from 'node:fs/promises';
import type { Config } from '../config/schema.js';
import { errnoName } from '../errors.js';
import type { FsContext } from '../fs/context.js';
import type { DataPlane, KernelCache, NativeWrite, ReleaseQueue, TimeSpec } from '../fs/native-api.js';
import type { Logger } from '../log.js';
import type { OpMetrics } from '../metrics/ops.js';
import { serveOps } from './ops.js';
import type { FuseClass, FuseInstance, WriteHandler } from './binding.js';
import { READAHEAD_KB, raiseReadahead } from './readahead.js';
import { SelfCheck } from './selfcheck.js';
import { inspectMountPoint } from './dead-mount.js';
import type { Handed, Kept } from './session.js';
import { ABI } from '../abi.js';

export interface ProbeState {
  mounted: boolean;
  loop: 'starting' | 'running' | 'ended';
  lastProbeAt: string | null;
  lastProbeOk: boolean | null;
  lastProbeError?: string;
}

/** Mount points listed in /proc/self/mountinfo (octal escapes decoded). */
async function mountedAt(path: string): Promise<string | null> {
  const info = await readFile('/proc/self/mountinfo', 'utf8');
  for (const line of info.split('\n')) {
    const fields = line.split(' ');
    const mp = fields[4]?.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (mp === path) {
      const dash = fields.indexOf('-');
      return fields[dash + 1] ?? 'unknown';
    }
  }
  return null;
}

export class MountError extends Error {}

/** statfs(2)'s f_type of every FUSE mount. */
const FUSE_SUPER_MAGIC = 0x65735546;
const MNT_DETACH = 2;

/**
 * One liveness probe: statfs(2) of the mount point. The kernel answers stat
 * from its attribute cache without asking a dead daemon, but statfs always
 * goes to the daemon. It needs no descriptor and no child process (both may
 * be what is short), and it runs on the libuv threadpool: this JS thread
 * serves the mount's requests, so a synchronous call here would deadlock. A
 * mount replaced or gone (the path then shows the directory below) has
 * another f_type. On timeout the threadpool thread stays in the call until
 * the mount answers or goes; the daemon gives up after three such failures.
 */
async function probeMount(mnt: string, timeoutMs: number): Promise<{ ok: boolean; error?: string; gone?: boolean }> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), timeoutMs);
  });
  try {
    const r = await Promise.race([statfs(mnt).then((st) => ({ st }), (err: NodeJS.ErrnoException) => ({ err })), deadline]);
    if (r === 'timeout') return { ok: false, error: 'probe timed out' };
    if ('err' in r) return { ok: false, error: `${r.err.code ?? 'error'}: ${r.err.message}`, gone: r.err.code === 'ENOTCONN' };
    if (r.st.type !== FUSE_SUPER_MAGIC) return { ok: false, error: `the mount point is no longer a FUSE mount (f_type 0x${r.st.type.toString(16)})`, gone: true };
    return { ok: true };
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The mount's life: clear a stale mount, mount, know when it is really up (the
 * kernel's INIT), keep knowing (the loop's end shows in loopState(), and a
 * probe of the mount with a deadline catches a daemon that no longer answers),
 * and unmount on shutdown.
 */
export class MountManager {
  private fuse: FuseInstance | null = null;
  private timer: NodeJS.Timeout | null = null;
  private failures = 0;
  readonly selfCheck = new SelfCheck();
  readonly state: ProbeState = { mounted: false, loop: 'starting', lastProbeAt: null, lastProbeOk: null };

  constructor(
    private readonly Fuse: FuseClass,
    private readonly ctx: FsContext,
    private readonly config: Config,
    private readonly log: Logger,
    private readonly onLost: (why: string) => void,
    /** the op table's own logger (component "fuse"), not a child of this one */
    private readonly fuseLog: Logger = log,
    /** per-operation counts and latencies, when the metrics endpoint is on */
    private readonly opMetrics: OpMetrics | null = null,
  ) {}

  private get mnt(): string {
    return this.config.mount;
  }

  /**
   * A mount left by a crashed daemon whose session nothing keeps answers
   * ENOTCONN; it is lazily unmounted before we mount again (dead-mount.ts says
   * what else may be there, and refuses it). Only a fresh start comes here: a
   * kept session is resumed, never mounted over.
   */
  async clearStale(): Promise<void> {
    await mkdir(this.mnt, { recursive: true, mode: 0o755 }).catch((err: NodeJS.ErrnoException) => {
      // EEXIST-like failures on a dead FUSE mount point: stat says ENOTCONN
      if (err.code !== 'ENOTCONN' && err.code !== 'EEXIST') throw err;
    });
    const verdict = await inspectMountPoint(this.mnt, this.config.probe.timeoutMs);
    if (verdict.action === 'none') return;
    if (verdict.action === 'refuse') throw new MountError(verdict.reason);
    this.log.warn({ mount: this.mnt, reason: verdict.reason }, 'clearing a stale FUSE mount');
    const res = await this.umount2(MNT_DETACH);
    if (res !== 0) throw new MountError(`cannot clear the stale mount at ${this.mnt}: ${errnoName(-res)}`);
  }

  async mount(): Promise<void> {
    await this.clearStale();
    await this.start((fuse, cb) => fuse.mount(cb), 'mounted');
    // A successor serves the same mount and its bdi: only a new mount sets it.
    const why = await raiseReadahead(this.mnt);
    if (why === null) this.log.info({ readaheadKb: READAHEAD_KB }, 'read-ahead raised to the largest request');
    else this.log.warn({ readaheadKb: READAHEAD_KB, error: why }, 'read-ahead left at the kernel default');
  }

  /** Serve the session a predecessor handed over (takeover.ts): the mount stays as it is. */
  async adopt(h: Handed): Promise<void> {
    await this.start((fuse, cb) => fuse.adopt(h, cb), 'session adopted');
  }

  /** Serve the session of a daemon that died, kept by a holder (the node table recovered first). */
  async revive(k: Kept): Promise<{ resend: number | undefined }> {
    await this.start((fuse, cb) => fuse.revive(k, cb), 'session revived');
    return { resend: this.session.resendResult };
  }

  /** Pause, paused, resume, handed: the session's side of a handover (takeover.ts). */
  get session(): FuseInstance {
    if (!this.fuse) throw new MountError('not serving');
    return this.fuse;
  }

  /**
   * The session went to a successor: stop probing and forget it, without
   * unmounting (the successor serves the mount now).
   */
  detach(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.fuse = null;
    this.state.mounted = false;
    this.state.loop = 'ended';
  }

  private async start(begin: (fuse: FuseInstance, cb: (err: Error | null) => void) => void, what: string): Promise<void> {
    const serve = serveOps(this.ctx, this.fuseLog, this.selfCheck, this.mnt, this.opMetrics);
    const f = this.config.fuse;
    // The session presents st_ino and d_ino as the daemon answers them (the
    // backing filesystem's: stable across restarts, one number and one kernel
    // inode for every hard link), and keeps a file unlinked while open
    // reachable under a hidden name, so fstat/fchmod on it reach the daemon
    // (src/fs/hidden.ts). No op has a timer: an ETIMEDOUT answered while the
    // backing write still runs would report a write as failed that then lands.
    this.fuse = new this.Fuse(this.mnt, serve, {
      allowOther: true,
      defaultPermissions: true,
      // Nothing created in a home may give privileges on this host.
      nosuid: true,
      nodev: true,
      bigWrites: true,
      maxWrite: f.maxWrite,
      // As large as the largest request INIT negotiates (session/proto.h): a READ of 1 MiB is one request.
      maxRead: 1 << 20,
      attrTimeout: f.attrTimeout,
      entryTimeout: f.entryTimeout,
      negativeTimeout: f.negativeTimeout,
      kernelCache: f.kernelCache,
      readdirplus: f.readdirplus,
      // A family's other opens follow its readers only where their writes need no data (nodes.h).
      passthrough: f.passthrough && f.nativeRead && f.nativeWrite,
      fsname: 'homesfs',
      subtype: 'homesfs',
      debug: f.debug,
    });
    this.fuse.setFlushGate(this.ctx.flushGate);
    // Changes in flight per home, for a crash to find (fs/ledger-area.ts).
    const ledgers = this.ctx.deps.ledgers;
    if (ledgers) this.fuse.tracker = (op, args) => ledgers.track(op, args);
    // Opens whose FLUSH would be answered as a no-op tell the kernel not to send it (FOPEN_NOFLUSH).
    this.Fuse.setNoFlush(f.noFlush);
    // Read once at the mount: one reader at a time, the others wait for its lead.
    this.Fuse.setSingleReader(f.singleReader);
    await new Promise<void>((resolve, reject) => {
      begin(this.fuse!, (err) => (err ? reject(new MountError(`${what === 'mounted' ? 'mount' : 'takeover'} failed: ${err.message}`)) : resolve()));
    });
    // The callback fires from the kernel's INIT (or the replayed one): the mount answers from here on.
    this.state.mounted = true;
    this.state.loop = 'running';
    this.log.info({ mount: this.mnt }, what);
  }

  async runSelfCheck(): Promise<void> {
    const r = await this.selfCheck.run(this.mnt, 30_000, this.Fuse.protocol().maxWrite);
    (r.state === 'ok' ? this.log.info.bind(this.log) : this.log.error.bind(this.log))({ selfCheck: r }, 'write-size self-check');
  }

  startProbing(): void {
    const tick = async (): Promise<void> => {
      if (!this.fuse || !this.state.mounted) return;
      if (this.fuse.loopState() === 2) return this.lost('the FUSE loop ended (unmounted behind the daemon?)');
      const r = await probeMount(this.mnt, this.config.probe.timeoutMs);
      // Stopped meanwhile: the unmount is not a lost mount.
      if (!this.fuse || !this.state.mounted) return;
      this.state.lastProbeAt = new Date().toISOString();
      this.state.lastProbeOk = r.ok;
      if (r.ok) {
        this.failures = 0;
        delete this.state.lastProbeError;
        this.logDirRefusals();
      } else {
        this.failures++;
        this.state.lastProbeError = r.error ?? 'probe failed';
        this.log.warn({ failures: this.failures, error: this.state.lastProbeError }, 'mount probe failed');
        if (this.fuse.loopState() === 2 || r.gone === true || this.failures >= 3) {
          return this.lost(`mount probe failed: ${this.state.lastProbeError}`);
        }
      }
      if (this.timer) this.timer.refresh();
    };
    this.timer = setTimeout(() => void tick(), this.config.probe.intervalMs);
    this.timer.unref();
  }

  private dirRefused = 0;

  /**
   * OPENDIRs the binding refused (EMFILE: limits.dirHandles*, or files and
   * directories at the uid's or the home's open-file cap; ENFILE: the daemon's)
   * since the last probe, as one line: they are answered on the session's worker threads,
   * which do not log.
   */
  private logDirRefusals(): void {
    const refused = this.Fuse.dirHandleStats().refused;
    if (refused > this.dirRefused) {
      this.log.warn({ op: 'opendir', code: 'OPEN_FILES_EXCEEDED', errno: 'EMFILE', refused: refused - this.dirRefused }, 'directory opens refused: a directory-handle cap (limits.dirHandlesPerUid, limits.dirHandles) or an open-file cap (limits.openFilesPerUid, maxOpenFiles, the daemon cap) was reached');
    }
    this.dirRefused = refused;
  }

  /** umount2(2) through the binding: 0 or -errno. */
  private umount2(flags: number): Promise<number> {
    return new Promise((resolve) => this.Fuse.umount2(this.mnt, flags, resolve));
  }

  private lost(why: string): void {
    this.state.mounted = false;
    this.state.loop = 'ended';
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.onLost(why);
  }

  async unmount(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (!this.fuse) return;
    const fuse = this.fuse;
    this.fuse = null;
    this.state.mounted = false;
    // After an external `umount` the binding's own unmount fails with "not
    // mounted": that is no failure, and the log must say what happened.
    const fsType = await mountedAt(this.mnt).catch(() => 'unknown');
    const gone = fsType === null;
    let failed = false;
    // The addon unmounts with umount2(2) (no `umount` child, no descriptor,
    // so it works even with the daemon's descriptors exhausted),
    // lazily if busy: processes still inside get ENOTCONN from then on.
    await new Promise<void>((resolve) => {
      fuse.unmount((err) => {
        if (err && !gone) {
          failed = true;
          this.log.error({ mount: this.mnt, err: err.message }, 'unmount failed');
        }
        resolve();
      });
    });
    this.state.loop = 'ended';
    if (gone) this.log.info({ mount: this.mnt }, 'already unmounted (by someone else): nothing left to unmount');
    else if (!failed) this.log.info({ mount: this.mnt }, 'unmounted');
  }
}

/** A negative errno from the binding, shaped like a Node system error so errnoOf maps it through the same table. */
function nativeError(call: string, res: number): Error {
  const code = errnoName(-res);
  return Object.assign(new Error(`${call}: ${code}`), { code });
}

export function nativeMknod(Fuse: FuseClass) {
  return (path: string, mode: number, dev: number): Promise<void> =>
    new Promise((resolve, reject) => Fuse.mknod(path, mode, dev, (res) => (res === 0 ? resolve() : reject(nativeError('mknod', res)))));
}

/** renameat2(2) between two backing directory descriptors, through the binding (Node has none). */
export function nativeRenameat2(Fuse: FuseClass) {
  return (oldDirFd: number, oldName: string, newDirFd: number, newName: string, flags: number): Promise<void> =>
    new Promise((resolve, reject) => {
      Fuse.renameat2(oldDirFd, oldName, newDirFd, newName, flags, (res) => (res === 0 ? resolve() : reject(nativeError('renameat2', res))));
    });
}

/** fallocate(2) on a backing descriptor, through the binding (Node has none). */
export function nativeFallocate(Fuse: FuseClass) {
  return (fd: number, mode: number, offset: number, length: number): Promise<void> =>
    new Promise((resolve, reject) => {
      Fuse.fallocate(fd, mode, offset, length, (res) => (res === 0 ? resolve() : reject(nativeError('fallocate', res))));
    });
}

/**
 * The binding's data plane (process-wide table fh -> descriptor); null when
 * `fuse.nativeRead` and `fuse.nativeWrite` are both off.
 */
export function nativeDataPlane(Fuse: FuseClass, on: { read: boolean; write: boolean }): DataPlane | null {
  if (!on.read && !on.write) return null;
  const { publish, setPublishFlags, unpublish, setWriteHandler, writeDecision, writeDone, dataPlaneStats, takeWriteReports, dispatchQueued } = Fuse;
  // pwrite results the binding reports for writes told to proceed, by request id.
  const reports = new Map<number, { resolve: (n: number) => void; reject: (err: Error) => void }>();
  /**
   * Writes that landed whole are answered to the kernel by the binding at
   * once; what is left is to end the wait of their writeAt, which holds the
   * file's lock. The binding queues them rather than waking this thread for
   * each: they are taken before every decision and every request JS serves,
   * which is everything that can wait for that lock, and by a 2 ms timer
   * after the last write told to proceed (nothing else may come).
   */
  const settle = (): void => {
    const done = takeWriteReports();
    if (!done) return;
    for (let i = 0; i < done.length; i += 2) {
      const id = done[i]!;
      const r = reports.get(id);
      reports.delete(id);
      r?.resolve(done[i + 1]!);
    }
  };
  let timer: NodeJS.Timeout | null = null;
  const settleSoon = (): void => {
    if (timer === null) timer = setTimeout(settle, 2).unref();
    else timer.refresh();
  };
  let serve: ((w: NativeWrite) => void) | null = null;
  const onWrite: WriteHandler = (kind, id, a, b, c, path, uid, gid, pid) => {
    // A decision comes through its own queue, which libuv may serve before the session's: the
    // requests read before this write (a RELEASE freeing an unlinked file's bytes) are served first.
    if (kind !== ABI.WRITE_DONE) dispatchQueued();
    settle();
    if (kind === ABI.WRITE_DONE) {
      const r = reports.get(id);
      reports.delete(id);
      if (!r) return void writeDone(id, a);
      if (a >= 0) r.resolve(a);
      else r.reject(nativeError('write', a));
      return;
    }
    try {
      serve!({
        fh: a,
        offset: b,
        len: c,
        path,
        caller: { uid, gid, pid },
        proceed: (start, wait = false) =>
          new Promise<number>((resolve, reject) => {
            reports.set(id, { resolve, reject });
            // Not waiting any more cannot happen (the binding waits for exactly this); if it did, nothing was written.
            if (!writeDecision(id, start, wait)) {
              reports.delete(id);
              reject(Object.assign(new Error('write plane: the request is gone'), { code: 'EIO' }));
              return;
            }
            settleSoon();
          }),
        fallback: () => void writeDecision(id, -1),
        finish: (res) => void writeDone(id, res),
      });
    } catch {
      // Never leave a session worker thread waiting: the data goes to ops.write, which answers.
      writeDecision(id, -1);
    }
  };
  return {
    read: on.read,
    write: on.write,
    publish: (fh, fd, flags, dev, ino, append) => publish(fh, fd, flags, dev, ino, append),
    setFlags: (fh, flags) => void setPublishFlags(fh, flags),
    unpublish: (fh) => void unpublish(fh),
    stats: () => {
      const s = dataPlaneStats();
      const f = Fuse.fastPath.stats();
      return { reads: s.reads, bytes: s.bytes, fallbacks: s.fallbacks, writes: s.writes, writeBytes: s.writeBytes, writeFallbacks: s.writeFallbacks, decided: f.writesDecided, decisionFallbacks: f.writeDecisionFallbacks };
    },
    settle,
    serveWrites: (handler) => {
      if (!on.write) return;
      if (serve === null) setWriteHandler(onWrite);
      serve = handler;
    },
  };
}

/** The first poll after activity, and the longest wait between polls while handles stay open. */
const RELEASE_POLL_MIN_MS = 10;
const RELEASE_POLL_MAX_MS = 1000;

/**
 * RELEASE answered by the binding (`fuse.nativeRelease`). Saves the JS thread's wake and
 * a session worker thread the wait for it: RELEASE is a third of the context switches
 * of an open+close. The queue is taken before every request (FsContext.settle);
 * the poll is for the last close before a quiet spell, so the daemon's
 * descriptor follows the caller's close within a second even then.
 */
export function nativeReleases(Fuse: FuseClass): ReleaseQueue {
  const { setReleaseDeferred, takeReleases, dataPlaneStats } = Fuse;
  let poll: (() => void) | null = null;
  let busy: () => boolean = () => false;
  let timer: NodeJS.Timeout | null = null;
  let delay = RELEASE_POLL_MIN_MS;
  let polling = false;
  let taken = 0;
  const arm = (): void => {
    timer = setTimeout(tick, delay);
    timer.unref();
  };
  const tick = (): void => {
    timer = null;
    const before = taken;
    polling = true;
    try {
      poll!();
    } finally {
      polling = false;
    }
    // Back off while nothing comes; stop once no handle is open (the next open's request kicks it again).
    delay = taken > before ? RELEASE_POLL_MIN_MS : Math.min(delay * 2, RELEASE_POLL_MAX_MS);
    if (taken > before || busy()) arm();
  };
  return {
    take: () => {
      const fhs = takeReleases();
      if (fhs !== null) taken += fhs.length;
      return fhs;
    },
    start: (p, b) => {
      poll = p;
      busy = b;
      setReleaseDeferred(true);
    },
    kick: () => {
      if (poll === null || polling) return;
      delay = RELEASE_POLL_MIN_MS;
      if (timer === null) arm();
    },
    answered: () => dataPlaneStats().releases,
  };
}

/**
 * The kernel's caches, through the session's invalidation queue
 * (native/src/session/inval.c). Each call
 * resolves the path in the node table and queues: the kernel is told by the
 * queue's own thread, never while a request waits on this one.
 */
export function kernelCache(Fuse: FuseClass): KernelCache {
  const invalidate = Fuse.invalidate;
  const progress = Fuse.invalidationProgress;
  return {
    path: (p) => void invalidate(ABI.INVAL_PATH, p),
    tree: (p) => void invalidate(ABI.INVAL_TREE, p),
    entry: (p) => void invalidate(ABI.INVAL_ENTRY, p),
    settled: async (limitMs = 2000) => {
      const [target] = progress();
      // Polled: the queue's thread may be blocked in the kernel for as long as a request
      // holds a directory, and a callback from it would need the JS thread besides.
      for (const until = Date.now() + limitMs; progress()[1] < target; ) {
        if (Date.now() >= until) return false;
        await new Promise((r) => setTimeout(r, 1));
      }
      return true;
    },
  };
}

export function nativeUtimensat(Fuse: FuseClass) {
  return (path: string, atime: TimeSpec, mtime: TimeSpec): Promise<void> =>
    new Promise((resolve, reject) => {
      Fuse.utimensat(path, atime, mtime, (res) => {
        if (res === 0) return resolve();
        // Shaped like a Node system error so errnoOf maps it through the same table.
        const code = errnoName(-res);
        reject(Object.assign(new Error(`utimensat: ${code}`), { code }));
      });
    });
}
