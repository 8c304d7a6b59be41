import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import os from 'node:os';
import path from 'node:path';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { StateError, StateStore, type State } from '../../src/statefile/store.js';
import { STATE_VERSION } from '../../src/statefile/schema.js';

let dir: string;
let file: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'homesfs-state-'));
  file = path.join(dir, 'sub', 'state.json');
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const NOW = '2025-01-02T03:04:05.000Z';

async function stateError(p: Promise<unknown>): Promise<StateError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(StateError);
    return err as StateError;
  }
  throw new Error('expected a StateError');
}

async function writeRaw(content: unknown): Promise<void> {
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(file, typeof content === 'string' ? content : JSON.stringify(content));
}

const VALID = {
  version: 1,
  settings: { acme: { tenantDefault: 'tenant', projects: { web: 'project' }, users: { alice: 'user' } } },
  homes: { 'acme/web': { owner: { uid: 20000, gid: 20000 }, profile: 'home', budget: 1024, createdAt: NOW } },
  owners: { highWater: 20000, retired: [19999] },
};

describe('StateStore: load and round trip', () => {
  it('a missing file is an empty state; nothing is created until the first update', async () => {
    const store = await StateStore.load(file);
    expect(store.state).toEqual({ version: STATE_VERSION, settings: {}, homes: {}, owners: { retired: [] } });
    await expect(stat(path.dirname(file))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('keeps limit overrides and rename forwards through updates and a reload', async () => {
    const store = await StateStore.load(file);
    await store.update((s) => {
      s.homes['acme/web'] = { owner: { uid: 20000, gid: 20000 }, budget: 0, maxInodes: 4, maxFileBytes: 10240, createdAt: NOW };
      s.forwards = { 'acme/shop': { to: 'acme/web', at: NOW } };
    });
    // an unrelated update must not drop them
    await store.update((s) => {
      s.settings.acme = { projects: {}, users: {} };
    });
    for (const st of [store.state, (await StateStore.load(file)).state]) {
      expect(st.homes['acme/web']).toEqual({ owner: { uid: 20000, gid: 20000 }, budget: 0, maxInodes: 4, maxFileBytes: 10240, createdAt: NOW });
      expect(st.forwards).toEqual({ 'acme/shop': { to: 'acme/web', at: NOW } });
    }
    await writeRaw({ ...VALID, forwards: { 'acme/x': { to: '../etc', at: NOW } } });
    expect((await stateError(StateStore.load(file))).issues.join('\n')).toMatch(/forwards\.acme\/x\.to/);
  });

  it('the first update creates the directory 0700 and the file 0600', async () => {
    const store = await StateStore.load(file);
    await store.update((s) => {
      s.settings.acme = { projects: {}, users: {}, tenantDefault: 'tenant' };
    });
    expect((await stat(path.dirname(file))).mode & 0o777).toBe(0o700);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
  });

  it('the file mode is 0600 whatever the umask', async () => {
    const old = process.umask(0o000);
    try {
      const store = await StateStore.load(file);
      await store.update((s) => {
        s.homes['acme/_tenant'] = { owner: { uid: 1, gid: 1 }, createdAt: NOW };
      });
      expect((await stat(file)).mode & 0o777).toBe(0o600);
    } finally {
      process.umask(old);
    }
  });

  it('round trip: what is written is what a restart loads', async () => {
    const a = await StateStore.load(file);
    await a.update((s) => {
      s.settings.acme = { tenantDefault: 'tenant', projects: { web: 'project', api: 'garbage-kept-as-is' }, users: { alice: 'user' } };
      s.homes['acme/web'] = { owner: { uid: 20000, gid: 20000 }, profile: 'home', budget: 0, createdAt: NOW };
      s.homes['acme/_user_alice'] = { owner: { uid: 20001, gid: 20001 }, createdAt: NOW };
    });
    const b = await StateStore.load(file);
    expect(b.state).toEqual(a.state);
    expect(b.state.settings.acme?.projects.api).toBe('garbage-kept-as-is');
    expect(JSON.parse(await readFile(file, 'utf8'))).toEqual(a.state);
  });

  it('loads a hand-written valid file; projects/users may be omitted', async () => {
    await writeRaw({ version: 1, settings: { acme: { tenantDefault: 'user' } }, homes: {} });
    const store = await StateStore.load(file);
    expect(store.state.settings.acme).toEqual({ tenantDefault: 'user', projects: {}, users: {} });
    await writeRaw(VALID);
    expect((await StateStore.load(file)).state).toEqual(VALID);
  });

  it('tenant overrides round-trip; a state without them stays without them', async () => {
    const a = await StateStore.load(file);
    await a.update((s) => {
      s.tenants ??= {};
      s.tenants.acme = { maxBytes: 0 };
      s.tenants.beta = { maxBytes: 1048576 };
    });
    const b = await StateStore.load(file);
    expect(b.state.tenants).toEqual({ acme: { maxBytes: 0 }, beta: { maxBytes: 1048576 } });
    await writeRaw(VALID);
    expect((await StateStore.load(file)).state).not.toHaveProperty('tenants');
  });

  it('the state is deeply frozen: changes go through update only', async () => {
    await writeRaw(VALID);
    const store = await StateStore.load(file);
    expect(() => {
      (store.state.homes['acme/web'] as { budget?: number }).budget = 5;
    }).toThrow(TypeError);
    expect(() => {
      (store.state.settings as Record<string, unknown>).evil = {};
    }).toThrow(TypeError);
  });

  it('names like "constructor" are plain keys, and a draft can never reach Object.prototype', async () => {
    const CTOR: string = 'constructor';
    const store = await StateStore.load(file);
    expect(store.state.settings[CTOR]).toBeUndefined();
    await store.update((s) => {
      const t = (s.settings[CTOR] ??= { projects: {}, users: {} });
      t.projects['toString'] = 'tenant';
    });
    expect(({} as Record<string, unknown>).projects).toBeUndefined();
    const again = await StateStore.load(file);
    expect(again.state.settings[CTOR]?.projects['toString']).toBe('tenant');
  });

  it('a "__proto__" name is refused, never silently dropped', async () => {
    const store = await StateStore.load(file);
    const err = await stateError(
      store.update((s) => {
        (s.settings.__proto__ as unknown) ??= { projects: {}, users: {} };
      }),
    );
    expect(err.issues.join('\n')).toMatch(/settings\.__proto__/);
    expect(({} as Record<string, unknown>).projects).toBeUndefined();
    await writeRaw('{"version":1,"settings":{"__proto__":{"tenantDefault":"tenant"}},"homes":{}}');
    expect((await stateError(StateStore.load(file))).issues.join('\n')).toMatch(/settings\.__proto__/);
  });
});

describe('StateStore: corrupt files are refused with every issue and its path', () => {
  const cases: Array<[string, unknown, RegExp[]]> = [
    ['not JSON', '{"version": 1,', [/^\(root\): not JSON/]],
    ['empty file', '', [/not JSON/]],
    ['JSON but not an object', '[1,2]', [/\(root\)/]],
    ['wrong version', { ...VALID, version: 2 }, [/^version: /]],
    ['missing version', { settings: {}, homes: {} }, [/^version: /]],
    ['negative budget', { ...VALID, homes: { 'acme/web': { ...VALID.homes['acme/web'], budget: -1 } } }, [/^homes\.acme\/web\.budget: /]],
    ['fractional budget', { ...VALID, homes: { 'acme/web': { ...VALID.homes['acme/web'], budget: 1.5 } } }, [/^homes\.acme\/web\.budget: /]],
    ['unknown top-level key', { ...VALID, extra: 1 }, [/^\(root\): .*extra/]],
    ['unknown home key', { ...VALID, homes: { 'acme/web': { ...VALID.homes['acme/web'], quota: 1 } } }, [/^homes\.acme\/web: .*quota/]],
    ['unknown owner key', { ...VALID, homes: { 'acme/web': { ...VALID.homes['acme/web'], owner: { uid: 1, gid: 1, mode: 7 } } } }, [/^homes\.acme\/web\.owner: .*mode/]],
    ['missing owner', { ...VALID, homes: { 'acme/web': { createdAt: NOW } } }, [/^homes\.acme\/web\.owner: /]],
    ['negative uid', { ...VALID, homes: { 'acme/web': { ...VALID.homes['acme/web'], owner: { uid: -1, gid: 1 } } } }, [/^homes\.acme\/web\.owner\.uid: /]],
    ['bad createdAt', { ...VALID, homes: { 'acme/web': { ...VALID.homes['acme/web'], createdAt: 'yesterday' } } }, [/^homes\.acme\/web\.createdAt: /]],
    ['home key without tenant', { ...VALID, homes: { web: VALID.homes['acme/web'] } }, [/^homes\.web: /]],
    ['home key escaping', { ...VALID, homes: { 'acme/..': VALID.homes['acme/web'] } }, [/^homes\.acme\/\.\.: /]],
    ['home key with a bad reserved name', { ...VALID, homes: { 'acme/_shared': VALID.homes['acme/web'] } }, [/^homes\.acme\/_shared: /]],
    ['tenant name with backslash', { ...VALID, settings: { 'a\\b': { projects: {}, users: {} } } }, [/^settings\.a\\b: /]],
    ['project name beginning with _', { ...VALID, settings: { acme: { projects: { _user_alice: 'tenant' }, users: {} } } }, [/^settings\.acme\.projects\._user_alice: /]],
    ['over-long setting value', { ...VALID, settings: { acme: { tenantDefault: 'x'.repeat(257), projects: {}, users: {} } } }, [/^settings\.acme\.tenantDefault: /]],
    ['negative tenant budget', { ...VALID, tenants: { acme: { maxBytes: -1 } } }, [/^tenants\.acme\.maxBytes: /]],
    ['tenant budget record with an unknown key', { ...VALID, tenants: { acme: { maxBytes: 1, max: 2 } } }, [/^tenants\.acme: .*max/]],
    ['tenant budget for an invalid tenant name', { ...VALID, tenants: { '.x': { maxBytes: 1 } } }, [/^tenants\.\.x: /]],
    ['non-string setting value', { ...VALID, settings: { acme: { projects: { web: 1 }, users: {} } } }, [/^settings\.acme\.projects\.web: /]],
    [
      'several problems at once',
      { version: 3, settings: { acme: { tenantDefault: 5, projects: {}, users: {} } }, homes: { 'acme/web': { ...VALID.homes['acme/web'], budget: -4 } } },
      [/^version: /, /^settings\.acme\.tenantDefault: /, /^homes\.acme\/web\.budget: /],
    ],
  ];
  it.each(cases)('%s', async (_name, content, want) => {
    await writeRaw(content);
    const err = await stateError(StateStore.load(file));
    for (const re of want) expect(err.issues.some((i) => re.test(i)), `${re} in ${JSON.stringify(err.issues)}`).toBe(true);
    expect(err.message).toContain(file);
    expect(err.path).toBe(file);
  });

  it('a garbage setting value is kept, not refused: resolveScope treats it as project', async () => {
    await writeRaw({ ...VALID, settings: { acme: { tenantDefault: 'Tenant', projects: {}, users: {} } } });
    expect((await StateStore.load(file)).state.settings.acme?.tenantDefault).toBe('Tenant');
  });

  it('a directory or a FIFO at the path is refused without hanging', async () => {
    await mkdir(file, { recursive: true });
    expect((await stateError(StateStore.load(file))).issues[0]).toMatch(/not a regular file/);
    await rm(file, { recursive: true });
    const { execFileSync } = await import('node:child_process');
    execFileSync('mkfifo', [file]);
    expect((await stateError(StateStore.load(file))).issues[0]).toMatch(/not a regular file/);
  });
});

describe('StateStore: atomic, serialised updates', () => {
  it('a mutator that throws changes nothing', async () => {
    await writeRaw(VALID);
    const store = await StateStore.load(file);
    const before = await readFile(file, 'utf8');
    await expect(
      store.update((s) => {
        s.homes['acme/web']!.budget = 99;
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(store.state).toEqual(VALID);
    expect(await readFile(file, 'utf8')).toBe(before);
  });

  it('an invalid result is a StateError and changes nothing', async () => {
    await writeRaw(VALID);
    const store = await StateStore.load(file);
    const err = await stateError(
      store.update((s) => {
        s.homes['acme/web']!.budget = -1;
      }),
    );
    expect(err.issues.join()).toMatch(/homes\.acme\/web\.budget/);
    expect(store.state.homes['acme/web']!.budget).toBe(1024);
    expect(JSON.parse(await readFile(file, 'utf8'))).toEqual(VALID);
  });

  it('an async mutator is refused', async () => {
    const store = await StateStore.load(file);
    await expect(store.update((async () => undefined) as unknown as (s: State) => void)).rejects.toThrow(/synchronous/);
    expect(store.state).toEqual({ version: 1, settings: {}, homes: {}, owners: { retired: [] } });
  });

  it('a failed write leaves memory and file as before, and no temp file', async () => {
    await writeRaw(VALID);
    const store = await StateStore.load(file);
    // A non-empty directory where the file was: rename fails even for root.
    await rm(file);
    await mkdir(path.join(file, 'blocker'), { recursive: true });
    await expect(
      store.update((s) => {
        s.homes['acme/web']!.budget = 7;
      }),
    ).rejects.toMatchObject({ code: expect.stringMatching(/EISDIR|ENOTEMPTY|EEXIST/) });
    expect(store.state.homes['acme/web']!.budget).toBe(1024);
    expect((await readdir(path.dirname(file))).sort()).toEqual(['state.json']);
    // the queue is not stuck after a failure
    await rm(file, { recursive: true });
    await store.update((s) => {
      s.homes['acme/web']!.budget = 8;
    });
    expect(JSON.parse(await readFile(file, 'utf8')).homes['acme/web'].budget).toBe(8);
  });

  it('many concurrent updates: none lost, the file always parses, no temp files left', async () => {
    const store = await StateStore.load(file);
    await store.update((s) => {
      s.settings.acme = { projects: {}, users: {} };
    });
    let reading = true;
    let reads = 0;
    const reader = (async () => {
      while (reading) {
        const text = await readFile(file, 'utf8');
        expect(() => JSON.parse(text)).not.toThrow();
        reads++;
        await new Promise((r) => setImmediate(r));
      }
    })();
    const N = 60;
    const results = await Promise.allSettled(
      Array.from({ length: N }, (_, i) =>
        store.update((s) => {
          if (i % 10 === 7) throw new Error(`planned failure ${i}`);
          s.settings.acme!.projects[`p${i}`] = i % 2 ? 'tenant' : 'project';
          s.homes[`acme/p${i}`] = { owner: { uid: 20000 + i, gid: 20000 + i }, createdAt: NOW };
        }),
      ),
    );
    reading = false;
    await reader;
    expect(reads).toBeGreaterThan(0);
    const expected = Array.from({ length: N }, (_, i) => i).filter((i) => i % 10 !== 7);
    expect(results.filter((r) => r.status === 'rejected')).toHaveLength(N - expected.length);
    expect(Object.keys(store.state.homes).sort()).toEqual(expected.map((i) => `acme/p${i}`).sort());
    const onDisk = JSON.parse(await readFile(file, 'utf8')) as State;
    expect(onDisk).toEqual(store.state);
    expect((await StateStore.load(file)).state).toEqual(store.state);
    expect(await readdir(path.dirname(file))).toEqual(['state.json']);
  });

  it('updates queued behind a slow one see its result', async () => {
    const store = await StateStore.load(file);
    const seen: number[] = [];
    await Promise.all(
      Array.from({ length: 20 }, () =>
        store.update((s) => {
          const n = Object.keys(s.homes).length;
          seen.push(n);
          s.homes[`acme/h${n}`] = { owner: { uid: 1000 + n, gid: 1000 + n }, createdAt: NOW };
        }),
      ),
    );
    expect(seen).toEqual(Array.from({ length: 20 }, (_, i) => i));
    await store.flush();
  });
});

describe('StateStore: crash leftovers', () => {
  it('a half-written temp file next to a good file is ignored and removed', async () => {
    await writeRaw(VALID);
    await writeFile(`${file}.tmp-4242-0`, '{"version":1,"settings":{"ac');
    await writeFile(`${file}.tmp-1-17`, JSON.stringify({ ...VALID, homes: {} }));
    const store = await StateStore.load(file);
    expect(store.state).toEqual(VALID);
    expect(await readdir(path.dirname(file))).toEqual(['state.json']);
  });

  it('a temp file without the real file is never promoted', async () => {
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(`${file}.tmp-${process.pid}-0`, JSON.stringify(VALID));
    const store = await StateStore.load(file);
    expect(store.state).toEqual({ version: 1, settings: {}, homes: {}, owners: { retired: [] } });
    expect(await readdir(path.dirname(file))).toEqual([]);
    // and our own first temp name is free again
    await store.update((s) => {
      s.settings.acme = { projects: {}, users: {} };
    });
    expect(await readdir(path.dirname(file))).toEqual(['state.json']);
  });

  it('other files in the directory are left alone', async () => {
    await writeRaw(VALID);
    await writeFile(path.join(path.dirname(file), 'other.json.tmp-1-0'), 'x');
    await writeFile(path.join(path.dirname(file), 'state.json.bak'), 'x');
    await StateStore.load(file);
    expect((await readdir(path.dirname(file))).sort()).toEqual(['other.json.tmp-1-0', 'state.json', 'state.json.bak']);
  });
});
