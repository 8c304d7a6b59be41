import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ext4Suite, haveCommands } from '../helpers/backing.js';
import { canMount, HOMESCTL, HOMESFS, runAsync, skipReason, SYSTEM_PATH } from '../helpers/daemon.js';
import { pyAs } from '../helpers/neighbour.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { serving, startSuccessor, type Successor } from '../helpers/takeover.js';

/**
 * Requests a daemon had read but not answered when it died. The backing is a
 * small ext4 of its own, frozen (fsfreeze) while three callers' requests are
 * inside the daemon's backing syscalls: an O_APPEND write, a create (no
 * O_EXCL) and a mkdir. The daemon is killed with SIGKILL and the backing
 * thawed (each dead syscall ends as the kernel decides: done or not, never
 * answered), and a plain `homesfs serve` resumes the session the holder
 * kept: the kernel sends the three requests again (FUSE_NOTIFY_RESEND). The
 * write lands where the kernel put it (once: a dead handle is reopened
 * without O_APPEND, so a write done twice is the same bytes at the same
 * offset), the create opens what is there, and the mkdir, whose effect the
 * new daemon cannot know, is answered EIO.
 */

const BASE = ownerRange(import.meta.filename).from;
const OWNER = { uid: BASE + 3, gid: BASE + 3 };
const T = 'cr';
const HOMES = { [`${T}/w`]: { owner: OWNER, profile: 'home' } };
const hasTools = haveCommands('mkfs.ext4', 'fsfreeze');

if (!canMount) console.warn(`crash-resend integration suite skipped: ${skipReason}`);
else if (!hasTools) console.warn('crash-resend integration suite skipped: mkfs.ext4 or fsfreeze missing (apt-get install e2fsprogs util-linux)');

