import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { ext4Suite, haveCommands } from '../helpers/backing.js';
import { canMount, HOMESCTL, HOMESFS, runAsync, skipReason, SYSTEM_PATH } from '../helpers/daemon.js';
import { pyAs } from '../helpers/neighbour.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { serving, startSuccessor, type Successor } from '../helpers/takeover.js';

/**
 * After a crash, one home's descriptors must never reach another home's
 * files. An owner holds files it unlinked while open (the session keeps them
 * under hidden names); the daemon is killed and a plain serve resumes the
 * session the holder kept. On a journaled ext4 (the backing filesystem hands
 * freed inode numbers out again at once) the owner of a home in another
 * tenant then creates files. Whatever the attacker's old descriptors do
 * (read, write, close), they reach only the attacker's own files: the
 * victim's files keep their bytes and their names.
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

describe.skipIf(!canMount || !hasTools)("a crash never turns one home's descriptors into another home's files", () => {
  let next: Successor | null = null;
  let agent: ChildProcess | null = null;
  let holderPid: number | null = null;
  const s = ext4Suite({
    size: '64M',
    homes: HOMES,
    config: { crashSurvival: true },
    beforeStop: () => {
      agent?.kill('SIGKILL');
      if (next && next.proc.exitCode === null) next.proc.kill('SIGKILL');
      if (holderPid !== null) {
        try {
          process.kill(holderPid, 'SIGKILL');
        } catch {
          /* gone */
        }
      }
    },
  });

  it("inode numbers the backing filesystem hands out again after the crash: the attacker's old descriptors read, write and unlink nothing of the victim's", async () => {
    const d = s.d;
    const status = JSON.parse((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'status'])).stdout) as { holder: { pid: number | null } };
    holderPid = status.holder.pid;
    expect(holderPid).not.toBeNull();

    const script = join(s.tmp, 'attacker.py');
    writeFileSync(script, AGENT, { mode: 0o644 });
    agent = spawn('setpriv', [`--reuid=${ATTACKER.uid}`, `--regid=${ATTACKER.gid}`, '--clear-groups', 'python3', script], { env: { PATH: SYSTEM_PATH }, stdio: ['pipe', 'pipe', 'inherit'] });
    const answers = createInterface({ input: agent.stdout! });
    const waiting: Array<(v: unknown) => void> = [];
    answers.on('line', (l) => waiting.shift()?.(JSON.parse(l)));
    const ask = <T>(line: string) => new Promise<T>((resolve) => (waiting.push(resolve as (v: unknown) => void), agent!.stdin!.write(`${line}\n`)));

    const { inos } = await ask<{ inos: number[] }>(`trap ${d.home('cra', 'att')} ${TRAPS}`);
    expect(inos.length).toBe(TRAPS);

    d.proc.kill('SIGKILL');
    await d.exited;
    next = startSuccessor(HOMESFS, join(d.dir, 'config.json'), false);
    expect(await serving(next)).toBe(true);

    // The victim, in another tenant, makes files: on ext4 the freed numbers come back first.
    await pyAs(s.tmp, VICTIM, `import os, sys\nfor i in range(${VICTIMS}):\n  open(os.path.join(sys.argv[1], 'v%d' % i), 'w').write('VICTIM-SECRET-%d' % i)\n`, d.home('crv', 'vic'));
    const vic = d.backingOf('crv', 'vic');
    const victimInos = new Map(readdirSync(vic).filter((n) => /^v\d+$/.test(n)).map((n) => [statSync(join(vic, n)).ino, n]));
    const reused = inos.filter((i) => victimInos.has(i));
    console.log(`trap inodes ${inos.join(',')}; reused by the victim's files: ${reused.map((i) => victimInos.get(i)).join(',') || 'none'}`);

    const used = await ask<Array<{ read: string; write: string; close: string }>>('use');
    console.log(`the attacker's descriptors after the crash: ${JSON.stringify(used)}`);
    for (const [i, u] of used.entries()) {
      expect(u.read).not.toMatch(/VICTIM/);
      // Its own bytes, or an error: never another file's.
      if (!u.read.startsWith('errno')) expect(u.read).toMatch(new RegExp(`^(ATTACKER-${i}|PWNED)`));
    }
    for (let i = 0; i < VICTIMS; i++) {
      const p = join(vic, `v${i}`);
      expect(existsSync(p), `v${i} still there`).toBe(true);
      expect(readFileSync(p, 'utf8')).toBe(`VICTIM-SECRET-${i}`);
    }
    // The test met what it is about: numbers of the attacker's dead inodes given to the victim's files.
    expect(reused.length).toBeGreaterThan(0);

    next.proc.kill('SIGTERM');
    expect(await next.exited).toBe(0);
  }, 180_000);
});
