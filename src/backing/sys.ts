import fs from 'node:fs';
import { promisify } from 'node:util';

/**
 * Raw-descriptor versions of node:fs calls. FileHandle objects are not used:
 * their GC-close warnings and per-object cost buy nothing in a daemon that
 * keeps its own handle table.
 */
export const C = fs.constants;
// libuv adds O_CLOEXEC to every open itself. Node does not export O_PATH; its value is fixed by the Linux ABI (x86_64, arm64).
export const O_PATH = 0o10000000;

/** The threadpool versions of every call below: for work that must never hold the JS thread (the scans, tree removal). */
export const pooled = {
  open: promisify(fs.open) as (path: fs.PathLike, flags: number, mode?: number) => Promise<number>,
  close: promisify(fs.close),
  fstat: (fd: number): Promise<fs.BigIntStats> =>
    new Promise((resolve, reject) => fs.fstat(fd, { bigint: true }, (e, st) => (e ? reject(e) : resolve(st)))),
  lstat: (path: fs.PathLike): Promise<fs.BigIntStats> =>
    new Promise((resolve, reject) => fs.lstat(path, { bigint: true }, (e, st) => (e ? reject(e) : resolve(st)))),
  fchmod: promisify(fs.fchmod),
  chmod: promisify(fs.chmod),
  lchown: promisify(fs.lchown),
  /** only ever on /proc/self/fd/N: follows the descriptor's magic link to the node itself */
  chown: promisify(fs.chown),
  fchown: promisify(fs.fchown),
  mkdir: (path: string, mode: number): Promise<void> =>
    new Promise((resolve, reject) => fs.mkdir(path, { mode }, (e) => (e ? reject(e) : resolve()))),
  rmdir: promisify(fs.rmdir) as (path: fs.PathLike) => Promise<void>,
  unlink: promisify(fs.unlink) as (path: fs.PathLike) => Promise<void>,
  rename: promisify(fs.rename) as (from: fs.PathLike, to: fs.PathLike) => Promise<void>,
  symlink: promisify(fs.symlink) as (target: string, path: string) => Promise<void>,
  link: promisify(fs.link) as (from: fs.PathLike, to: fs.PathLike) => Promise<void>,
  readlink: (path: string): Promise<Buffer> =>
    new Promise((resolve, reject) => fs.readlink(path, { encoding: 'buffer' }, (e, b) => (e ? reject(e) : resolve(b)))),
  readdirRaw: (path: fs.PathLike): Promise<fs.Dirent<Buffer>[]> =>
    new Promise((resolve, reject) =>
      fs.readdir(path, { encoding: 'buffer', withFileTypes: true }, (e, d) => (e ? reject(e) : resolve(d as fs.Dirent<Buffer>[]))),
    ),
};
type Pooled = typeof pooled;

/** Run a synchronous call and hand its result or error back as a settled promise. */
const now =
  <A extends unknown[], R>(fn: (...a: A) => R) =>
  (...a: A): Promise<R> => {
    try {
      return Promise.resolve(fn(...a));
    } catch (err) {
      return Promise.reject(err);
    }
  };

/**
 * Metadata calls answered on the JS thread. On a local backing they take 1–5 µs,
 * while a threadpool round trip costs about 20 µs of CPU and two context
 * switches (measured: bench/micro.c lookup, create, unlink). On a network
 * backing (CephFS, NFS) one slow call would stall every home: `syncMetadata:
 * false` keeps them on the threadpool. Data I/O (read, write, fsync,
 * ftruncate) always stays on the threadpool.
 */