describe.skipIf(!canMount || !hasTools)('a crash with requests in flight: the kernel sends them again to the daemon that resumes', () => {
  let frozen = false;
  const fsfreeze = (flag: '-f' | '-u') => {
    const r = spawnSync('fsfreeze', [flag, s.fs], { env: { PATH: SYSTEM_PATH } });
    if (r.status !== 0) throw new Error(`fsfreeze ${flag} ${s.fs}: ${r.stderr}`);
    frozen = flag === '-f';
  };
  let next: Successor | null = null;
  const callers: ChildProcess[] = [];
  let holderPid: number | null = null;
  const s = ext4Suite({
    size: '64M',
    homes: HOMES,
    config: { crashSurvival: true },
    beforeStop: () => {
      if (frozen) fsfreeze('-u');
      // A test that failed midway: its callers, the daemon that resumed, and the holder go (the
      // holder last: until then the mount keeps the callers waiting instead of failing).
      for (const c of callers) if (c.exitCode === null) c.kill('SIGKILL');
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

  /** a python script as the home's owner, started now: its exit code, stdout and stderr once it ends */
  const caller = (body: string): { proc: ChildProcess; out: () => string; done: Promise<{ code: number | null; out: string; err: string }> } => {
    const proc = spawn('setpriv', [`--reuid=${OWNER.uid}`, `--regid=${OWNER.gid}`, '--clear-groups', 'python3', '-c', `import os, sys\nhome = sys.argv[1]\n${body}`, s.d.home(T, 'w')], {
      env: { PATH: SYSTEM_PATH },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    callers.push(proc);
    let out = '';
    let err = '';
    proc.stdout!.on('data', (b: Buffer) => (out += b.toString()));
    proc.stderr!.on('data', (b: Buffer) => (err += b.toString()));
    return { proc, out: () => out, done: new Promise((r) => proc.once('exit', (code) => r({ code, out, err }))) };
  };
  /** the daemon's threads in uninterruptible sleep (in a syscall on the frozen backing) */
  const stuckThreads = (pid: number): number =>
    readdirSync(`/proc/${pid}/task`).filter((t) => {
      try {
        return readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8').replace(/^.*\) /, '').startsWith('D');
      } catch {
        return false;
      }
    }).length;

  it('an O_APPEND write lands once, a create opens what is there, a mkdir is answered EIO, a handle first used by an fsync still writes; the ledger equals the disk', async () => {
    const d = s.d;
    const home = d.home(T, 'w');
    const backing = d.backingOf(T, 'w');
    await pyAs(s.tmp, OWNER, `import os,sys\nopen(os.path.join(sys.argv[1], 'log'), 'w').write('a\\n')\nos.mkdir(os.path.join(sys.argv[1], 'sub'))`, home);
    // The writer's file is open before the freeze (an open writes nothing).
    const first = JSON.parse((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'status'])).stdout) as { holder: { pid: number | null } };
    holderPid = first.holder.pid;
    expect(holderPid).not.toBeNull();
    const go = join(s.tmp, 'go');
    const writer = caller(`fd = os.open(os.path.join(home, 'log'), os.O_WRONLY | os.O_APPEND)\nprint('open', flush=True)\nimport time\nwhile not os.path.exists(${JSON.stringify(go)}): time.sleep(0.01)\nos.write(fd, b'b\\n')\nos.fsync(fd)\nprint('done', flush=True)`);
    // Another writer whose first request after the crash is an fsync (which does not say how its
    // file was opened): its handle must still take the write after it.
    const go2 = join(s.tmp, 'go2');
    const syncer = caller(`fd = os.open(os.path.join(home, 'log2'), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)\nos.write(fd, b'x')\nprint('open', flush=True)\nimport time\nwhile not os.path.exists(${JSON.stringify(go2)}): time.sleep(0.01)\nos.fsync(fd)\nos.write(fd, b'y')\nos.fsync(fd)\nprint('done', flush=True)`);
    for (let i = 0; i < 400 && !(writer.out().includes('open') && syncer.out().includes('open')); i++) await new Promise((r) => setTimeout(r, 25));
    expect(writer.out()).toBe('open\n');
    expect(syncer.out()).toBe('open\n');
    fsfreeze('-f');
    writeFileSync(go, '');
    const creator = caller(`fd = os.open(os.path.join(home, 'new'), os.O_WRONLY | os.O_CREAT, 0o600)\nos.write(fd, b'n')\nos.close(fd)\nprint('done', flush=True)`);
    const mkdirer = caller(`try:\n  os.mkdir(os.path.join(home, 'sub', 'd'))\n  print('made', flush=True)\nexcept OSError as e:\n  print('errno', e.errno, flush=True)`);
    // Three requests inside the daemon's backing syscalls, waiting for the thaw (the mkdir in a
    // directory of its own: the kernel holds a directory's lock while it creates in it).
    for (let i = 0; i < 400 && stuckThreads(d.proc.pid!) < 3; i++) await new Promise((r) => setTimeout(r, 50));
    expect(stuckThreads(d.proc.pid!)).toBeGreaterThanOrEqual(3);

    d.proc.kill('SIGKILL');
    writeFileSync(go2, '');
    // Thawed, the dead daemon's syscalls complete (the process ends as each returns): on disk, never answered.
    fsfreeze('-u');
    await d.exited;
    // (whether a dead syscall went through before the process ended is the kernel's: the resumed daemon cannot know)
    const landed = { write: readFileSync(join(backing, 'log'), 'utf8') === 'a\nb\n', mkdir: existsSync(join(backing, 'sub', 'd')) };
    for (const c of [writer, creator, mkdirer]) expect(c.proc.exitCode).toBeNull();

    next = startSuccessor(HOMESFS, join(d.dir, 'config.json'), false);
    expect(await serving(next)).toBe(true);
    const [w, c, m, y] = await Promise.all([writer.done, creator.done, mkdirer.done, syncer.done]);
    console.log(`before the resume, the dead daemon's write ${landed.write ? 'had' : 'had not'} landed, its mkdir ${landed.mkdir ? 'had' : 'had not'}`);
    expect(w).toEqual({ code: 0, out: 'open\ndone\n', err: '' });
    expect(c).toEqual({ code: 0, out: 'done\n', err: '' });
    expect(m).toEqual({ code: 0, out: 'errno 5\n', err: '' });
    expect(y).toEqual({ code: 0, out: 'open\ndone\n', err: '' });
    expect(readFileSync(join(backing, 'log2'), 'utf8')).toBe('xy');
    // Once: the resent write put the same bytes where the kernel said, not a second append.
    expect(readFileSync(join(backing, 'log'), 'utf8')).toBe('a\nb\n');
    expect(readFileSync(join(backing, 'new'), 'utf8')).toBe('n');

    const ctl = async (...args: string[]) => {
      const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', ...args]);
      expect(r.code, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as Record<string, unknown>;
    };
    const st = (await ctl('status')) as { session: { startMode: string }; native: { handles: { resent: number; refused: number; reopened: number } } };
    expect(st.session.startMode).toBe('resumed');
    expect(st.native.handles.resent).toBeGreaterThanOrEqual(3);
    expect(st.native.handles.refused).toBe(1);
    expect(st.native.handles.reopened).toBeGreaterThanOrEqual(2);
    const rescan = (await ctl('rescan', `${T}/w`)) as { drift: { bytes: number; inodes: number } };
    expect(rescan.drift).toEqual({ bytes: 0, inodes: 0 });

    next.proc.kill('SIGTERM');
    expect(await next.exited).toBe(0);
  }, 180_000);
});
