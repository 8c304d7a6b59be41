/**
 * The one op table of the JavaScript side of the session: for each request
 * the session hands over (by ABI op code, native/src/abi.h), how its
 * arguments convert, which fs/ operation runs, and how its result becomes the
 * reply. `serveOps` runs a row: errors through errnoOf (the one errno table),
 * refusals logged and counted, metrics per op. Adding an op is a row here
 * (and its code in abi.h). A code with no row is answered ENOSYS, which the
 * kernel remembers for the whole mount.
 */
import { readFile } from 'node:fs/promises';
import { constants as osConstants } from 'node:os';
import { ABI } from '../abi.js';
import { errnoName, errnoOf, isHomesError, type HomesCode } from '../errors.js';
import * as attr from '../fs/attr.js';
import type { FsContext } from '../fs/context.js';
import type { TimeSpec } from '../fs/native-api.js';
import type { Caller } from '../fs/state.js';
import * as dir from '../fs/dir.js';
import * as file from '../fs/file.js';
import type { Logger } from '../log.js';
import type { OpMetrics } from '../metrics/ops.js';
import { RefusalLimiter } from '../policy/ratelimit.js';
import type { SelfCheck } from './selfcheck.js';
import { openBits, statfsWords, statWords, type StatLike } from './marshal.js';

const E = osConstants.errno;

/** Codes that are the policy saying no: each one is logged (rate-limited) with home, op and caller. */
const REFUSALS = new Set<HomesCode>([
  'QUOTA_EXCEEDED',
  'TENANT_QUOTA_EXCEEDED',
  'INODES_EXCEEDED',
  'FILE_TOO_LARGE',
  'OPEN_FILES_EXCEEDED',
  'DAEMON_FILES_EXHAUSTED',
  'NOT_UTF8',
  'OP_REFUSED',
  'PASSED_THROUGH',
  'CROSS_HOME',
  'CROSS_DEVICE',
  'DAEMON_TREE',
  'INVALID_NAME',
  'NAME_TOO_LONG',
  'NOT_UTF8_NAME',
  'SYMLINK_ESCAPES',
  // arguments no op of the mount takes (renameat2's RENAME_WHITEOUT, a mknod file type): refused, as their callers should hear
  'INVALID_ARGUMENT',
  // fallocate modes the budgets cannot charge (policy/fallocate.ts): refused like any other policy answer
  'NOT_SUPPORTED',
]);

const BUDGET_CODES = new Set<HomesCode>(['QUOTA_EXCEEDED', 'TENANT_QUOTA_EXCEEDED', 'INODES_EXCEEDED', 'FILE_TOO_LARGE']);
/** Every budget refusal says how to get out of it, for the home it happened in. */
const waysOut = (home: string | undefined, code: HomesCode): string => {
  const h = home ?? 'TENANT/KEY';
  if (code === 'TENANT_QUOTA_EXCEEDED') {
    return `clean up files in any of the tenant's homes; or raise the tenant budget: homesctl set-tenant-budget ${h.split('/')[0]} SIZE|off (default goes back to the config's)`;
  }
  const raise = code === 'QUOTA_EXCEEDED' ? `homesctl set-budget ${h} SIZE|off` : code === 'INODES_EXCEEDED' ? `homesctl set-limits ${h} --inodes N|off` : `homesctl set-limits ${h} --file-size SIZE|off`;
  return `clean up files in the home; or raise the limit: ${raise} (default goes back to the profile's)`;
};

/** Open-file refusals: what an admin can do about them. */
const openFilesWaysOut = (home: string | undefined, err: { code: HomesCode; details: Record<string, unknown> }): string => {
  if (err.code === 'DAEMON_FILES_EXHAUSTED') return 'the daemon is at limits.nofile minus limits.reserveFiles across all homes: find the homes holding most (homesctl list --sort busy), or raise limits.nofile (restart)';
  if (err.details.scope === 'uid') return "the uid's processes must close files; or raise limits.openFilesPerUid (restart)";
  return `the home's processes must close files; or give ${home ?? 'the home'} a profile with a larger maxOpenFiles (homesctl set-profile)`;
};

