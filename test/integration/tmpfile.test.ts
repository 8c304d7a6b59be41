import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, HOMESCTL, HOMESFS, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { serving, startSuccessor, type Successor } from '../helpers/takeover.js';
import { pyAs } from '../helpers/neighbour.js';
import { ownerRange } from '../helpers/owner-ids.js';

/**
 * O_TMPFILE (the kernel's FUSE_TMPFILE: native/src/session/proto.c,
 * ops_files.c; src/fs/file.ts createUnnamed): a file with no name, made
 * straight at its home's orphan, charged while open as any file's bytes, gone
 * at the last close; linkat(2) of it gives it its first name as a create does
 * (dir.ts nameUnnamed), and between homes EXDEV. Before, the kernel answered
 * EOPNOTSUPP.
 */

const OWNERS = ownerRange(import.meta.filename);
const U = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const V = { uid: OWNERS.from + 2, gid: OWNERS.from + 2 };
const W = { uid: OWNERS.from + 3, gid: OWNERS.from + 3 };
const ROOT_USER = { uid: 0, gid: 0 };

if (!canMount) console.warn(`tmpfile integration suite skipped: ${skipReason}`);

/** Python: linkfd(fd, dst), linkat(2) of a descriptor's file with AT_SYMLINK_FOLLOW (os.link calls link(2), which would link the /proc symlink itself). */
const LINKFD = `import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def linkfd(fd, dst):
    if libc.linkat(-100, ('/proc/self/fd/%d' % fd).encode(), -100, dst.encode(), 0x400) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), dst)
`;

/** An agent keeping an O_TMPFILE descriptor open: `open DIR`, `write TEXT`, `name PATH` (linkat, then close), `close`; one JSON line per command. */
const AGENT = `import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = None
for line in sys.stdin:
    cmd = line.split()
    try:
        if cmd[0] == 'open':
            fd = os.open(cmd[1], os.O_TMPFILE | os.O_RDWR, 0o600)
            print(json.dumps({'ok': True}), flush=True)
        elif cmd[0] == 'write':
            os.write(fd, cmd[1].encode())
            print(json.dumps({'ok': True, 'size': os.fstat(fd).st_size}), flush=True)
        elif cmd[0] == 'name':
            if libc.linkat(-100, ('/proc/self/fd/%d' % fd).encode(), -100, cmd[1].encode(), 0x400) != 0:
                raise OSError(ctypes.get_errno(), 'linkat')
            os.close(fd)
            print(json.dumps({'ok': True}), flush=True)
        elif cmd[0] == 'close':
            os.close(fd)
            print(json.dumps({'ok': True}), flush=True)
    except OSError as e:
        print(json.dumps({'ok': False, 'errno': e.errno}), flush=True)
`;

/** The agent as `who`, and a way to ask it. */
function startAgent(script: string, who: { uid: number; gid: number }): { agent: ChildProcess; ask: <V>(line: string) => Promise<V> } {
  const agent = spawn('setpriv', [`--reuid=${who.uid}`, `--regid=${who.gid}`, '--clear-groups', 'python3', script], { env: { PATH: SYSTEM_PATH }, stdio: ['pipe', 'pipe', 'inherit'] });
  const waiting: Array<(v: unknown) => void> = [];
  createInterface({ input: agent.stdout! }).on('line', (l) => waiting.shift()?.(JSON.parse(l)));
  const ask = <V>(line: string) => new Promise<V>((resolve) => (waiting.push(resolve as (v: unknown) => void), agent.stdin!.write(`${line}\n`)));
  return { agent, ask };
}

interface Home {
  tenant: string;
  key: string;
  bytes: number;
  inodes: number;
}

