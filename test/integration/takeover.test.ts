import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, copyDaemonTree, HOMESCTL, HOMESFS, runAsync, skipReason, startDaemon, SYSTEM_PATH, type RunningDaemon } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { serving, startSuccessor, type Successor } from '../helpers/takeover.js';

/**
 * Live upgrade: `homesfs serve --takeover` takes the running daemon's session
 * over while agents work in a home, again and again. Every agent is a real
 * process running as the home's owner and counts its own errors and its
 * longest wait; the old daemon must exit 0 without unmounting, and the next
 * one must serve what the kernel already holds (open files, an open
 * directory, a working directory, the node IDs).
 */

const OWNERS = ownerRange(import.meta.filename);
const OWNER = { uid: OWNERS.from + 1, gid: OWNERS.from + 1 };
const T = 'tko';
const HOME = `${T}/work`;
const TAKEOVERS = 10;
/** then the daemon is killed with SIGKILL this many times, and a plain `homesfs serve` resumes the session each time */
const CRASHES = 3;
/** the other build's version (a copy of this tree whose version differs: an upgrade and back) */
const OTHER_VERSION = 'upgrade-test';

if (!canMount) console.warn(`takeover integration suite skipped: ${skipReason}`);

/** An agent: a python script run as the home's owner until the stop file appears; prints a JSON summary. */
function agent(tmp: string, name: string, body: string, home: string): { done: Promise<Record<string, number>> } {
  const file = join(tmp, `${name}.py`);
  writeFileSync(
    file,
    `import os, sys, time, json, errno\nhome, stop = sys.argv[1], sys.argv[2]\nerrors = 0\nlongest = 0.0\nrounds = 0\nlast_err = ''\n` +
      `def timed(f):\n  global errors, longest, rounds, last_err\n  t = time.monotonic()\n  try:\n    f()\n  except OSError as e:\n    errors += 1\n    last_err = str(e)\n  longest = max(longest, time.monotonic() - t)\n  rounds += 1\n` +
      body +
      `\nprint(json.dumps({'errors': errors, 'longestMs': round(longest * 1000, 1), 'rounds': rounds, 'lastError': last_err}))\n`,
    { mode: 0o644 },
  );
  const done = runAsync('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'python3', file, home, join(tmp, 'stop')], {
    env: { PATH: SYSTEM_PATH },
    timeoutMs: 300_000,
  }).then((r) => {
    if (r.code !== 0) throw new Error(`agent ${name} failed: ${r.stderr}`);
    return JSON.parse(r.stdout.trim().split('\n').pop()!) as Record<string, number>;
  });
  return { done };
}

