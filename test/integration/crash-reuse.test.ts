import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { ext4Suite, haveCommands } from '../helpers/backing.js';
import { canMount, HOMESCTL, HOMESFS, runAsync, skipReason, SYSTEM_PATH } from '../helpers/daemon.js';
import { pyAs } from '../helpers/neighbour.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { serving, startSuccessor, type Successor } from '../helpers/takeover.js';

/**
 * Files unlinked while open, across a crash. An owner holds files it
 * unlinked while open (the session keeps them under hidden names, their
 * inodes by orphans at the home's root: fs/hidden.ts); the daemon is killed
 * and a plain serve resumes the session the holder kept; on a journaled ext4
 * (which hands a freed inode number out again at once) the owner of a home
 * in another tenant then creates files.
 *
 * - The orphans keep the inodes: the owner's descriptors go on reading and
 *   writing their own bytes, no number is given to another file, and the
 *   orphans go with the last close (the ledger equal to the disk).
 * - Where an orphan is gone anyway (removed behind the daemon, or a hidden
 *   file an older build left), the inode dies with the crash and its number
 *   goes to the victim's new file: the attacker's old descriptors still reach
 *   nothing of the victim's (they read, write and unlink nothing of it).
 */

const OWNERS = ownerRange(import.meta.filename);
const ATTACKER = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const VICTIM = { uid: OWNERS.from + 2, gid: OWNERS.from + 2 };
const HOMES = { 'cra/att': { owner: ATTACKER, profile: 'home' }, 'crv/vic': { owner: VICTIM, profile: 'home' } };
const TRAPS = 6;
const VICTIMS = 40;
const hasTools = haveCommands('mkfs.ext4');

if (!canMount) console.warn(`crash-reuse integration suite skipped: ${skipReason}`);
else if (!hasTools) console.warn('crash-reuse integration suite skipped: mkfs.ext4 missing (apt-get install e2fsprogs)');

/** `trap DIR N` creates, opens and unlinks N files and keeps their descriptors; `use` reads, writes and closes each. */
const AGENT = `import json, os, sys
fds = []
for line in sys.stdin:
    cmd = line.split()
    if cmd[0] == 'trap':
        inos = []
        for i in range(int(cmd[2])):
            p = os.path.join(cmd[1], 'trap%d' % i)
            fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
            os.write(fd, b'ATTACKER-%d' % i)
            os.unlink(p)
            fds.append(fd)
            inos.append(os.fstat(fd).st_ino)
        print(json.dumps({'inos': inos}), flush=True)
    elif cmd[0] == 'use':
        out = []
        for fd in fds:
            r = {}
            try:
                r['read'] = os.pread(fd, 64, 0).decode(errors='replace')
            except OSError as e:
                r['read'] = 'errno %d' % e.errno
            try:
                os.pwrite(fd, b'PWNED', 0)
                r['write'] = 'ok'
            except OSError as e:
                r['write'] = 'errno %d' % e.errno
            try:
                os.close(fd)
                r['close'] = 'ok'
            except OSError as e:
                r['close'] = 'errno %d' % e.errno
            out.append(r)
        fds = []
        print(json.dumps(out), flush=True)
`;

