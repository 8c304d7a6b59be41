/**
 * Every export of our addon (native/addon/homesfs.node, built from
 * native/src), with its signature: the one list of the binding's contract.
 * Only src/fuse/binding.ts loads the addon, and it refuses one whose ABI
 * (abi.ts) differs from this daemon's: past that check, every member here is
 * there. Modules that use a part take a `Pick` of this interface, so a fake
 * in a test names what it stands in for.
 *
 * The functions check their arguments in C (a TypeError, never a crash);
 * a negative number is -errno unless its line says otherwise.
 */
/** A time for utimensat: now, left as it is, or exact (the addon's and the fs operations' one type). */
export type TimeSpec = 'now' | 'omit' | { sec: number; nsec: number };

type Cb = (res: number) => void;
type Dispatch = (op: number, id: number, uid: number, gid: number, pid: number, ...args: unknown[]) => void;

/** (0, id, fh, offset, length, path, uid, gid, pid): decide a write; (1, id, result): its pwrite returned result. */
export type WriteHandler = (kind: number, id: number, a: number, b: number, c: number, path: string | null, uid: number, gid: number, pid: number) => void;

/** What a successor needs of a paused session (session.c `hs_session_handed`). */
export interface Handed {
  /** the /dev/fuse descriptor (this process's; sent as a copy) */
  fd: number;
  bufsize: number;
  /** the kernel's INIT request, replayed into the successor's libfuse state */
  init: Buffer;
  /** the node table and the open directories, serialised (nodes.c, ops_dirs.c) */
  nodes: Buffer;
  dirs: Buffer;
  /** the epoch in the handles the kernel holds (handles.h); absent from a predecessor that had none: 0 */
  epoch?: number;
}

/** The fast path's counters (fastpath_napi.c `hs_fastpath_stats`). */
export interface FastPathStats {
  enabled: boolean;
  answered: number;
  fallbacks: number;
  negative: number;
  /** GETATTRs of a home itself answered while the daemon's check of its directory stood (also in answered) */
  homeAnswered: number;
  unlinkAnswered: number;
  unlinkFallbacks: number;
  unlinkSlowFrees: number;
  readdirAnswered: number;
  readdirFallbacks: number;
  fgetattrAnswered: number;
  fgetattrFallbacks: number;
  utimensAnswered: number;
  chmodAnswered: number;
  chownAnswered: number;
  setattrFallbacks: number;
  createAnswered: number;
  createFallbacks: number;
  mkdirAnswered: number;
  mkdirFallbacks: number;
  symlinkAnswered: number;
  symlinkFallbacks: number;
  linkAnswered: number;
  linkFallbacks: number;
  rmdirAnswered: number;
  /** GETATTRs below a kept directory descriptor (fastpath_dircache.c), walks that opened one, descriptors kept now */
  dirCacheHits: number;
  dirCacheWalks: number;
  dirCacheHeld: number;
  rmdirFallbacks: number;
  renameAnswered: number;
  renameFallbacks: number;
  openAnswered: number;
  openClosedNatively: number;
  createClosedNatively: number;
  /** times a caller's create slots ran low and JS was asked to grant more */
  settleAsks: number;
  openFallbacks: number;
  writesDecided: number;
  writeDecisionFallbacks: number;
  truncatesDecided: number;
  truncateFallbacks: number;
  /** open slots granted to C (open files it may count for a uid without asking) */
  openSlots: number;
  homes: number;
  inodes: number;
  handles: number;
  inFlight: number;
  retiredHomes: number;
}

/** The data plane's counters (dataplane.c `hs_fastpath_dp_stats`). */
export interface DataPlaneStats {
  published: number;
  reads: number;
  bytes: number;
  fallbacks: number;
  writes: number;
  writeBytes: number;
  writeFallbacks: number;
  releases: number;
}

/** Passthrough opens (session/passthrough.c, nodes.h), as the binding's counts become `status`'s (src/fuse/addon.ts) */
export interface PassthroughInfo {
  /** negotiated at INIT (by this daemon or the one whose session it adopted) */
  negotiated: boolean;
  /** the kernel offered it */
  offered: boolean;
  /** new files' opens may be passed through now */
  active: boolean;
  /** opens answered passed through: readers, and the others of a passed-through file (direct I/O) */
  opens: number;
  opensDirect: number;
  /** opens refused (ETXTBSY): their home's content policy must see the data of a file passed through */
  refused: number;
  /** backing IDs opened and closed, backing opens that failed and the last one's errno */
  idsOpened: number;
  idsClosed: number;
  idFailures: number;
  lastError: number;
  /** a failure every file would share (no privilege, no kernel support) turned it off */
  disabled: boolean;
  /** files passed through now (nodes holding a backing ID) */
  files: number;
}

