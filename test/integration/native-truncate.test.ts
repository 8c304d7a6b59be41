import { describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { canMount, skipReason } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownerSuite, type Owner } from '../helpers/owner-suite.js';

/**
 * FTRUNCATE decided in the binding (fuse.nativeTruncate) for an open file
 * whose charged size the binding owns (files it made, whose writes it
 * decides): growth from the same byte credit as a write's, within the
 * per-file limit; a cut gives its bytes back. What must hold: the truncates
 * are native (counted in status), every answer and size is the daemon's with
 * the switch off (EFBIG past the per-file limit, EDQUOT past the budget, the
 * file unchanged then), and the ledger equals the disk.
 *
 * NATIVE_TRUNCATE_OFF=1 runs the first block with the switch off: its
 * "native" counts then fail, which shows this file tests the binding's truncates.
 */

const OWNERS = ownerRange(import.meta.filename);
const ownerNo = (i: number): Owner => ({ uid: OWNERS.from + 5 + i, gid: OWNERS.from + 5 + i });
const T = 'nt';
const KiB = 1024;
const MiB = 1024 * KiB;
const FORCE_OFF = process.env.NATIVE_TRUNCATE_OFF === '1';

if (!canMount) console.warn(`native-truncate integration suite skipped: ${skipReason}`);

const sized = { ...BUILTIN_PROFILES.home, maxFileBytes: MiB, maxHomeBytes: 3 * MiB - 4 * KiB };
const PROFILES = { sized };

type Native = { truncatesDecided: number; truncateFallbacks: number };

/**
 * The owner makes files (the first gets it create slots: the binding makes the rest, and owns their sizes),
 * writes and truncates them; every answer and size is printed.
 */
const SCRIPT = `import os,sys,errno,time
h=sys.argv[1]
open(os.path.join(h, 'warm'), 'w').close()
time.sleep(0.5)
out=[]
def step(what, f):
  try: f(); out.append(what + ' ok')
  except OSError as e: out.append(what + ' ' + errno.errorcode[e.errno])
fds=[os.open(os.path.join(h, 'f%d' % i), os.O_RDWR|os.O_CREAT|os.O_EXCL, 0o600) for i in range(3)]
a, b, c = fds
os.write(a, b'a' * (100 * 1024))
step('grow 512K', lambda: os.ftruncate(a, 512 * 1024))
step('cut 10K', lambda: os.ftruncate(a, 10 * 1024))
step('grow 1M', lambda: os.ftruncate(a, 1024 * 1024))
step('grow 1M+1', lambda: os.ftruncate(a, 1024 * 1024 + 1))
step('b 1M', lambda: os.ftruncate(b, 1024 * 1024))
step('c 1M', lambda: os.ftruncate(c, 1024 * 1024))
step('a 0', lambda: os.ftruncate(a, 0))
step('c 1M again', lambda: os.ftruncate(c, 1024 * 1024))
step('a 1M', lambda: os.ftruncate(a, 1024 * 1024))
step('b 1', lambda: os.ftruncate(b, 1))
step('a 1M', lambda: os.ftruncate(a, 1024 * 1024))
for fd in fds: os.close(fd)
out.append('sizes ' + ' '.join(str(os.stat(os.path.join(h, 'f%d' % i)).st_size) for i in range(3)))
print('\\n'.join(out))
`;

const EXPECTED = [
  'grow 512K ok',
  'cut 10K ok',
  'grow 1M ok',
  'grow 1M+1 EFBIG',
  'b 1M ok',
  // Three files of 1 MiB are over the budget (3 MiB less 4 KiB): the third is refused until another is cut.
  'c 1M EDQUOT',
  'a 0 ok',
  'c 1M again ok',
  'a 1M EDQUOT',
  'b 1 ok',
  'a 1M ok',
  `sizes ${MiB} 1 ${MiB}`,
];

let seen: string | undefined;

describe.skipIf(!canMount)('native ftruncate (fuse.nativeTruncate): decided in the binding from the byte credit', () => {
  const s = ownerSuite({ homes: { [`${T}/a`]: { owner: ownerNo(0), profile: 'sized' } }, config: { owners: OWNERS, profiles: PROFILES, fuse: { nativeTruncate: !FORCE_OFF } } });

  it('grows, cuts, EFBIG past the per-file limit and EDQUOT past the budget as the daemon does; the ledger equals the disk', async () => {
    const n0 = ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;
    seen = await s.py(SCRIPT, s.d.home(T, 'a'));
    expect(seen.split('\n')).toEqual(EXPECTED);
    const n1 = ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;
    expect(n1.truncatesDecided - n0.truncatesDecided).toBeGreaterThanOrEqual(5);
    expect(await s.usage(`${T}/a`)).toMatchObject({ bytes: 2 * MiB + 1, inodes: 4 });
    const r = JSON.parse(await s.ctl('--json', 'rescan', `${T}/a`)) as { drift: { bytes: number; inodes: number } };
    expect(r.drift).toEqual({ bytes: 0, inodes: 0 });
  });
});

describe.skipIf(!canMount)('the same with fuse.nativeTruncate off', () => {
  const s = ownerSuite({ homes: { [`${T}/b`]: { owner: ownerNo(1), profile: 'sized' } }, config: { owners: OWNERS, profiles: PROFILES, fuse: { nativeTruncate: false } } });

  it('gives the same answers and sizes, none decided in the binding', async () => {
    const n0 = ((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath;
    const out = await s.py(SCRIPT, s.d.home(T, 'b'));
    expect(((await s.d.status()) as { native: { fastPath: Native } }).native.fastPath.truncatesDecided).toBe(n0.truncatesDecided);
    expect(seen, 'the switch-on block ran first').toBeDefined();
    expect(out).toBe(seen);
    expect(await s.usage(`${T}/b`)).toMatchObject({ bytes: 2 * MiB + 1, inodes: 4 });
  });
});