const inline: Pooled = {
  open: now((path: fs.PathLike, flags: number, mode?: number) => fs.openSync(path, flags, mode)),
  close: now((fd: number) => fs.closeSync(fd)),
  fstat: now((fd: number) => fs.fstatSync(fd, { bigint: true })),
  lstat: now((path: fs.PathLike) => fs.lstatSync(path, { bigint: true })),
  fchmod: now((fd: number, mode: fs.Mode) => fs.fchmodSync(fd, mode)),
  chmod: now((path: fs.PathLike, mode: fs.Mode) => fs.chmodSync(path, mode)),
  lchown: now((path: fs.PathLike, uid: number, gid: number) => fs.lchownSync(path, uid, gid)),
  chown: now((path: fs.PathLike, uid: number, gid: number) => fs.chownSync(path, uid, gid)),
  fchown: now((fd: number, uid: number, gid: number) => fs.fchownSync(fd, uid, gid)),
  mkdir: now((path: string, mode: number) => void fs.mkdirSync(path, { mode })),
  rmdir: now((path: fs.PathLike) => fs.rmdirSync(path)),
  unlink: now((path: fs.PathLike) => fs.unlinkSync(path)),
  rename: now((from: fs.PathLike, to: fs.PathLike) => fs.renameSync(from, to)),
  symlink: now((target: string, path: string) => fs.symlinkSync(target, path)),
  link: now((from: fs.PathLike, to: fs.PathLike) => fs.linkSync(from, to)),
  readlink: now((path: string) => fs.readlinkSync(path, { encoding: 'buffer' })),
  readdirRaw: now((path: fs.PathLike) => fs.readdirSync(path, { encoding: 'buffer', withFileTypes: true }) as fs.Dirent<Buffer>[]),
};

export let open = inline.open;
export let close = inline.close;
export let fstat = inline.fstat;
export let lstat = inline.lstat;
export let fchmod = inline.fchmod;
export let chmod = inline.chmod;
export let lchown = inline.lchown;
export let chown = inline.chown;
export let fchown = inline.fchown;
export let mkdir = inline.mkdir;
export let rmdir = inline.rmdir;
export let unlink = inline.unlink;
export let rename = inline.rename;
export let symlink = inline.symlink;
export let link = inline.link;
export let readlink = inline.readlink;
export let readdirRaw = inline.readdirRaw;
/** A directory read on the threadpool whatever syncMetadata says: for one too big to read on the JS thread. */
export const readdirPooled = pooled.readdirRaw;

/** Choose where metadata calls run (config `syncMetadata`); set once at start, before serving. */
export function setSyncMetadata(on: boolean): void {
  const m = on ? inline : pooled;
  ({ open, close, fstat, lstat, fchmod, chmod, lchown, chown, fchown, mkdir, rmdir, unlink, rename, symlink, link, readlink, readdirRaw } = m);
}

export const read = (fd: number, buf: Buffer, off: number, len: number, pos: number): Promise<number> =>
  new Promise((resolve, reject) => fs.read(fd, buf, off, len, pos, (e, n) => (e ? reject(e) : resolve(n))));
export const write = (fd: number, buf: Buffer, off: number, len: number, pos: number): Promise<number> =>
  new Promise((resolve, reject) => fs.write(fd, buf, off, len, pos, (e, n) => (e ? reject(e) : resolve(n))));
export const ftruncate = promisify(fs.ftruncate) as (fd: number, len: number) => Promise<void>;
export const fsync = promisify(fs.fsync);
export const fdatasync = promisify(fs.fdatasync);
export const statfs = (path: string): Promise<fs.StatsFs> =>
  new Promise((resolve, reject) => fs.statfs(path, (e, s) => (e ? reject(e) : resolve(s))));

/** The path through which the kernel resolves an open descriptor itself, not a name. */
export function fdPath(fd: number, name?: string): string {
  return name === undefined ? `/proc/self/fd/${fd}` : `/proc/self/fd/${fd}/${name}`;
}

/** fdPath for a raw backing name (one that need not be UTF-8: an orphan's, paths/hidden-names.ts). */
export function fdPathRaw(fd: number, name: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`/proc/self/fd/${fd}/`), name]);
}

export function sysCode(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err ? String((err as { code: unknown }).code) : undefined;
}
