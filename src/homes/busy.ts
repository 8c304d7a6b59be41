import { readdir, readFile, readlink } from 'node:fs/promises';

/**
 * Call `fn` with the working directory of every visible process. Reading /proc
 * is best effort: processes come and go, and those in other pid namespaces are
 * not visible.
 */
async function eachCwd(fn: (pid: number, cwd: string) => void): Promise<void> {
  let entries: string[];
  try {
    entries = await readdir('/proc');
  } catch {
    return;
  }
  await Promise.all(
    entries
      .filter((e) => /^\d+$/.test(e))
      .map(async (e) => {
        let cwd: string;
        try {
          cwd = await readlink(`/proc/${e}/cwd`);
        } catch {
          return; // gone, or not ours to read
        }
        fn(Number(e), cwd);
      }),
  );
}

/**
 * Processes whose working directory is inside `dir` (a home under the mount).
 * A rename or delete would pull the floor from under them, so the control
 * socket counts them as "in use".
 */
export async function cwdProcessesUnder(dir: string): Promise<number[]> {
  const pids: number[] = [];
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  await eachCwd((pid, cwd) => {
    if (cwd === dir || cwd.startsWith(prefix)) pids.push(pid);
  });
  return pids.sort((a, b) => a - b);
}

/**
 * Working directories of all processes below `root` (the mount), counted per
 * home ("tenant/key"): one /proc walk for a whole `list`.
 */
export async function cwdCountsByHome(root: string): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  const prefix = root.endsWith('/') ? root : `${root}/`;
  await eachCwd((_pid, cwd) => {
    if (!cwd.startsWith(prefix)) return;
    const [tenant, key] = cwd.slice(prefix.length).split('/');
    if (tenant === undefined || key === undefined || key === '') return;
    const id = `${tenant}/${key}`;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  });
  return counts;
}

export interface HomeHolders {
  /** processes whose working directory is in the home */
  cwdPids: number[];
  /** processes with a descriptor open on something in the home */
  filePids: number[];
}

/**
 * Who holds what below `mount`, by home ("tenant/key"): working directories
 * and open descriptors of every visible process. For the shutdown log: an
 * admin stopping the daemon learns which agents lose their files. Best effort
 * like cwdProcessesUnder (processes in other pid namespaces are not seen; the
 * daemon's own handle count covers them).
 */
export async function holdersUnder(mount: string): Promise<Map<string, HomeHolders>> {
  const out = new Map<string, HomeHolders>();
  const prefix = mount.endsWith('/') ? mount : `${mount}/`;
  const homeOf = (p: string): string | null => {
    if (!p.startsWith(prefix)) return null;
    const [tenant, key] = p.slice(prefix.length).split('/');
    return tenant && key ? `${tenant}/${key}` : null;
  };
  const add = (home: string, pid: number, kind: keyof HomeHolders) => {
    let h = out.get(home);
    if (!h) out.set(home, (h = { cwdPids: [], filePids: [] }));
    if (!h[kind].includes(pid)) h[kind].push(pid);
  };
  let entries: string[];
  try {
    entries = await readdir('/proc');
  } catch {
    return out;
  }
  await Promise.all(
    entries
      .filter((e) => /^\d+$/.test(e) && Number(e) !== process.pid)
      .map(async (e) => {
        const pid = Number(e);
        try {
          const home = homeOf(await readlink(`/proc/${e}/cwd`));
          if (home) add(home, pid, 'cwdPids');
        } catch {
          // gone, or not ours to read
        }
        let fds: string[];
        try {
          fds = await readdir(`/proc/${e}/fd`);
        } catch {
          return;
        }
        for (const fd of fds) {
          try {
            const home = homeOf(await readlink(`/proc/${e}/fd/${fd}`));
            if (home) add(home, pid, 'filePids');
          } catch {
            // closed meanwhile
          }
        }
      }),
  );
  for (const h of out.values()) {
    h.cwdPids.sort((a, b) => a - b);
    h.filePids.sort((a, b) => a - b);
  }
  return out;
}