export interface AddonRaw {
  /** the addon's copy of native/src/abi.h (abi.ts compares it with ours) */
  readonly ABI: Readonly<Record<string, number>>;

  // ---- the session (native/src/session/session.c, bridge.c, loop.c) ----
  hs_session_mount(mnt: string, mountOpts: string, lowlevelOpts: string, conf: number[], dispatch: Dispatch): void;
  /** 0 not started, 1 serving, 2 ended */
  hs_session_loop_state(): number;
  /** [nodes, of them reachable by inode number, -] (nodes.c) */
  hs_session_stats(): [number, number, number];
  hs_session_adopt(fd: number, bufsize: number, init: Buffer, nodes: Buffer, dirs: Buffer, lowlevelOpts: string, conf: number[], dispatch: Dispatch): number;
  /** [0 or -errno, the resend notification's result] */
  hs_session_revive(fd: number, bufsize: number, init: Buffer, epoch: number, lowlevelOpts: string, conf: number[], dispatch: Dispatch): [number, number];
  /** the handles' epoch, set first when given */
  hs_session_fh_epoch(set?: number): number;
  /** [requests resent, of them answered EIO, dead handles reopened] (handles.c) */
  hs_session_handle_stats(): [number, number, number];
  /** [minor, kernel's minor, max write, max pages, INIT flags, largest READ, largest WRITE, LOOKUPs, READDIRPLUSes] (session/proto.h) */
  hs_session_proto(): [number, number, number, number, number, number, number, number, number, number, number];
  hs_session_passthrough(): [number, number, number, number, number, number, number, number, number, number, number, number];
  hs_session_passed_through(ino: bigint): boolean;
  /** the dead handles this daemon reopened (handles.h), serialised for a successor, or -errno */
  hs_session_dead_handles(): Buffer | number;
  hs_session_dead_handles_import(pairs: Buffer): number;
  /** a successor's head start: import the node table on a thread of its own; adopt waits for it */
  hs_session_preimport(nodes: Buffer): number;
  hs_session_pause(): void;
  hs_session_paused(): boolean;
  /** ms the oldest request a worker is inside has been there (0: none), answered natively or not */
  hs_session_busy_ms(): number;
  hs_session_resume(): void;
  /** `withNodes` false: `nodes` is empty (a successor that followed the journal has them) */
  hs_session_handed(withNodes?: boolean): Handed;
  hs_session_reply(id: number, res: number, ...values: unknown[]): void;
  hs_session_unref(): void;
  /** every call the session's workers posted so far, dispatched now (bridge_napi.c) */
  hs_session_dispatch_queued(): void;
  /** slot fh & 0xffff > 0 of a Uint16Array(65536): FLUSH of fh goes to JavaScript */
  hs_session_set_flush_gate(gate: Buffer): void;

  // ---- the kernel's caches (session/inval.c) ----
  /** kind: ABI.INVAL_*; the notifications queued */
  hs_session_invalidate(kind: number, path: string): number;
  /** [queued, sent, not cached, failed, pending] */
  hs_session_inval_stats(): [number, number, number, number, number];
  /** [entries queued, of them sent] */
  hs_session_inval_progress(): [number, number];

  // ---- the node table's journal (session/nodes_journal*.c, journal_js.c) ----
  /** two memfds for a keeper ([fd0, fd1]), or -errno */
  hs_handover_journal_open(): [number, number] | number;
  /** a fresh table from them: the stored epoch, or -errno */
  hs_handover_journal_recover(fd0: number, fd1: number): number;
  /** after a live handover's import: 0 or -errno */
  hs_handover_journal_rebase(fd0: number, fd1: number): number;
  /** the stored epoch, set first when given (-ENOENT: no journal) */
  hs_handover_journal_epoch(set?: number): number;
  /** the last recovery's figures */
  hs_handover_journal_recovered(): number[];
  hs_handover_journal_follow(fd0: number, fd1: number): number;
  hs_handover_journal_follow_finish(): number;
  hs_handover_journal_follow_drop(): void;
  hs_handover_journal_gen(): number;

