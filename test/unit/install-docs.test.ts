import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { aptLine, installCommands, installPrefix, installShPackages } from '../helpers/readme-install.js';

const pkg = JSON.parse(readFileSync(join(import.meta.dirname, '../../package.json'), 'utf8')) as { engines: { node: string } };

describe('README "Install"', () => {
  const commands = installCommands();

  it('checks Node, then apt, then npm ci, npm pack and the global install, in that order', () => {
    const at = (re: RegExp) => {
      const i = commands.findIndex((c) => re.test(c));
      expect(i, String(re)).toBeGreaterThanOrEqual(0);
      return i;
    };
    const order = [/^node -e /, /^apt-get /, /^npm ci\b/, /^npm pack\b/, /^npm install -g\b/, /^homesfs --version && homesctl --version$/].map(at);
    expect(order).toEqual([...order].sort((a, b) => a - b));
    // the tarball npm pack wrote, by a glob: the block runs as written, no <version> to fill in
    expect(commands.find((c) => /^npm install -g\b/.test(c))).toMatch(/ \.\/homesfs-\*\.tgz\b/);
  });

  it("names neither nodejs nor npm on the apt line, and exactly scripts/install.sh's runtime and build packages", () => {
    const { packages } = aptLine(commands);
    expect(packages).not.toContain('nodejs');
    expect(packages).not.toContain('npm');
    expect(new Set(packages).size).toBe(packages.length);
    expect([...packages].sort()).toEqual([...installShPackages('runtime'), ...installShPackages('build')].sort());
    // the test-only packages are install.sh's business, not a node's
    for (const p of installShPackages('tests')) expect(packages).not.toContain(p);
  });

  it('installs into the prefix whose bin/homesfs the unit starts', () => {
    const unit = readFileSync(join(import.meta.dirname, '../../systemd/homesfs.service'), 'utf8');
    const execStart = /^ExecStart=(\S+)/m.exec(unit)![1];
    expect(execStart).toBe(`${installPrefix(commands)}/bin/homesfs`);
  });

  describe('the Node version check, run as written with the version Node reports faked', () => {
    let dir: string;
    beforeAll(() => {
      dir = mkdtempSync(join(tmpdir(), 'homesfs-nodecheck-'));
      // loaded before the README's `node -e`: what process.versions and process.version report
      writeFileSync(
        join(dir, 'fake.cjs'),
        "const v = process.env.FAKE_NODE_VERSION; Object.defineProperty(process, 'versions', { value: { ...process.versions, node: v } }); Object.defineProperty(process, 'version', { value: `v${v}` });\n",
      );
    });
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    const check = () => commands.find((c) => /^node -e /.test(c))!;
    const run = (version: string | null) =>
      spawnSync('sh', ['-c', check()], {
        encoding: 'utf8',
        env: version === null ? process.env : { ...process.env, FAKE_NODE_VERSION: version, NODE_OPTIONS: `--require ${join(dir, 'fake.cjs')}` },
      });

    it('agrees with package.json engines: refuses 18, 20 before 20.19 and 21; accepts 20.19+, 22+ and the Node running this', () => {
      // the table below is this range; change both together
      expect(pkg.engines.node).toBe('>=20.19 <21 || >=22');
      for (const v of ['18.19.1', '20.0.0', '20.18.3', '21.7.3']) {
        const r = run(v);
        expect(r.status, v).toBe(1);
        expect(r.stderr).toContain(`homesfs needs Node.js 20.19+ or 22+, this is v${v}`);
      }
      for (const v of ['20.19.0', '20.20.2', '22.0.0', '24.1.0']) {
        const r = run(v);
        expect(r.status, `${v}: ${r.stderr}`).toBe(0);
        expect(r.stderr).toBe('');
      }
      expect(run(null).status).toBe(0);
    });
  });
});
