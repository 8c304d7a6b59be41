import { spawnSync } from 'node:child_process';
import { closeSync, constants as C, fstatSync, ftruncateSync, lstatSync, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import path from 'node:path';

/** Another live process holds the lock: the daemon must not start. */
export class LockHeldError extends Error {
  constructor(
    readonly file: string,
    readonly holder: string,
  ) {
    super(`${file} is locked by another homesfs daemon (${holder}): two daemons never share one backing tree or state file`);
    this.name = 'LockHeldError';
  }
}

export interface HeldLock {
  readonly file: string;
  /** the descriptor whose open file description holds the flock (a live upgrade hands it on) */
  readonly fd: number;
  release(): void;
  /** close our descriptor and leave the file as it is: a successor holds the lock through its copy */
  handOff(): void;
}

/**
 * An exclusive flock(2) on `file`, held for the life of this process.
 *
 * Node has no flock, and a pid file checked for liveness can be stolen in a
 * race between two starters that both find it stale. So the file is opened
 * here and `flock --nonblock 3` runs as a child on that very descriptor: a
 * flock belongs to the open file description, which the child shares, so the
 * lock outlives the child and stays with our descriptor. The kernel drops it
 * when our last descriptor closes, including on SIGKILL: no stale lock is ever
 * left behind, and no liveness guessing is needed. The descriptor is
 * close-on-exec (Node opens everything so), so no other child keeps it.
 *
 * The file holds the holder's pid and host for the refusal message only.
 * Sync calls: this runs once at start-up, before the mount exists.
 */
export function acquireLock(file: string): HeldLock {
  const dir = path.dirname(file);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = lstatSync(dir);
  if (!st.isDirectory()) throw new Error(`${dir} is not a directory (a symlink is not followed)`);
  const fd = openSync(file, C.O_RDWR | C.O_CREAT | C.O_NOFOLLOW | C.O_NONBLOCK, 0o600);
  try {
    if (!fstatSync(fd).isFile()) throw new Error(`${file} is not a regular file`);
    const r = spawnSync('flock', ['--nonblock', '--conflict-exit-code', '75', '3'], { stdio: ['ignore', 'ignore', 'pipe', fd], encoding: 'utf8' });
    if (r.error) throw new Error(`cannot run flock(1) (util-linux) to lock ${file}: ${r.error.message}`);
    if (r.status === 75) {
      let holder = 'holder unknown';
      try {
        holder = readFileSync(file, 'utf8').trim() || holder;
      } catch {
        // unreadable: the message says less
      }
      throw new LockHeldError(file, holder);
    }
    if (r.status !== 0) throw new Error(`flock ${file} failed (exit ${r.status}): ${String(r.stderr).trim()}`);
    ftruncateSync(fd, 0);
    writeHolder(fd);
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  return held(file, fd);
}

/**
 * The lock a serving daemon handed over with its session (`fd`: a copy of
 * its descriptor, received by SCM_RIGHTS, so the same open file description
 * and the same flock; no moment without it, no flock(1) to run). Refused
 * unless `fd` is the regular file at `file`.
 */
export function adoptLock(file: string, fd: number): HeldLock {
  const st = fstatSync(fd);
  const at = lstatSync(file);
  if (!st.isFile() || !at.isFile() || st.dev !== at.dev || st.ino !== at.ino) throw new Error(`the lock handed over is not ${file}`);
  ftruncateSync(fd, 0);
  writeHolder(fd);
  return held(file, fd);
}

function writeHolder(fd: number): void {
  writeSync(fd, `pid ${process.pid} on ${hostname()} since ${new Date().toISOString()}\n`, 0);
}

function held(file: string, fd: number): HeldLock {
  let open = true;
  return {
    file,
    fd,
    release() {
      if (!open) return;
      open = false;
      // Leave the file: removing it would let a starter lock a fresh inode
      // while another still waits on the old one.
      ftruncateSync(fd, 0);
      closeSync(fd);
    },
    handOff() {
      if (!open) return;
      open = false;
      closeSync(fd);
    },
  };
}
