/**
 * What a fresh start (no session kept: nothing in systemd's fd store, no
 * holder) finds at its mount point, and whether it may clear it.
 *
 * Only a dead mount of ours is cleared: the top-most mount at the mount point
 * is `fuse.homesfs` and statfs(2) answers ENOTCONN (its connection is gone: no
 * daemon, no holder and no fd store keeps it). A FUSE mount that does not
 * answer in time is not dead: something keeps its connection (processes wait
 * in it), and a lazy unmount would cut them; another filesystem's mount, or
 * a live one, is never ours to remove. Those refuse the start (exit 5, which
 * waits for an admin). This is the only place that unmounts a mount the
 * daemon did not make; nothing in the unit unmounts (systemd/homesfs.service).
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';

/** statfs(2)'s f_type of every FUSE mount. */
export const FUSE_SUPER_MAGIC = 0x65735546;
/** The type /proc/self/mountinfo shows for our mounts (fsname homesfs, subtype homesfs). */
export const HOMESFS_FSTYPE = 'fuse.homesfs';

/** How the mount point answered statfs(2). */
export type Probe = { ok: true; fType: number } | { ok: false; code: string } | { ok: false; timedOut: true };

export type DeadMountVerdict =
  | { action: 'none' }
  | { action: 'clear'; reason: string }
  | { action: 'refuse'; reason: string };

/** Pure: the verdict for the top-most mount's type at the mount point (null: none) and the probe. */
export function deadMountVerdict(mnt: string, fstype: string | null, probe: Probe | null): DeadMountVerdict {
  if (fstype === null) return { action: 'none' };
  if (fstype !== HOMESFS_FSTYPE) return { action: 'refuse', reason: `${mnt} already has a ${fstype} mount on it` };
  if (probe === null) return { action: 'refuse', reason: `${mnt} has a homesfs mount that was not probed` };
  if (probe.ok) return { action: 'refuse', reason: `${mnt} is already served by a live homesfs daemon` };
  if ('timedOut' in probe) {
    return { action: 'refuse', reason: `${mnt} has a homesfs mount that does not answer: something keeps its session (a holder, or systemd's fd store of another unit), and clearing it would cut the processes waiting in it` };
  }
  if (probe.code === 'ENOTCONN') return { action: 'clear', reason: 'statfs: ENOTCONN (no daemon and no keeper holds its connection)' };
  return { action: 'refuse', reason: `${mnt} has a homesfs mount that answers ${probe.code}` };
}

/** The fstype of the top-most mount at `mnt` in a mountinfo text (octal escapes decoded), or null. */
export function topMountType(mountinfo: string, mnt: string): string | null {
  let found: string | null = null;
  for (const line of mountinfo.split('\n')) {
    const fields = line.split(' ');
    const mp = fields[4]?.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (mp !== mnt) continue;
    // Later lines are mounted on top of earlier ones at the same point.
    found = fields[fields.indexOf('-') + 1] ?? 'unknown';
  }
  return found;
}

/**
 * statfs(2) of the mount point in a child (`stat -f`), killed at the deadline.
 * Not on the threadpool: a kept session makes the call wait until its keeper
 * lets go, and a threadpool thread stuck in it would keep this process from
 * exiting (libuv joins its threads at exit).
 */
export function probeStatfs(mnt: string, timeoutMs: number): Promise<Probe> {
  return new Promise((resolve) => {
    execFile('stat', ['-f', '-c', '%t', mnt], { timeout: timeoutMs, killSignal: 'SIGKILL', env: { ...process.env, LC_ALL: 'C' } }, (err, stdout, stderr) => {
      if (!err) return resolve({ ok: true, fType: parseInt(String(stdout).trim(), 16) });
      if ((err as { killed?: boolean }).killed) return resolve({ ok: false, timedOut: true });
      const text = String(stderr);
      resolve({ ok: false, code: /Transport endpoint is not connected/.test(text) ? 'ENOTCONN' : text.trim() || err.message });
    });
  });
}

/** Looks at the mount point: what is there and what a fresh start may do about it. */
export async function inspectMountPoint(mnt: string, timeoutMs: number): Promise<DeadMountVerdict> {
  const fstype = topMountType(await readFile('/proc/self/mountinfo', 'utf8'), mnt);
  if (fstype === null) return { action: 'none' };
  return deadMountVerdict(mnt, fstype, fstype === HOMESFS_FSTYPE ? await probeStatfs(mnt, timeoutMs) : null);
}
