import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOMESCTL, HOMESFS, canMount, runAsync, skipReason, startDaemon } from '../helpers/daemon.js';

if (!canMount) console.warn(`node-state integration suite skipped: ${skipReason}`);

const pkg = JSON.parse(readFileSync(join(import.meta.dirname, '../../package.json'), 'utf8')) as { version: string };

describe('the command line without a daemon', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-cli-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('homesfs --version prints the package version', async () => {
    const r = await runAsync(process.execPath, [HOMESFS, '--version']);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(`homesfs ${pkg.version}\n`);
  });

  it('serve without a configuration refuses to start and says how to run the demo and where the config goes', async () => {
    const r = await runAsync(process.execPath, [HOMESFS, 'serve']);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/no configuration given/);
    expect(r.stderr).toMatch(/homesfs serve --demo/);
    expect(r.stderr).toMatch(/scripts\/demo\.sh/);
    expect(r.stderr).toMatch(/--config \/etc\/homesfs\/config\.json/);
    // only a backing is not enough either
    const half = await runAsync(process.execPath, [HOMESFS, 'serve', '--backing', join(dir, 'b')]);
    expect(half.code).toBe(3);
    expect(existsSync(join(dir, 'b'))).toBe(false);
  });

  it('check-config validates without mounting: 0 for a good file, 3 with line and column for bad JSON', async () => {
    const mount = join(dir, 'never-mounted');
    const good = join(dir, 'good.json');
    writeFileSync(good, JSON.stringify({ backing: join(dir, 'backing'), mount }));
    const ok = await runAsync(process.execPath, [HOMESFS, 'check-config', good]);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain(`state ${join(dir, 'backing', '.homesfs', 'state.json')}`);
    const viaServe = await runAsync(process.execPath, [HOMESFS, 'serve', '--config', good, '--check']);
    expect(viaServe.code).toBe(0);
    expect(existsSync(mount)).toBe(false);
    expect(existsSync(join(dir, 'backing'))).toBe(false);

    const syntax = join(dir, 'syntax.json');
    writeFileSync(syntax, `{\n  "backing": "/b",\n  "mount": "/m"\n  "logLevel": "info"\n}\n`);
    const bad = await runAsync(process.execPath, [HOMESFS, 'check-config', syntax]);
    expect(bad.code).toBe(3);
    expect(bad.stderr).toContain(`${syntax}:4:3:`);
    expect(bad.stderr).toContain('line 4, column 3');

    const invalid = join(dir, 'invalid.json');
    writeFileSync(invalid, JSON.stringify({ backing: 'relative', mount: '/m', logLevel: 'chatty' }));
    const inv = await runAsync(process.execPath, [HOMESFS, 'check-config', invalid]);
    expect(inv.code).toBe(3);
    expect(inv.stderr).toMatch(/backing: must be an absolute path/);
    expect(inv.stderr).toMatch(/logLevel/);
  });
});

describe.skipIf(!canMount)('state with its backing tree, locked', () => {
  it('keeps the state under <backing>/.homesfs by default, hidden from the mount, and a second daemon on that backing refuses to start', async () => {
    // stateFile: undefined drops the helper's explicit state file: the default applies
    const d = await startDaemon({ create: ['t/h'], config: { stateFile: undefined } });
    const other = mkdtempSync(join(tmpdir(), 'homesfs-second-'));
    try {
      const created = await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, '--json', 'create', 't/new']);
      expect(created.code).toBe(0);
      const stateFile = join(d.backing, '.homesfs', 'state.json');
      const saved = JSON.parse(readFileSync(stateFile, 'utf8')) as { homes: Record<string, unknown> };
      expect(Object.keys(saved.homes)).toContain('t/new');
      expect(statSync(join(d.backing, '.homesfs')).mode & 0o777).toBe(0o700);
      expect(readdirSync(d.mount)).toEqual(['t']);
      expect(d.logs.filter((l) => l.msg === 'backing name skipped, never served')).toEqual([]);

      // same backing, everything else its own: refused, naming the holder
      const cfg = join(other, 'config.json');
      writeFileSync(
        cfg,
        JSON.stringify({ backing: d.backing, mount: join(other, 'mnt'), socket: join(other, 'admin.sock'), platformSocket: join(other, 'p', 'platform.sock') }),
      );
      const second = await runAsync(process.execPath, [HOMESFS, 'serve', '--config', cfg], { timeoutMs: 30_000 });
      expect(second.code).toBe(10);
      expect(second.stderr).toContain(join(d.backing, '.homesfs', 'lock'));
      expect(second.stderr).toContain(`pid ${d.proc.pid}`);
      expect(existsSync(join(other, 'mnt'))).toBe(false);
      // the first one still serves, its state untouched
      expect(JSON.parse(readFileSync(stateFile, 'utf8'))).toEqual(saved);
      expect((await runAsync(process.execPath, [HOMESCTL, '--socket', d.socket, 'status'])).code).toBe(0);

      // after a clean stop the same backing starts again (the lock went with the process)
      const again = await d.restart();
      await again.stopKeep();
    } finally {
      await d.stop();
      rmSync(other, { recursive: true, force: true });
    }
  });

  it('an explicit stateFile is locked too: another backing cannot share it', async () => {
    const shared = mkdtempSync(join(tmpdir(), 'homesfs-sharedstate-'));
    const stateFile = join(shared, 'state.json');
    const d = await startDaemon({ create: ['t/h'], config: { stateFile } });
    const other = mkdtempSync(join(tmpdir(), 'homesfs-second-'));
    try {
      // A backing tree the daemon accepts (owner-only): the shared state file is its one fault.
      mkdirSync(join(other, 'backing'), { mode: 0o700 });
      const cfg = join(other, 'config.json');
      writeFileSync(
        cfg,
        JSON.stringify({ backing: join(other, 'backing'), mount: join(other, 'mnt'), socket: join(other, 'admin.sock'), platformSocket: join(other, 'p', 'platform.sock'), stateFile }),
      );
      const second = await runAsync(process.execPath, [HOMESFS, 'serve', '--config', cfg], { timeoutMs: 30_000 });
      expect(second.code).toBe(10);
      expect(second.stderr).toContain(`${stateFile}.lock`);
    } finally {
      await d.stop();
      rmSync(other, { recursive: true, force: true });
      rmSync(shared, { recursive: true, force: true });
    }
  });
});
