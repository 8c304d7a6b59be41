import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigSchema } from '../../src/config/schema.js';
import { commands } from '../../src/control/commands.js';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';

/**
 * The reference pages under docs/ held to the code, as readme.test.ts holds
 * the README's errno and exit-code tables: a key, metric, command or module
 * added or renamed in the code without its page fails here, and so does a
 * page naming one the code does not have.
 */

const ROOT = join(import.meta.dirname, '../..');
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');

/** The key paths of the configuration schema (records as `*`), from its JSON Schema. */
function schemaKeys(): string[] {
  const js = z.toJSONSchema(ConfigSchema, { unrepresentable: 'any', io: 'input' });
  const out = new Set<string>();
  const walk = (s: Record<string, unknown>, path: string): void => {
    for (const [k, v] of Object.entries((s.properties ?? {}) as Record<string, Record<string, unknown>>)) {
      const p = path ? `${path}.${k}` : k;
      out.add(p);
      walk(v, p);
    }
    if (s.additionalProperties && typeof s.additionalProperties === 'object') walk(s.additionalProperties as Record<string, unknown>, `${path}.*`);
    for (const sub of [...((s.anyOf ?? []) as Record<string, unknown>[]), ...((s.allOf ?? []) as Record<string, unknown>[])]) walk(sub, path);
  };
  walk(js as Record<string, unknown>, '');
  return [...out];
}

/** `tenants.<t>.maxBytes` → `tenants.*.maxBytes`, `homes["<t>/<k>"].owner` → `homes.*.owner`. */
const normalise = (key: string) => key.replace(/\["<t>\/<k>"\]/g, '.*').replace(/\.<[a-z]>\./g, '.*.');

/** The keys the configuration reference has an entry for: its `### ` headings, each naming one or more keys. */
function documentedKeys(page: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of page.matchAll(/^### (.+)$/gm)) {
    for (const k of m[1]!.matchAll(/`([^`]+)`/g)) out.set(normalise(k[1]!), m[1]!);
  }
  return out;
}

/**
 * The keys that get an entry: every key of the top level and of its fixed
 * groups (fuse, limits, probe, metrics, exec, userdb) and of a tenant's and a
 * home's entry, but not the groups themselves; of a profile only the soft
 * limits (every profile field is on docs/profiles.md).
 */
function expectedKeys(): string[] {
  const groups = new Set(['fuse', 'limits', 'probe', 'metrics', 'exec', 'userdb', 'tenants', 'homes', 'tenants.*', 'homes.*']);
  return schemaKeys().filter((k) => {
    if (groups.has(k)) return false;
    const parent = k.includes('.') ? k.slice(0, k.lastIndexOf('.')) : '';
    if (parent === '' || groups.has(parent)) return true;
    return k === 'profiles.*.softHomeBytes' || k === 'profiles.*.softInodes';
  });
}

describe('docs/configuration.md stays true to src/config/schema.ts', () => {
  const page = read('docs/configuration.md');

  it('has an entry for every key of the schema, and none for a key it does not have', () => {
    const documented = documentedKeys(page);
    const expected = expectedKeys();
    expect(expected.length).toBeGreaterThan(50);
    for (const k of expected) expect(documented.has(k), `docs/configuration.md has no "### \`${k}\`" entry`).toBe(true);
    expect([...documented.keys()].filter((k) => !expected.includes(k)), 'entries naming no key of the schema').toEqual([]);
  });

  it('marks restart-only exactly the keys a reload refuses to change (src/daemon.ts RESTART_KEYS)', () => {
    const m = /const RESTART_KEYS = \[([^\]]*)\]/.exec(read('src/daemon.ts'));
    expect(m, 'src/daemon.ts declares RESTART_KEYS').not.toBeNull();
    const restart = new Set([...m![1]!.matchAll(/'([A-Za-z]+)'/g)].map((x) => x[1]!));
    const rows = [...page.matchAll(/^\| \[(.+?)\]\(#[^)]*\) \| .* \| (yes|restart) \|$/gm)];
    expect(rows.length).toBeGreaterThan(40);
    for (const [, keys, mark] of rows) {
      for (const k of keys!.matchAll(/`([^`]+)`/g)) {
        const top = k[1]!.split(/[.[]/)[0]!;
        expect(mark, `reload mark of ${k[1]}`).toBe(restart.has(top) ? 'restart' : 'yes');
      }
    }
  });
});

describe('docs/metrics.md stays true to src/metrics/exposition.ts', () => {
  it('lists every metric the endpoint exposes, and no other', () => {
    const code = new Set([...read('src/metrics/exposition.ts').matchAll(/'(homesfs_[a-z_]+)'/g)].map((m) => m[1]!));
    const page = read('docs/metrics.md');
    const rows = page.split('\n').filter((l) => l.startsWith('| `homesfs_'));
    const documented = new Set(rows.flatMap((l) => [...l.split(' | ')[0]!.matchAll(/`(homesfs_[a-z_]+)`/g)].map((m) => m[1]!)));
    expect(code.size).toBeGreaterThan(20);
    expect([...documented].sort()).toEqual([...code].sort());
  });
});

