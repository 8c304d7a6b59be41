import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { HOMESCTL, runAsync, startDaemon, type RunningDaemon, type StartOptions } from './daemon.js';
import { pyAs, type Owner } from './neighbour.js';

export type { Owner };

export interface OwnerSuite {
  /** the daemon of this describe block (set once beforeAll ran) */
  readonly d: RunningDaemon;
  /**
   * A python script run as the owner of the home its first argument lies in
   * (a home's mount path, or a path below it): every home has an owner of its
   * own, so the script's home says who runs it. Its stdout, trimmed; a
   * non-zero exit throws with its stderr.
   */
  py(script: string, home: string, ...args: string[]): Promise<string>;
  /** the owner a home ("tenant/key") of this suite was given */
  owner(home: string): Owner;
  /** homesctl against the daemon, as root (its stdout; a non-zero exit throws) */
  ctl(...args: string[]): Promise<string>;
  usage(home: string): Promise<{ bytes: number; inodes: number }>;
}

/**
 * The owner of the home a path lies in (the home's mount path or a path below
 * it), among `homes` ("tenant/key" → entry) served by `d`. Every home has an
 * owner of its own, so a process working in a home runs as this one.
 */
export function ownerAt(d: Pick<RunningDaemon, 'home'>, homes: Readonly<Record<string, { owner?: Owner }>>, path: string): Owner {
  for (const [id, e] of Object.entries(homes)) {
    const [t, k] = id.split('/') as [string, string];
    const at = d.home(t, k);
    if (e.owner && (path === at || path.startsWith(`${at}/`))) return { ...e.owner };
  }
  throw new Error(`${path} is in none of these homes with an owner: ${Object.keys(homes).join(', ')}`);
}

/**
 * `keys` with an owner each, `base`, `base + step`, … in their order (gid =
 * uid); a `step` above 1 leaves ids between them for files of other uids.
 */
export function ownersFrom<K extends string>(base: number, keys: readonly K[], step = 1): Record<K, Owner> {
  return Object.fromEntries(keys.map((k, i) => [k, { uid: base + i * step, gid: base + i * step }])) as Record<K, Owner>;
}

/**
 * One daemon for a describe block, started with `homes` created and their
 * ledgers built, stopped after; and the tools its tests use: scripts run as
 * a home's owner, homesctl as root. Each home names its own owner (an owner
 * belongs to one home).
 */
export function ownerSuite(opts: Pick<StartOptions, 'config'> & { homes: Record<string, { owner: Owner; profile?: string }> }): OwnerSuite {
  let daemon: RunningDaemon | undefined;
  let tmp = '';

  beforeAll(async () => {
    // Scripts live here; the owner must be able to read them.
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-owner-'));
    chmodSync(tmp, 0o755);
    daemon = await startDaemon({ awaitLedgers: true, homes: opts.homes, create: Object.keys(opts.homes), ...(opts.config ? { config: opts.config } : {}) });
  }, 60_000);

  afterAll(async () => {
    await daemon?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  const ctl = async (...args: string[]): Promise<string> => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', daemon!.socket, ...args]);
    if (r.code !== 0) throw new Error(`homesctl ${args.join(' ')}: ${r.stderr}${r.stdout}`);
    return r.stdout;
  };
  return {
    get d() {
      return daemon!;
    },
    py: (script, home, ...args) => pyAs(tmp, ownerAt(daemon!, opts.homes, home), script, home, ...args),
    owner: (home) => {
      if (!Object.hasOwn(opts.homes, home)) throw new Error(`${home} is not a home of this suite`);
      return { ...opts.homes[home]!.owner };
    },
    ctl,
    usage: async (home) => JSON.parse(await ctl('--json', 'usage', home)) as { bytes: number; inodes: number },
  };
}
