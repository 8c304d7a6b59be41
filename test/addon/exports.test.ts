// The addon's contract is one interface (src/addon-raw.ts AddonRaw): the
// compiler holds the code to it, this holds it to the addon.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadFuse } from '../../src/fuse/binding.js';

const here = path.dirname(fileURLToPath(import.meta.url));

describe('the addon contract', () => {
  it('AddonRaw names every export of the addon the ABI check lets through, and nothing else', () => {
    const src = readFileSync(path.join(here, '../../src/addon-raw.ts'), 'utf8');
    const body = src.slice(src.indexOf('export interface AddonRaw'));
    const declared = [...body.slice(0, body.indexOf('\n}\n')).matchAll(/^ {2}(?:readonly )?(\w+)[(:]/gm)].map((m) => m[1]!).sort();
    expect(declared.length).toBeGreaterThan(50);
    expect(Object.keys(loadFuse().native).sort()).toEqual(declared);
  });
});
