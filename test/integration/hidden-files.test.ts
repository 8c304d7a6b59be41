import { chmodSync, existsSync, mkdtempSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ABI } from '../../src/abi.js';
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

  it("a user's name of the hidden form is the user's: renamed to, listed, kept after the close; in another directory it never reaches an orphan", async () => {
    const h = d.home('hf', 'p');
    const orphans = () => readdirSync(d.backingOf('hf', 'p'), { encoding: 'buffer' }).filter((n) => n[0] === 0xff);
    // The test hands the open-and-unlinked file's hidden name (its orphan's, read from the backing as
    // root) to the script through a file the script polls for.
    const marks = mkdtempSync(join(tmp, 'marks-'));
    chmodSync(marks, 0o1777);
    const script = `import os, sys, time
h, marks = sys.argv[1], sys.argv[2]
mine = '${ABI.HIDDEN_PREFIX}' + '0123456789abcdef'[:${ABI.HIDDEN_DIGITS}].ljust(${ABI.HIDDEN_DIGITS}, '0')
os.mkdir(h + '/sub')
with open(h + '/a', 'w') as f: f.write('users')
fd = os.open(h + '/a', os.O_RDONLY)
os.rename(h + '/a', h + '/' + mine)
os.close(fd)
print(sorted(os.listdir(h)), open(h + '/' + mine).read())
fd = os.open(h + '/sub/g', os.O_RDWR | os.O_CREAT, 0o600)
os.write(fd, b'secret')
os.unlink(h + '/sub/g')
open(marks + '/unlinked', 'w').close()
while not os.path.exists(marks + '/name'): time.sleep(0.02)
hidden = open(marks + '/name').read()
def probe(p):
    try: return str(os.stat(p).st_size) + ' ' + open(p).read()
    except OSError as e: return os.strerror(e.errno)
print(probe(h + '/sub/' + hidden), probe(h + '/sub/' + mine))
os.close(fd)
print(sorted(os.listdir(h)), open(h + '/' + mine).read())
`;
    const run = pyAs(tmp, U, script, h, marks);
    for (let i = 0; i < 400 && !existsSync(join(marks, 'unlinked')); i++) await new Promise((r) => setTimeout(r, 25));
    const [orphan] = orphans();
    writeFileSync(join(marks, 'name.tmp'), orphan ? orphan.subarray(1).toString('latin1') : 'none');
    renameSync(join(marks, 'name.tmp'), join(marks, 'name'));
    const mine = `${ABI.HIDDEN_PREFIX}${'0123456789abcdef'.slice(0, ABI.HIDDEN_DIGITS).padEnd(ABI.HIDDEN_DIGITS, '0')}`;
    // The user's rename to a name of the hidden form is a rename: the file keeps it after its last
    // close. A path in `sub` ending in the hidden name `sub` lacks is no name: not the orphan
    // (the session puts hidden names at the home's root only).
    expect((await run).split('\n')).toEqual([`['${mine}', 'sub'] users`, 'No such file or directory No such file or directory', `['${mine}', 'sub'] users`]);
    expect(orphan).toBeDefined();
  }, 60_000);
});