describe.skipIf(!canMount)('O_TMPFILE', () => {
  let d: RunningDaemon;
  let tmp = '';
  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-tmpfile-'));
    chmodSync(tmp, 0o755);
    d = await startDaemon({
      awaitLedgers: true,
      homes: { 'tf/a': { owner: U, profile: 'home' }, 'tf/b': { owner: W, profile: 'home' }, 'tf/s': { owner: V, profile: 'scratch' } },
      create: ['tf/a', 'tf/b', 'tf/s'],
      config: { owners: OWNERS },
    });
  }, 60_000);
  let successor: Successor | null = null;
  afterAll(async () => {
    if (successor && successor.proc.exitCode === null && successor.proc.signalCode === null) {
      successor.proc.kill('SIGTERM');
      await successor.exited;
    }
    await d?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  const home = async (key: string): Promise<Home> => {
    const st = (await d.status()) as unknown as { homes: Home[] };
    return st.homes.find((h) => h.tenant === 'tf' && h.key === key)!;
  };
  const orphans = (key: string) => readdirSync(d.backingOf('tf', key), { encoding: 'buffer' }).filter((n) => n[0] === 0xff);
  const noOrphans = async (key: string) => {
    // The RELEASE reaches the daemon after close(2) returned.
    for (let i = 0; i < 100 && orphans(key).length > 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(orphans(key)).toEqual([]);
  };
  const drift = async (key: string) => JSON.parse((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'rescan', `tf/${key}`])).stdout) as { drift: { bytes: number; inodes: number } };

  it('a file with no name: listed nowhere, its bytes charged while it is open, gone at the close', async () => {
    const before = await home('a');
    // The script waits (stdin) while the file is open, so the test can read the ledger then.
    const script = `import json, os, sys
h = sys.argv[1]
os.mkdir(h + '/d')
fd = os.open(h + '/d', os.O_TMPFILE | os.O_RDWR, 0o600)
os.write(fd, b'x' * 5000)
st = os.fstat(fd)
os.lseek(fd, 0, 0)
back = os.read(fd, 10)
print(json.dumps([st.st_nlink, st.st_size, oct(st.st_mode & 0o777), back.decode(), os.listdir(h + '/d'), sorted(os.listdir(h))]), flush=True)
with open(sys.argv[2], 'w') as f: f.write('open')
while not os.path.exists(sys.argv[3]): pass
os.close(fd)
`;
    const marks = mkdtempSync(join(tmp, 'marks-'));
    chmodSync(marks, 0o1777);
    const opened = join(marks, 'opened');
    const go = join(marks, 'go');
    const run = pyAs(tmp, U, script, d.home('tf', 'a'), opened, go);
    for (let i = 0; i < 200 && !(await import('node:fs')).existsSync(opened); i++) await new Promise((r) => setTimeout(r, 25));
    const during = await home('a');
    // One orphan at the home's root holds it; the ledger counts its bytes, and no name (the directory's own inode aside).
    expect(orphans('a')).toHaveLength(1);
    expect({ bytes: during.bytes - before.bytes, inodes: during.inodes - before.inodes }).toEqual({ bytes: 5000, inodes: 1 });
    (await import('node:fs')).writeFileSync(go, '');
    expect(JSON.parse(await run)).toEqual([0, 5000, '0o600', 'xxxxxxxxxx', [], ['d']]);
    await noOrphans('a');
    const after = await home('a');
    expect({ bytes: after.bytes - before.bytes, inodes: after.inodes - before.inodes }).toEqual({ bytes: 0, inodes: 1 });
    expect((await drift('a')).drift).toEqual({ bytes: 0, inodes: 0 });
  }, 60_000);

  it('linkat gives it its first name, as a create; a second linkat is a hard link; into another home EXDEV', async () => {
    // Between homes, as root (no owner may write another's home): EXDEV, nothing made on either side.
    const cross = `import errno, os, sys
${LINKFD}fd = os.open(sys.argv[1], os.O_TMPFILE | os.O_RDWR, 0o600)
try:
    linkfd(fd, sys.argv[2] + '/stolen')
    print('linked')
except OSError as e:
    print(errno.errorcode[e.errno])
os.close(fd)
`;
    expect(await pyAs(tmp, ROOT_USER, cross, d.home('tf', 'a'), d.home('tf', 'b'))).toBe('EXDEV');
    await noOrphans('a');
    const before = await home('a');
    const script = `import errno, json, os, sys
${LINKFD}h = sys.argv[1]
fd = os.open(h, os.O_TMPFILE | os.O_RDWR, 0o600)
os.write(fd, b'y' * 3000)
linkfd(fd, h + '/named')
n1 = os.fstat(fd).st_nlink
linkfd(fd, h + '/again')
n2 = os.fstat(fd).st_nlink
os.close(fd)
print(json.dumps([n1, n2, open(h + '/named').read() == 'y' * 3000, os.stat(h + '/again').st_ino == os.stat(h + '/named').st_ino, sorted(os.listdir(h))]))
`;
    const out = JSON.parse(await pyAs(tmp, U, script, d.home('tf', 'a'))) as unknown[];
    expect(out).toEqual([1, 2, true, true, ['again', 'd', 'named']]);
    await noOrphans('a');
    const after = await home('a');
    // Two names (each an inode), its bytes once.
    expect({ bytes: after.bytes - before.bytes, inodes: after.inodes - before.inodes }).toEqual({ bytes: 3000, inodes: 2 });
    expect((await drift('a')).drift).toEqual({ bytes: 0, inodes: 0 });
    expect(readdirSync(d.backingOf('tf', 'b'))).toEqual([]);
  }, 60_000);

  it("in a scratch home it is scratch's file: text only, 0600", async () => {
    const script = `import errno, json, os, sys
${LINKFD}h = sys.argv[1]
fd = os.open(h, os.O_TMPFILE | os.O_RDWR, 0o644)
os.write(fd, 'héllo\\n'.encode())
try:
    os.write(fd, b'\\xff\\xfe')
    bad = 'written'
except OSError as e:
    bad = errno.errorcode[e.errno]
mode = oct(os.fstat(fd).st_mode & 0o777)
linkfd(fd, h + '/note')
os.close(fd)
print(json.dumps([bad, mode, open(h + '/note', encoding='utf-8').read()]))
`;
    expect(JSON.parse(await pyAs(tmp, V, script, d.home('tf', 's')))).toEqual(['EILSEQ', '0o600', 'héllo\n']);
    await noOrphans('s');
    expect((await drift('s')).drift).toEqual({ bytes: 0, inodes: 0 });
  }, 60_000);

  it("Python's tempfile.TemporaryFile takes O_TMPFILE here (before, it fell back to a named file it unlinked)", async () => {
    const before = await home('a');
    const script = `import json, os, sys, tempfile
listed = sorted(os.listdir(sys.argv[1]))
with tempfile.TemporaryFile(dir=sys.argv[1]) as f:
    f.write(b'z' * 4096)
    f.flush()
    f.seek(0)
    back = f.read()
    # O_TMPFILE's file has no name: /proc shows the directory itself (a fallback shows its tmpXXXX name)
    target = os.readlink('/proc/self/fd/%d' % f.fileno())
    print(json.dumps([len(back), os.fstat(f.fileno()).st_nlink, target.endswith('/' + os.path.basename(sys.argv[1]) + '// (deleted)'), sorted(os.listdir(sys.argv[1])) == listed]))
`;
    expect(JSON.parse(await pyAs(tmp, U, script, d.home('tf', 'a')))).toEqual([4096, 0, true, true]);
    await noOrphans('a');
    const after = await home('a');
    expect({ bytes: after.bytes - before.bytes, inodes: after.inodes - before.inodes }).toEqual({ bytes: 0, inodes: 0 });
  }, 60_000);

  it('open across a live upgrade: written before and after, then named; nothing lost, no orphan, the ledger exact', async () => {
    const before = await home('a');
    // An agent that keeps its O_TMPFILE descriptor open while the daemon is replaced under it.
    const agentPy = join(tmp, 'agent.py');
    writeFileSync(agentPy, AGENT, { mode: 0o644 });
    const { agent, ask } = startAgent(agentPy, U);
    try {
      expect(await ask(`open ${d.home('tf', 'a')}`)).toEqual({ ok: true });
      expect(await ask('write before-')).toEqual({ ok: true, size: 7 });
      successor = startSuccessor(HOMESFS, join(d.dir, 'config.json'), true);
      expect(await serving(successor)).toBe(true);
      expect(await ask('write after')).toEqual({ ok: true, size: 12 });
      expect(await ask(`name ${d.home('tf', 'a')}/upgraded`)).toEqual({ ok: true });
    } finally {
      agent.kill('SIGKILL');
    }
    expect(readFileSync(join(d.backingOf('tf', 'a'), 'upgraded'), 'utf8')).toBe('before-after');
    await noOrphans('a');
    const after = await home('a');
    expect({ bytes: after.bytes - before.bytes, inodes: after.inodes - before.inodes }).toEqual({ bytes: 12, inodes: 1 });
    expect((await drift('a')).drift).toEqual({ bytes: 0, inodes: 0 });
  }, 120_000);
});

