import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const DEPCRUISE = join(ROOT, 'node_modules/.bin/depcruise');
const CONFIG = join(ROOT, '.dependency-cruiser.cjs');

interface Violation {
  from: string;
  to: string;
  rule: { name: string };
}

/** dependency-cruiser's verdict on `src` under cwd, by the project's own rules */
function cruise(cwd: string): Promise<Violation[]> {
  return new Promise((res, rej) =>
    execFile(DEPCRUISE, ['src', '--config', CONFIG, '--output-type', 'json'], { cwd, maxBuffer: 64 << 20 }, (err, stdout) => {
      // exit status = the number of errors; the report is on stdout either way
      if (stdout === '') return rej(err ?? new Error('depcruise wrote nothing'));
      res((JSON.parse(stdout) as { summary: { violations: Violation[] } }).summary.violations);
    }),
  );
}

describe('layers: dependencies point one way (.dependency-cruiser.cjs)', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'homesfs-layers-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('src/ breaks none of the rules', async () => {
    const v = await cruise(ROOT);
    expect(v.map((x) => `${x.rule.name}: ${x.from} → ${x.to}`)).toEqual([]);
  });

  it('the rules are live: an operation importing the session, policy importing the store, a cycle and an import of the entry points are each caught', async () => {
    const files: Record<string, string> = {
      'tsconfig.json': JSON.stringify({ compilerOptions: { module: 'nodenext', moduleResolution: 'nodenext', strict: true } }),
      'src/fuse/session.ts': "export const s = 1;\n",
      'src/fs/dir.ts': "import { s } from '../fuse/session.js';\nexport const d = s;\n",
      'src/backing/store.ts': 'export const b = 1;\n',
      'src/policy/ledger.ts': "import type { b } from '../backing/store.js';\nexport type L = typeof b;\n",
      'src/homes/a.ts': "import { c } from './c.js';\nexport const a = c;\n",
      'src/homes/c.ts': "import { a } from './a.js';\nexport const c = () => a;\n",
      'src/cli/exitcodes.ts': 'export const EXIT = 0;\n',
      'src/fs/exit.ts': "import { EXIT } from '../cli/exitcodes.js';\nexport const e = EXIT;\n",
    };
    for (const [p, text] of Object.entries(files)) {
      mkdirSync(join(tmp, p, '..'), { recursive: true });
      writeFileSync(join(tmp, p), text);
    }
    const v = await cruise(tmp);
    const got = v.map((x) => `${x.rule.name}: ${x.from} → ${x.to}`).sort();
    expect(got).toEqual(
      expect.arrayContaining([
        'fs-is-fuse-independent: src/fs/dir.ts → src/fuse/session.ts',
        'pure-policy: src/policy/ledger.ts → src/backing/store.ts',
        'no-circular: src/homes/a.ts → src/homes/c.ts',
        'entry-points-on-top: src/fs/exit.ts → src/cli/exitcodes.ts',
      ]),
    );
  });
});
