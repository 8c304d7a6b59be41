import { execFile } from 'node:child_process';

/**
 * What the host's user database (NSS: /etc/passwd, /etc/group, LDAP, sssd,
 * nss-systemd's /run/userdb…) knows about some uids and gids. Asked through
 * `getent`, a child process, so a slow NSS module never blocks the JS thread
 * (which serves the mount); only at create, resolve of a new home, reload and
 * start-up, never per request.
 *
 * nss-systemd also answers with the records homesfs publishes for its own
 * owners: the caller leaves those out (see `withoutOwn`).
 */
export interface HostIds {
  /** uid → account name */
  users: Map<number, string>;
  /** gid → group name */
  groups: Map<number, string>;
}

export type HostIdLookup = (uids: readonly number[], gids: readonly number[]) => Promise<HostIds>;

/** Keys per getent call: one process per chunk, argv well below ARG_MAX. */
const CHUNK = 256;

/** `name:x:id:…` lines → id → name (the first answer for an id wins, as in NSS). */
export function parseGetent(text: string): Map<number, string> {
  const out = new Map<number, string>();
  for (const line of text.split('\n')) {
    const f = line.split(':');
    if (f.length < 3 || f[0] === '') continue;
    const id = Number(f[2]);
    if (Number.isSafeInteger(id) && id >= 0 && !out.has(id)) out.set(id, f[0]!);
  }
  return out;
}

function getent(bin: string, db: 'passwd' | 'group', ids: readonly number[], timeoutMs: number): Promise<Map<number, string>> {
  return new Promise((resolve, reject) => {
    execFile(bin, [db, ...ids.map(String)], { timeout: timeoutMs, maxBuffer: 16 << 20, env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' } }, (err, stdout) => {
      // getent exits 2 when some key was not found: the others are still printed.
      const code = (err as (Error & { code?: unknown }) | null)?.code;
      if (err && code !== 2) return reject(new Error(`getent ${db} failed: ${err.message}`));
      resolve(parseGetent(stdout));
    });
  });
}

/**
 * A lookup that can be asked ahead: `warm` asks `inner` for these ids now,
 * and the next lookup whose ids were all warmed is answered from that answer
 * (once; any other, and every later one, asks `inner`). A live upgrade warms
 * it before it pauses the mount, so the owner check that runs while the
 * mount is paused starts no getent(1) process. The answer is as old as the
 * pause is long: the same as a check run just before the pause.
 */
export function warmedLookup(inner: HostIdLookup): { lookup: HostIdLookup; warm(uids: readonly number[], gids: readonly number[]): Promise<void> } {
  let warmed: { uids: Set<number>; gids: Set<number>; ids: HostIds } | null = null;
  return {
    async warm(uids, gids) {
      warmed = { uids: new Set(uids), gids: new Set(gids), ids: await inner(uids, gids) };
    },
    lookup: async (uids, gids) => {
      const w = warmed;
      warmed = null;
      if (!w || !uids.every((u) => w.uids.has(u)) || !gids.every((g) => w.gids.has(g))) return inner(uids, gids);
      const pick = (m: Map<number, string>, ids: readonly number[]) => new Map(ids.filter((i) => m.has(i)).map((i) => [i, m.get(i)!] as const));
      return { users: pick(w.ids.users, uids), groups: pick(w.ids.groups, gids) };
    },
  };
}

/** The host's view through getent(1) (libc-bin: on every Debian). Failing to ask is an error, never "unknown". */
export function getentLookup(opts: { bin?: string; timeoutMs?: number } = {}): HostIdLookup {
  const bin = opts.bin ?? 'getent';
  const timeoutMs = opts.timeoutMs ?? 20_000;
  const ask = async (db: 'passwd' | 'group', ids: readonly number[]): Promise<Map<number, string>> => {
    const unique = [...new Set(ids)];
    const out = new Map<number, string>();
    for (let i = 0; i < unique.length; i += CHUNK) {
      for (const [id, name] of await getent(bin, db, unique.slice(i, i + CHUNK), timeoutMs)) out.set(id, name);
    }
    return out;
  };
  return async (uids, gids) => {
    const [users, groups] = await Promise.all([ask('passwd', uids), ask('group', gids)]);
    return { users, groups };
  };
}

/**
 * Leave out the records homesfs publishes for its own homes' owners (same
 * name and id): they are these homes, not host accounts. `own` lists every
 * home's owner name with its uid and gid.
 */
export function withoutOwn(ids: HostIds, own: Iterable<{ name: string; uid: number; gid: number }>): HostIds {
  const users = new Map(ids.users);
  const groups = new Map(ids.groups);
  for (const o of own) {
    if (users.get(o.uid) === o.name) users.delete(o.uid);
    if (groups.get(o.gid) === o.name) groups.delete(o.gid);
  }
  return { users, groups };
}
