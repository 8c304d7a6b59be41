/**
 * The addon's exports besides the session (native/src), wrapped for this code
 * and attached to the daemon's Fuse class. The raw functions validate their arguments
 * in C (a TypeError, never a crash); these wrappers coerce what JS would
 * otherwise pass loosely (uint32 counts, booleans) and give results a shape.
 *
 * attachAddon runs once, after loadFuse checked the ABI: every export named
 * here exists in the addon it attaches.
 */
import type { AddonRaw, DataPlaneStats, FastPathStats, PassthroughInfo, WriteHandler } from '../addon-raw.js';
import type { FuseInstance, SessionOptions } from './session.js';
import type { Serve } from './ops.js';
import type { TimeSpec } from '../fs/native-api.js';

/** The native fast path (native/src/fastpath_*.c), as addon.ts wraps it: one per process. */
export interface FastPathNative {
  setHome(prefix: string, fd: number, dev: bigint, uid: number, gid: number, ownerFromStat: boolean, maxName: number, types: number, masks: Uint32Array, token: number): void;
  /** token absent: whatever is published there */
  removeHome(prefix: string, token?: number): boolean;
  /** pending: [bytes, inodes] the binding's unlinks add to; null: no native unlinks there (returns once none is in flight) */
  setMutable(prefix: string, token: number, pending: BigInt64Array | null): boolean;
  /** regular files with more allocated bytes are never unlinked natively: JS frees them off its thread */
  setFreeInlineMax(bytes: number): void;
  /** RMDIRs of mutable homes done natively (config fuse.nativeRmdir) */
  setRmdir(on: boolean): void;
  /** directory descriptors kept for GETATTR (on only while the backing is root's alone: allowOpenBacking off) */
  setDirCache(on: boolean): void;
  /** FTRUNCATE of an open file whose charged size the binding owns decided there (fastpath_write.c), as its writes are */
  setTruncate(on: boolean): void;
  inode(dev: bigint, ino: bigint, delta: 1 | -1): void;
  /** the size JS charges an inode it tracks; getattrs of it are then answered natively */
  inodeSize(dev: bigint, ino: bigint, size: number): void;
  /** the home's backing directory was found in place; the check stands ms more (the home's own GETATTR is answered natively until then) */
  homeChecked(prefix: string, token: number, ms: number): boolean;
  setHandle(fh: number, fd: number, uid: number, gid: number, ownerFromStat: boolean, types: number, masks: Uint32Array): void;
  removeHandle(fh: number): void;
  /** read-only opens answered natively (flags: ABI.OPEN_*) */
  setOpen(prefix: string, token: number, flags: number): boolean;
  /** UTIMENS (flags & 1), CHMOD (flags & 2, new = asked & chmodM unless equal to current & chmodK), CHOWN (4: owner-only's no-op, 8: lchown) by path */
  setAttrOps(prefix: string, token: number, flags: number, chmodM: number, chmodK: number): boolean;
  grant(prefix: string, token: number, fh: number, uid: number): boolean;
  /** CREATE of new names answered natively; one create slot (open-file slot for uid, reserved inode, fh) */
  setCreate(prefix: string, token: number, on: boolean, modeM: number, modeOr: number, maxDepth: number, ownerIsCaller: boolean): boolean;
  grantCreate(prefix: string, token: number, fh: number, uid: number): boolean;
  /** MKDIR of new names answered natively while creates are, the new directory's mode (asked & modeM) | modeOr, with a create slot's inode */
  setMkdir(prefix: string, token: number, on: boolean, modeM: number, modeOr: number): boolean;
  /** SYMLINK of new names answered natively while creates are, with a create slot's inode: rule 0 never, 1 relative targets that stay in the home, 2 any */
  setSymlink(prefix: string, token: number, rule: 0 | 1 | 2): boolean;
  /** the binding's own judgement of a relative target (fp_link_inside), for the test that holds it equal to symlinkTargetInsideHome */
  symlinkInside(depth: number, target: string): boolean;
  /** LINK within a home answered natively while creates are, with a create slot's inode (on only where hard links are allowed) */
  setLink(prefix: string, token: number, on: boolean): boolean;
  /** RENAME of regular files within the home answered natively while it is mutable, the target at most maxDepth deep (0: no limit) */
  setRename(prefix: string, token: number, on: boolean, maxDepth: number): boolean;
  reclaim(): number;
  /** writes' growth decided natively for inodes handed over (acct: the home's BigInt64Array(8), policy/ledger.ts) */
  wlDelegate(dev: bigint, ino: bigint, size: number, acct: BigInt64Array): boolean;
  /** the size, now JS's; -1 a native write is in flight (ask again); -2 not handed over */
  wlRevoke(dev: bigint, ino: bigint): number;
  wlSize(dev: bigint, ino: bigint): number;
  /** files made natively in the home start handed over */
  setWriteCredit(prefix: string, token: number, on: boolean): boolean;
  takeOpens(): BigUint64Array | null;
  /** fn() on the JS thread when a caller's create slots in a home run low: take the queue, grant more (once per process) */
  setSettleHandler(fn: () => void): void;
  setReserved(names: string[]): void;
  enable(on: boolean): void;
  clear(): void;
  stats(): FastPathStats;
}

