import { spawn, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOMESCTL, HOMESFS, canMount, runAsync, skipReason } from '../helpers/daemon.js';

/**
 * `homesfs serve --demo` as the quick start runs it, on its real default
 * paths (/var/lib/homesfs-demo, /run/homesfs-demo*), but in a private mount
 * namespace with tmpfs over /var/lib and /run: the host's own never change.
 */
describe.skipIf(!canMount)('the demo: its homes are usable by their owners', () => {
  let proc: ChildProcess;
  const inNs = (cmd: string[]) => runAsync('nsenter', ['-t', String(proc.pid), '-m', '--', ...cmd]);
  const ctl = (...args: string[]) => inNs([process.execPath, HOMESCTL, '--socket', '/run/homesfs-demo/admin.sock', ...args]);

  beforeAll(async () => {
    proc = spawn(
      'unshare',
      ['--mount', '--propagation', 'private', '--', 'sh', '-c', 'mount -t tmpfs -o mode=755 tmpfs /var/lib && mount -t tmpfs -o mode=755 tmpfs /run && exec "$0" "$1" serve --demo', process.execPath, HOMESFS],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    proc.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
    const deadline = Date.now() + 30_000;
    for (;;) {
      const r = await ctl('--json', 'list');
      if (r.code === 0 && (JSON.parse(r.stdout) as unknown[]).length === 2) break;
      if (Date.now() > deadline || proc.exitCode !== null) throw new Error(`the demo did not come up: ${r.stderr}\n${stderr}`);
      await new Promise((res) => setTimeout(res, 200));
    }
  }, 40_000);

  afterAll(async () => {
    if (proc && proc.exitCode === null) {
      const exited = new Promise((res) => proc.once('exit', res));
      proc.kill('SIGTERM');
      await exited;
    }
  });

  it('makes its homes with owners from the pool, under directories their owners can pass', async () => {
    const homes = JSON.parse((await ctl('--json', 'list')).stdout) as Array<{ tenant: string; key: string; owner: { uid: number; gid: number } }>;
    expect(homes.map((h) => `${h.tenant}/${h.key}`).sort()).toEqual(['demo/_tenant', 'demo/hello']);
    for (const h of homes) expect(h.owner.uid).toBeGreaterThan(0);
    const modes = await inNs(['stat', '-c', '%n %a', '/var/lib/homesfs-demo', '/var/lib/homesfs-demo/backing']);
    expect(modes.stdout).toBe('/var/lib/homesfs-demo 755\n/var/lib/homesfs-demo/backing 700\n');
  });

  it("runs the quick start's commands: exec as the owner writes in the home; a typo makes nothing", async () => {
    const hello = JSON.parse((await ctl('--json', 'usage', 'demo/hello')).stdout) as { owner: { uid: number } };
    const r = await ctl('exec', '--tenant', 'demo', '--project', 'hello', '--', 'sh', '-c', 'id -u; echo hello > greeting; stat -c "%a %u" greeting; pwd');
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(`${hello.owner.uid}\n600 ${hello.owner.uid}\n/var/lib/homesfs-demo/homes/demo/hello\n`);
    const typo = await ctl('exec', '--tenant', 'demo', '--project', 'helo', '--', 'true');
    expect(typo.code).toBe(125);
    expect(typo.stderr).toContain('did you mean demo/hello?');
    expect((JSON.parse((await ctl('--json', 'list')).stdout) as unknown[]).length).toBe(2);
  });
});

if (!canMount) describe('the demo', () => it.skip(skipReason, () => undefined));
