import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ABI, abiMismatches } from '../../src/abi.js';
import { HIDDEN_NAME, HIDDEN_NAME_PREFIX } from '../../src/fs/hidden.js';

const ROOT = join(import.meta.dirname, '..', '..');

/** The X(name, value) entries and the version of native/src/abi.h, as the C preprocessor would see them. */
function parseAbiHeader(): Record<string, number> {
  const text = readFileSync(join(ROOT, 'native/src/abi.h'), 'utf8').replace(/\/\*[\s\S]*?\*\//g, '');
  const out: Record<string, number> = {};
  const version = /#define HOMESFS_ABI_VERSION (\d+)/.exec(text);
  if (version) out.VERSION = Number(version[1]);
  const list = /#define HOMESFS_ABI_CONSTANTS\(X\)((?:[^\n]*\\\n)*[^\n]*)/.exec(text)?.[1] ?? '';
  for (const m of list.matchAll(/X\((\w+),\s*(\d+)\)/g)) out[m[1]!] = Number(m[2]);
  return out;
}

describe('the native ABI', () => {
  it('native/src/abi.h and src/abi.ts define the same names with the same values', () => {
    const header = parseAbiHeader();
    expect(Object.keys(header).length).toBeGreaterThan(20);
    expect(header).toEqual({ ...ABI });
  });

  it('the hidden names are the ones the session makes: abi.h prefix and digit count', () => {
    const text = readFileSync(join(ROOT, 'native/src/abi.h'), 'utf8');
    expect(/#define HOMESFS_HIDDEN_PREFIX "([^"]*)"/.exec(text)?.[1]).toBe(HIDDEN_NAME_PREFIX);
    expect(HIDDEN_NAME.test(`${HIDDEN_NAME_PREFIX}${'0a'.repeat(ABI.HIDDEN_DIGITS / 2)}`)).toBe(true);
    expect(HIDDEN_NAME.test(`${HIDDEN_NAME_PREFIX}${'0a'.repeat(ABI.HIDDEN_DIGITS / 2)}0`)).toBe(false);
    expect(HIDDEN_NAME.test(`${HIDDEN_NAME_PREFIX}${'0A'.repeat(ABI.HIDDEN_DIGITS / 2)}`)).toBe(false);
  });

  it('an addon whose ABI differs in its version, a value, a missing or an extra name is named, not trusted', () => {
    expect(abiMismatches({ ...ABI })).toEqual([]);
    expect(abiMismatches(undefined)).toEqual(['the addon exports no ABI (built before it had one)']);
    expect(abiMismatches({ ...ABI, VERSION: ABI.VERSION - 1 })).toEqual([`ABI version ${ABI.VERSION - 1}, this daemon needs ${ABI.VERSION}`]);
    expect(abiMismatches({ ...ABI, ACCT_CREDIT_BYTES: 9 })).toEqual([`ACCT_CREDIT_BYTES is 9 in the addon, ${ABI.ACCT_CREDIT_BYTES} here`]);
    const { REC_CREATED: _gone, ...missing } = ABI;
    expect(abiMismatches(missing)).toEqual([`REC_CREATED is undefined in the addon, ${ABI.REC_CREATED} here`]);
    expect(abiMismatches({ ...ABI, NEW_THING: 1 })).toEqual(['NEW_THING is in the addon only']);
  });

  it('every shared constant in the C sources comes from abi.h: no second definition of a slot, flag or kind', () => {
    const names = Object.keys(ABI).filter((n) => n !== 'VERSION');
    const sources = (dir: string): string[] =>
      readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name)) : /\.[ch]$/.test(e.name) && e.name !== 'abi.h' ? [join(dir, e.name)] : []));
    const files = sources('native/src').map((f) => f.slice('native/src/'.length));
    expect(files).toEqual(expect.arrayContaining(['fastpath/fastpath_state.c', 'session/ops_files.c', 'addon.c']));
    for (const file of files) {
      const text = readFileSync(join(ROOT, 'native/src', file), 'utf8');
      for (const n of names) expect(text, `${file} defines ${n} itself`).not.toMatch(new RegExp(`#define \\w*_${n}\\b`));
    }
  });
});
