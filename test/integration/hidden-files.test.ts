import { chmodSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { pyAs } from '../helpers/neighbour.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * A file unlinked while open lives on as its home's orphan (fs/hidden.ts):
 * gone from its directory at once, reachable through its descriptors
 * whatever happens to that directory, charged until the last close, and gone
 * then.
 */

const OWNERS = ownerRange(import.meta.filename);
const U = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };

if (!canMount) console.warn(`hidden-files integration suite skipped: ${skipReason}`);

describe.skipIf(!canMount)('files unlinked while open: their orphan', () => {
  let d: RunningDaemon;
  let tmp = '';
  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-hidden-'));
    chmodSync(tmp, 0o755);
    d = await startDaemon({ awaitLedgers: true, homes: { 'hf/p': { owner: U, profile: 'posix' } }, create: ['hf/p'], config: { owners: OWNERS } });
  }, 60_000);
  afterAll(async () => {
    await d?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('fstat, fchmod and ftruncate go on after its directory is renamed; the directory can be removed; the orphan goes at the close', async () => {
    const script = `import os, sys
h = sys.argv[1]
os.mkdir(h + '/d')
fd = os.open(h + '/d/f', os.O_RDWR | os.O_CREAT, 0o600)
os.write(fd, b'abc')
os.unlink(h + '/d/f')
os.rename(h + '/d', h + '/e')
st = os.fstat(fd)
os.fchmod(fd, 0o640)
os.ftruncate(fd, 1)
st2 = os.fstat(fd)
print(st.st_nlink, st.st_size, oct(st2.st_mode & 0o777), st2.st_size, os.listdir(h + '/e'), sorted(os.listdir(h)))
os.rmdir(h + '/e')
os.lseek(fd, 0, 0)
print(os.read(fd, 10).decode(), sorted(os.listdir(h)))
os.close(fd)
`;
    const out = await pyAs(tmp, U, script, d.home('hf', 'p'));
    expect(out.split('\n').slice(0, 2)).toEqual(["0 3 0o640 1 [] ['e']", 'a []']);
    // After the close (whose RELEASE reaches the daemon after close(2) returned), no orphan is left at the home's root.
    const orphans = () => readdirSync(d.backingOf('hf', 'p'), { encoding: 'buffer' }).filter((n) => n[0] === 0xff);
    for (let i = 0; i < 100 && orphans().length > 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(orphans()).toEqual([]);
    const rescan = JSON.parse((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'rescan', 'hf/p'])).stdout) as { drift: { bytes: number; inodes: number } };
    expect(rescan.drift).toEqual({ bytes: 0, inodes: 0 });
  }, 60_000);
});
