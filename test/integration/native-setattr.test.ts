// UTIMENS, CHMOD and CHOWN by path done in the binding (fuse.nativeSetattr,
// fastpath_setattr.c) must change time, never behaviour: the same random trees, built
// from the same seed into two daemons' backings, one with them native and
// one without, get the same utime, chmod and chown calls, and every answer,
// mode, owner, time and "did ctime move" must match.
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { canMount, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownersFrom } from '../helpers/owner-suite.js';

if (!canMount) console.warn(`native-setattr integration suite skipped: ${skipReason}`);

const TREE = join(import.meta.dirname, 'fixtures', 'fastpath_tree.py');
/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
// Every builtin profile (owner-mask chmod, allow, deny-widen), and one that ignores chmod with forced modes.
const HOMES: Record<string, string> = { 's/home': 'home', 's/posix': 'posix', 's/scratch': 'scratch', 's/forced': 'forced' };
/** each home's owner (an owner belongs to one home), 10 apart: the tree plants files of owner + 1 */
const OWNER = ownersFrom(BASE + 11, Object.keys(HOMES), 10);
const PROFILES = { forced: { ...BUILTIN_PROFILES.home, chmod: 'ignore', fileMode: 0o640 } };

type Stats = { utimensAnswered: number; chmodAnswered: number; chownAnswered: number; setattrFallbacks: number };

describe.skipIf(!canMount)('native utimens and chmod: the same answers and the same tree as JavaScript gives', () => {
  const daemons: RunningDaemon[] = [];
  const seed = 1 + Math.floor(Math.random() * 1e6);

  beforeAll(async () => {
    for (const nativeSetattr of [true, false]) {
      const d = await startDaemon({
        create: Object.keys(HOMES),
        homes: Object.fromEntries(Object.entries(HOMES).map(([h, profile]) => [h, { owner: OWNER[h]!, profile }])),
        config: { owners: OWNERS, profiles: PROFILES, fuse: { attrTimeout: 0, entryTimeout: 0, negativeTimeout: 0, nativeSetattr } },
      });
      daemons.push(d);
    }
  }, 60_000);

  afterAll(async () => {
    for (const d of daemons) await d.stop();
  });

  it('every path of a random tree per profile: utime, chmod, chmod again', async () => {
    const runs: Array<Map<string, unknown[]>> = [];
    for (const d of daemons) {
      const rows = new Map<string, unknown[]>();
      let s = seed;
      for (const h of Object.keys(HOMES)) {
        const [t, k] = h.split('/') as [string, string];
        const b = await runAsync('python3', [TREE, 'build', d.backingOf(t, k), String(s++), String(OWNER[h]!.uid), String(OWNER[h]!.gid)]);
        expect(b.stderr).toBe('');
        const m = join(d.mount, h);
        const paths = [m, ...b.stdout.trim().split('\n').map((rel) => join(m, rel)), `${m}/nope`, `${m}/.homesfs`, `${m}/.homesfs/status`, `${m}/sl2/x`];
        const r = await runAsync('python3', [TREE, 'setattr', d.mount], { input: paths.join('\n') + '\n', timeoutMs: 120_000 });
        expect(r.stderr).toBe('');
        for (const line of r.stdout.trim().split('\n')) {
          const row = JSON.parse(line) as unknown[];
          // The status file is made up at each start, stamped then: its times are no tree's.
          if ((row[0] as string).endsWith('/.homesfs/status') && row.length > 4) row[3] = row[4] = null;
          rows.set(row[0] as string, row);
        }
      }
      runs.push(rows);
    }
    const [native, js] = runs as [Map<string, unknown[]>, Map<string, unknown[]>];
    expect([...native.keys()].sort()).toEqual([...js.keys()].sort());
    for (const [p, row] of native) expect(row, p).toEqual(js.get(p));
    // Not a comparison of empty answers: both kinds were done natively, and the profiles differ.
    const stats = ((await daemons[0]!.status()) as { native: { fastPath: Stats } }).native.fastPath;
    expect(stats.utimensAnswered).toBeGreaterThan(native.size / 2);
    expect(stats.chmodAnswered).toBeGreaterThan(native.size / 2);
    expect(stats.chownAnswered).toBeGreaterThan(native.size);
    expect(stats.setattrFallbacks).toBeGreaterThan(0);
    const off = ((await daemons[1]!.status()) as { native: { fastPath: Stats } }).native.fastPath;
    expect(off.utimensAnswered + off.chmodAnswered + off.chownAnswered).toBe(0);
    const outcomes = new Set([...native.values()].flatMap((r) => r.filter((x): x is string => typeof x === 'string' && (x.startsWith('chmod') || x.startsWith('utime') || x.startsWith('chown')))));
    expect(outcomes.has('chmod')).toBe(true);
    expect([...outcomes].some((o) => o.startsWith('chmod E'))).toBe(true);
    expect(outcomes.has('chown')).toBe(true);
    expect(outcomes.has('chown EPERM')).toBe(true);
    const moved = [...native.values()].flatMap((r) => r.filter((x) => typeof x === 'boolean'));
    expect(moved).toContain(true);
    expect(moved).toContain(false);
  }, 180_000);
});
