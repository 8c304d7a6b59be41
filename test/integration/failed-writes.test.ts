import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ext4Suite, haveCommands, regularBytes } from '../helpers/backing.js';
import { canMount, HOMESCTL, runAsync, skipReason } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { pyAs } from '../helpers/neighbour.js';

/**
 * A write that fails lands nothing, wherever it was aimed: one past the end of
 * the file that fails (ENOSPC on a full backing) neither moves the file's size
 * nor charges the gap, whether the binding decided it (a file it writes for
 * the ledger) or JavaScript did. The backing is a small ext4 of its own, filled.
 */

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const U = { uid: BASE + 1, gid: BASE + 1 };
const T = 'fw';
const HOMES = { [`${T}/full`]: { owner: U, profile: 'unbudgeted' } };
const hasTools = haveCommands('mkfs.ext4');

if (!canMount) console.warn(`failed-writes integration suite skipped: ${skipReason}`);

describe.skipIf(!canMount || !hasTools)('a failed write past the end of a file charges nothing', () => {
  const s = ext4Suite({ size: '8M', homes: HOMES, config: { profiles: { unbudgeted: { extends: 'home', maxHomeBytes: 0, maxFileBytes: 0 } } } });

  const usage = async () => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', s.d.socket, '--json', 'usage', `${T}/full`]);
    if (r.code !== 0) throw new Error(r.stderr);
    return JSON.parse(r.stdout) as { bytes: number };
  };
  const status = async () => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', s.d.socket, '--json', 'status']);
    return JSON.parse(r.stdout) as { native: { fastPath?: { writesDecided: number } } };
  };

  it('ENOSPC 3 MiB past the end: the size stays, the ledger equals the disk', async () => {
    const home = s.d.home(T, 'full');
    const decided = (await status()).native.fastPath?.writesDecided ?? 0;
    const out = await pyAs(
      s.tmp,
      U,
      `import os, sys, errno
home = sys.argv[1]
# A file written a few times first, so its writes are the binding's to decide.
fd = os.open(os.path.join(home, 'w'), os.O_WRONLY | os.O_CREAT, 0o600)
for i in range(4): os.write(fd, b'x' * 4096)
# Then the disk is filled through another file.
g = os.open(os.path.join(home, 'fill'), os.O_WRONLY | os.O_CREAT, 0o600)
try:
    while True: os.write(g, b'f' * 65536)
except OSError as e:
    assert e.errno == errno.ENOSPC, e
try:
    while True: os.write(g, b'f' * 512)
except OSError as e:
    assert e.errno == errno.ENOSPC, e
os.fsync(g)
os.close(g)
try:
    os.pwrite(fd, b'y' * 4096, 3 << 20)
    print('written')
except OSError as e:
    print(errno.errorcode[e.errno], os.fstat(fd).st_size)
os.close(fd)`,
      home,
    );
    expect(out).toBe('ENOSPC 16384');
    // the binding decided the file's writes (the failing one among them)
    expect((await status()).native.fastPath!.writesDecided).toBeGreaterThan(decided);
    expect((await usage()).bytes).toBe(regularBytes(s.d.backingOf(T, 'full')));
    const st = spawnSync('stat', ['-c', '%s', join(home, 'w')], { encoding: 'utf8' });
    expect(st.stdout.trim()).toBe('16384');
  });
});
