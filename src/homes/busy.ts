import { readdir, readFile, readlink } from 'node:fs/promises';
import { posix } from 'node:path';

interface MountEntry {
  /** st_dev as mountinfo writes it, "major:minor" */
  dev: string;
  /** the mounted filesystem's directory shown there (a bind mount of a home: "/t/k") */
  root: string;
  /** where, as the namespace's processes see it */
  point: string;
}

/** mountinfo(5) escapes space, tab, newline and backslash as octal. */
const unescape = (s: string) => s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));

async function mountsOf(pid: number | 'self'): Promise<MountEntry[]> {
  const text = await readFile(`/proc/${pid}/mountinfo`, 'utf8');
  return text
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => {
      const f = l.split(' ');
      return { dev: f[2]!, root: unescape(f[3]!), point: unescape(f[4]!) };
    });
}

/** The mount a path is on: the longest mount point that holds it (the last one mounted there wins). */
function mountHolding(mounts: readonly MountEntry[], path: string): MountEntry | null {
  let best: MountEntry | null = null;
  for (const m of mounts) {
    const inside = path === m.point || m.point === '/' || path.startsWith(`${m.point}/`);
    if (inside && (best === null || m.point.length >= best.point.length)) best = m;
  }
  return best;
}

/**
 * Paths that processes see, turned into paths as the daemon sees them. A
 * process in another mount namespace (a pod that mounts its home at
 * /home/user) has its working directory at /home/user/src, which is
 * <mount>/t/k/src here: its namespace's mountinfo says which of its mounts is
 * this filesystem (the same device) and which directory of it is mounted
 * there. Paths on any other filesystem come back unchanged (they match no
 * home). One per /proc walk: each namespace's mountinfo is read once.
 */
class PathView {
  private readonly byNs = new Map<string, Promise<MountEntry[] | null>>();
  private constructor(
    private readonly ours: MountEntry | null,
    private readonly ownNs: string | null,
  ) {}

  /** `under`: a path on the filesystem whose processes are looked for (the mount, or a home below it). */
  static async for(under: string): Promise<PathView> {
    const [mounts, ns] = await Promise.all([mountsOf('self').catch(() => []), readlink('/proc/self/ns/mnt').catch(() => null)]);
    const m = mountHolding(mounts, under);
    // Where `under` is the mount itself or a directory of it as mounted here.
    return new PathView(m && { dev: m.dev, root: m.root, point: m.point }, ns);
  }

  async translate(pid: string, path: string): Promise<string> {
    if (this.ours === null) return path;
    const ns = await readlink(`/proc/${pid}/ns/mnt`).catch(() => null);
    if (ns === null || ns === this.ownNs) return path;
    let mounts = this.byNs.get(ns);
    if (!mounts) this.byNs.set(ns, (mounts = mountsOf(Number(pid)).catch(() => null)));
    const theirs = await mounts;
    const m = theirs && mountHolding(theirs, path);
    if (!m || m.dev !== this.ours.dev) return path;
    // The path within the filesystem, then where that is in the daemon's view.
    const within = posix.join(m.root, path === m.point ? '' : path.slice(m.point === '/' ? 0 : m.point.length));
    const rel = posix.relative(this.ours.root, within);
    return rel.startsWith('..') ? path : posix.join(this.ours.point, rel);
  }
}

/**
 * Call `fn` with the working directory of every visible process, as a path in
 * the daemon's own view (PathView). Reading /proc is best effort: processes
 * come and go, and those in other pid namespaces are not visible.
 */
async function eachCwd(under: string, fn: (pid: number, cwd: string) => void): Promise<void> {
  let entries: string[];
  try {
    entries = await readdir('/proc');
  } catch {
    return;
  }
  const view = await PathView.for(under);
  await Promise.all(
    entries
      .filter((e) => /^\d+$/.test(e))
      .map(async (e) => {
        let cwd: string;
        try {
          cwd = await view.translate(e, await readlink(`/proc/${e}/cwd`));
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
  await eachCwd(dir, (pid, cwd) => {
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
  await eachCwd(root, (_pid, cwd) => {
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
  const view = await PathView.for(mount);
  await Promise.all(
    entries
      .filter((e) => /^\d+$/.test(e) && Number(e) !== process.pid)
      .map(async (e) => {
        const pid = Number(e);
        try {
          const home = homeOf(await view.translate(e, await readlink(`/proc/${e}/cwd`)));
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
            const home = homeOf(await view.translate(e, await readlink(`/proc/${e}/fd/${fd}`)));
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
  const view = await PathView.for(dir);
  const seen = (e: string, link: string) => readlink(link).then((p) => view.translate(e, p)).then(inside, () => false);
  const found: Array<{ pid: number; cwd: boolean; openFiles: number }> = [];
  await Promise.all(
    entries
      .filter((e) => /^\d+$/.test(e) && Number(e) !== process.pid)
      .map(async (e) => {
        const cwd = await seen(e, `/proc/${e}/cwd`);
        let openFiles = 0;
        const fds = await readdir(`/proc/${e}/fd`).catch(() => [] as string[]);
        for (const fd of fds) {
          if (await seen(e, `/proc/${e}/fd/${fd}`)) openFiles++;
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
