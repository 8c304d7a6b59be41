import { readdir, readlink } from 'node:fs/promises';

/**
 * Processes whose working directory is inside `dir` (a home under the mount).
 * A rename or delete would pull the floor from under them, so the control
 * socket counts them as "in use". Reading /proc is best effort: processes come
 * and go, and those in other pid namespaces are not visible.
 */
export async function cwdProcessesUnder(dir: string): Promise<number[]> {
  const pids: number[] = [];
  let entries: string[];
  try {
    entries = await readdir('/proc');
  } catch {
    return pids;
  }
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  await Promise.all(
    entries
      .filter((e) => /^\d+$/.test(e))
      .map(async (e) => {
        try {
          const cwd = await readlink(`/proc/${e}/cwd`);
          if (cwd === dir || cwd.startsWith(prefix)) pids.push(Number(e));
        } catch {
          // gone, or not ours to read
        }
      }),
  );
  return pids.sort((a, b) => a - b);
}
