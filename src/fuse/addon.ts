/**
 * The addon's exports besides the session (native/src), wrapped for this code
 * and attached to the daemon's Fuse class. The raw functions validate their arguments
 * in C (a TypeError, never a crash); these wrappers coerce what JS would
 * otherwise pass loosely (uint32 counts, booleans) and give results a shape.
 *
 * attachAddon runs once, after loadFuse checked the ABI: every export named
 * here exists in the addon it attaches.
 */
import type { TimeSpec } from '../fs/native-api.js';

/** The C functions, as seam.c exports them. */
type Raw = Record<string, (...args: never[]) => unknown>;
type Cb = (errno: number) => void;

const MNT_DETACH = 2;
const EINVAL = -22;

const badPath = (p: unknown): boolean => typeof p !== 'string' || p.includes('\0');

function umountError(mnt: string, res: number): Error {
  return Object.assign(new Error(`umount2 ${mnt}: errno ${-res}`), { errno: res });
}

/** Adds the statics and Fuse.fastPath to the daemon's Fuse class. */
export function attachAddon(Fuse: Record<string, unknown>, raw: Raw): void {
  const call = <T>(name: string, ...args: unknown[]): T => (raw[name] as (...a: unknown[]) => T)(...args);
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
      call('sys_umount2', mnt, flags | 0, cb);
    },
    /** utimensat(AT_FDCWD, path, [atime, mtime], AT_SYMLINK_NOFOLLOW) on libuv's pool */
    utimensat(p: string, atime: TimeSpec, mtime: TimeSpec, cb: Cb): void {
      cbFirst('utimensat', cb);
      if (badPath(p)) return void process.nextTick(cb, EINVAL);
      call('sys_utimensat', p, atime, mtime, cb);
    },
    /** mknod(path, mode, dev) on libuv's pool (Node has none) */
    mknod(p: string, mode: number, dev: number, cb: Cb): void {
      cbFirst('mknod', cb);
      if (badPath(p)) return void process.nextTick(cb, EINVAL);
      call('sys_backing_mknod', p, mode >>> 0, dev >>> 0, cb);
    },
    /** fallocate(fd, mode, offset, length) on libuv's pool (Node has none) */
    fallocate(fd: number, mode: number, offset: number, length: number, cb: Cb): void {
      cbFirst('fallocate', cb);
      call('sys_backing_fallocate', fd, mode, offset, length, cb);
    },
    /** RLIMIT_NOFILE: read it, or set it (0 keeps a value); Infinity = unlimited */
    nofile(soft = 0, hard = 0): { res: number; soft: number; hard: number } {
      const [res, s, h] = call<[number, number, number]>('sys_nofile', soft, hard);
      return { res, soft: s, hard: h };
    },
    /** OPENDIR counted per caller uid (0 not) and in all; past a cap (0: none) EMFILE */
    setDirHandleCaps(perUid: number, all: number): void {
      call('fastpath_set_dir_caps', perUid >>> 0, all >>> 0);
    },
    dirHandleStats: (): { open: number; refused: number } => call('fastpath_dir_stats'),
    /** directory handles open: uid's (0 for uid 0), under the home's prefix ("/<tenant>/<key>"), in all */
    dirHandleCounts: (uid: number, prefix: string): [number, number, number] => call('fastpath_dir_counts', uid >>> 0, prefix),
    /** JS's open files (uid's, the home's with its cap, all) and the caps per uid and in all, which OPENDIR counts its handles beside */
    setOpenFileCounts(uid: number, uidFiles: number, prefix: string, homeFiles: number, homeCap: number, total: number, capPerUid: number, capAll: number): void {
      call('fastpath_set_open_files', uid >>> 0, uidFiles >>> 0, prefix, homeFiles >>> 0, homeCap >>> 0, total >>> 0, capPerUid >>> 0, capAll >>> 0);
    },
    /**
     * The data plane (dataplane.c): READs of fh (DP_READ) answered with
     * pread(fd) on libfuse's thread; WRITEs (DP_WRITE) decided by the write
     * handler without their data, then pwrite(fd) there. Publish before
     * answering the open; unpublish before closing fd (it waits for syscalls
     * in flight). dev, ino and append name the inode for writes whose growth
     * fastpath_write.c decides.
     */
    publish(fh: number, fd: number, flags: number, dev = 0n, ino = 0n, append = false): void {
      call('fastpath_dp_publish', fh, fd, flags, dev, ino, !!append);
    },
    setPublishFlags: (fh: number, flags: number): boolean => call('fastpath_dp_set_flags', fh, flags),
    unpublish: (fh: number): boolean => call('fastpath_dp_unpublish', fh),
    /** once per process; the handler must not throw (see WriteHandler) */
    setWriteHandler(handler: unknown): void {
      if (typeof handler !== 'function') throw new TypeError('setWriteHandler: handler must be a function');
      call('fastpath_dp_set_write_handler', handler);
    },
    writeDecision: (id: number, offset: number, wait = false): boolean => call('fastpath_dp_write_decision', id, offset, !!wait),
    writeDone: (id: number, result: number): boolean => call('fastpath_dp_write_done', id, result),
    /** [id, bytes, ...] of writes that landed whole since the last call (answered already), or null */
    takeWriteReports: (): Float64Array | null => call('fastpath_dp_take_write_reports'),
    /** RELEASE answered on libfuse's thread and queued (true), or sent to ops.release */
    setReleaseDeferred(on: boolean): void {
      call('fastpath_dp_set_release_deferred', Boolean(on));
    },
    /** [fh, ...] of the RELEASEs answered since the last call, oldest first, or null */
    takeReleases: (): Float64Array | null => call('fastpath_dp_take_releases'),
    dataPlaneStats: (): object => call('fastpath_dp_stats'),
    /** opens of handles in a zero flush-gate slot answered with FOPEN_NOFLUSH; returns opens answered so */
    setNoFlush: (on: boolean): number => call('session_set_noflush', !!on),
    noFlushCount(): { opens: number; flushes: number } {
      const [opens, flushes] = call<[number, number]>('session_noflush_count');
      return { opens, flushes };
    },
    /** one thread reads the device at a time, from the next mount on */
    setSingleReader(on: boolean): void {
      call('session_set_single_reader', !!on);
    },
    leadStats(): { on: boolean; handoffs: number; revocations: number; readWaits: number } {
      const [on, handoffs, revocations, readWaits] = call<[number, number, number, number]>('session_lead_stats');
      return { on: on === 1, handoffs, revocations, readWaits };
    },
    /**
     * Drop what the kernel caches for a virtual path (session/inval.c; kind:
     * ABI.INVAL_*): queued for the session's invalidation thread, never
     * waited for. Returns the notifications queued, or -errno.
     */
    invalidate: (kind: number, p: string): number => call('session_invalidate', kind >>> 0, String(p)),
    invalidationStats(): { queued: number; sent: number; notCached: number; failed: number; pending: number } {
      const [queued, sent, notCached, failed, pending] = call<[number, number, number, number, number]>('session_inval_stats');
      return { queued, sent, notCached, failed, pending };
    },
    /** the session's node table (session/nodes.c): nodes the kernel may name, of them reachable by inode number */
    nodeStats(): { nodes: number; byInode: number } {
      const [nodes, byInode] = call<[number, number, number]>('session_stats');
      return { nodes, byInode };
    },
    /**
     * A successor's head start: import the node table handed over on a
     * thread of its own while JavaScript adopts the rest (session.c,
     * hs_session_preimport); the session's adopt waits for it. 0 or -errno.
     */
    preimportNodes: (nodes: Buffer): number => call('session_preimport', nodes),
    handleStats(): { epoch: number; resent: number; refused: number; reopened: number } {
      const [resent, refused, reopened] = call<[number, number, number]>('session_handle_stats');
      return { epoch: call<number>('session_fh_epoch'), resent, refused, reopened };
    },
    /** [entries queued, of them sent]: the queue is FIFO (session/inval.c) */
    invalidationProgress: (): [number, number] => call<[number, number]>('session_inval_progress'),
    _isValidUtf8: (buf: Uint8Array): boolean => call('sys_utf8_valid_buffer', buf),
  };
  Object.assign(Fuse, statics);

  /** The native getattr/lookup/open/create/unlink/setattr table (fastpath_*.c): one per process. */
  Fuse.fastPath = {
    setHome(prefix: string, fd: number, dev: bigint, uid: number, gid: number, ownerFromStat: boolean, maxName: number, types: number, masks: Uint32Array, token: number): void {
      call('fastpath_set_home', prefix, fd, dev, uid >>> 0, gid >>> 0, !!ownerFromStat, maxName >>> 0, types >>> 0, masks, token);
    },
    removeHome: (prefix: string, token?: number): boolean => call('fastpath_remove_home', prefix, token === undefined ? -1 : token),
    setMutable: (prefix: string, token: number, pending?: BigInt64Array | null): boolean => call('fastpath_set_mutable', prefix, token, pending ?? null),
    setFreeInlineMax(bytes: number): void {
      call('fastpath_set_free_inline_max', bytes);
    },
    unlinks: true,
    inode(dev: bigint, ino: bigint, delta: number): void {
      call('fastpath_inode', dev, ino, delta);
    },
    inodeSize(dev: bigint, ino: bigint, size: number): void {
      call('fastpath_inode_size', dev, ino, size);
    },
    wlDelegate: (dev: bigint, ino: bigint, size: number, acct: BigInt64Array): boolean => call('fastpath_wl_delegate', dev, ino, size, acct),
    wlRevoke: (dev: bigint, ino: bigint): number => call('fastpath_wl_revoke', dev, ino),
    wlSize: (dev: bigint, ino: bigint): number => call('fastpath_wl_size', dev, ino),
    setWriteCredit: (prefix: string, token: number, on: boolean): boolean => call('fastpath_set_write_credit', prefix, token, !!on),
    writeDecisions: true,
    setHandle(fh: number, fd: number, uid: number, gid: number, ownerFromStat: boolean, types: number, masks: Uint32Array): void {
      call('fastpath_set_handle', fh >>> 0, fd, uid >>> 0, gid >>> 0, !!ownerFromStat, types >>> 0, masks);
    },
    removeHandle(fh: number): void {
      call('fastpath_remove_handle', fh >>> 0);
    },
    setReserved(names: string[]): void {
      call('fastpath_set_reserved', names);
    },
    setOpen: (prefix: string, token: number, flags: number): boolean => call('fastpath_set_open', prefix, token, flags >>> 0),
    setAttrOps: (prefix: string, token: number, flags: number, chmodM: number, chmodK: number): boolean =>
      call('fastpath_set_attr_ops', prefix, token, flags >>> 0, chmodM >>> 0, chmodK >>> 0),
    opens: true,
    setCreate: (prefix: string, token: number, on: boolean, modeM: number, modeOr: number, maxDepth: number, ownerIsCaller: boolean): boolean =>
      call('fastpath_set_create', prefix, token, !!on, modeM >>> 0, modeOr >>> 0, maxDepth >>> 0, !!ownerIsCaller),
    grantCreate: (prefix: string, token: number, fh: number, uid: number): boolean => call('fastpath_grant_create', prefix, token, fh >>> 0, uid >>> 0),
    grant: (prefix: string, token: number, fh: number, uid: number): boolean => call('fastpath_grant', prefix, token, fh >>> 0, uid >>> 0),
    reclaim: (): number => call('fastpath_reclaim'),
    /** BigUint64Array of 7-word records (ABI.REC_* kinds), or null */
    takeOpens: (): BigUint64Array | null => call('fastpath_take_opens'),
    enable(on: boolean): void {
      call('fastpath_enable', !!on);
    },
    clear(): void {
      call('fastpath_clear');
    },
    stats: (): object => call('fastpath_stats'),
  };
}
