import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERRNO_OF, errnoName, errnoOf, HOMES_CODES, HomesError } from '../../src/errors.js';
import { EXIT } from '../../src/cli/exitcodes.js';

const readme = readFileSync(join(import.meta.dirname, '../../README.md'), 'utf8');

/** Rows of the README table that follows the errno-table marker. */
function errnoRows(): Map<string, string> {
  const start = readme.indexOf('<!-- errno-table');
  expect(start).toBeGreaterThan(0);
  const rows = new Map<string, string>();
  for (const line of readme.slice(start).split('\n').slice(1)) {
    if (!line.startsWith('|')) {
      if (rows.size > 0) break;
      continue;
    }
    const m = /^\| `([A-Z_0-9]+)` \| `(E[A-Z0-9]+)` \|/.exec(line);
    if (m) rows.set(m[1]!, m[2]!);
  }
  return rows;
}

describe('README stays true to the code', () => {
  it('documents every error code with the errno the code really maps to', () => {
    const rows = errnoRows();
    for (const code of HOMES_CODES) {
      expect(rows.get(code), `README errno table row for ${code}`).toBe(errnoName(ERRNO_OF[code]));
    }
    expect([...rows.keys()].sort()).toEqual([...HOMES_CODES].sort());
  });

  it('documents every exit code', () => {
    for (const [name, code] of Object.entries(EXIT)) {
      expect(readme, `exit code ${name}`).toMatch(new RegExp(`^\\| ${code} \\|`, 'm'));
    }
  });
});

describe('errnoOf: the one mapping', () => {
  it('maps HomesError codes through the table', () => {
    expect(errnoOf(new HomesError('QUOTA_EXCEEDED', 'x'))).toBe(ERRNO_OF.QUOTA_EXCEEDED);
  });
  it('maps Node system errors by their symbolic code, whatever their errno sign', () => {
    expect(errnoName(errnoOf(Object.assign(new Error('x'), { code: 'ENOENT', errno: -2 })))).toBe('ENOENT');
    expect(errnoName(errnoOf(Object.assign(new Error('x'), { code: 'EDQUOT' })))).toBe('EDQUOT');
  });
  it('never answers ENOSYS or EPERM by accident: unknown is EIO', () => {
    expect(errnoName(errnoOf(new Error('plain')))).toBe('EIO');
    expect(errnoName(errnoOf(Object.assign(new Error('x'), { code: 'ENOSYS' })))).toBe('EIO');
    expect(errnoName(errnoOf(Object.assign(new Error('x'), { code: 'ERR_SOMETHING' })))).toBe('EIO');
    expect(errnoName(errnoOf(-1))).toBe('EIO');
  });
});
