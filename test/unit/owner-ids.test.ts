import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { FIRST, LANES, OWNER_BLOCK, ownerBlock, ownerRange, testFiles } from '../helpers/owner-ids.js';

const TEST_ROOT = join(import.meta.dirname, '..');

/**
 * Ids a test may name as literals: root, `daemon` (1) and nobody, host
 * accounts the owner checks must refuse. Everything else comes from
 * helpers/owner-ids.ts.
 */
const HOST_IDS = new Set([0, 1, 65534]);

/**
 * Files whose literal ids are not owner ranges of the suite: deploy.test.ts runs
 * the Kubernetes manifests as shipped (their owners 65536–524287 and the pod's
 * runAsUser), below FIRST and used by no other file; owner-check.test.ts gives
 * one daemon a range among the host's accounts to see them skipped.
 */
const EXEMPT: Record<string, RegExp> = {
  'integration/deploy.test.ts': /owners: \{ from: 131072, to: 196607 \}/,
  'integration/owner-check.test.ts': /owners: \{ from: 1, to: 2000 \}/,
};

/**
 * A uid or gid written as a number where an owner is given: `uid: 40001`,
 * `ownersFrom(40021`, `--owner', '40092:…`, `runAs(300050`, `from: 41000`,
 * `BASE = 300_000 + …`.
 */
const LITERAL_ID = /\b(?:uid|gid|from|to):\s*(\d+)|ownersFrom\((\d+)|--owner',\s*'(\d+)|runAs\((\d+)|--reuid=(\d+)|BASE = ([\d_]+)/g;
const idOf = (m: RegExpMatchArray) => Number(m.slice(1).find((g) => g !== undefined)!.replaceAll('_', ''));

describe('owner ids of the test files', () => {
  it('no two blocks (slot, lane) overlap, and all lie above FIRST and below 2^31', () => {
    const files = testFiles().length;
    let prevTo = FIRST - 1;
    const gaps: string[] = [];
    for (let slot = 0; slot < files; slot++) {
      for (let lane = 0; lane < LANES; lane++) {
        const b = ownerBlock(slot, lane);
        if (b.from !== prevTo + 1 || b.to - b.from + 1 !== OWNER_BLOCK) gaps.push(`slot ${slot} lane ${lane}: ${b.from}..${b.to}`);
        prevTo = b.to;
      }
    }
    expect(gaps).toEqual([]);
    expect(prevTo).toBeLessThan(2 ** 31);
  });

  it('every test file has a range of its own', () => {
    const ranges = testFiles().map((f) => ({ f, ...ownerRange(join(TEST_ROOT, f)) }));
    expect(ranges.length).toBeGreaterThan(50);
    const sorted = [...ranges].sort((a, b) => a.from - b.from);
    for (let i = 1; i < sorted.length; i++) expect(sorted[i]!.from, `${sorted[i - 1]!.f} and ${sorted[i]!.f}`).toBeGreaterThan(sorted[i - 1]!.to);
    expect(ownerRange(pathToFileURL(import.meta.filename).href)).toEqual(ownerRange(import.meta.filename));
    expect(() => ownerRange(join(TEST_ROOT, 'helpers/daemon.ts'))).toThrow(/not a test file/);
  });

  it('no integration or native test names an owner id as a number (host accounts aside)', () => {
    const found: string[] = [];
    for (const f of testFiles().filter((f) => /^(integration|native)\//.test(f))) {
      let text = readFileSync(join(TEST_ROOT, f), 'utf8');
      if (EXEMPT[f]) text = text.replace(EXEMPT[f], '');
      for (const m of text.matchAll(LITERAL_ID)) {
        const id = idOf(m);
        if (!HOST_IDS.has(id)) found.push(`${f}: ${m[0]}`);
      }
    }
    expect(found).toEqual([]);
  });

  it('the literal check sees the forms it looks for', () => {
    const ids = (s: string) => [...s.matchAll(LITERAL_ID)].map(idOf);
    expect(ids("{ uid: 40001, gid: 40002 } ownersFrom(40021, ['a']) '--owner', '40092:40092' runAs(300050, 1) --reuid=7 owners: { from: 41000, to: 41999 }")).toEqual([
      40001, 40002, 40021, 40092, 300050, 7, 41000, 41999,
    ]);
    expect(ids('const BASE = 300_000 + Math.floor(Math.random() * 60) * 10_000;')).toEqual([300000]);
  });
});
