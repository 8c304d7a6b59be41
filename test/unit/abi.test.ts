import { constants, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ABI, abiMismatches } from '../../src/abi.js';
import { HIDDEN_NAME, HIDDEN_NAME_PREFIX } from '../../src/fs/hidden.js';
import { checkComponent, NAME_MAX_BYTES } from '../../src/paths/names.js';
import { BUILTIN_PROFILES, ProfileShape } from '../../src/policy/profiles.js';
import { presentationMasks } from '../../src/fuse/fastpath.js';

const ROOT = join(import.meta.dirname, '..', '..');

/** The X(name, value) entries of both lists and the version of native/src/abi.h, as the C preprocessor would see them. */
function parseAbiHeader(): Record<string, number | string> {
  const text = readFileSync(join(ROOT, 'native/src/abi.h'), 'utf8').replace(/\/\*[\s\S]*?\*\//g, '');
  const out: Record<string, number | string> = {};
  const version = /#define HOMESFS_ABI_VERSION (\d+)/.exec(text);
  if (version) out.VERSION = Number(version[1]);
  const list = (name: string): string => new RegExp(`#define ${name}\\(X\\)((?:[^\\n]*\\\\\\n)*[^\\n]*)`).exec(text)?.[1] ?? '';
  for (const m of list('HOMESFS_ABI_CONSTANTS').matchAll(/X\((\w+),\s*(\d+)\)/g)) out[m[1]!] = Number(m[2]);
  for (const m of list('HOMESFS_ABI_STRINGS').matchAll(/X\((\w+),\s*"([^"\\]*)"\)/g)) out[m[1]!] = m[2]!;
  return out;
}

/** Every file under `dir` (relative to the repository) whose name matches `ext`. */
function sources(dir: string, ext: RegExp): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? sources(join(dir, e.name), ext) : ext.test(e.name) ? [join(dir, e.name)] : []));
}

describe('the native ABI', () => {
  it('native/src/abi.h and src/abi.ts define the same names with the same values', () => {
    const header = parseAbiHeader();
    expect(Object.keys(header).length).toBeGreaterThan(20);
    expect(header).toEqual({ ...ABI });
    expect(typeof header.HIDDEN_PREFIX).toBe('string');
  });

  it('MAX_SAFE_INTEGER is JavaScript\'s, and NAME_MAX the cap every name check applies', () => {
    expect(ABI.MAX_SAFE_INTEGER).toBe(Number.MAX_SAFE_INTEGER);
    expect(NAME_MAX_BYTES).toBe(ABI.NAME_MAX);
    expect(() => checkComponent('a'.repeat(ABI.NAME_MAX))).not.toThrow();
    expect(() => checkComponent('a'.repeat(ABI.NAME_MAX + 1))).toThrow();
    expect(ProfileShape.shape.maxNameBytes.safeParse(ABI.NAME_MAX).success).toBe(true);
    expect(ProfileShape.shape.maxNameBytes.safeParse(ABI.NAME_MAX + 1).success).toBe(false);
  });

  it('MODE_TYPES covers every file type a mode holds, and the presentation masks are laid out by it', () => {
    expect(ABI.MODE_TYPES).toBe((constants.S_IFMT >> 12) + 1);
    const { types, masks } = presentationMasks(BUILTIN_PROFILES.home);
    expect(masks.length).toBe(2 * ABI.MODE_TYPES);
    expect(types >>> ABI.MODE_TYPES).toBe(0);
  });

  it('the hidden names are the ones the session makes: abi.h prefix and digit count', () => {
    expect(HIDDEN_NAME_PREFIX).toBe(ABI.HIDDEN_PREFIX);
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
    const files = sources('native/src', /\.[ch]$/)
      .map((f) => f.slice('native/src/'.length))
      .filter((f) => f !== 'abi.h');
    expect(files).toEqual(expect.arrayContaining(['fastpath/fastpath_state.c', 'session/ops_files.c', 'addon.c']));
    for (const file of files) {
      const text = readFileSync(join(ROOT, 'native/src', file), 'utf8');
      for (const n of names) expect(text, `${file} defines ${n} itself`).not.toMatch(new RegExp(`#define \\w*_${n}\\b`));
    }
  });

  it('no source restates a shared value abi.h gives: 2^53 - 1, the hidden prefix (C and TypeScript), NAME_MAX (C)', () => {
    const restated = [String(ABI.MAX_SAFE_INTEGER), '0x1fffffffffffff', `"${ABI.HIDDEN_PREFIX}`, `'${ABI.HIDDEN_PREFIX}`, `\`${ABI.HIDDEN_PREFIX}`];
    const files = [...sources('native/src', /\.[ch]$/), ...sources('src', /\.ts$/)].filter((f) => f !== join('native/src', 'abi.h') && f !== join('src', 'abi.ts'));
    expect(files.length).toBeGreaterThan(100);
    for (const file of files) {
      const text = readFileSync(join(ROOT, file), 'utf8');
      for (const literal of restated) expect(text.includes(literal), `${file} restates ${literal}`).toBe(false);
      // NAME_MAX in C: every comparison of a name's length with 255.
      if (file.endsWith('.c') || file.endsWith('.h')) expect(text, `${file} compares with 255 itself`).not.toMatch(/[<>]=? *255\b/);
    }
  });
});