describe('docs/homesctl.md stays true to the command table', () => {
  it('has an entry for every command the daemon serves, and no other', () => {
    const page = read('docs/homesctl.md');
    const section = /^## Commands on the wire$([\s\S]*?)^## /m.exec(page);
    expect(section, 'docs/homesctl.md has a "Commands on the wire" section').not.toBeNull();
    const entries = [...section![1]!.matchAll(/^### `([a-z-]+)`$/gm)].map((m) => m[1]!);
    expect(entries.sort()).toEqual(Object.keys(commands).sort());
  });
});

/** A limit as the pages write it: `off`, `1,000,000`, `2 GiB (2147483648)` (the exact bytes win), `4 MiB`. */
function limitValue(cell: string): number {
  const t = cell.trim();
  if (t === 'off') return 0;
  const exact = /\((\d+)\)$/.exec(t);
  if (exact) return Number(exact[1]);
  const m = /^([\d,]+)(?: (KiB|MiB|GiB))?$/.exec(t);
  if (!m) throw new Error(`not a limit: ${cell}`);
  return Number(m[1]!.replace(/,/g, '')) * { '': 1, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3 }[m[2] ?? '']!;
}

describe('the built-in profiles as the pages quote them (src/policy/profiles.ts)', () => {
  const names = ['home', 'scratch', 'posix'] as const;

  it('docs/profiles.md: every numeric limit of the table', () => {
    const rows = new Map(
      read('docs/profiles.md')
        .split('\n')
        .filter((l) => l.startsWith('| '))
        .map((l) => l.slice(2, -2).split(' | '))
        .map((c) => [c[0]!, c.slice(1)] as const),
    );
    const single = { maxHomeBytes: 'home budget (`maxHomeBytes`)', maxInodes: 'inodes (`maxInodes`)', maxFileBytes: 'per-file (`maxFileBytes`)', maxOpenFiles: 'open files (`maxOpenFiles`)' } as const;
    names.forEach((p, i) => {
      for (const [field, rule] of Object.entries(single)) {
        expect(limitValue(rows.get(rule)![i]!), `${p} ${field}`).toBe(BUILTIN_PROFILES[p][field as keyof typeof single]);
      }
      const [depth, entries, nameBytes] = rows.get('max depth / entries per dir / name bytes')![i]!.split(' / ').map(limitValue);
      expect([depth, entries, nameBytes], `${p} maxDepth / maxEntriesPerDir / maxNameBytes`).toEqual([BUILTIN_PROFILES[p].maxDepth, BUILTIN_PROFILES[p].maxEntriesPerDir, BUILTIN_PROFILES[p].maxNameBytes]);
    });
  });

  it("README's profile table: budget / inodes / per file", () => {
    const readme = read('README.md');
    for (const p of names) {
      const row = readme.split('\n').find((l) => l.startsWith(`| \`${p}\``));
      expect(row, `README has a profile row for ${p}`).toBeDefined();
      const limits = row!.split(' | ')[1]!.split(' / ').map(limitValue);
      expect(limits, p).toEqual([BUILTIN_PROFILES[p].maxHomeBytes, BUILTIN_PROFILES[p].maxInodes, BUILTIN_PROFILES[p].maxFileBytes]);
    }
  });
});

describe('docs/architecture.md names every module', () => {
  it('has a layout line for every entry of src/', () => {
    const page = read('docs/architecture.md');
    const block = /## Layout[\s\S]*?```\n([\s\S]*?)```/.exec(page)![1]!;
    const named = new Set(block.split('\n').map((l) => l.split(/\s+/)[0]!));
    for (const e of readdirSync(join(ROOT, 'src'))) {
      const name = statSync(join(ROOT, 'src', e)).isDirectory() ? `src/${e}/` : `src/${e}`;
      expect(named.has(name), `docs/architecture.md's layout has no line for ${name}`).toBe(true);
    }
  });
});

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
const slug = (heading: string) =>
  heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');

describe('links between the pages', () => {
  const pages = ['README.md', ...readdirSync(join(ROOT, 'docs')).map((f) => `docs/${f}`), 'bench/results.md', 'deploy/kubernetes/README.md', 'native-notes/native-layer.md'];
  const anchors = (path: string) => {
    const text = read(path).replace(/^```[\s\S]*?^```$/gm, '');
    return new Set([...text.matchAll(/^#{1,6} (.+)$/gm)].map((m) => slug(m[1]!)));
  };

  it.each(pages)('every relative link of %s reaches a file, and a heading when it names one', (page) => {
    const text = read(page).replace(/^```[\s\S]*?^```$/gm, '');
    const bad: string[] = [];
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1]!;
      if (/^[a-z]+:/.test(target)) continue;
      const [file, hash] = target.split('#') as [string, string | undefined];
      const path = file === '' ? page : relative(ROOT, join(ROOT, dirname(page), file));
      if (!existsSync(join(ROOT, path))) {
        bad.push(`${target}: no file ${path}`);
        continue;
      }
      if (hash !== undefined && path.endsWith('.md') && !anchors(path).has(hash)) bad.push(`${target}: no heading #${hash} in ${path}`);
    }
    expect(bad).toEqual([]);
  });
});

/**
 * native-notes §6.7, "Answers C gives itself": every rule C applies from
 * values JavaScript published, with the C function that applies it, the
 * TypeScript function that is its specification and the tests that hold them
 * equal. A name in it that the code or the tests no longer have fails here.
 */
describe('native-notes: answers C gives itself', () => {
  const notes = read('native-notes/native-layer.md');
  const section = /^### 6\.7 Answers C gives itself\n([\s\S]*?)^##? /m.exec(notes)?.[1] ?? '';
  const rows = [...section.matchAll(/^\| (?!Rule \||---)(.+) \|$/gm)].map((m) => m[1]!.split(/ \| /));
  /** The `a: b` items of a cell (text outside backticks is prose). */
  const items = (cell: string) => [...cell.matchAll(/`([^`:]+): ([^`]+)`/g)].map((m) => [m[1]!, m[2]!] as const);
  const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const cSources = (dir: string): string[] =>
    readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? cSources(join(dir, e.name)) : /\.[ch]$/.test(e.name) ? [join(dir, e.name)] : []));

  it('has a row for each rule, each with a C function, a TypeScript specification and a test', () => {
    expect(rows.length).toBeGreaterThanOrEqual(15);
    for (const r of rows) {
      expect(r.length, r.join(' | ')).toBe(4);
      for (const cell of r.slice(1)) expect(items(cell).length, `${r[0]}: ${cell}`).toBeGreaterThan(0);
    }
  });

  it('names C functions the C sources define (files by name, wherever native/src keeps them)', () => {
    const files = cSources('native/src');
    for (const [file, fn] of rows.flatMap((r) => items(r[1]!))) {
      const found = files.filter((f) => f.endsWith(`/${file}`) || f === join('native/src', file));
      expect(found.length, `${file}: no such file under native/src`).toBe(1);
      expect(read(found[0]!), `${file} defines no ${fn}`).toMatch(new RegExp(`^[a-z][^;(\\n]*\\b${escape(fn)} ?\\(`, 'm'));
    }
  });

  it('names TypeScript functions, methods and constants src/ defines', () => {
    for (const [file, name] of rows.flatMap((r) => items(r[2]!))) {
      expect(existsSync(join(ROOT, file)), `${file}: no such file`).toBe(true);
      const text = read(file);
      const [owner, member] = name.includes('.') ? (name.split('.') as [string, string]) : [null, name];
      if (owner !== null) expect(text, `${file} has no class ${owner}`).toMatch(new RegExp(`\\bclass ${escape(owner)}\\b`));
      const def =
        owner !== null
          ? new RegExp(`^\\s+(?:(?:private|protected|public|static|async|readonly)\\s+)*${escape(member)}\\s*[(<]`, 'm')
          : new RegExp(`^(?:export )?(?:async )?(?:function\\*? |const |let |class )${escape(member)}\\b`, 'm');
      expect(text, `${file} defines no ${name}`).toMatch(def);
    }
  });

  it('names tests that exist: switch-diff variants, and test titles (a title may be cited by its beginning)', () => {
    const variants = [...read('test/integration/switch-diff.test.ts').matchAll(/\{ name: '(\w+)', off:/g)].map((m) => m[1]!);
    expect(variants.length).toBeGreaterThan(5);
    let switchDiff = 0;
    for (const [file, title] of rows.flatMap((r) => items(r[3]!))) {
      if (file === 'switch-diff') {
        const v = /^(\w+) off$/.exec(title)?.[1];
        expect(v !== undefined && variants.includes(v), `switch-diff has no variant "${title}"`).toBe(true);
        switchDiff++;
        continue;
      }
      expect(existsSync(join(ROOT, file)), `${file}: no such file`).toBe(true);
      const text = read(file).replace(/\\(['"`])/g, '$1');
      expect(text, `${file} has no test "${title}"`).toMatch(new RegExp(`\\bit(?:\\.each\\([^)]*\\))?\\(\\s*['"\`]${escape(title)}`));
    }
    expect(switchDiff).toBeGreaterThan(10);
  });
});
