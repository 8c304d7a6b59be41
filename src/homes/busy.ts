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

/**
 * Working directories of all processes below `root` (the mount), counted per
 * home ("tenant/key"): one /proc walk for a whole `list`.
 */
export async function cwdCountsByHome(root: string): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  let entries: string[];
  try {
    entries = await readdir('/proc');
  } catch {
    return counts;
  }
  const prefix = root.endsWith('/') ? root : `${root}/`;
  await Promise.all(
    entries
      .filter((e) => /^\d+$/.test(e))
      .map(async (e) => {
        try {
          const cwd = await readlink(`/proc/${e}/cwd`);
          if (!cwd.startsWith(prefix)) return;
          const [tenant, key] = cwd.slice(prefix.length).split('/');
          if (tenant === undefined || key === undefined || key === '') return;
          const id = `${tenant}/${key}`;
          counts.set(id, (counts.get(id) ?? 0) + 1);
        } catch {
          // gone, or not ours to read
        }
      }),
  );
  return counts;
}
