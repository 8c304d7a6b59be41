import fs from 'node:fs';
import { promisify } from 'node:util';

/**
 * Raw-descriptor versions of node:fs calls. FileHandle objects are not used:
 * their GC-close warnings and per-object cost buy nothing in a daemon that
 * keeps its own handle table. Every call runs on libuv's threadpool.
 */
export const C = fs.constants;
// libuv adds O_CLOEXEC to every open itself. Node does not export O_PATH; its value is fixed by the Linux ABI (x86_64, arm64).
export const O_PATH = 0o10000000;

export const open = promisify(fs.open) as (path: fs.PathLike, flags: number, mode?: number) => Promise<number>;
export const close = promisify(fs.close);
export const fstat = (fd: number): Promise<fs.BigIntStats> =>
  new Promise((resolve, reject) => fs.fstat(fd, { bigint: true }, (e, st) => (e ? reject(e) : resolve(st))));
export const lstat = (path: fs.PathLike): Promise<fs.BigIntStats> =>
  new Promise((resolve, reject) => fs.lstat(path, { bigint: true }, (e, st) => (e ? reject(e) : resolve(st))));
export const read = (fd: number, buf: Buffer, off: number, len: number, pos: number): Promise<number> =>
  new Promise((resolve, reject) => fs.read(fd, buf, off, len, pos, (e, n) => (e ? reject(e) : resolve(n))));
export const write = (fd: number, buf: Buffer, off: number, len: number, pos: number): Promise<number> =>
  new Promise((resolve, reject) => fs.write(fd, buf, off, len, pos, (e, n) => (e ? reject(e) : resolve(n))));
export const ftruncate = promisify(fs.ftruncate) as (fd: number, len: number) => Promise<void>;
export const fsync = promisify(fs.fsync);
export const fdatasync = promisify(fs.fdatasync);
export const fchmod = promisify(fs.fchmod);
export const chmod = promisify(fs.chmod);
export const lchown = promisify(fs.lchown);
export const mkdir = (path: string, mode: number): Promise<void> =>
  new Promise((resolve, reject) => fs.mkdir(path, { mode }, (e) => (e ? reject(e) : resolve())));
export const rmdir = promisify(fs.rmdir) as (path: fs.PathLike) => Promise<void>;
export const unlink = promisify(fs.unlink) as (path: fs.PathLike) => Promise<void>;
export const rename = promisify(fs.rename);
export const symlink = promisify(fs.symlink) as (target: string, path: string) => Promise<void>;
export const link = promisify(fs.link);
export const readlink = (path: string): Promise<Buffer> =>
  new Promise((resolve, reject) => fs.readlink(path, { encoding: 'buffer' }, (e, b) => (e ? reject(e) : resolve(b))));
export const readdirRaw = (path: string): Promise<fs.Dirent<Buffer>[]> =>
  new Promise((resolve, reject) =>
    fs.readdir(path, { encoding: 'buffer', withFileTypes: true }, (e, d) => (e ? reject(e) : resolve(d as fs.Dirent<Buffer>[]))),
  );
export const statfs = (path: string): Promise<fs.StatsFs> =>
  new Promise((resolve, reject) => fs.statfs(path, (e, s) => (e ? reject(e) : resolve(s))));

/** The path through which the kernel resolves an open descriptor itself, not a name. */
export function fdPath(fd: number, name?: string): string {
  return name === undefined ? `/proc/self/fd/${fd}` : `/proc/self/fd/${fd}/${name}`;
}

export function sysCode(err: unknown): string | undefined {
  return typeof err === 'object' && err !== null && 'code' in err ? String((err as { code: unknown }).code) : undefined;
}
