// Child process of the daemon: writes 2 MiB in a single write(2) to the
// self-check file so the daemon can see how the kernel splits it (see
// fuse/selfcheck.ts). It runs outside the daemon's event loop.
//
// It writes nowhere but the live homesfs mount it is given: the file is the
// daemon's synthetic one, opened without O_CREAT (on a plain directory there
// is nothing to open), and before a byte is written the descriptor must be on
// the device of the top-most mount at the mount point, which must be a
// fuse.homesfs mount, and carry the synthetic inode number (given). A resumed daemon
// whose mount was detached under it would otherwise write 2 MiB onto whatever
// disk holds the mount point. Exit 4: not our live mount, nothing written.
import { closeSync, constants, fstatSync, openSync, readFileSync, writeSync } from 'node:fs';
import path from 'node:path';

export const NOT_OUR_MOUNT = 4;

/** The device number (glibc's makedev) of the top-most fuse.homesfs mount at `mnt`, or why there is none. */
function homesfsDevice(mnt: string): bigint | string {
  let top: string[] | null = null;
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = line.split(' ');
    const mp = f[4]?.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (mp === mnt) top = f;
  }
  if (top === null) return `${mnt} is not a mount point`;
  const fstype = top[top.indexOf('-') + 1];
  if (fstype !== 'fuse.homesfs') return `the mount at ${mnt} is ${fstype ?? 'unknown'}, not fuse.homesfs`;
  const [major, minor] = (top[2] ?? '').split(':').map((n) => BigInt(n));
  if (major === undefined || minor === undefined) return `no device for the mount at ${mnt}`;
  return ((major & 0xfffn) << 8n) | (minor & 0xffn) | ((minor & ~0xffn) << 12n) | ((major & ~0xfffn) << 32n);
}

function fail(why: string): never {
  process.stderr.write(`selfcheck-writer: ${why}: nothing written\n`);
  process.exit(NOT_OUR_MOUNT);
}

const [file, bytes, inode] = process.argv.slice(2);
const size = Number(bytes);
const ino = /^[0-9]+$/.test(inode ?? '') ? BigInt(inode!) : null;
if (!file || !Number.isSafeInteger(size) || size <= 0 || ino === null) {
  process.stderr.write('usage: selfcheck-writer MOUNTPOINT/FILE BYTES INODE\n');
  process.exit(2);
}
const mnt = path.dirname(path.resolve(file));
let fd: number;
try {
  fd = openSync(file, constants.O_WRONLY | constants.O_NOFOLLOW);
} catch (err) {
  fail(`${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
}
const st = fstatSync(fd, { bigint: true });
const dev = homesfsDevice(mnt);
if (typeof dev === 'string') fail(dev);
if (BigInt.asUintN(64, st.dev) !== dev) fail(`${file} is on device ${st.dev}, the homesfs mount at ${mnt} is ${dev}`);
// Node reads st_ino as a signed 64-bit number: the synthetic ones have the top bit set.
if (BigInt.asUintN(64, st.ino) !== ino) fail(`${file} is inode ${BigInt.asUintN(64, st.ino)}, not the daemon's self-check file`);
const n = writeSync(fd, Buffer.alloc(size));
closeSync(fd);
process.exit(n === size ? 0 : 3);
