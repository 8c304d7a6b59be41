import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ext4Suite, haveCommands } from '../helpers/backing.js';
import { canMount, HOMESCTL, runAsync, skipReason, SYSTEM_PATH } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { pyAs } from '../helpers/neighbour.js';
import { ownerAt } from '../helpers/owner-suite.js';

/**
 * A native answer whose backing syscall blocks holds up its own home only.
 * The binding's ops pin their home (a reference taken under the table lock)
 * and make their syscalls with no lock held, so neither the other homes'
 * native answers nor JavaScript's publications (which take the table's
 * write lock) wait behind it.
 *
 * The backing is a small ext4 of its own, mounted noatime, frozen with
 * fsfreeze while a CHMOD in one home is answered natively: its chmod(2) waits
 * in the kernel until the thaw. Meanwhile the other home is read (opens,
 * reads and stats, all answered natively; nothing writes) and republished
 * (set-limits). Everything there must complete while the chmod is still held.
 */

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const U = { stuck: { uid: BASE + 7, gid: BASE + 7 }, other: { uid: BASE + 8, gid: BASE + 8 } };
const T = 'nf';
const HOMES = { [`${T}/stuck`]: { owner: U.stuck, profile: 'home' }, [`${T}/other`]: { owner: U.other, profile: 'home' } };
const hasTools = haveCommands('mkfs.ext4', 'fsfreeze');

if (!canMount) console.warn(`native-frozen integration suite skipped: ${skipReason}`);
else if (!hasTools) console.warn('native-frozen integration suite skipped: mkfs.ext4 or fsfreeze missing (apt-get install e2fsprogs util-linux)');

type FastPath = { answered: number; openAnswered: number; chmodAnswered: number; inFlight: number };

describe.skipIf(!canMount || !hasTools)('a native syscall blocked in one home (frozen backing)', () => {
  let frozen = false;
  const fsfreeze = (flag: '-f' | '-u') => {
    const r = spawnSync('fsfreeze', [flag, s.fs], { env: { PATH: SYSTEM_PATH } });
    if (r.status !== 0) throw new Error(`fsfreeze ${flag} ${s.fs}: ${r.stderr}`);
    frozen = flag === '-f';
  };
  const s = ext4Suite({ size: '64M', homes: HOMES, beforeStop: () => frozen && fsfreeze('-u') });
  /** a python script run as the owner of the home its first argument lies in: its stdout, trimmed */
  const py = (script: string, _timeoutMs: number, at: string, ...rest: string[]) => pyAs(s.tmp, ownerAt(s.d, HOMES, at), script, at, ...rest);

  /** p's result, or 'stalled' when it has none after ms (a process waiting for a stalled mount cannot even be killed) */
  const within = <T,>(ms: number, p: Promise<T>) => Promise.race([p, new Promise<'stalled'>((r) => setTimeout(() => r('stalled'), ms).unref())]);
  const ctl = (...args: string[]) => runAsync(process.execPath, [HOMESCTL, '--socket', s.d.socket, '--json', ...args], { timeoutMs: 20_000 });
  const fastPath = async () => {
    const r = await ctl('status');
    if (r.code !== 0) throw new Error(`status: ${r.stderr}`);
    return (JSON.parse(r.stdout) as { native: { fastPath: FastPath } }).native.fastPath;
  };

  it('holds up neither the other home nor a republication of it; it lands at the thaw', async () => {
    const d = s.d;
    const stuck = d.home(T, 'stuck');
    const other = d.home(T, 'other');
    await py(`import os,sys\nfor i in range(20): open(os.path.join(sys.argv[1], 'f%02d' % i), 'w').write('x' * i)`, 60_000, other);
    await py(`import os,sys\nos.close(os.open(os.path.join(sys.argv[1], 'f'), os.O_WRONLY|os.O_CREAT, 0o600))`, 60_000, stuck);
    // 20 opens, reads and stats, 10 times: the first round is JS's opens (the caller's slots come after them).
    const readAll = `import os,sys\nn=0\nfor r in range(10):\n  for i in range(20):\n    p=os.path.join(sys.argv[1], 'f%02d' % i)\n    fd=os.open(p, os.O_RDONLY); n+=len(os.read(fd, 100)); os.close(fd)\n    os.stat(p); n+=1\nprint(n)`;
    const expected = String(10 * (190 + 20));
    expect(await py(readAll, 60_000, other)).toBe(expected);
    const before = await fastPath();
    expect(before.inFlight).toBe(0);

    fsfreeze('-f');
    // 0600 -> 0700 changes the mode (the home profile keeps the owner bits): the native chmod's chmod(2) waits for the thaw.
    const chmod = spawn('setpriv', [`--reuid=${U.stuck.uid}`, `--regid=${U.stuck.gid}`, '--clear-groups', 'python3', '-c', `import os,sys\nos.chmod(sys.argv[1], 0o700)\nprint('done', flush=True)`, join(stuck, 'f')], {
      env: { PATH: SYSTEM_PATH },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    chmod.stdout!.on('data', (b: Buffer) => (out += b.toString()));
    const chmodExit = new Promise<number | null>((resolve) => chmod.once('exit', (c) => resolve(c)));
    // Until the binding reports the op holding its home (the chmod, inside its syscall).
    let held = await fastPath();
    for (let i = 0; i < 400 && held.inFlight === 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
      held = await fastPath();
    }
    expect(held.inFlight).toBeGreaterThanOrEqual(1);
    expect(out).toBe('');

    // The other home: 400 native answers (open, read, stat) ...
    expect(await within(30_000, py(readAll, 60_000, other))).toBe(expected);
    const during = await fastPath();
    expect(during.openAnswered).toBeGreaterThan(before.openAnswered);
    expect(during.answered).toBeGreaterThan(before.answered);
    // ... and a republication of it (set-limits: the home published anew, every operation turned on again) ...
    const limits = await ctl('set-limits', `${T}/other`, '--inodes', '100000');
    expect(limits.code, limits.stderr).toBe(0);
    expect(await within(30_000, py(readAll, 60_000, other))).toBe(expected);
    // ... all while the chmod is still held.
    expect(out).toBe('');
    expect((await fastPath()).inFlight).toBe(1);
    expect(chmod.exitCode).toBeNull();

    fsfreeze('-u');
    expect(await chmodExit).toBe(0);
    expect(out).toContain('done');
    const after = await fastPath();
    expect(after.chmodAnswered).toBe(before.chmodAnswered + 1);
    expect(after.inFlight).toBe(0);
    expect(await py(`import os,sys\nprint(oct(os.stat(os.path.join(sys.argv[1], 'f')).st_mode & 0o777))`, 30_000, stuck)).toBe('0o700');
  }, 180_000);
});
