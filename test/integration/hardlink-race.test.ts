import { describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { namesBelow, regularBytes } from '../helpers/backing.js';
import { canMount, skipReason } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownerSuite, type OwnerSuite } from '../helpers/owner-suite.js';

/**
 * Two names of one inode in different directories, removed at the same time:
 * the kernel serialises removals per parent directory only, so both removers'
 * fstat after their unlink (or rename over the name) can see nlink 0. The
 * file's bytes must leave the ledger once, whoever removed the names (the
 * binding's unlink, JS's unlink of a name under ~/.homesfs/, which C hands to
 * JS, JS's rename over a name), and every name gives back its one inode. A
 * ballast file keeps the ledger above 0, so a release too many shows (the
 * ledger stops at 0). Each round puts the two removals behind a barrier in
 * two threads of one process, each round a new file.
 */

const KiB = 1024;
/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
const U = { uid: BASE + 5, gid: BASE + 5 };
const UP = { uid: BASE + 6, gid: BASE + 6 };
const UJ = { uid: BASE + 7, gid: BASE + 7 };
const T = 'hl';
const TP = 'hlp';
const TJ = 'hlj';
const ROUNDS = Number(process.env.HL_ROUNDS ?? 150);
const PAIRS = Number(process.env.HL_PAIRS ?? 8);
const roomy = { ...BUILTIN_PROFILES.home, maxHomeBytes: 64 * 1024 * KiB, maxFileBytes: 0, maxInodes: 0 };

if (!canMount) console.warn(`hardlink-race integration suite skipped: ${skipReason}`);

/**
 * ROUNDS rounds in `home`: PAIRS files of 10,000 bytes, each under two names,
 * all removed at once by two threads per file (many removals in flight widen
 * every remover's window between its removal and its fstat). mode: "unlink"
 * (a/ and b/), "reserved" (.homesfs/ and b/: JS and the binding), "rename" (a
 * small file of c/ renamed over a/'s name while b/'s is unlinked). Prints what
 * went wrong, or "ok".
 */
const RACE = `import os, sys, threading
h, mode, rounds, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
first = os.path.join(h, '.homesfs' if mode == 'reserved' else 'a')
for d in (first, os.path.join(h, 'b'), os.path.join(h, 'c')): os.makedirs(d, exist_ok=True)
open(os.path.join(h, 'ballast'), 'wb').write(b'B' * 1048576)
gate = threading.Barrier(2 * pairs + 1)
errors = []
def name(d, i): return os.path.join(first if d == 'a' else os.path.join(h, d), 'f%d' % i)
def one(i):
    if mode == 'rename': os.rename(name('c', i), name('a', i))
    else: os.unlink(name('a', i))
def two(i):
    # b/'s removal (the binding's, where it unlinks) a little later each file, up to a JS removal's time
    # to come: some land between the other name's removal and its fstat, whatever the machine's speed.
    for _ in range(i % 16): os.stat(name('b', i))
    os.unlink(name('b', i))
def worker(fn, p):
    for r in range(rounds):
        gate.wait()
        try: fn(r * pairs + p)
        except OSError as e: errors.append(repr(e))
        gate.wait()
ts = [threading.Thread(target=worker, args=(f, p)) for p in range(pairs) for f in (one, two)]
for t in ts: t.start()
for r in range(rounds):
    for i in range(r * pairs, (r + 1) * pairs):
        with open(name('a', i), 'wb') as f: f.write(b'x' * 10000)
        os.link(name('a', i), name('b', i))
        if mode == 'rename': open(name('c', i), 'wb').write(b'r' * 10)
    gate.wait()
    gate.wait()
for t in ts: t.join()
print('; '.join(errors[:5]) or 'ok')`;

function raceCases(s: OwnerSuite, t: string, modes: readonly string[]) {
  for (const mode of modes) {
    it(`${mode}: ${ROUNDS * PAIRS} files, their two names removed at once; the ledger equals the disk, bytes and names`, async () => {
      const home = s.d.home(t, mode);
      expect(await s.py(RACE, home, mode, String(ROUNDS), String(PAIRS))).toBe('ok');
      const backing = s.d.backingOf(t, mode);
      const disk = { bytes: regularBytes(backing), inodes: namesBelow(backing) };
      // What is left: the ballast, and after renames the small files under their new names.
      expect(disk.bytes).toBe(1024 * KiB + (mode === 'rename' ? ROUNDS * PAIRS * 10 : 0));
      const u = await s.usage(`${t}/${mode}`);
      expect({ bytes: u.bytes, inodes: u.inodes }).toEqual(disk);
    }, 180_000);
  }
}

const MODES = ['unlink', 'reserved', 'rename'] as const;

/** One daemon for `tenant`, a home per mode, with `config` over the defaults. */
function raceSuite(owner: { uid: number; gid: number }, tenant: string, config: Record<string, unknown>): OwnerSuite {
  // one owner per home (an owner uid belongs to one home): the suite's, then 100 and 200 above it
  return ownerSuite({
    homes: Object.fromEntries(MODES.map((m, i) => [`${tenant}/${m}`, { owner: { uid: owner.uid + 100 * i, gid: owner.gid + 100 * i }, profile: 'roomy' }])),
    config: { owners: OWNERS, profiles: { roomy }, ...config },
  });
}

type Native = { fastPath: { unlinkAnswered: number }; removals: { inFlight: number; raced: number } };
const native = async (s: OwnerSuite) => ((await s.d.status()) as { native: Native }).native;
const unlinkAnswered = async (s: OwnerSuite) => (await native(s)).fastPath.unlinkAnswered;

describe.skipIf(!canMount)('hard links removed at once, the binding unlinking beside JavaScript: the bytes leave the ledger once', () => {
  const s = raceSuite(U, T, {});
  raceCases(s, T, MODES);

  it('the binding did unlinks of these homes (so C raced JS and itself)', async () => {
    expect(await unlinkAnswered(s)).toBeGreaterThanOrEqual(ROUNDS * PAIRS);
  });
});

// syncMetadata false (a network backing's setting): JS's removals wait for the threadpool between their
// unlink or rename and their fstat, so other removals, C's and JS's own, land in between far more often.
describe.skipIf(!canMount)('the same with the removals of JavaScript on the threadpool (syncMetadata false)', () => {
  const s = raceSuite(UP, TP, { syncMetadata: false });
  raceCases(s, TP, MODES);

  it('the binding did unlinks of these homes', async () => {
    expect(await unlinkAnswered(s)).toBeGreaterThanOrEqual(ROUNDS * PAIRS);
  });
});

describe.skipIf(!canMount)('the same with JavaScript alone (fuse.nativeUnlink off, syncMetadata false)', () => {
  const s = raceSuite(UJ, TJ, { syncMetadata: false, fuse: { nativeUnlink: false } });
  raceCases(s, TJ, MODES);

  // Every name of a hard-linked file is one kernel inode, whose lock the kernel takes for each
  // removal: the removals of one file reach the daemon one after the other, so none finds another
  // in its claim (the claim table stays for the removals the daemon makes itself: hiding, rescans).
  it('the binding did no unlink; the kernel handed the removals of one inode over one at a time, and none is left in the claim table', async () => {
    const n = await native(s);
    expect(n.fastPath.unlinkAnswered).toBe(0);
    expect(n.removals.raced).toBe(0);
    expect(n.removals.inFlight).toBe(0);
  });
});