  // ---- the ledgers' area (handover/ledgers.c) ----
  hs_handover_ledgers_open(): [number, ArrayBuffer] | number;
  hs_handover_ledgers_map(fd: number): ArrayBuffer | number;

  // ---- the handover socket (handover/handover.c) ----
  hs_handover_listen(path: string): number;
  hs_handover_accept(fd: number): number;
  hs_handover_connect(path: string): number;
  hs_handover_send(fd: number, data: Buffer, fds: number[], timeoutMs: number): number;
  hs_handover_recv(fd: number, timeoutMs: number): { res: number; data?: Buffer; fds: number[] };
  hs_handover_close(fd: number): number;
  hs_handover_memfd(data: Buffer): number;
  hs_handover_reserve_fds(fd: number): number;

  // ---- the holder (handover/holder.c) and systemd's fd store ----
  hs_handover_holder_poll(fd: number, events: number): number;
  /** the process at the other end of a connection: its pid and a pidfd of it (-errno: none; -ESRCH: it is gone), or -errno */
  hs_handover_holder_peer(fd: number): { pid: number; pidfd: number } | number;
  hs_handover_holder_peer_pidfd(fd: number): { pid: number; pidfd: number } | number;
  /** the serving session's descriptor (this process's) and INIT; null before the session started */
  hs_handover_holder_session(): { fd: number; bufsize: number; init: Buffer } | null;
  hs_handover_sd_notify_fds(socket: string, message: string, fds: number[]): number;
  hs_handover_sd_cloexec(fd: number): number;

  // ---- one-shot readiness watches on this thread's event loop (sys/fdwatch.c) ----
  /** cb(status, events) once fd is readable (readable 1) or writable (0); the id (> 0), or -errno */
  hs_fdwatch_open(fd: number, readable: number, cb: (status: number, events: number) => void): number;
  /** the watch fires once more: 0, or -errno (-ENOENT: no such watch) */
  hs_fdwatch_arm(id: number): number;
  /** the watch ends before its descriptor is closed: 0, or -ENOENT */
  hs_fdwatch_close(id: number): number;
  /** watches open */
  hs_fdwatch_count(): number;

  // ---- system calls Node lacks, on libuv's pool (calls.c): cb(0) or cb(-errno) ----
  hs_sys_utimensat(path: string, atime: TimeSpec, mtime: TimeSpec, cb: Cb): void;
  hs_sys_backing_mknod(path: string, mode: number, dev: number, cb: Cb): void;
  hs_sys_backing_fallocate(fd: number, mode: number, offset: number, length: number, cb: Cb): void;
  /** renameat2(olddirfd, oldname, newdirfd, newname, flags): single components only (EINVAL otherwise) */
  hs_sys_backing_renameat2(oldDirFd: number, oldName: string, newDirFd: number, newName: string, flags: number, cb: Cb): void;
  hs_sys_umount2(mnt: string, flags: number, cb: Cb): void;
  /** RLIMIT_NOFILE: [res, soft, hard] after setting what is not 0; Infinity = unlimited */
  hs_sys_nofile(soft: number, hard: number): [number, number, number];
  hs_sys_utf8_valid_buffer(buf: Uint8Array): boolean;

  // ---- the channel (channel.c) ----
  /** opens of handles in a zero flush-gate slot answered with FOPEN_NOFLUSH; returns the opens answered so */
  hs_session_set_noflush(on: boolean): number;
  /** [opens, flushes] */
  hs_session_noflush_count(): [number, number];
  hs_session_set_single_reader(on: boolean): void;
  /** [on, handoffs, revocations, read waits] */
  hs_session_lead_stats(): [number, number, number, number];

  // ---- directory handles (dirhandles.c) ----
  hs_fastpath_set_dir_caps(perUid: number, all: number): void;
  hs_fastpath_set_open_files(uid: number, uidFiles: number, prefix: string, homeFiles: number, homeCap: number, total: number, capPerUid: number, capAll: number): void;
  /** [uid's, under the prefix, in all] */
  hs_fastpath_dir_counts(uid: number, prefix: string): [number, number, number];
  hs_fastpath_dir_stats(): { open: number; refused: number };

