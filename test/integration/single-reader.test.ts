import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ext4Suite, haveCommands } from '../helpers/backing.js';
import { canMount, HOMESCTL, runAsync, skipReason, SYSTEM_PATH } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownerAt } from '../helpers/owner-suite.js';

/**
 * fuse.singleReader (off by default, on here): one session worker thread reads the device at
 * a time and keeps the lead while it answers natively. What must hold is
 * that no home can hold the others up through it: a native answer that blocks in the backing (here a WRITE on a frozen
 * filesystem, whose pwrite waits in the kernel until the thaw) loses the lead
 * to the watchdog, and another thread serves the other homes meanwhile.
 *
 * The backing is a small ext4 of its own (fsfreeze needs a filesystem that
 * freezes; tmpfs does not), mounted noatime so that reads write nothing.
 * Freezing stops every write to the backing, of every home: the other home
 * only reads.
 */

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
/** each home's owner (an owner belongs to one home) */
const U = { stuck: { uid: BASE + 7, gid: BASE + 7 }, other: { uid: BASE + 8, gid: BASE + 8 } };
const T = 'sr';
const HOMES = { [`${T}/stuck`]: { owner: U.stuck, profile: 'home' }, [`${T}/other`]: { owner: U.other, profile: 'home' } };
const hasTools = haveCommands('mkfs.ext4', 'fsfreeze');

if (!canMount) console.warn(`single-reader integration suite skipped: ${skipReason}`);
else if (!hasTools) console.warn('single-reader integration suite skipped: mkfs.ext4 or fsfreeze missing (apt-get install e2fsprogs util-linux)');

type Lead = { on: boolean; handoffs: number; revocations: number; readWaits: number };

