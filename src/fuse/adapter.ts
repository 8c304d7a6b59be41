import { readFile } from 'node:fs/promises';
import { constants as osConstants } from 'node:os';
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
import type { NativeOps, OpenOpts } from './binding.js';
import type { SelfCheck } from './selfcheck.js';

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
  'CROSS_HOME',
  'CROSS_DEVICE',
  'DAEMON_TREE',
  'INVALID_NAME',
  'NAME_TOO_LONG',
  'NOT_UTF8_NAME',
  'SYMLINK_ESCAPES',
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

/** Ordinary answers that programs expect all the time (lookups of missing names…): not worth a log line. */
const ROUTINE = new Set<number>([E.ENOENT, E.EEXIST, E.ENOTEMPTY, E.ENOTDIR, E.EISDIR, E.EOPNOTSUPP, E.ENODATA, E.EACCES]);

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

/**
 * The FUSE adapter: the only place that speaks the binding's callback dialect.
 * It decides nothing: every op calls one fs/ function and turns its result or
 * error into the reply (errors through errnoOf, the one errno table).
 */
/**
 * `mountPoint`: log lines carry absolute paths (the mount point joined with
 * the path the kernel sent), so an admin can paste them into a shell.
 */
export function createNativeOps(ctx: FsContext, log: Logger, selfCheck: SelfCheck, mountPoint = '', metrics: OpMetrics | null = null): Partial<NativeOps> {
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

  /** Run an op that replies `cb(0, ...values)` or `cb(-errno)`. */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  type AnyCb = (err: number, ...rest: any[]) => void;
  // What the binding answered itself and queued (RELEASEs, writes that landed whole) is carried out before any other request is served.
  const settle = ctx.deps.dataPlane || ctx.deps.releases ? () => ctx.settle() : () => undefined;
  const run = (op: string, path: string | null, caller: Caller | undefined, cb: AnyCb, fn: () => Promise<unknown[]>): void => {
    settle();
    runSettled(op, path, caller, cb, fn);
  };
  const runSettled = (op: string, path: string | null, caller: Caller | undefined, cb: AnyCb, fn: () => Promise<unknown[]>): void => {
    if (log.isLevelEnabled('trace')) log.trace({ op, path: abs(path), caller }, 'op');
    const t0 = metrics !== null ? metrics.start() : 0;
    fn().then(
      (values) => {
        metrics?.observe(op, t0, false);
        cb(0, ...values);
      },
      (err: unknown) => {
        const errno = errnoOf(err);
        report(op, path, caller, err, errno);
        metrics?.observe(op, t0, true);
        cb(-errno);
      },
    );
  };

  /** read/write reply with the byte count or a negative errno in one number. */
  const runCount = (op: string, path: string | null, caller: Caller, cb: (res: number) => void, fn: () => Promise<number>): void => {
    settle();
    const t0 = metrics !== null ? metrics.start() : 0;
    fn().then(
      (n) => {
        metrics?.observe(op, t0, false);
        cb(n);
      },
      (err: unknown) => {
        const errno = errnoOf(err);
        report(op, path, caller, err, errno);
        metrics?.observe(op, t0, true);
        cb(-errno);
      },
    );
  };

  const openOpts = (r: file.OpenResult): OpenOpts => ({ directIo: r.directIo, keepCache: r.keepCache });

  // WRITEs of handles published for the data plane: the same decision as the
  // write op below (file.writeNative and file.write share it), without the
  // bytes; the binding writes them. Replies, logs and metrics as for `write`.
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

  /** A RELEASE, whether the kernel's request reached JS or the binding answered it and queued it (cb then goes nowhere). */
  const release = (path: string | null, fh: number, cb: AnyCb, caller: Caller | undefined, settled: boolean): void => {
    if (selfCheck.ownsHandle(fh)) return void cb(selfCheck.release());
    (settled ? runSettled : run)('release', path, caller, cb, async () => (await file.release(ctx, fh), []));
  };
  ctx.serveReleases((fh) => release(null, fh, () => undefined, undefined, true));

  return {
    init: (cb) => cb(0),
    getattr: (path, cb, caller) => {
      if (selfCheck.owns(path)) return cb(0, selfCheck.attr());
      run('getattr', path, caller, cb, async () => [await attr.getattr(ctx, path)]);
    },
    fgetattr: (path, fh, cb, caller) => {
      if (selfCheck.ownsHandle(fh)) return cb(0, selfCheck.attr());
      run('fgetattr', path, caller, cb, async () => [await attr.fgetattr(ctx, fh, path)]);
    },
    access: (path, _mode, cb, caller) => run('access', path, caller, cb, async () => (await attr.access(ctx, path), [])),
    statfs: (path, cb, caller) => run('statfs', path, caller, cb, async () => [await attr.statfs(ctx, path)]),
    readdir: (path, cb, caller, offset = 0) => {
      // A directory removed while a process still lists it: empty, as on any filesystem.
      if (path === null) return offset > 0 ? cb(0, [], [], []) : cb(0, ['.', '..']);
      run('readdir', path, caller, cb, async () => {
        const listing = await dir.readdir(ctx, path, offset);
        return listing.offsets ? [listing.names, listing.stats, listing.offsets] : [listing.names, listing.stats];
      });
    },
    readlink: (path, cb, caller) => run('readlink', path, caller, cb, async () => [await attr.readlink(ctx, path)]),
    open: (path, flags, cb, caller, reopen = 0n) => {
      if (selfCheck.owns(path)) return reopen !== 0n ? cb(-osConstants.errno.EIO) : cb(0, selfCheck.open(), { directIo: true });
      run(reopen !== 0n ? 'reopen' : 'open', path, caller, cb, async () => {
        const r = await file.open(ctx, path, flags, caller, reopen !== 0n ? { ino: reopen } : undefined);
        return [r.fh, openOpts(r)] as [number, OpenOpts];
      });
    },
    create: (path, mode, flags, cb, caller) =>
      run('create', path, caller, cb, async () => {
        const r = await file.create(ctx, path, mode, flags, caller);
        return [r.fh, openOpts(r)] as [number, OpenOpts];
      }),
    read: (path, fh, buf, len, pos, cb, caller) => runCount('read', path, caller, cb, () => file.read(ctx, fh, buf, len, pos)),
    write: (path, fh, buf, len, pos, cb, caller) => {
      if (selfCheck.ownsHandle(fh)) return cb(selfCheck.write(len));
      // The native buffer is only valid until cb: fs.write awaits the backing write before replying.
      runCount('write', path, caller, cb, () => file.write(ctx, fh, len === buf.length ? buf : buf.subarray(0, len), pos));
    },
    flush: (path, fh, cb, caller) => {
      if (selfCheck.ownsHandle(fh)) return cb(0);
      run('flush', path, caller, cb, async () => (await file.flush(ctx, fh), []));
    },
    fsync: (path, fh, datasync, cb, caller) => run('fsync', path, caller, cb, async () => (await file.fsync(ctx, fh, Boolean(datasync)), [])),
    fsyncdir: (path, _fh, _datasync, cb, caller) => {
      // A directory unlinked while open has no path left and nothing to flush.
      if (path === null) return cb(0);
      run('fsyncdir', path, caller, cb, async () => (await dir.fsyncdir(ctx, path), []));
    },
    release: (path, fh, cb, caller) => release(path, fh, cb, caller, false),
    truncate: (path, size, cb, caller) => {
      if (selfCheck.owns(path)) return cb(0);
      run('truncate', path, caller, cb, async () => (await file.truncate(ctx, path, size), []));
    },
    ftruncate: (path, fh, size, cb, caller) => {
      if (selfCheck.ownsHandle(fh)) return cb(0);
      run('ftruncate', path, caller, cb, async () => (await file.ftruncate(ctx, fh, size), []));
    },
    fallocate: (path, fh, mode, offset, length, cb, caller) =>
      run('fallocate', path, caller, cb, async () => (await file.fallocate(ctx, fh, mode, offset, length), [])),
    utimens: (path, atime: TimeSpec, mtime: TimeSpec, cb, caller) =>
      run('utimens', path, caller, cb, async () => (await attr.utimens(ctx, path, atime, mtime), [])),
    chmod: (path, mode, cb, caller) => run('chmod', path, caller, cb, async () => (await attr.chmod(ctx, path, mode), [])),
    chown: (path, uid, gid, cb, caller) => run('chown', path, caller, cb, async () => (await attr.chown(ctx, path, uid, gid), [])),
    mkdir: (path, mode, cb, caller) => run('mkdir', path, caller, cb, async () => (await dir.mkdir(ctx, path, mode, caller), [])),
    rmdir: (path, cb, caller) => run('rmdir', path, caller, cb, async () => (await dir.rmdir(ctx, path), [])),
    unlink: (path, cb, caller, hidden = false) => run(hidden ? 'unlink hidden' : 'unlink', path, caller, cb, async () => (await dir.unlink(ctx, path, hidden), [])),
    rename: (src, dest, cb, caller, hide = false) => run(hide ? 'hide' : 'rename', src, caller, cb, async () => (await dir.rename(ctx, src, dest, caller, hide), [])),
    link: (src, dest, cb, caller) => run('link', dest, caller, cb, async () => (await dir.link(ctx, src, dest), [])),
    symlink: (target, path, cb, caller) => run('symlink', path, caller, cb, async () => (await dir.symlink(ctx, target, path, caller), [])),
    mknod: (path, mode, dev, cb, caller) => run('mknod', path, caller, cb, async () => (await dir.mknod(ctx, path, mode, dev, caller), [])),
    // Extended attributes are not part of any profile, so the xattr ops are not
    // registered: libfuse answers ENOSYS, the kernel turns that into EOPNOTSUPP
    // (what tar and cp -a expect) and, unlike after EOPNOTSUPP, stops asking.
    // Otherwise every write(2) first costs a getxattr("security.capability")
    // round trip (23 % of the requests of a tar -x). A profile with xattrs would
    // have to register them for the whole mount.
  };
}