describe.skipIf(!canMount)('O_TMPFILE across a crash', () => {
  let d: RunningDaemon;
  let tmp = '';
  let resumed: Successor | null = null;
  let holderPid: number | null = null;
  const X = { uid: OWNERS.from + 4, gid: OWNERS.from + 4 };
  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-tmpfile-crash-'));
    chmodSync(tmp, 0o755);
    d = await startDaemon({ awaitLedgers: true, homes: { 'tc/a': { owner: X, profile: 'home' } }, create: ['tc/a'], config: { owners: OWNERS, crashSurvival: true } });
  }, 60_000);
  afterAll(async () => {
    if (resumed && resumed.proc.exitCode === null && resumed.proc.signalCode === null) {
      resumed.proc.kill('SIGTERM');
      await resumed.exited;
    }
    if (holderPid !== null) {
      try {
        process.kill(holderPid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    await d?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  it('written before and after a kill -9, then named: nothing lost, no orphan, the ledger exact', async () => {
    holderPid = ((await d.status()) as unknown as { holder: { pid: number | null } }).holder.pid;
    expect(holderPid).not.toBeNull();
    const agentPy = join(tmp, 'agent.py');
    writeFileSync(agentPy, AGENT, { mode: 0o644 });
    const { agent, ask } = startAgent(agentPy, X);
    try {
      expect(await ask(`open ${d.home('tc', 'a')}`)).toEqual({ ok: true });
      expect(await ask('write before-')).toEqual({ ok: true, size: 7 });
      d.proc.kill('SIGKILL');
      await d.exited;
      resumed = startSuccessor(HOMESFS, join(d.dir, 'config.json'), false);
      expect(await serving(resumed)).toBe(true);
      expect(await ask('write after')).toEqual({ ok: true, size: 12 });
      expect(await ask(`name ${d.home('tc', 'a')}/named`)).toEqual({ ok: true });
    } finally {
      agent.kill('SIGKILL');
    }
    const orphans = () => readdirSync(d.backingOf('tc', 'a'), { encoding: 'buffer' }).filter((n) => n[0] === 0xff);
    for (let i = 0; i < 100 && orphans().length > 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(orphans()).toEqual([]);
    expect(readdirSync(d.backingOf('tc', 'a'))).toEqual(['named']);
    expect(readFileSync(join(d.backingOf('tc', 'a'), 'named'), 'utf8')).toBe('before-after');
    const r = JSON.parse((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'rescan', 'tc/a'])).stdout) as { drift: { bytes: number; inodes: number } };
    expect(r.drift).toEqual({ bytes: 0, inodes: 0 });
  }, 120_000);
});
