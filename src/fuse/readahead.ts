import { readFile, writeFile } from 'node:fs/promises';

/**
 * The kernel reads ahead on a FUSE mount at most what the backing device
 * info (bdi) allows, and a FUSE mount's bdi starts at 128 KiB whatever INIT
 * negotiated (fuse_bdi_init and process_init_reply, Linux fs/fuse/inode.c:
 * INIT can lower it, never raise it). Raised to the largest request
 * (session/proto.h) through sysfs, which only root may write, a sequential
 * read reaches the daemon as 1 MiB requests instead of 128 KiB ones.
 */
export const READAHEAD_KB = 1024;

/** The bdi name ("major:minor") of the top-most mount at `mnt`, from mountinfo (nothing asked of the mount itself). */
export async function mountDevice(mnt: string): Promise<string | null> {
  let dev: string | null = null;
  for (const line of (await readFile('/proc/self/mountinfo', 'utf8')).split('\n')) {
    const f = line.split(' ');
    const mp = f[4]?.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (mp === mnt && f[2] !== undefined) dev = f[2];
  }
  return dev;
}

/** Sets the mount's read-ahead; the error as text when it cannot (not root, no sysfs), else null. */
export async function raiseReadahead(mnt: string, kb = READAHEAD_KB): Promise<string | null> {
  const dev = await mountDevice(mnt);
  if (dev === null || !/^\d+:\d+$/.test(dev)) return `no device for the mount at ${mnt}`;
  try {
    await writeFile(`/sys/class/bdi/${dev}/read_ahead_kb`, `${kb}\n`);
    return null;
  } catch (err) {
    return (err as Error).message;
  }
}