/**
 * Ordinary answers that programs expect all the time (lookups of missing names…), and the
 * backing filesystem's own limits reached by what the caller asked (a size past its largest
 * file, more links than it keeps, an attribute buffer too small): the caller's errno, not a
 * fault of the daemon, so a debug line and never an error (a homesfs limit is a refusal, logged
 * as a warning above).
 */
const ROUTINE = new Set<number>([E.ENOENT, E.EEXIST, E.ENOTEMPTY, E.ENOTDIR, E.EISDIR, E.EOPNOTSUPP, E.ENODATA, E.EACCES, E.EFBIG, E.EMLINK, E.ERANGE]);

function homeOf(path: string | null): string | undefined {
  if (!path) return undefined;
  const parts = path.split('/');
  return parts.length >= 3 ? `${parts[1]}/${parts[2]}` : undefined;
}

async function commOf(pid: number): Promise<string | undefined> {
  if (pid <= 0) return undefined;
  try {
    return (await readFile(`/proc/${pid}/comm`, 'utf8')).trim();
  } catch {
    return undefined; // gone already, or in a pid namespace we cannot see
  }
}


// ---- the table -------------------------------------------------------------------------

/** A reply: 0, a byte count or a negative errno, then the values the session reads for that op. */
export type Answer = readonly [res: number, ...values: unknown[]];

interface Row<A extends readonly unknown[], R> {
  /** the request's arguments as the session passes them (native/src/session/ops_*.c, `*_args`) */
  args(raw: readonly unknown[]): A;
  /** the op's name in logs and metrics */
  name: string | ((a: A) => string);
  /** the path a refusal is logged with (default: the first argument) */
  path?(a: A): string | null;
  /** an answer that needs no fs op (the self-check's file, a directory gone while listed); undefined: run the op */
  early?(a: A, self: SelfCheck): Answer | undefined;
  /** the fs/ operation */
  fs(ctx: FsContext, a: A, caller: Caller): Promise<R>;
  /** its result as the reply */
  reply(r: R, a: A): Answer;
}

type AnyRow = Row<readonly unknown[], unknown>;
const row = <A extends readonly unknown[], R>(r: Row<A, R>): AnyRow => r as unknown as AnyRow;

const P = (a: unknown): string => a as string;
const PN = (a: unknown): string | null => a as string | null;
const N = (a: unknown): number => a as number;
const done = (): Answer => [0];

/**
 * A getattr's answer: the stat, and `true` after it when the attributes are
 * volatile (they change with no request the kernel sees, as a status file's
 * size does): the session then lets the kernel keep them for no time at all.
 */
const statAnswer = (st: object): Answer => ((st as { volatile?: boolean }).volatile === true ? [0, statWords(st as StatLike), true] : [0, statWords(st as StatLike)]);

const openAnswer = (r: { fh: number; directIo?: boolean; keepCache?: boolean }): Answer => [0, r.fh, openBits({ directIo: r.directIo, keepCache: r.keepCache })];

/** stats feed d_ino and d_type (a number is a mode's type bits alone); `offsets` answer a part of a streamed listing. */
const listingAnswer = (names: readonly string[], stats: readonly unknown[], offsets?: readonly number[]): Answer => {
  const words = stats.map((s) => (typeof s === 'number' ? s : statWords(s as StatLike)));
  return offsets ? [0, names, words, offsets] : [0, names, words];
};

