import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyDaemonTree, runAsync } from '../helpers/daemon.js';

/**
 * A daemon must not run on an addon built from other sources (a stale build
 * after an upgrade, or a newer one): it refuses with exit 4 and says how to
 * rebuild. The daemon here is a copy of dist/ and the real addon whose own
 * ABI table (dist/abi.js) differs from the addon's, as it does for a daemon
 * upgraded without its build (or a build without its daemon); nothing outside
 * the test's temporary directory changes.
 */
describe('a daemon and an addon built from other sources', () => {
  let dir: string;
  const tree = (name: string, alter: string): string => {
    const root = join(dir, name);
    copyDaemonTree(root);
    const abiJs = join(root, 'dist', 'abi.js');
    const src = readFileSync(abiJs, 'utf8');
    const check = 'export function abiMismatches(native) {';
    expect(src).toContain(check);
    // The addon's table as the check sees it, altered as the addon of other sources would have it.
    writeFileSync(abiJs, src.replace(check, `${check}\n    if (native) { const binding = { ABI: native }; ${alter}; native = binding.ABI; }`));
    const config = join(root, 'config.json');
    mkdirSync(join(root, 'backing'));
    mkdirSync(join(root, 'mnt'));
    writeFileSync(config, JSON.stringify({ backing: join(root, 'backing'), mount: join(root, 'mnt'), socket: join(root, 'admin.sock') }));
    return root;
  };
  const serve = (root: string) =>
    runAsync(process.execPath, [join(root, 'dist', 'cli', 'homesfs.js'), 'serve', '--config', join(root, 'config.json')], { timeoutMs: 30_000 });

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-abi-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('an older build (another ABI version) is refused with exit 4 and the rebuild command', async () => {
    const r = await serve(tree('older', 'binding.ABI = Object.assign({}, binding.ABI, { VERSION: binding.ABI.VERSION - 1 })'));
    expect(r.code).toBe(4);
    expect(r.stderr + r.stdout).toMatch(/built from other sources than this daemon \(ABI version \d+, this daemon needs \d+\); rebuild it: node scripts\/build-native\.mjs/);
  });

  it('a build whose slots differ, or one from before the ABI existed, is refused the same way', async () => {
    const moved = await serve(tree('moved', 'binding.ABI = Object.assign({}, binding.ABI, { ACCT_CREDIT_BYTES: 7 })'));
    expect(moved.code).toBe(4);
    expect(moved.stderr + moved.stdout).toMatch(/ACCT_CREDIT_BYTES is 7 in the addon, 3 here/);
    const none = await serve(tree('none', 'delete binding.ABI'));
    expect(none.code).toBe(4);
    expect(none.stderr + none.stdout).toMatch(/the addon exports no ABI/);
  });
});