describe.skipIf(!canMount || !hasTools)('one reader at a time (fuse.singleReader): a blocked native answer holds up no other home', () => {
  let frozen = false;
  const s = ext4Suite({
    size: '64M',
    homes: HOMES,
    // Reads from the disk must reach the daemon: no passthrough (passthrough.test.ts).
    config: { fuse: { passthrough: false, singleReader: true } },
    beforeStop: () => {
      if (frozen) spawnSync('fsfreeze', ['-u', s.fs], { env: { PATH: SYSTEM_PATH } });
    },
  });

  /** a python script run as the owner of the home its first argument lies in */
  const py = async (script: string, timeoutMs: number, at: string, ...rest: string[]) => {
    const o = ownerAt(s.d, HOMES, at);
    const args = [at, ...rest];
    const file = join(s.tmp, `s${Math.random().toString(36).slice(2)}.py`);
    writeFileSync(file, script, { mode: 0o644 });
    const r = await runAsync('setpriv', [`--reuid=${o.uid}`, `--regid=${o.gid}`, '--clear-groups', 'python3', file, ...args], { env: { PATH: SYSTEM_PATH }, timeoutMs });
    if (r.code !== 0) throw new Error(`python failed (${r.code}): ${r.stderr}`);
    return r.stdout.trim();
  };
  const status = async () => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', s.d.socket, '--json', 'status'], { timeoutMs: 20_000 });
    if (r.code !== 0) throw new Error(`status: ${r.stderr}`);
    return JSON.parse(r.stdout) as { native: { singleReader?: Lead; fastPath: { writesDecided: number } } };
  };
  const exitOf = (p: ChildProcess) => new Promise<number | null>((resolve) => (p.exitCode !== null ? resolve(p.exitCode) : p.once('exit', (c) => resolve(c))));


  it('is on by default, and a request handed to JavaScript keeps the lead (no thread waits for JavaScript)', async () => {
    const before = (await status()).native.singleReader;
    expect(before?.on).toBe(true);
    // The first write open of each file is JavaScript's: the session posts it and reads on.
    await py(`import os,sys\nfor i in range(20): open(os.path.join(sys.argv[1], 'f%02d' % i), 'w').write('x' * i)`, 60_000, s.d.home(T, 'other'));
    const lead = (await status()).native.singleReader;
    expect(lead!.handoffs).toBe(before!.handoffs);
  });

  it('a read the page cache holds keeps the lead; one that must wait for the disk gives it up first', async () => {
    const other = s.d.home(T, 'other');
    await py(`import os,sys\nfor n in ('warm', 'cold'):\n  with open(os.path.join(sys.argv[1], n), 'wb') as f: f.write(os.urandom(1 << 20)); f.flush(); os.fsync(f.fileno())`, 60_000, other);
    const readIt = (name: string) => py(`import sys\nprint(len(open(sys.argv[1], 'rb').read()))`, 60_000, join(other, name));
    // Warm: read once (the daemon grants this caller its slots), then again with every page cached.
    expect(await readIt('warm')).toBe(String(1 << 20));
    const w0 = (await status()).native.singleReader!.readWaits;
    expect(await readIt('warm')).toBe(String(1 << 20));
    expect((await status()).native.singleReader!.readWaits).toBe(w0);
    // Cold: the backing file's pages dropped (it is clean), so a READ would wait for the disk.
    const drop = spawnSync('python3', ['-c', `import os,sys\nfd=os.open(sys.argv[1], os.O_RDONLY)\nos.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)`, join(s.d.backingOf(T, 'other'), 'cold')]);
    expect(drop.status).toBe(0);
    expect(await readIt('cold')).toBe(String(1 << 20));
    expect((await status()).native.singleReader!.readWaits).toBeGreaterThan(w0);
  });

  it('a native WRITE blocked in the backing (frozen) loses the lead; another home is served meanwhile; the write lands at the thaw', async () => {
    const stuck = s.d.home(T, 'stuck');
    const other = s.d.home(T, 'other');
    const readAll = `import os,sys\nn=0\nfor r in range(10):\n  for i in range(20):\n    fd=os.open(os.path.join(sys.argv[1], 'f%02d' % i), os.O_RDONLY); n+=len(os.read(fd, 100)); os.close(fd)\n    os.stat(os.path.join(sys.argv[1], 'f%02d' % i)); n+=1\nprint(n)`;
    const expected = String(10 * (190 + 20));
    expect(await py(readAll, 60_000, other)).toBe(expected);
    // A writer that has written before (the ledger has handed its file's size and byte credit
    // to the binding), then waits for a line before one more 4 KiB write.
    const file = join(s.tmp, 'writer.py');
    writeFileSync(
      file,
      `import os,sys\nfd=os.open(sys.argv[1], os.O_WRONLY|os.O_CREAT, 0o600)\nfor i in range(4): os.write(fd, b'x'*4096)\nprint('ready', flush=True)\nsys.stdin.readline()\nos.pwrite(fd, b'y'*4096, 16384)\nprint('done', flush=True)\nos.close(fd)\n`,
      { mode: 0o644 },
    );
    const writer = spawn('setpriv', [`--reuid=${U.stuck.uid}`, `--regid=${U.stuck.gid}`, '--clear-groups', 'python3', file, join(stuck, 'w')], {
      env: { PATH: SYSTEM_PATH },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    writer.stdout!.on('data', (b: Buffer) => (out += b.toString()));
    const writerExit = exitOf(writer);
    for (let i = 0; i < 600 && !out.includes('ready'); i++) await new Promise((r) => setTimeout(r, 50));
    expect(out).toContain('ready');
    const before = await status();

    expect(spawnSync('fsfreeze', ['-f', s.fs], { env: { PATH: SYSTEM_PATH } }).status).toBe(0);
    frozen = true;
    // The write is decided natively and its pwrite waits in the kernel (file_start_write) on
    // the thread that read it, until the thaw.
    writer.stdin!.write('go\n');
    await new Promise((r) => setTimeout(r, 300));
    expect(out).not.toContain('done');
    // 400 opens, reads and stats in the other home: all served while the write is held.
    expect(await py(readAll, 30_000, other)).toBe(expected);
    expect(out).not.toContain('done');
    const during = await status();
    expect(during.native.singleReader!.revocations).toBeGreaterThan(before.native.singleReader!.revocations);

    expect(spawnSync('fsfreeze', ['-u', s.fs], { env: { PATH: SYSTEM_PATH } }).status).toBe(0);
    frozen = false;
    expect(await writerExit).toBe(0);
    expect(out).toContain('done');
    // It was the binding's decision that waited (not JavaScript's, which hands the lead over first).
    expect((await status()).native.fastPath.writesDecided).toBeGreaterThan(before.native.fastPath.writesDecided);
    expect(await py(`import os,sys\nd=open(sys.argv[1],'rb').read()\nprint(len(d), d[16384:].count(b'y'))`, 60_000, join(stuck, 'w'))).toBe('20480 4096');
    // And the mount goes on serving both homes.
    expect(await py(readAll, 60_000, other)).toBe(expected);
  }, 120_000);
});