/** The daemon's Fuse class: the session, and the addon's other exports as addon.ts wraps them. */
/** What INIT settled (zeros before it) and the largest requests seen since. */
export interface ProtocolInfo {
  /** 7.<minor>: the version both speak */
  minor: number;
  kernelMinor: number;
  maxWrite: number;
  maxPages: number;
  flags: number;
  largestRead: number;
  largestWrite: number;
  /** LOOKUP, READDIRPLUS and READ requests the kernel has sent */
  lookups: number;
  readdirplus: number;
  reads: number;
  /** the kernel offers FUSE over io_uring (enable_uring on); never taken (proto.h HS_FUSE2_OVER_IO_URING) */
  ioUringOffered: boolean;
  passthrough: PassthroughInfo;
}

export interface FuseClass {
  new (mnt: string, serve: Serve, opts: SessionOptions): FuseInstance;
  /** the addon itself, for the modules that take a part of it (a Pick of AddonRaw) */
  native: AddonRaw;
  /** where it was loaded from */
  BINDING_PATH: string;
  utimensat(path: string, atime: TimeSpec, mtime: TimeSpec, cb: (errno: number) => void): void;
  mknod(path: string, mode: number, dev: number, cb: (errno: number) => void): void;
  /** open directory handles counted per caller uid (0 not) and in all; past a cap (0: none) OPENDIR answers EMFILE */
  setDirHandleCaps(perUid: number, all: number): void;
  dirHandleStats(): { open: number; refused: number };
  /** directory handles open: uid's, under a home's "/<tenant>/<key>", in all */
  dirHandleCounts(uid: number, prefix: string): [number, number, number];
  /** JS's open files and caps, which OPENDIR counts its handles beside (each directory handle is one open file too) */
  setOpenFileCounts(uid: number, uidFiles: number, prefix: string, homeFiles: number, homeCap: number, total: number, capPerUid: number, capAll: number): void;
  /** fallocate(2) on the libuv threadpool; cb(0) or cb(-errno) */
  fallocate(fd: number, mode: number, offset: number, length: number, cb: (errno: number) => void): void;
  /** renameat2(2) of single components below two directory descriptors on the libuv threadpool; cb(0) or cb(-errno) */
  renameat2(oldDirFd: number, oldName: string, newDirFd: number, newName: string, flags: number, cb: (errno: number) => void): void;
  unmount(mnt: string, cb: (err: Error | null) => void): void;
  /** umount2(2) on the libuv threadpool: no child process, no descriptor. cb(0) or cb(-errno). */
  umount2(mnt: string, flags: number, cb: (errno: number) => void): void;
  /** RLIMIT_NOFILE: read it, or set it (0 keeps a value); res 0 or -errno, Infinity = unlimited */
  nofile(soft?: number, hard?: number): { res: number; soft: number; hard: number };
  /** the data plane (dataplane.c) */
  publish(fh: number, fd: number, flags: number, dev?: bigint, ino?: bigint, append?: boolean): void;
  setPublishFlags(fh: number, flags: number): boolean;
  unpublish(fh: number): boolean;
  setWriteHandler(handler: WriteHandler): void;
  /** every request the session's workers handed JavaScript so far, dispatched now, before the caller goes on */
  dispatchQueued(): void;
  /** [id, bytes, ...] of writes that landed whole since the last call (answered already); null when none */
  takeWriteReports(): Float64Array | null;
  /** wait: even a write that lands whole is answered only after writeDone (JS hands the file back to native decisions at its end) */
  writeDecision(id: number, offset: number, wait?: boolean): boolean;
  writeDone(id: number, result: number): boolean;
  dataPlaneStats(): DataPlaneStats;
  /** RELEASE answered on the session's worker and queued for takeReleases (true), or handed to JavaScript (false, the default) */
  setReleaseDeferred(on: boolean): void;
  /** [fh, ...] of the RELEASEs answered since the last call, oldest first; null when none */
  takeReleases(): Float64Array | null;
  /** the native fast path (fastpath_*.c) */
  fastPath: FastPathNative;
  /** opens of handles in a zero flush-gate slot answered with FOPEN_NOFLUSH; returns opens answered so */
  setNoFlush(on: boolean): number;
  noFlushCount(): { opens: number; flushes: number };
  /** one thread reads the device at a time, from the next mount on */
  setSingleReader(on: boolean): void;
  leadStats(): { on: boolean; handoffs: number; revocations: number; readWaits: number };
  /** drop the kernel's cached entry/attributes for a virtual path (kind: ABI.INVAL_*); queued, never waited for; -> notifications queued or -errno */
  invalidate(kind: number, path: string): number;
  /** notifications queued, sent (the kernel dropped something), not cached (it had nothing), failed, still pending */
  invalidationStats(): { queued: number; sent: number; notCached: number; failed: number; pending: number };
  /** the session's node table: nodes the kernel may name, of them reachable by inode number */
  nodeStats(): { nodes: number; byInode: number };
  /** handles across daemons (session/handles.c): this daemon's epoch, requests resent after a crash, of them answered EIO, dead handles reopened */
  handleStats(): { epoch: number; resent: number; refused: number; reopened: number };
  /** [entries queued, of them sent]: sent in the order queued */
  invalidationProgress(): [number, number];
  /** the protocol the session and the kernel agreed at INIT (session/proto.c), and the largest READ and WRITE the kernel has sent */
  protocol(): ProtocolInfo;
  /** whether the file of presented inode number `ino` is passed through now (session/nodes.h families) */
  passedThrough(ino: bigint): boolean;
  /** start importing a handed-over node table before the session is adopted; 0 or -errno */
  preimportNodes(nodes: Buffer): number;
  /** strict UTF-8, as C checks names (tests compare it with TextDecoder's) */
  _isValidUtf8(buf: Uint8Array): boolean;
}