/** A process as admins are shown it: who runs it and what it is. */
export interface ProcessRef {
  pid: number;
  /** its real uid */
  uid: number;
  /** the kernel's short name (15 characters at most) */
  comm: string;
  /** the command line, cut at COMMAND_CHARS; "[comm]" where there is none (a kernel thread, a zombie) */
  command: string;
}

/** Longest command line a reply carries per process. */
export const COMMAND_CHARS = 200;

interface ProcStatus {
  uids: number[];
  comm: string;
}

async function readStatus(pid: number): Promise<ProcStatus | null> {
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const ids = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(status);
    if (!ids) return null;
    return { uids: ids.slice(1).map(Number), comm: /^Name:\s*(.*)$/m.exec(status)?.[1] ?? '' };
  } catch {
    return null; // gone meanwhile
  }
}

async function commandOf(pid: number, comm: string): Promise<string> {
  const raw = await readFile(`/proc/${pid}/cmdline`).catch(() => Buffer.alloc(0));
  const text = raw.toString('utf8').replace(/\0+$/, '').replace(/\0/g, ' ').trim();
  if (text === '') return `[${comm}]`;
  return text.length > COMMAND_CHARS ? `${text.slice(0, COMMAND_CHARS - 1)}…` : text;
}

/** pid, real uid, name and command line of a process; null once it is gone. */
export async function describeProcess(pid: number): Promise<ProcessRef | null> {
  const st = await readStatus(pid);
  if (!st) return null;
  return { pid, uid: st.uids[0]!, comm: st.comm, command: await commandOf(pid, st.comm) };
}

/** Processes with `uid` as any of their real, effective, saved or filesystem uid. */
export async function processesOfUid(uid: number): Promise<ProcessRef[]> {
  let entries: string[];
  try {
    entries = await readdir('/proc');
  } catch {
    return [];
  }
  const out: ProcessRef[] = [];
  await Promise.all(
    entries
      .filter((e) => /^\d+$/.test(e))
      .map(async (e) => {
        const pid = Number(e);
        const st = await readStatus(pid);
        if (!st || !st.uids.includes(uid)) return;
        out.push({ pid, uid: st.uids[0]!, comm: st.comm, command: await commandOf(pid, st.comm) });
      }),
  );
  return out.sort((a, b) => a.pid - b.pid);
}

/** A process that keeps a home busy, and how. */
export interface HomeHolder extends ProcessRef {
  /** its working directory is inside */
  cwd: boolean;
  /** descriptors it has open on something inside */
  openFiles: number;
}

/**
 * The visible processes holding `dir` (a home under the mount): a working
 * directory or a descriptor inside. What BUSY refusals name. Best effort like
 * the rest of this file: processes in other pid namespaces are not seen (the
 * daemon's handle count still counts their files).
 */
export async function holdersOf(dir: string): Promise<HomeHolder[]> {
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  const inside = (p: string) => p === dir || p.startsWith(prefix);
  let entries: string[];
  try {
    entries = await readdir('/proc');
  } catch {
    return [];
  }
  const found: Array<{ pid: number; cwd: boolean; openFiles: number }> = [];
  await Promise.all(
    entries
      .filter((e) => /^\d+$/.test(e) && Number(e) !== process.pid)
      .map(async (e) => {
        const cwd = await readlink(`/proc/${e}/cwd`).then(inside, () => false);
        let openFiles = 0;
        const fds = await readdir(`/proc/${e}/fd`).catch(() => [] as string[]);
        for (const fd of fds) {
          if (await readlink(`/proc/${e}/fd/${fd}`).then(inside, () => false)) openFiles++;
        }
        if (cwd || openFiles > 0) found.push({ pid: Number(e), cwd, openFiles });
      }),
  );
  const out: HomeHolder[] = [];
  for (const f of found.sort((a, b) => a.pid - b.pid)) {
    const p = await describeProcess(f.pid);
    if (p) out.push({ ...p, cwd: f.cwd, openFiles: f.openFiles });
  }
  return out;
}