  // ---- the data plane (dataplane.c, dataplane_write.c) ----
  hs_fastpath_dp_publish(fh: number, fd: number, flags: number, dev: bigint, ino: bigint, append: boolean): void;
  hs_fastpath_dp_set_flags(fh: number, flags: number): boolean;
  hs_fastpath_dp_unpublish(fh: number): boolean;
  hs_fastpath_dp_set_write_handler(handler: WriteHandler): void;
  hs_fastpath_dp_write_decision(id: number, offset: number, wait: boolean): boolean;
  hs_fastpath_dp_write_done(id: number, result: number): boolean;
  /** [id, bytes, ...] of writes that landed whole since the last call, or null */
  hs_fastpath_dp_take_write_reports(): Float64Array | null;
  hs_fastpath_dp_set_release_deferred(on: boolean): void;
  /** [fh, ...] of the RELEASEs answered since the last call, oldest first, or null */
  hs_fastpath_dp_take_releases(): Float64Array | null;
  hs_fastpath_dp_stats(): DataPlaneStats;

  // ---- the fast path (fastpath_*.c) ----
  hs_fastpath_set_home(prefix: string, fd: number, dev: bigint, uid: number, gid: number, ownerFromStat: boolean, maxName: number, types: number, masks: Uint32Array, token: number): void;
  /** token -1: whatever is published there */
  hs_fastpath_remove_home(prefix: string, token: number): boolean;
  hs_fastpath_set_mutable(prefix: string, token: number, pending: BigInt64Array | null): boolean;
  hs_fastpath_inode(dev: bigint, ino: bigint, delta: number): void;
  hs_fastpath_inode_size(dev: bigint, ino: bigint, size: number): void;
  hs_fastpath_home_checked(prefix: string, token: number, ms: number): boolean;
  hs_fastpath_wl_delegate(dev: bigint, ino: bigint, size: number, acct: BigInt64Array): boolean;
  /** the size, now JS's; -1 a native write is in flight (ask again); -2 not handed over */
  hs_fastpath_wl_revoke(dev: bigint, ino: bigint): number;
  hs_fastpath_wl_size(dev: bigint, ino: bigint): number;
  hs_fastpath_set_write_credit(prefix: string, token: number, on: boolean): boolean;
  hs_fastpath_set_handle(fh: number, fd: number, uid: number, gid: number, ownerFromStat: boolean, types: number, masks: Uint32Array): void;
  hs_fastpath_remove_handle(fh: number): void;
  hs_fastpath_set_reserved(names: string[]): void;
  hs_fastpath_set_open(prefix: string, token: number, flags: number): boolean;
  hs_fastpath_set_attr_ops(prefix: string, token: number, flags: number, chmodM: number, chmodK: number): boolean;
  hs_fastpath_grant(prefix: string, token: number, fh: number, uid: number): boolean;
  hs_fastpath_set_create(prefix: string, token: number, on: boolean, modeM: number, modeOr: number, maxDepth: number, ownerIsCaller: boolean): boolean;
  hs_fastpath_grant_create(prefix: string, token: number, fh: number, uid: number): boolean;
  hs_fastpath_set_mkdir(prefix: string, token: number, on: boolean, modeM: number, modeOr: number): boolean;
  hs_fastpath_set_symlink(prefix: string, token: number, rule: number): boolean;
  hs_fastpath_symlink_inside(depth: number, target: string): boolean;
  hs_fastpath_set_link(prefix: string, token: number, on: boolean): boolean;
  hs_fastpath_set_rename(prefix: string, token: number, on: boolean, maxDepth: number): boolean;
  hs_fastpath_reclaim(): number;
  /** BigUint64Array of 7-word records (ABI.REC_* kinds), or null */
  hs_fastpath_take_opens(): BigUint64Array | null;
  /** fn() on the JS thread when a caller's create slots in a home run low (once per process) */
  hs_fastpath_set_settle_handler(fn: () => void): void;
  hs_fastpath_set_free_inline_max(bytes: number): void;
  hs_fastpath_set_rmdir(on: boolean): void;
  hs_fastpath_set_dircache(on: boolean): void;
  hs_fastpath_set_truncate(on: boolean): void;
  hs_fastpath_enable(on: boolean): void;
  hs_fastpath_clear(): void;
  hs_fastpath_stats(): FastPathStats;

  // ---- the removal claims C's unlinks and JS's removers share (removals.c) ----
  hs_fastpath_claim_enter(dev: bigint, ino: bigint): void;
  hs_fastpath_claim_leave(dev: bigint, ino: bigint, gone: boolean): boolean;
  hs_fastpath_claim_stats(): { inFlight: number; raced: number };
}