type Cb = (errno: number) => void;

const MNT_DETACH = 2;
const EINVAL = -22;

const badPath = (p: unknown): boolean => typeof p !== 'string' || p.includes('\0');

function umountError(mnt: string, res: number): Error {
  return Object.assign(new Error(`umount2 ${mnt}: errno ${-res}`), { errno: res });
}

/** Adds the statics and Fuse.fastPath to the daemon's Fuse class. */
export function attachAddon(Fuse: Record<string, unknown>, raw: AddonRaw): void {
  const cbFirst = (name: string, cb: unknown): void => {
    if (typeof cb !== 'function') throw new TypeError(`${name}: cb must be a function`);
  };

  const statics = {
    /**
     * Unmount without fusermount as root (Debian's fuse package, which ships
     * it, conflicts with fuse3): umount2(2), lazily (MNT_DETACH) when busy. No
     * child process and no descriptor: it works with descriptors exhausted.
     */
    unmount(mnt: string, cb: (err: Error | null) => void): void {
      statics.umount2(mnt, 0, (res) => {
        if (res === 0) return cb(null);
        statics.umount2(mnt, MNT_DETACH, (res2) => cb(res2 === 0 ? null : umountError(mnt, res2)));
      });
    },
    /** umount2(mnt, flags) on libuv's pool; cb(0) or cb(-errno) */
    umount2(mnt: string, flags: number, cb: Cb): void {
      cbFirst('umount2', cb);
      if (badPath(mnt)) return void process.nextTick(cb, EINVAL);
      raw.hs_sys_umount2(mnt, flags | 0, cb);
    },
    /** utimensat(AT_FDCWD, path, [atime, mtime], AT_SYMLINK_NOFOLLOW) on libuv's pool */
    utimensat(p: string, atime: TimeSpec, mtime: TimeSpec, cb: Cb): void {
      cbFirst('utimensat', cb);
      if (badPath(p)) return void process.nextTick(cb, EINVAL);
      raw.hs_sys_utimensat(p, atime, mtime, cb);
    },
    /** mknod(path, mode, dev) on libuv's pool (Node has none) */
    mknod(p: string, mode: number, dev: number, cb: Cb): void {
      cbFirst('mknod', cb);
      if (badPath(p)) return void process.nextTick(cb, EINVAL);
      raw.hs_sys_backing_mknod(p, mode >>> 0, dev >>> 0, cb);
    },
    /** fallocate(fd, mode, offset, length) on libuv's pool (Node has none) */
    fallocate(fd: number, mode: number, offset: number, length: number, cb: Cb): void {
      cbFirst('fallocate', cb);
      raw.hs_sys_backing_fallocate(fd, mode, offset, length, cb);
    },
    /** renameat2(olddirfd, oldname, newdirfd, newname, flags) on libuv's pool (Node has none); names are single components */
    renameat2(oldDirFd: number, oldName: string, newDirFd: number, newName: string, flags: number, cb: Cb): void {
      cbFirst('renameat2', cb);
      if (badPath(oldName) || badPath(newName)) return void process.nextTick(cb, EINVAL);
      raw.hs_sys_backing_renameat2(oldDirFd, oldName, newDirFd, newName, flags >>> 0, cb);
    },
    /** RLIMIT_NOFILE: read it, or set it (0 keeps a value); Infinity = unlimited */
    nofile(soft = 0, hard = 0): { res: number; soft: number; hard: number } {
      const [res, s, h] = raw.hs_sys_nofile(soft, hard);
      return { res, soft: s, hard: h };
    },
    /** OPENDIR counted per caller uid (0 not) and in all; past a cap (0: none) EMFILE */
    setDirHandleCaps(perUid: number, all: number): void {
      raw.hs_fastpath_set_dir_caps(perUid >>> 0, all >>> 0);
    },
    dirHandleStats: (): { open: number; refused: number } => raw.hs_fastpath_dir_stats(),
    /** directory handles open: uid's (0 for uid 0), under the home's prefix ("/<tenant>/<key>"), in all */
    dirHandleCounts: (uid: number, prefix: string): [number, number, number] => raw.hs_fastpath_dir_counts(uid >>> 0, prefix),
    /** JS's open files (uid's, the home's with its cap, all) and the caps per uid and in all, which OPENDIR counts its handles beside */
    setOpenFileCounts(uid: number, uidFiles: number, prefix: string, homeFiles: number, homeCap: number, total: number, capPerUid: number, capAll: number): void {
      raw.hs_fastpath_set_open_files(uid >>> 0, uidFiles >>> 0, prefix, homeFiles >>> 0, homeCap >>> 0, total >>> 0, capPerUid >>> 0, capAll >>> 0);
    },
    /**
     * The data plane (dataplane.c): READs of fh (DP_READ) answered with
     * pread(fd) on a session worker thread; WRITEs (DP_WRITE) decided by the write
     * handler without their data, then pwrite(fd) there. Publish before
     * answering the open; unpublish before closing fd (it waits for syscalls
     * in flight). dev, ino and append name the inode for writes whose growth
     * fastpath_write.c decides.
     */
    publish(fh: number, fd: number, flags: number, dev = 0n, ino = 0n, append = false): void {
      raw.hs_fastpath_dp_publish(fh, fd, flags, dev, ino, !!append);
    },
    setPublishFlags: (fh: number, flags: number): boolean => raw.hs_fastpath_dp_set_flags(fh, flags),
    unpublish: (fh: number): boolean => raw.hs_fastpath_dp_unpublish(fh),
    /** once per process; the handler must not throw (see WriteHandler) */
    setWriteHandler(handler: WriteHandler): void {
      if (typeof handler !== 'function') throw new TypeError('setWriteHandler: handler must be a function');
      raw.hs_fastpath_dp_set_write_handler(handler);
    },
    dispatchQueued: (): void => raw.hs_session_dispatch_queued(),
    writeDecision: (id: number, offset: number, wait = false): boolean => raw.hs_fastpath_dp_write_decision(id, offset, !!wait),
    writeDone: (id: number, result: number): boolean => raw.hs_fastpath_dp_write_done(id, result),
    /** [id, bytes, ...] of writes that landed whole since the last call (answered already), or null */
    takeWriteReports: (): Float64Array | null => raw.hs_fastpath_dp_take_write_reports(),
    /** RELEASE answered on a session worker thread and queued (true), or sent to ops.release */
    setReleaseDeferred(on: boolean): void {
      raw.hs_fastpath_dp_set_release_deferred(Boolean(on));
    },
    /** [fh, ...] of the RELEASEs answered since the last call, oldest first, or null */
    takeReleases: (): Float64Array | null => raw.hs_fastpath_dp_take_releases(),
    dataPlaneStats: (): DataPlaneStats => raw.hs_fastpath_dp_stats(),
    /** opens of handles in a zero flush-gate slot answered with FOPEN_NOFLUSH; returns opens answered so */
    setNoFlush: (on: boolean): number => raw.hs_session_set_noflush(!!on),
    noFlushCount(): { opens: number; flushes: number } {
      const [opens, flushes] = raw.hs_session_noflush_count();
      return { opens, flushes };
    },
    /** one thread reads the device at a time, from the next mount on */
    setSingleReader(on: boolean): void {
      raw.hs_session_set_single_reader(!!on);
    },
    leadStats(): { on: boolean; handoffs: number; revocations: number; readWaits: number } {
      const [on, handoffs, revocations, readWaits] = raw.hs_session_lead_stats();
      return { on: on === 1, handoffs, revocations, readWaits };
    },
    /**
     * Drop what the kernel caches for a virtual path (session/inval.c; kind:
     * ABI.INVAL_*): queued for the session's invalidation thread, never
     * waited for. Returns the notifications queued, or -errno.
     */
    invalidate: (kind: number, p: string): number => raw.hs_session_invalidate(kind >>> 0, String(p)),
    invalidationStats(): { queued: number; sent: number; notCached: number; failed: number; pending: number } {
      const [queued, sent, notCached, failed, pending] = raw.hs_session_inval_stats();
      return { queued, sent, notCached, failed, pending };
    },
    /** the session's node table (session/nodes.c): nodes the kernel may name, of them reachable by inode number */
    nodeStats(): { nodes: number; byInode: number } {
      const [nodes, byInode] = raw.hs_session_stats();
      return { nodes, byInode };
    },
    /**
     * A successor's head start: import the node table handed over on a
     * thread of its own while JavaScript adopts the rest (session.c,
     * hs_session_preimport); the session's adopt waits for it. 0 or -errno.
     */
    preimportNodes: (nodes: Buffer): number => raw.hs_session_preimport(nodes),
    handleStats(): { epoch: number; resent: number; refused: number; reopened: number } {
      const [resent, refused, reopened] = raw.hs_session_handle_stats();
      return { epoch: raw.hs_session_fh_epoch(), resent, refused, reopened };
    },
    /** [entries queued, of them sent]: the queue is FIFO (session/inval.c) */
    invalidationProgress: (): [number, number] => raw.hs_session_inval_progress(),
    protocol(): ProtocolInfo {
      const [minor, kernelMinor, maxWrite, maxPages, flags, largestRead, largestWrite, lookups, readdirplus, reads, uringOffered] = raw.hs_session_proto();
      const [negotiated, offered, active, opens, opensDirect, refused, idsOpened, idsClosed, idFailures, lastError, disabled, files] = raw.hs_session_passthrough();
      const passthrough = { negotiated: negotiated !== 0, offered: offered !== 0, active: active !== 0, opens, opensDirect, refused, idsOpened, idsClosed, idFailures, lastError, disabled: disabled !== 0, files };
      return { minor, kernelMinor, maxWrite, maxPages, flags, largestRead, largestWrite, lookups, readdirplus, reads, ioUringOffered: uringOffered !== 0, passthrough };
    },
    passedThrough: (ino: bigint): boolean => raw.hs_session_passed_through(ino),
    _isValidUtf8: (buf: Uint8Array): boolean => raw.hs_sys_utf8_valid_buffer(buf),
  } satisfies Omit<FuseClass, 'native' | 'BINDING_PATH' | 'fastPath'>;
  Object.assign(Fuse, statics);

  /** The native getattr/lookup/open/create/unlink/setattr table (fastpath_*.c): one per process. */
  Fuse.fastPath = {
    setHome(prefix: string, fd: number, dev: bigint, uid: number, gid: number, ownerFromStat: boolean, maxName: number, types: number, masks: Uint32Array, token: number): void {
      raw.hs_fastpath_set_home(prefix, fd, dev, uid >>> 0, gid >>> 0, !!ownerFromStat, maxName >>> 0, types >>> 0, masks, token);
    },
    removeHome: (prefix: string, token?: number): boolean => raw.hs_fastpath_remove_home(prefix, token === undefined ? -1 : token),
    setMutable: (prefix: string, token: number, pending?: BigInt64Array | null): boolean => raw.hs_fastpath_set_mutable(prefix, token, pending ?? null),
    setFreeInlineMax(bytes: number): void {
      raw.hs_fastpath_set_free_inline_max(bytes);
    },
    setDirCache(on: boolean): void {
      raw.hs_fastpath_set_dircache(on);
    },
    setRmdir(on: boolean): void {
      raw.hs_fastpath_set_rmdir(on);
    },
    setTruncate(on: boolean): void {
      raw.hs_fastpath_set_truncate(on);
    },
    inode(dev: bigint, ino: bigint, delta: number): void {
      raw.hs_fastpath_inode(dev, ino, delta);
    },
    homeChecked: (prefix: string, token: number, ms: number): boolean => raw.hs_fastpath_home_checked(prefix, token, ms),
    inodeSize(dev: bigint, ino: bigint, size: number): void {
      raw.hs_fastpath_inode_size(dev, ino, size);
    },
    wlDelegate: (dev: bigint, ino: bigint, size: number, acct: BigInt64Array): boolean => raw.hs_fastpath_wl_delegate(dev, ino, size, acct),
    wlRevoke: (dev: bigint, ino: bigint): number => raw.hs_fastpath_wl_revoke(dev, ino),
    wlSize: (dev: bigint, ino: bigint): number => raw.hs_fastpath_wl_size(dev, ino),
    setWriteCredit: (prefix: string, token: number, on: boolean): boolean => raw.hs_fastpath_set_write_credit(prefix, token, !!on),
    setHandle(fh: number, fd: number, uid: number, gid: number, ownerFromStat: boolean, types: number, masks: Uint32Array): void {
      raw.hs_fastpath_set_handle(fh >>> 0, fd, uid >>> 0, gid >>> 0, !!ownerFromStat, types >>> 0, masks);
    },
    removeHandle(fh: number): void {
      raw.hs_fastpath_remove_handle(fh >>> 0);
    },
    setReserved(names: string[]): void {
      raw.hs_fastpath_set_reserved(names);
    },
    setOpen: (prefix: string, token: number, flags: number): boolean => raw.hs_fastpath_set_open(prefix, token, flags >>> 0),
    setAttrOps: (prefix: string, token: number, flags: number, chmodM: number, chmodK: number): boolean =>
      raw.hs_fastpath_set_attr_ops(prefix, token, flags >>> 0, chmodM >>> 0, chmodK >>> 0),
    setCreate: (prefix: string, token: number, on: boolean, modeM: number, modeOr: number, maxDepth: number, ownerIsCaller: boolean): boolean =>
      raw.hs_fastpath_set_create(prefix, token, !!on, modeM >>> 0, modeOr >>> 0, maxDepth >>> 0, !!ownerIsCaller),
    grantCreate: (prefix: string, token: number, fh: number, uid: number): boolean => raw.hs_fastpath_grant_create(prefix, token, fh >>> 0, uid >>> 0),
    setMkdir: (prefix: string, token: number, on: boolean, modeM: number, modeOr: number): boolean =>
      raw.hs_fastpath_set_mkdir(prefix, token, !!on, modeM >>> 0, modeOr >>> 0),
    setSymlink: (prefix: string, token: number, rule: 0 | 1 | 2): boolean => raw.hs_fastpath_set_symlink(prefix, token, rule),
    symlinkInside: (depth: number, target: string): boolean => raw.hs_fastpath_symlink_inside(depth >>> 0, target),
    setLink: (prefix: string, token: number, on: boolean): boolean => raw.hs_fastpath_set_link(prefix, token, !!on),
    setRename: (prefix: string, token: number, on: boolean, maxDepth: number): boolean => raw.hs_fastpath_set_rename(prefix, token, !!on, maxDepth >>> 0),
    grant: (prefix: string, token: number, fh: number, uid: number): boolean => raw.hs_fastpath_grant(prefix, token, fh >>> 0, uid >>> 0),
    reclaim: (): number => raw.hs_fastpath_reclaim(),
    /** BigUint64Array of 7-word records (ABI.REC_* kinds), or null */
    takeOpens: (): BigUint64Array | null => raw.hs_fastpath_take_opens(),
    setSettleHandler: (fn: () => void): void => raw.hs_fastpath_set_settle_handler(fn),
    enable(on: boolean): void {
      raw.hs_fastpath_enable(!!on);
    },
    clear(): void {
      raw.hs_fastpath_clear();
    },
    stats: (): FastPathStats => raw.hs_fastpath_stats(),
  } satisfies FastPathNative;
}