/** Every request the session hands to JavaScript, by ABI op code (OP_INIT is the session's own: FuseSession). */
export const OPS: Readonly<Partial<Record<number, AnyRow>>> = {
  [ABI.OP_GETATTR]: row({
    args: ([path]) => [P(path)] as const,
    name: 'getattr',
    early: ([path], self) => (self.owns(path) ? statAnswer(self.attr()) : undefined),
    fs: (ctx, [path]) => attr.getattr(ctx, path),
    reply: statAnswer,
  }),
  [ABI.OP_FGETATTR]: row({
    args: ([path, fh]) => [PN(path), N(fh)] as const,
    name: 'fgetattr',
    early: ([, fh], self) => (self.ownsHandle(fh) ? statAnswer(self.attr()) : undefined),
    fs: (ctx, [path, fh]) => attr.fgetattr(ctx, fh, path),
    reply: statAnswer,
  }),
  [ABI.OP_ACCESS]: row({
    args: ([path, mask]) => [P(path), N(mask)] as const,
    name: 'access',
    fs: (ctx, [path]) => attr.access(ctx, path),
    reply: done,
  }),
  [ABI.OP_STATFS]: row({
    args: ([path]) => [P(path)] as const,
    name: 'statfs',
    fs: (ctx, [path]) => attr.statfs(ctx, path),
    reply: (st) => [0, statfsWords(st)],
  }),
  [ABI.OP_READDIR]: row({
    args: ([path, offset]) => [PN(path), N(offset)] as const,
    name: 'readdir',
    // A directory removed while a process still lists it: empty, as on any filesystem.
    early: ([path, offset]) => (path !== null ? undefined : offset > 0 ? listingAnswer([], [], []) : listingAnswer(['.', '..'], [])),
    fs: (ctx, [path, offset]) => dir.readdir(ctx, path!, offset),
    reply: (l) => listingAnswer(l.names, l.stats, l.offsets),
  }),
  [ABI.OP_READLINK]: row({
    args: ([path]) => [P(path)] as const,
    name: 'readlink',
    fs: (ctx, [path]) => attr.readlink(ctx, path),
    reply: (target) => [0, target],
  }),
  [ABI.OP_OPEN]: row({
    // reopen: the session reopens a dead daemon's handle, which must reach this inode (session/handles.c); 0n for an open
    args: ([path, flags, reopen]) => [P(path), N(flags), typeof reopen === 'bigint' ? reopen : 0n] as const,
    name: ([, , reopen]) => (reopen !== 0n ? 'reopen' : 'open'),
    early: ([path, , reopen], self) => (!self.owns(path) ? undefined : reopen !== 0n ? [-osConstants.errno.EIO] : [0, self.open(), openBits({ directIo: true })]),
    fs: (ctx, [path, flags, reopen], caller) => file.open(ctx, path, flags, caller, reopen !== 0n ? { ino: reopen } : undefined),
    reply: openAnswer,
  }),
  [ABI.OP_CREATE]: row({
    args: ([path, mode, flags]) => [P(path), N(mode), N(flags)] as const,
    name: 'create',
    fs: (ctx, [path, mode, flags], caller) => file.create(ctx, path, mode, flags, caller),
    reply: openAnswer,
  }),
  [ABI.OP_READ]: row({
    args: ([path, fh, len, pos]) => [PN(path), N(fh), N(len), N(pos), Buffer.allocUnsafe(N(len))] as const,
    name: 'read',
    fs: (ctx, [, fh, len, pos, buf]) => file.read(ctx, fh, buf, len, pos),
    reply: (n, [, , , , buf]) => [n, buf],
  }),
  [ABI.OP_WRITE]: row({
    // The session's copy of the data (ops_files.c): fs.write awaits the backing write before the reply anyway.
    args: ([path, fh, data, pos]) => [PN(path), N(fh), data as Buffer, N(pos)] as const,
    name: 'write',
    early: ([, fh, data], self) => (self.ownsHandle(fh) ? [self.write(data.length)] : undefined),
    fs: (ctx, [, fh, data, pos]) => file.write(ctx, fh, data, pos),
    reply: (n) => [n],
  }),
  [ABI.OP_FLUSH]: row({
    args: ([path, fh]) => [PN(path), N(fh)] as const,
    name: 'flush',
    early: ([, fh], self) => (self.ownsHandle(fh) ? [0] : undefined),
    fs: (ctx, [, fh]) => file.flush(ctx, fh),
    reply: done,
  }),
  [ABI.OP_FSYNC]: row({
    args: ([path, fh, datasync]) => [PN(path), N(fh), Boolean(datasync)] as const,
    name: 'fsync',
    fs: (ctx, [, fh, datasync]) => file.fsync(ctx, fh, datasync),
    reply: done,
  }),
  [ABI.OP_FSYNCDIR]: row({
    args: ([path]) => [PN(path)] as const,
    name: 'fsyncdir',
    // A directory unlinked while open has no path left and nothing to flush.
    early: ([path]) => (path === null ? [0] : undefined),
    fs: (ctx, [path]) => dir.fsyncdir(ctx, path!),
    reply: done,
  }),
  [ABI.OP_RELEASE]: row({
    args: ([path, fh]) => [PN(path), N(fh)] as const,
    name: 'release',
    early: ([, fh], self) => (self.ownsHandle(fh) ? [self.release()] : undefined),
    fs: (ctx, [, fh]) => file.release(ctx, fh),
    reply: done,
  }),
  [ABI.OP_TRUNCATE]: row({
    args: ([path, size]) => [P(path), N(size)] as const,
    name: 'truncate',
    early: ([path], self) => (self.owns(path) ? [0] : undefined),
    fs: (ctx, [path, size]) => file.truncate(ctx, path, size),
    reply: done,
  }),
  [ABI.OP_FTRUNCATE]: row({
    args: ([path, fh, size]) => [PN(path), N(fh), N(size)] as const,
    name: 'ftruncate',
    early: ([, fh], self) => (self.ownsHandle(fh) ? [0] : undefined),
    fs: (ctx, [, fh, size]) => file.ftruncate(ctx, fh, size),
    reply: done,
  }),
  [ABI.OP_FALLOCATE]: row({
    args: ([path, fh, mode, offset, length]) => [PN(path), N(fh), N(mode), N(offset), N(length)] as const,
    name: 'fallocate',
    fs: (ctx, [, fh, mode, offset, length]) => file.fallocate(ctx, fh, mode, offset, length),
    reply: done,
  }),
  [ABI.OP_UTIMENS]: row({
    args: ([path, atime, mtime]) => [P(path), atime as TimeSpec, mtime as TimeSpec] as const,
    name: 'utimens',
    fs: (ctx, [path, atime, mtime]) => attr.utimens(ctx, path, atime, mtime),
    reply: done,
  }),
  [ABI.OP_CHMOD]: row({
    args: ([path, mode]) => [P(path), N(mode)] as const,
    name: 'chmod',
    fs: (ctx, [path, mode]) => attr.chmod(ctx, path, mode),
    reply: done,
  }),
  [ABI.OP_CHOWN]: row({
    args: ([path, uid, gid]) => [P(path), N(uid), N(gid)] as const,
    name: 'chown',
    fs: (ctx, [path, uid, gid]) => attr.chown(ctx, path, uid, gid),
    reply: done,
  }),
  [ABI.OP_MKDIR]: row({
    args: ([path, mode]) => [P(path), N(mode)] as const,
    name: 'mkdir',
    fs: (ctx, [path, mode], caller) => dir.mkdir(ctx, path, mode, caller),
    reply: done,
  }),
  [ABI.OP_RMDIR]: row({
    args: ([path]) => [P(path)] as const,
    name: 'rmdir',
    fs: (ctx, [path]) => dir.rmdir(ctx, path),
    reply: done,
  }),
  [ABI.OP_UNLINK]: row({
    // hidden: the session's unlink of a hidden name at the node's last release (fs/hidden.ts)
    args: ([path, hidden]) => [P(path), hidden === 1] as const,
    name: ([, hidden]) => (hidden ? 'unlink hidden' : 'unlink'),
    fs: (ctx, [path, hidden]) => dir.unlink(ctx, path, hidden),
    reply: done,
  }),
  [ABI.OP_RENAME]: row({
    // hide: the session hides an open file whose last name goes (`to` a hidden name at its home's root: fs/hidden.ts);
    // flags: renameat2's (0 for rename(2); a hiding has none)
    args: ([from, to, hide, flags]) => [P(from), P(to), hide === 1, typeof flags === 'number' ? flags >>> 0 : 0] as const,
    name: ([, , hide, flags]) => (hide ? 'hide' : flags === dir.RENAME_EXCHANGE ? 'rename exchange' : flags === dir.RENAME_NOREPLACE ? 'rename noreplace' : 'rename'),
    fs: (ctx, [from, to, hide, flags], caller) => dir.rename(ctx, from, to, caller, hide, flags),
    reply: done,
  }),
  [ABI.OP_LINK]: row({
    args: ([from, to]) => [P(from), P(to)] as const,
    name: 'link',
    path: ([, to]) => to,
    fs: (ctx, [from, to], caller) => dir.link(ctx, from, to, caller),
    reply: done,
  }),
  [ABI.OP_SYMLINK]: row({
    args: ([target, path]) => [P(target), P(path)] as const,
    name: 'symlink',
    path: ([, path]) => path,
    fs: (ctx, [target, path], caller) => dir.symlink(ctx, target, path, caller),
    reply: done,
  }),
  [ABI.OP_MKNOD]: row({
    args: ([path, mode, rdev]) => [P(path), N(mode), N(rdev)] as const,
    name: 'mknod',
    fs: (ctx, [path, mode, rdev], caller) => dir.mknod(ctx, path, mode, rdev, caller),
    reply: done,
  }),
  // Extended attributes are not part of any profile, so the session hands no
  // xattr op over: libfuse answers ENOSYS, the kernel turns that into
  // EOPNOTSUPP (what tar and cp -a expect) and, unlike after EOPNOTSUPP, stops
  // asking. Otherwise every write(2) first costs a getxattr("security.capability")
  // round trip (23 % of the requests of a tar -x). A profile with xattrs would
  // need rows for the whole mount.
};

