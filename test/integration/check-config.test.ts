import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOMESCTL, HOMESFS, canMount, runAsync, skipReason, startDaemon } from '../helpers/daemon.js';

if (!canMount) console.warn(`check-config: the mounted part is skipped: ${skipReason}`);

// The built CLI as an admin runs it: what it prints and how it exits.
describe('homesfs check-config and serve on a temp config file', () => {
  let dir: string;
  const write = (name: string, config: unknown) => {
    const p = join(dir, name);
    writeFileSync(p, JSON.stringify(config));
    return p;
  };
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-check-config-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const base = () => ({ backing: join(dir, 'backing'), mount: join(dir, 'mnt') });

  it('a missing file: "no such file", exit 3, not "invalid configuration"', async () => {
    const missing = join(dir, 'nope.json');
    for (const args of [['check-config', missing], ['serve', '--config', missing]]) {
      const r = await runAsync(process.execPath, [HOMESFS, ...args]);
      expect(r.code).toBe(3);
      expect(r.stderr).toBe(`homesfs: cannot read the configuration: ${missing}: no such file\n`);
      expect(r.stdout).toBe('');
    }
  });

  it('a misspelt key: did you mean, exit 3, from check-config and from serve', async () => {
    const p = write('typo.json', { ...base(), tenants: { acme: { maxbytes: '2G' } }, logLevle: 'info' });
    for (const args of [['check-config', p], ['serve', '--config', p]]) {
      const r = await runAsync(process.execPath, [HOMESFS, ...args]);
      expect(r.code).toBe(3);
      expect(r.stderr).toContain('invalid configuration:');
      expect(r.stderr).toContain('  (root): Unrecognized key: "logLevle" (did you mean "logLevel"?)');
      expect(r.stderr).toContain('  tenants.acme: Unrecognized key: "maxbytes" (did you mean "maxBytes"?)');
    }
  });

  it('a bad size names its path; good sizes pass', async () => {
    const bad = await runAsync(process.execPath, [HOMESFS, 'check-config', write('size.json', { ...base(), tenants: { acme: { maxBytes: '2 GX' } } })]);
    expect(bad.code).toBe(3);
    expect(bad.stderr).toContain("tenants.acme.maxBytes: '2 GX': unknown unit 'GX'");
    const good = write('sizes.json', { ...base(), tenants: { acme: { maxBytes: '20 GB' } }, profiles: { big: { extends: 'home', maxHomeBytes: '1.5 GiB' } } });
    const ok = await runAsync(process.execPath, [HOMESFS, 'check-config', good]);
    expect(ok.code).toBe(0);
    expect(ok.stderr).toBe('');
    expect(ok.stdout).toMatch(new RegExp(`^${good}: valid \\(backing `));
  });

  it("a budget over its tenant's: a warning line, exit 0", async () => {
    const p = write('warn.json', { ...base(), tenants: { acme: { maxBytes: '1G' } }, profiles: { big: { extends: 'home', maxHomeBytes: '5G' } }, homes: { 'acme/big': { profile: 'big' } } });
    for (const args of [['check-config', p], ['serve', '--config', p, '--check']]) {
      const r = await runAsync(process.execPath, [HOMESFS, ...args]);
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(new RegExp(`^${p}: valid with 2 warnings \\(backing `));
      expect(r.stderr.split('\n')).toEqual([
        expect.stringMatching(/^homesfs: warning: tenants\.acme: homes of this tenant get profile "home" by default, whose budget of 2\.0 GiB .* exceeds the tenant's budget of 1\.0 GiB/),
        expect.stringMatching(/^homesfs: warning: homes\.acme\/big: profile "big" gives this home a budget of 5\.0 GiB .* exceeds its tenant's budget of 1\.0 GiB/),
        '',
      ]);
    }
  });
});

describe.skipIf(!canMount)('the daemon logs configuration warnings', () => {
  it('one warn line at start, and again after a reload that keeps a budget over its tenant\'s', async () => {
    const d = await startDaemon({ create: ['acme/p'], config: { tenants: { acme: { maxBytes: '1G' } } } });
    try {
      const isWarning = (l: { msg: string }) => l.msg.startsWith('configuration warning');
      const atStart = await d.waitForLog(isWarning);
      expect(d.logs.filter(isWarning)).toHaveLength(1);
      expect(atStart).toMatchObject({ level: 'warn', component: 'config', warnings: [{ path: 'tenants.acme', tenant: 'acme', profile: 'home', budget: 2 * 1024 ** 3, tenantBudget: 1024 ** 3 }] });

      // a second offending tenant, then reload: the line names both
      const configPath = join(d.dir, 'config.json');
      const config = JSON.parse(readFileSync(configPath, 'utf8')) as Record<string, unknown>;
      writeFileSync(configPath, JSON.stringify({ ...config, tenants: { acme: { maxBytes: '1G' }, beta: { maxBytes: '100 MB' } } }));
      const r = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'reload']);
      expect(r.code, r.stderr).toBe(0);
      const again = await d.waitForLog((l) => isWarning(l) && (l.warnings as unknown[]).length === 2);
      expect((again.warnings as Array<{ path: string }>).map((w) => w.path)).toEqual(['tenants.acme', 'tenants.beta']);
      expect(again.msg).toContain('tenants.beta: homes of this tenant get profile "home"');

      // the file gone: the reload is refused as unreadable, not as invalid, and the daemon serves on
      rmSync(configPath);
      const gone = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'reload']);
      expect(gone.code).not.toBe(0);
      const refused = await d.waitForLog((l) => l.msg.startsWith('reload refused'));
      expect(refused).toMatchObject({ msg: 'reload refused: the configuration file cannot be read; the old one stays', issues: [`${configPath}: no such file`] });
      expect(d.proc.exitCode).toBeNull();
    } finally {
      await d.stop();
    }
  });
});