describe.skipIf(!canMount)('live upgrade: the session handed to the next daemon while agents work', () => {
  let d: RunningDaemon;
  let tmp = '';
  let last: Successor | null = null;
  let holderPid: number | null = null;

  beforeAll(async () => {
    tmp = mkdtempSync(join(tmpdir(), 'homesfs-takeover-'));
    chmodSync(tmp, 0o777);
    // The other build: this tree copied, its version changed.
    copyDaemonTree(join(tmp, 'other'));
    const v = join(tmp, 'other', 'dist', 'version.js');
    writeFileSync(v, readFileSync(v, 'utf8').replace(/export const VERSION = [^;]+;/, `export const VERSION = '${OTHER_VERSION}';`));
    d = await startDaemon({ awaitLedgers: true, homes: { [HOME]: { owner: OWNER, profile: 'home' } }, create: [HOME], config: { owners: OWNERS, crashSurvival: true } });
  }, 60_000);

  afterAll(async () => {
    // Agents of a test that failed midway end too (they poll for this file), before their home goes.
    if (tmp) {
      writeFileSync(join(tmp, 'stop'), '');
      await new Promise((r) => setTimeout(r, 4000));
    }
    if (last && last.proc.exitCode === null && last.proc.signalCode === null) {
      last.proc.kill('SIGTERM');
      await Promise.race([last.exited, new Promise((r) => setTimeout(r, 15_000))]);
    }
    // A test that failed after a kill leaves the session with its holder: it goes too.
    if (holderPid !== null) {
      try {
        process.kill(holderPid, 'SIGKILL');
      } catch {
        /* gone already */
      }
    }
    await d?.stop();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  /** this daemon's configuration with `change` applied, in a file of its own */
  const configWith = (name: string, change: (c: Record<string, unknown>) => void): string => {
    const c = JSON.parse(readFileSync(join(d.dir, 'config.json'), 'utf8')) as Record<string, unknown>;
    change(c);
    const f = join(tmp, `${name}.json`);
    writeFileSync(f, JSON.stringify(c));
    return f;
  };
  const generation = async () =>
    (JSON.parse((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'status'])).stdout) as { session: { generation: number } }).session.generation;

  it('a successor for another mount is refused; one that fails after it got the session leaves the daemon serving; with nothing to take over, exit 12', async () => {
    const home = d.home(T, 'work');
    const other = configWith('other-mount', (c) => (c.mount = join(tmp, 'elsewhere')));
    let s = startSuccessor(HOMESFS, other);
    expect(await s.exited).toBe(12);
    expect(s.stderr()).toMatch(/refused the takeover: mount .* is not this daemon's/);
    // One the serving daemon hands its session to, which then refuses its own configuration's owners
    // (uid 1 is a host account): it tells the serving daemon, which takes its session back.
    const badOwners = configWith('bad-owners', (c) => ((c.homes as Record<string, unknown>)['tko/evil'] = { owner: { uid: 1, gid: 1 } }));
    s = startSuccessor(HOMESFS, badOwners);
    expect(await s.exited).toBe(9);
    expect(s.logs.some((l) => l.msg === 'session received')).toBe(true);
    await d.waitForLog((l) => l.msg === 'handover abandoned: serving on');
    expect(d.proc.exitCode).toBeNull();
    expect(await generation()).toBe(1);
    // The mount answers as before, and a control command too.
    const r = await runAsync('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'sh', '-c', `echo still > ${home}/after && cat ${home}/after`]);
    expect(r.stdout).toBe('still\n');
    // Nothing serves this one: exit 12 at once, nothing mounted.
    const none = configWith('nobody', (c) => (c.socket = join(tmp, 'nobody', 'admin.sock')));
    s = startSuccessor(HOMESFS, none);
    expect(await s.exited).toBe(12);
    expect(s.stderr()).toContain(`no daemon serves ${d.mount} (no socket at ${join(tmp, 'nobody', 'takeover.sock')}): start it with \`homesfs serve\``);
  }, 60_000);

  it(`${TAKEOVERS} takeovers in a row between two builds, then ${CRASHES} kills with SIGKILL, each resumed: no agent sees an error, every fsynced byte is there, the ledger equals the disk`, async () => {
    const status = async () => JSON.parse((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'status'])).stdout) as { version: string; pid: number; session: { generation: number; startMode: string; lastHandoverPauseMs: number | null }; holder: { pid: number | null; registered: boolean }; native: { handles: { epoch: number; resent: number; refused: number; reopened: number } } };
    const first = await status();
    expect(first.holder.registered).toBe(true);
    holderPid = first.holder.pid;
    expect(first.session).toEqual({ generation: 1, startMode: 'fresh', lastHandoverPauseMs: null });
    expect(first.version).not.toBe(OTHER_VERSION);
    const home = d.home(T, 'work');
    const config = join(d.dir, 'config.json');
    const big = join(d.backingOf(T, 'work'), 'big');
    writeFileSync(big, Buffer.alloc(8 << 20, 7));
    await runAsync('chown', [`${OWNER.uid}:${OWNER.gid}`, big]);
    await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'rescan', HOME]);

    const agents = {
      // A file kept open, appended and fsynced every 10 ms.
      writer: agent(tmp, 'writer', `fd = os.open(os.path.join(home, 'log'), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)\nn = 0\ndef w():\n  global n\n  os.write(fd, b'line %08d\\n' % n)\n  os.fsync(fd)\n  n += 1\nwhile not os.path.exists(stop):\n  timed(w)\n  time.sleep(0.01)\nos.close(fd)\nwith open(os.path.join(home, 'written'), 'w') as f: f.write(str(n))`, home),
      // A large file streamed over and over through one descriptor.
      reader: agent(tmp, 'reader', `fd = os.open(os.path.join(home, 'big'), os.O_RDONLY)\ndef r():\n  os.lseek(fd, 0, 0)\n  got = 0\n  while True:\n    b = os.read(fd, 1 << 16)\n    if not b: break\n    if b != bytes([7]) * len(b): raise OSError(errno.EIO, 'bad bytes')\n    got += len(b)\n  if got != 8 << 20: raise OSError(errno.EIO, 'short read %d' % got)\nwhile not os.path.exists(stop):\n  timed(r)`, home),
      // A working directory in the home, listed and statted relative to it.
      shell: agent(tmp, 'shell', `os.chdir(home)\ndef s():\n  os.listdir('.')\n  os.stat('big')\n  os.getcwd()\nwhile not os.path.exists(stop):\n  timed(s)\n  time.sleep(0.005)`, home),
      // An open directory descriptor, listed again and again.
      dirfd: agent(tmp, 'dirfd', `dfd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)\ndef l():\n  if 'big' not in os.listdir(dfd): raise OSError(errno.ENOENT, 'big missing')\nwhile not os.path.exists(stop):\n  timed(l)\n  time.sleep(0.005)`, home),
      // Files made and removed: creates, renames and unlinks across the handovers.
      // `tail -f` of the writer's file from its first byte: at the end it must have shown every byte.
      tail: agent(tmp, 'tail', `import subprocess\nlog = os.path.join(home, 'log')\nwhile not os.path.exists(log): time.sleep(0.01)\nseen = stop + '.tail'\nout = open(seen, 'wb')\np = subprocess.Popen(['tail', '-c', '+1', '-f', log], stdout=out)\ndef alive():\n  if p.poll() is not None: raise OSError(errno.EIO, 'tail exited %d' % p.returncode)\nwhile not os.path.exists(stop):\n  timed(alive)\n  time.sleep(0.05)\ntime.sleep(3)\np.terminate(); p.wait(); out.close()\ngot, want = open(seen, 'rb').read(), open(log, 'rb').read()\nif got != want:\n  errors += 1\n  last_err = 'tail showed %d bytes of %d' % (len(got), len(want))`, home),
      // git status in a repository in the home, again and again.
      git: agent(tmp, 'git', `import subprocess\nrepo = os.path.join(home, 'repo')\nenv = {'HOME': home, 'PATH': '/usr/bin:/bin', 'GIT_CONFIG_NOSYSTEM': '1'}\nsubprocess.run(['git', 'init', '-q', repo], check=True, env=env)\nfor i in range(20): open(os.path.join(repo, 'f%d' % i), 'w').write('x' * i)\nsubprocess.run(['git', '-c', 'user.email=a@b', '-c', 'user.name=a', 'add', '.'], cwd=repo, check=True, env=env)\nsubprocess.run(['git', '-c', 'user.email=a@b', '-c', 'user.name=a', 'commit', '-q', '-m', 'x'], cwd=repo, check=True, env=env)\ndef g():\n  r = subprocess.run(['git', 'status', '--porcelain'], cwd=repo, env=env, capture_output=True)\n  if r.returncode != 0 or r.stdout != b'': raise OSError(errno.EIO, 'git status: %d %r %r' % (r.returncode, r.stdout[:80], r.stderr[:200]))\nwhile not os.path.exists(stop):\n  timed(g)\n  time.sleep(0.02)`, home),
      // It stops before the crashes: a create, rename or unlink in flight at a kill may be answered EIO (its effect cannot be known).
      churn: agent(tmp, 'churn', `i = 0\ndef c():\n  global i\n  p = os.path.join(home, 'c%d' % (i % 7))\n  with open(p, 'w') as f: f.write('x' * 100)\n  os.rename(p, p + '.r')\n  os.unlink(p + '.r')\n  i += 1\nwhile not os.path.exists(stop) and not os.path.exists(stop + '.churn'):\n  timed(c)`, home),
    };
    // The agents are at work before the first handover.
    await new Promise((r) => setTimeout(r, 500));

    let server: { exited: Promise<number | null> } = d;
    const pauses: number[] = [];
    for (let i = 0; i < TAKEOVERS; i++) {
      const bin = i % 2 === 0 ? join(tmp, 'other', 'dist', 'cli', 'homesfs.js') : HOMESFS;
      const s = startSuccessor(bin, config);
      expect(await serving(s)).toBe(true);
      expect(await server.exited).toBe(0);
      const t = s.logs.find((l) => l.msg === 'session taken over')!;
      expect(t.generation).toBe(i + 2);
      pauses.push(t.pauseMs as number);
      console.log(`takeover ${i + 1}: pause ${String(t.pauseMs)} ms, successor's steps ${JSON.stringify(t.steps)}`);
      const st = await status();
      expect(st.pid).toBe(s.proc.pid);
      expect(st.version === OTHER_VERSION).toBe(i % 2 === 0);
      expect(st.session).toEqual({ generation: i + 2, startMode: 'taken over', lastHandoverPauseMs: t.pauseMs });
      if (process.env.TAKEOVER_TRACE) console.log(s.logs.map((l) => `${l.time as number} ${l.msg as string} ${String(l.ms ?? "")}`).join("\n"));
      last = s;
      server = s;
      await new Promise((r) => setTimeout(r, 300));
    }
    writeFileSync(join(tmp, 'stop.churn'), '');
    const churned = await agents.churn.done;
    const crashPauses: number[] = [];
    const handleStats: unknown[] = [];
    for (let k = 0; k < CRASHES; k++) {
      const victim = last!;
      const killedAt = Date.now();
      victim.proc.kill('SIGKILL');
      expect(await victim.exited).toBeNull();
      // The holder kept the connection: a plain serve (no --takeover) resumes it, whichever build.
      const s = startSuccessor(k % 2 === 0 ? join(tmp, 'other', 'dist', 'cli', 'homesfs.js') : HOMESFS, config, false);
      expect(await serving(s)).toBe(true);
      crashPauses.push(Date.now() - killedAt);
      const revived = s.logs.find((l) => l.msg === 'session resumed after a crash')!;
      expect(revived).toBeDefined();
      const st = await status();
      expect(st.pid).toBe(s.proc.pid);
      expect(st.session).toMatchObject({ generation: TAKEOVERS + 2 + k, startMode: 'resumed' });
      // The same holder, the session registered again by its new daemon.
      expect(st.holder).toMatchObject({ pid: holderPid, registered: true });
      // Handles of its own epoch; the agents' files, opened by a dead daemon, reopened on their next use
      // (the writer's and the reader's, each used within a second; the listed directory only when the
      // kernel's kept listing does not answer it).
      expect(st.native.handles.epoch).toBe(Number(revived.epoch));
      let handles = st.native.handles;
      for (let t = 0; t < 50 && handles.reopened < 2; t++) {
        await new Promise((r) => setTimeout(r, 100));
        handles = (await status()).native.handles;
      }
      expect(handles.reopened).toBeGreaterThanOrEqual(2);
      handleStats.push(handles);
      console.log(`crash ${k + 1}: serving again ${crashPauses[k]!} ms after the kill; ${JSON.stringify(revived)}`);
      last = s;
      server = s;
      await new Promise((r) => setTimeout(r, 500));
    }
    writeFileSync(join(tmp, 'stop'), '');
    const results = Object.fromEntries(await Promise.all(Object.entries(agents).map(async ([k, a]) => [k, k === 'churn' ? churned : await a.done] as const)));
    console.log(`takeover pauses (ms, the daemon's): ${pauses.join(', ')}; from a kill to serving again (ms): ${crashPauses.join(', ')}; handles after each resume: ${JSON.stringify(handleStats)}; agents (longestMs: the longest wait each saw): ${JSON.stringify(results)}`);
    for (const [name, r] of Object.entries(results)) {
      expect({ name, errors: r.errors, lastError: r.lastError }).toEqual({ name, errors: 0, lastError: '' });
      expect(r.rounds).toBeGreaterThan(10);
    }
    // Every line the writer fsynced is there, once, in order.
    const n = Number(readFileSync(join(d.backingOf(T, 'work'), 'written'), 'utf8'));
    const lines = readFileSync(join(d.backingOf(T, 'work'), 'log'), 'utf8').split('\n').filter(Boolean);
    expect(lines.length).toBe(n);
    lines.forEach((l, i) => expect(l).toBe(`line ${String(i).padStart(8, '0')}`));
    // The ledger of the last daemon is the disk's.
    const usage = JSON.parse((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'usage', HOME])).stdout) as { bytes: number; inodes: number };
    const rescan = JSON.parse((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'rescan', HOME])).stdout) as { drift: { bytes: number; inodes: number } };
    expect(rescan.drift).toEqual({ bytes: 0, inodes: 0 });
    expect(usage.bytes).toBeGreaterThan(8 << 20);
    expect(existsSync(join(d.mount, T))).toBe(true);
  }, 300_000);
});
