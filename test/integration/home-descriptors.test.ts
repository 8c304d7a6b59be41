import { chownSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, runAs, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * Every loaded home holds descriptors: its directory's, and the binding's
 * copy of it (the fast path dups each published home's). Both count against
 * what the daemon's descriptors allow beside its reserve, so homes past that
 * are refused with the daemon's own error (DAEMON_FILES_EXHAUSTED, ENFILE)
 * instead of eating the reserve until something meets EMFILE; the homes
 * already loaded, the control socket and the mount carry on.
 *
 * limits.nofile 1536 with the smallest reserve (1280) leaves 256 descriptors
 * for homes and their open files, of which homes may hold half: 64 homes at
 * two each.
 */

if (!canMount) console.warn(`home-descriptors suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
const U = { uid: BASE + 1, gid: BASE + 1 };
const NOFILE = 1536;
const RESERVE = 1280;
const HOMES = 80;

type Status = {
  homes: Array<{ tenant: string; key: string }>;
  mount: { mounted: boolean };
  limits: { openFiles: number; openFilesCap: number; descriptorsInUse: number };
};

describe.skipIf(!canMount)('home descriptors count against the daemon descriptor limit', () => {
  let d: RunningDaemon;

  beforeAll(async () => {
    d = await startDaemon({ config: { limits: { nofile: NOFILE, reserveFiles: RESERVE }, owners: OWNERS } });
  }, 60_000);

  afterAll(async () => {
    await d?.stop();
  });

  it(`${HOMES} homes met at once: past what the limit allows beside its reserve, a home is refused with ENFILE, and the rest works`, async () => {
    // The homes appear in the backing tree after start: each is loaded on its first use.
    const tenant = join(d.backingOf('hd', 'x'), '..');
    mkdirSync(tenant, { recursive: true, mode: 0o711 });
    for (let i = 0; i < HOMES; i++) {
      const dir = join(tenant, `h${String(i).padStart(3, '0')}`);
      mkdirSync(dir, { mode: 0o700 });
      chownSync(dir, U.uid, U.gid);
    }
    const mnt = join(d.home('hd', 'x'), '..');
    const r = await runAs(
      U.uid,
      U.gid,
      `python3 -c "
import os,sys,errno
out=[]
for i in range(${HOMES}):
  try:
    with open(os.path.join(sys.argv[1], 'h%03d' % i, 'f'), 'w') as f: f.write('x')
    out.append('ok')
  except OSError as e: out.append(errno.errorcode[e.errno])
print(' '.join(out))" ${mnt}`,
      { timeoutMs: 120_000 },
    );
    expect(r.stderr).toBe('');
    const out = r.stdout.trim().split(' ');
    expect(out).toHaveLength(HOMES);
    const ok = out.filter((x) => x === 'ok').length;
    // Homes in use until the limit, then the daemon's own refusal, for every home after.
    expect(ok).toBeGreaterThan(50);
    expect(ok).toBeLessThanOrEqual((NOFILE - RESERVE) / 4);
    expect(out).toEqual([...Array(ok).fill('ok'), ...Array(HOMES - ok).fill('ENFILE')]);
    expect(await d.waitForLog((l) => l.code === 'DAEMON_FILES_EXHAUSTED')).toMatchObject({ errno: 'ENFILE', scope: 'daemon' });
    // Nothing was left behind in the refused homes.
    expect(readdirSync(join(tenant, `h${String(HOMES - 1).padStart(3, '0')}`))).toEqual([]);

    const s = (await d.status()) as unknown as Status;
    expect(s.mount.mounted).toBe(true);
    // Two descriptors per loaded home are kept out of the open files' reach, and they are all there is.
    expect(s.limits.openFilesCap).toBe(NOFILE - RESERVE - 2 * s.homes.length);
    expect(s.limits.openFilesCap).toBeGreaterThanOrEqual((NOFILE - RESERVE) / 2);
    expect(s.limits.descriptorsInUse).toBeLessThan(NOFILE - RESERVE / 2);
    // A home already loaded carries on.
    const again = await runAs(U.uid, U.gid, `echo y >> ${mnt}/h000/f && cat ${mnt}/h000/f`);
    expect(again.stdout).toBe('xy\n');
  }, 180_000);
});