// ---- running a row ------------------------------------------------------------------------

export type Reply = (res: number, ...values: unknown[]) => void;
/** How the session hands a request over: the op code, its arguments, its caller, and where the answer goes. */
export type Serve = (op: number, args: readonly unknown[], caller: Caller, reply: Reply) => void;

/**
 * The table, bound to the fs context: it decides nothing, every row calls one
 * fs/ function and turns its result or error into the reply.
 * `mountPoint`: log lines carry absolute paths (the mount point joined with
 * the path the kernel sent), so an admin can paste them into a shell.
 */
export function serveOps(ctx: FsContext, log: Logger, selfCheck: SelfCheck, mountPoint = '', metrics: OpMetrics | null = null): Serve {
  const abs = (path: string | null): string | null => (path === null ? null : mountPoint + (path === '/' && mountPoint ? '' : path));
  const limiter = new RefusalLimiter({ windowMs: 10_000, burst: 5 });

  const report = (op: string, path: string | null, caller: Caller | undefined, err: unknown, errno: number): void => {
    if (isHomesError(err) && REFUSALS.has(err.code)) {
      const home = homeOf(path);
      // Every refusal, before rate limiting: the home's status file and the metrics count them all.
      if (home !== undefined && path !== null) {
        ctx.refusals.record(home, { at: Date.now(), op, path: path.split('/').slice(3).join('/'), code: err.code, errno: errnoName(errno), reason: err.message });
      }
      const gate = limiter.admit(`${home ?? '-'}|${op}|${err.code}`);
      if (!gate.log) return;
      void commOf(caller?.pid ?? 0).then((comm) =>
        log.warn(
          {
            op,
            home,
            path: abs(path),
            code: err.code,
            errno: errnoName(errno),
            caller: caller ? { uid: caller.uid, gid: caller.gid, pid: caller.pid, comm } : undefined,
            ...err.details,
            ...(BUDGET_CODES.has(err.code) ? { waysOut: waysOut(home, err.code) } : {}),
            ...(err.code === 'OPEN_FILES_EXCEEDED' || err.code === 'DAEMON_FILES_EXHAUSTED' ? { waysOut: openFilesWaysOut(home, err) } : {}),
            ...(gate.suppressed > 0 ? { suppressed: gate.suppressed } : {}),
          },
          err.message,
        ),
      );
      return;
    }
    if (ROUTINE.has(errno) || errno === E.EBADF) {
      if (log.isLevelEnabled('debug')) log.debug({ op, path: abs(path), errno: errnoName(errno) }, 'op failed');
      return;
    }
    log.error({ op, path: abs(path), errno: errnoName(errno), err }, 'operation failed');
  };

  // What the binding answered itself and queued (RELEASEs, writes that landed whole) is carried out before any other request is served.
  const settle = ctx.deps.dataPlane || ctx.deps.releases ? () => ctx.settle() : () => undefined;

  /** Run an fs op with its metrics; a failure is reported and becomes -errno. */
  const run = <R>(op: string, path: string | null, caller: Caller | undefined, fn: () => Promise<R>, ok: (r: R) => void, fail: (errno: number) => void): void => {
    if (log.isLevelEnabled('trace')) log.trace({ op, path: abs(path), caller }, 'op');
    const t0 = metrics !== null ? metrics.start() : 0;
    let p: Promise<R>;
    try {
      p = fn();
    } catch (err) {
      p = Promise.reject(err);
    }
    p.then(
      (r) => {
        metrics?.observe(op, t0, false);
        ok(r);
      },
      (err: unknown) => {
        const errno = errnoOf(err);
        report(op, path, caller, err, errno);
        metrics?.observe(op, t0, true);
        fail(-errno);
      },
    );
  };

  // WRITEs of handles published for the data plane: the same decision as the
  // write row (file.writeNative and file.write share it), without the bytes;
  // the binding writes them. Replies, logs and metrics as for `write`.
  ctx.deps.dataPlane?.serveWrites((w) => {
    // The decision may depend on a RELEASE still queued (the last close of a file unlinked while open frees its bytes).
    settle();
    const t0 = metrics !== null ? metrics.start() : 0;
    file.writeNative(ctx, w.fh, w.len, w.offset, w.proceed).then(
      (n) => {
        if (n === file.NEEDS_DATA) return w.fallback();
        metrics?.observe('write', t0, false);
        w.finish(n);
      },
      (err: unknown) => {
        const errno = errnoOf(err);
        report('write', w.path, w.caller, err, errno);
        metrics?.observe('write', t0, true);
        w.finish(-errno);
      },
    );
  });

  // RELEASEs the binding answered itself and queued: carried out as the release row, with no reply and nothing left to settle.
  ctx.serveReleases((fh) => {
    if (selfCheck.ownsHandle(fh)) return void selfCheck.release();
    run('release', null, undefined, () => file.release(ctx, fh), () => undefined, () => undefined);
  });

  return (op, raw, caller, reply) => {
    const r = OPS[op];
    if (r === undefined) return reply(-osConstants.errno.ENOSYS);
    const a = r.args(raw);
    const early = r.early?.(a, selfCheck);
    if (early !== undefined) return reply(...early);
    settle();
    run(
      typeof r.name === 'string' ? r.name : r.name(a),
      r.path ? r.path(a) : (a[0] as string | null),
      caller,
      () => r.fs(ctx, a, caller),
      (res) => reply(...r.reply(res, a)),
      reply,
    );
  };
}
