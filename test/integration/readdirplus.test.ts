import { chownSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, runAs, skipReason, startDaemon, type RunningDaemon, rewriteConfig } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * READDIRPLUS (native/src/session/ops_dirs_plus.c): a listing answers each
 * entry's attributes and node with its name, so `ls -l` of a directory the
 * kernel has never seen needs no LOOKUP per name, and what it shows is what
 * LOOKUPs show with `fuse.readdirplus` off: the same sizes, modes, owners,
 * inode numbers. The nodes the listing made are the nodes later requests
 * use (stat, unlink, a rename).
 */

const OWNERS = ownerRange(import.meta.filename);
const OWNER = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const T = 'rdp';
const FILES = 300;

if (!canMount) console.warn(`readdirplus integration suite skipped: ${skipReason}`);

interface Protocol {
  flags: number;
  lookups: number;
  readdirplus: number;
}
const FUSE_DO_READDIRPLUS = 1 << 13;

describe.skipIf(!canMount)('READDIRPLUS: listings with attributes', () => {
  let d: RunningDaemon;
  const homes = { [`${T}/work`]: { owner: OWNER, profile: 'home' } };

  beforeAll(async () => {
    d = await startDaemon({ awaitLedgers: true, homes, create: [`${T}/work`], config: { owners: OWNERS } });
    await d.stopKeep();
  }, 60_000);

  afterAll(async () => {
    await d?.stop();
  });

  const protocol = async (): Promise<Protocol> => ((await d.status()) as unknown as { native: { protocol: Protocol } }).native.protocol;

  /** N files written behind the daemon into a new directory of the home. */
  const populate = (name: string): void => {
    const dir = join(d.backing, T, 'work', name);
    mkdirSync(dir);
    chownSync(dir, OWNER.uid, OWNER.gid);
    for (let i = 0; i < FILES; i++) {
      const f = join(dir, `f${String(i).padStart(3, '0')}`);
      writeFileSync(f, 'x'.repeat(i), { mode: 0o600 });
      chownSync(f, OWNER.uid, OWNER.gid);
    }
  };

  /** A new daemon and mount (the kernel has seen none of the names) with READDIRPLUS on or off; the path of `name` through it. */
  const remount = async (name: string, plus: boolean): Promise<string> => {
    await d.stopKeep();
    rewriteConfig(d, (c) => ((c.fuse as Record<string, unknown>) = { ...((c.fuse as Record<string, unknown>) ?? {}), readdirplus: plus }));
    d = await startDaemon({ dir: d.dir, awaitLedgers: true, homes });
    return join(d.home(T, 'work'), name);
  };

  const ls = async (dir: string): Promise<string> => {
    const r = await runAs(OWNER.uid, OWNER.gid, `ls -lni --time-style=+%s ${dir}`);
    expect(r.code, r.stderr).toBe(0);
    return r.stdout;
  };

  it('ls -l of a directory the kernel has not seen: one listing, no LOOKUP per name, the same answers as LOOKUPs give', async () => {
    populate('plus');
    populate('off');
    const plusDir = await remount('plus', true);
    const before = await protocol();
    expect(before.flags & FUSE_DO_READDIRPLUS).toBe(FUSE_DO_READDIRPLUS);
    const withPlus = await ls(plusDir);
    const after = await protocol();
    expect(after.readdirplus - before.readdirplus).toBeGreaterThanOrEqual(1);
    // The path's own components, not the 300 names (ls -l stats each one: LOOKUP without READDIRPLUS).
    expect(after.lookups - before.lookups).toBeLessThan(20);
    const rows = withPlus.trim().split('\n').slice(1);
    expect(rows).toHaveLength(FILES);
    for (const row of rows) {
      const [ino, mode, , uid, gid, size, , name] = row.split(/\s+/);
      const st = statSync(join(d.backing, T, 'work', 'plus', name!));
      expect({ ino: Number(ino), mode, uid: Number(uid), gid: Number(gid), size: Number(size) }).toEqual({ ino: st.ino, mode: '-rw-------', uid: OWNER.uid, gid: OWNER.gid, size: st.size });
    }

    // The nodes the listing made serve what follows: stat, rename, unlink.
    const r = await runAs(OWNER.uid, OWNER.gid, `cd ${plusDir} && stat -c '%i %s' f123 && mv f123 g123 && stat -c '%i %s' g123 && rm f124 g123 && ls | wc -l`);
    expect(r.code, r.stderr).toBe(0);
    const ino = statSync(join(d.backing, T, 'work', 'plus', 'f200')).ino;
    const [a, b, n] = r.stdout.trim().split('\n');
    expect(a).toBe(b);
    expect(Number(n)).toBe(FILES - 2);
    expect((await runAs(OWNER.uid, OWNER.gid, `stat -c %i ${plusDir}/f200`)).stdout.trim()).toBe(String(ino));

    // The same listing through LOOKUPs (fuse.readdirplus off): the same text, and a LOOKUP per name.
    const offDir = await remount('off', false);
    const b2 = await protocol();
    expect(b2.flags & FUSE_DO_READDIRPLUS).toBe(0);
    const without = await ls(offDir);
    const a2 = await protocol();
    expect(a2.readdirplus - b2.readdirplus).toBe(0);
    expect(a2.lookups - b2.lookups).toBeGreaterThanOrEqual(FILES);
    // The same directory listed on a new mount with READDIRPLUS on: the same text.
    const again = await ls(await remount('off', true));
    expect(again).toBe(without);
  }, 180_000);
});
