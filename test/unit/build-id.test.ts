import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildIdOf } from '../../src/build-id.js';
import { upgradeReason } from '../../src/cli/reload.js';

describe('buildIdOf: what `homesfs reload` compares', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'homesfs-build-id-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));
  const tree = (name: string, files: Record<string, string>) => {
    const root = join(tmp, name);
    for (const [f, text] of Object.entries(files)) {
      mkdirSync(join(root, f, '..'), { recursive: true });
      writeFileSync(join(root, f), text);
    }
    return root;
  };
  const base = { 'package.json': '{"version":"1.0.0"}', 'dist/a.js': 'a', 'dist/cli/b.js': 'b', 'native/addon/homesfs.node': 'bin' };

  it('is the same for the same code, wherever it lies', () => {
    const a = tree('a', base);
    cpSync(a, join(tmp, 'a-copy'), { recursive: true });
    expect(buildIdOf(join(tmp, 'a-copy'))).toBe(buildIdOf(a));
    expect(buildIdOf(a)).toMatch(/^[0-9a-f]{16}$/);
  });

  it('differs when a module, the addon or package.json differs, at the same version too', () => {
    const id = buildIdOf(tree('base', base));
    expect(buildIdOf(tree('module', { ...base, 'dist/cli/b.js': 'b2' }))).not.toBe(id);
    expect(buildIdOf(tree('addon', { ...base, 'native/addon/homesfs.node': 'bin2' }))).not.toBe(id);
    expect(buildIdOf(tree('pkg', { ...base, 'package.json': '{"version":"1.0.1"}' }))).not.toBe(id);
    expect(buildIdOf(tree('more', { ...base, 'dist/c.js': '' }))).not.toBe(id);
    // maps and declarations are not code
    expect(buildIdOf(tree('maps', { ...base, 'dist/a.js.map': 'x', 'dist/a.d.ts': 'y' }))).toBe(id);
  });
});

describe('upgradeReason: a configuration reload or a takeover', () => {
  const installed = { version: '1.1.0', build: 'bbbb' };
  it.each([
    [{ version: '1.1.0', build: 'bbbb' }, false, null],
    [{ version: '1.1.0', build: 'bbbb' }, true, '--takeover'],
    [{ version: '1.0.0', build: 'aaaa' }, false, 'version 1.0.0 runs, 1.1.0 is installed'],
    [{ version: '1.1.0', build: 'aaaa' }, false, 'build aaaa runs, bbbb is installed (version 1.1.0)'],
    [{ version: '1.1.0' }, false, 'the running daemon (1.1.0) does not report its build'],
  ])('%j, --takeover %s: %s', (running, force, want) => {
    expect(upgradeReason(running, installed, force)).toBe(want);
  });
});