/** What a test of this file needs: the suite, the attacker's agent, the resumed daemon. */
function crashSuite(title: string) {
  const st: { next: Successor | null; agent: ChildProcess | null; holderPid: number | null } = { next: null, agent: null, holderPid: null };
  const s = ext4Suite({
    size: '64M',
    homes: HOMES,
    config: { crashSurvival: true },
    beforeStop: () => {
      st.agent?.kill('SIGKILL');
      if (st.next && st.next.proc.exitCode === null) st.next.proc.kill('SIGKILL');
      if (st.holderPid !== null) {
        try {
          process.kill(st.holderPid, 'SIGKILL');
        } catch {
          /* gone */
        }
      }
    },
  });
  /** Lays the traps, kills the daemon (`between` runs before the resume) and resumes; then the victim makes its files. */
  const crash = async (between: () => void) => {
    const d = s.d;
    const status = JSON.parse((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'status'])).stdout) as { holder: { pid: number | null } };
    st.holderPid = status.holder.pid;
    expect(st.holderPid).not.toBeNull();
    const script = join(s.tmp, 'attacker.py');
    writeFileSync(script, AGENT, { mode: 0o644 });
    const agent = spawn('setpriv', [`--reuid=${ATTACKER.uid}`, `--regid=${ATTACKER.gid}`, '--clear-groups', 'python3', script], { env: { PATH: SYSTEM_PATH }, stdio: ['pipe', 'pipe', 'inherit'] });
    st.agent = agent;
    const waiting: Array<(v: unknown) => void> = [];
    createInterface({ input: agent.stdout! }).on('line', (l) => waiting.shift()?.(JSON.parse(l)));
    const ask = <T>(line: string) => new Promise<T>((resolve) => (waiting.push(resolve as (v: unknown) => void), agent.stdin!.write(`${line}\n`)));
    const { inos } = await ask<{ inos: number[] }>(`trap ${d.home('cra', 'att')} ${TRAPS}`);
    expect(inos.length).toBe(TRAPS);
    d.proc.kill('SIGKILL');
    await d.exited;
    between();
    st.next = startSuccessor(HOMESFS, join(d.dir, 'config.json'), false);
    expect(await serving(st.next)).toBe(true);
    await pyAs(s.tmp, VICTIM, `import os, sys\nfor i in range(${VICTIMS}):\n  open(os.path.join(sys.argv[1], 'v%d' % i), 'w').write('VICTIM-SECRET-%d' % i)\n`, d.home('crv', 'vic'));
    const vic = d.backingOf('crv', 'vic');
    const victimInos = new Map(readdirSync(vic).filter((n) => /^v\d+$/.test(n)).map((n) => [statSync(join(vic, n)).ino, n]));
    const reused = inos.filter((i) => victimInos.has(i));
    console.log(`${title}: trap inodes ${inos.join(',')}; reused by the victim's files: ${reused.map((i) => victimInos.get(i)).join(',') || 'none'}`);
    const used = await ask<Array<{ read: string; write: string; close: string }>>('use');
    console.log(`${title}: the attacker's descriptors after the crash: ${JSON.stringify(used)}`);
    for (const [i, u] of used.entries()) expect(u.read, `trap ${i}`).not.toMatch(/VICTIM/);
    for (let i = 0; i < VICTIMS; i++) {
      const p = join(vic, `v${i}`);
      expect(existsSync(p), `v${i} still there`).toBe(true);
      expect(readFileSync(p, 'utf8')).toBe(`VICTIM-SECRET-${i}`);
    }
    return { reused, used, d };
  };
  const done = async () => {
    st.next!.proc.kill('SIGTERM');
    expect(await st.next!.exited).toBe(0);
  };
  return { s, crash, done };
}

/** The orphans of the attacker's home: raw names at its backing root (not UTF-8: fs/hidden.ts). */
function orphansOf(dir: string): Buffer[] {
  return readdirSync(dir, { encoding: 'buffer' })
    .filter((n) => n[0] === 0xff)
    .map((n) => Buffer.concat([Buffer.from(dir + '/'), n]));
}

describe.skipIf(!canMount || !hasTools)('files unlinked while open survive a crash of the daemon', () => {
  const { s, crash, done } = crashSuite('orphans kept');
  it("the owner's descriptors go on with their own bytes; no number goes to another file; the orphans go at the close", async () => {
    const { reused, used, d } = await crash(() => expect(orphansOf(s.d.backingOf('cra', 'att')).length).toBe(TRAPS));
    expect(reused).toEqual([]);
    // Read before the write: each its own bytes; the write and the close went through.
    expect(used).toEqual(Array.from({ length: TRAPS }, (_, i) => ({ read: `ATTACKER-${i}`, write: 'ok', close: 'ok' })));
    // The last close removed the orphans; the ledger is the disk.
    for (let i = 0; i < 100 && orphansOf(d.backingOf('cra', 'att')).length > 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(orphansOf(d.backingOf('cra', 'att'))).toEqual([]);
    const rescan = JSON.parse((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'rescan', 'cra/att'])).stdout) as { drift: { bytes: number; inodes: number } };
    expect(rescan.drift).toEqual({ bytes: 0, inodes: 0 });
    await done();
  }, 180_000);
});

describe.skipIf(!canMount || !hasTools)("a crash never turns one home's descriptors into another home's files", () => {
  const { s, crash, done } = crashSuite('orphans gone');
  it("inode numbers the backing filesystem hands out again after the crash: the attacker's old descriptors read, write and unlink nothing of the victim's", async () => {
    // The orphans removed behind the daemon: the inodes die with the dead daemon's descriptors.
    const { reused, used } = await crash(() => {
      const o = orphansOf(s.d.backingOf('cra', 'att'));
      expect(o.length).toBe(TRAPS);
      for (const p of o) unlinkSync(p);
    });
    // Their own bytes are gone with them: an error, never another file's.
    for (const u of used) expect(u.read).toMatch(/^errno /);
    // The test met what it is about: numbers of the attacker's dead inodes given to the victim's files.
    expect(reused.length).toBeGreaterThan(0);
    await done();
  }, 180_000);
});
