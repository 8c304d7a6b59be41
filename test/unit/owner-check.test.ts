import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { HomesError } from '../../src/errors.js';
import { checkOwner, configOwners, existingOwnerProblems, ownerRefusal, type OwnerAssignment, type OwnerConflictReason, type OwnerFacts } from '../../src/scope/owner-check.js';
import { getentLookup, parseGetent, withoutOwn } from '../../src/users/hostids.js';

/** A made-up host: no test here depends on the machine's accounts. */
const FACTS: OwnerFacts = {
  range: { from: 200000, to: 299999 },
  holders: [
    { home: 't1/web', owner: { uid: 200000, gid: 200000 } },
    { home: 't1/api', owner: { uid: 200001, gid: 200007 } },
    { home: 'acme/a', owner: { uid: 200010, gid: 200010 } },
    { home: 'acme/b', owner: { uid: 200010, gid: 200010 } },
  ],
  retired: new Set([200005]),
  hostUsers: new Map([
    [1, 'daemon'],
    [101, 'postgres'],
    [1001, 'alice'],
    [250000, 'ldapuser'],
  ]),
  hostGroups: new Map([
    [104, 'postgres'],
    [1001, 'alice'],
    [250001, 'ldapgroup'],
  ]),
};

const fresh = (uid: number, gid = uid, over: Partial<OwnerAssignment> = {}): OwnerAssignment => ({
  home: 't2/web',
  owner: { uid, gid },
  kind: 'new',
  force: false,
  ...over,
});

describe('checkOwner: the owner rule', () => {
  const cases: Array<[string, OwnerAssignment, OwnerConflictReason[]]> = [
    ['a free id in the range', fresh(200100), []],
    ['root', fresh(0), ['owner-root']],
    ['root gid only', fresh(200100, 0), ['owner-root']],
    ['root, even forced', fresh(0, 0, { force: true }), ['owner-root']],
    ['the overflow id', fresh(65534), ['owner-overflow']],
    ['the overflow id, forced', fresh(65534, 65534, { force: true }), ['owner-overflow']],
    ["another tenant's home's uid", fresh(200000), ['owner-of-home']],
    ["another home's gid as a uid", fresh(200007, 200100), ['owner-of-home']],
    ["another home's uid, forced", fresh(200000, 200000, { force: true }), ['owner-of-home']],
    ['a retired id', fresh(200005), ['owner-retired']],
    ['a retired id, forced', fresh(200005, 200005, { force: true }), ['owner-retired']],
    ['a system account (daemon) out of range', fresh(1), ['owner-host-account', 'owner-out-of-range']],
    ['postgres uid, postgres gid', fresh(101, 104), ['owner-host-account', 'owner-out-of-range', 'owner-host-account', 'owner-out-of-range']],
    ['a system account, forced', fresh(1, 1, { force: true }), ['owner-host-account', 'owner-out-of-range']],
    ['an unknown system id, forced', fresh(500, 500, { force: true }), ['owner-out-of-range']],
    ['out of range', fresh(300050), ['owner-out-of-range']],
    ['out of range, forced', fresh(300050, 300050, { force: true }), []],
    ['a host account in range', fresh(250000, 250002), ['owner-host-account']],
    ['a host group in range', fresh(250002, 250001), ['owner-host-account']],
    ['a host account above the system ids, forced (adoption)', fresh(1001, 1001, { force: true }), []],
    ["another home of its tenant's uid", fresh(200000, 200100, { home: 't1/new' }), ['owner-of-home']],
    ["another home of its tenant's gid", fresh(200100, 200007, { home: 't1/new' }), ['owner-of-home']],
    ['an owner in force that homes of its tenant have', fresh(200010, 200010, { home: 'acme/c', kind: 'existing' }), ['owner-of-home', 'owner-of-home']],
    ['an owner in force that homes of another tenant have', fresh(200010, 200010, { home: 'other/c', kind: 'existing' }), ['owner-of-home', 'owner-of-home']],
    ["an owner in force with a gid another home of its tenant has", fresh(200100, 200007, { home: 't1/new', kind: 'existing' }), ['owner-of-home']],
    ['an existing owner outside a moved range', fresh(300050, 300050, { kind: 'existing' }), []],
    ['an existing owner that a deleted home shared', fresh(200005, 200005, { kind: 'existing' }), []],
    ['an existing owner that is a host account', fresh(250000, 250000, { kind: 'existing' }), ['owner-host-account']],
    ['an existing forced owner that is a host account above 999', fresh(1001, 1001, { kind: 'existing', force: true }), []],
    ['its own record is not another home', fresh(200000, 200000, { home: 't1/web', kind: 'existing' }), []],
  ];
  it.each(cases)('%s', (_name, a, reasons) => {
    const v = checkOwner(a, FACTS);
    expect(v.refused.map((c) => c.reason).sort()).toEqual([...reasons].sort());
  });

  it('names the home that has the id and the host account, and logs what force took', () => {
    const taken = checkOwner(fresh(200000), FACTS).refused[0]!;
    expect(taken).toMatchObject({ reason: 'owner-of-home', home: 't1/web' });
    expect(taken.message).toBe('uid 200000 belongs to the home t1/web');
    const pg = checkOwner(fresh(101, 104), FACTS).refused.filter((c) => c.reason === 'owner-host-account');
    expect(pg.map((c) => c.message)).toEqual(['uid 101 is the host\'s account "postgres" (a system id)', 'gid 104 is the host\'s group "postgres" (a system id)']);
    const forced = checkOwner(fresh(1001, 1001, { force: true }), FACTS);
    expect(forced.forced.map((c) => c.reason).sort()).toEqual(['owner-host-account', 'owner-host-account', 'owner-out-of-range']);
  });

  it('answers INVALID_ARGUMENT with every conflict, and says when --force would take it', () => {
    const err = ownerRefusal('t2/web', { uid: 300050, gid: 300050 }, checkOwner(fresh(300050), FACTS).refused);
    expect(err).toBeInstanceOf(HomesError);
    expect(err.code).toBe('INVALID_ARGUMENT');
    expect(err.details).toMatchObject({ reason: 'owner-out-of-range', conflicts: [{ reason: 'owner-out-of-range', kind: 'uid', id: 300050 }] });
    expect(err.message).toContain('--force takes it');
    const root = ownerRefusal('t2/web', { uid: 0, gid: 0 }, checkOwner(fresh(0), FACTS).refused);
    expect(root.message).toBe('owner 0:0 refused for t2/web: uid 0 is root: a home is never owned by root');
  });
});

describe('existingOwnerProblems: owners in force (start-up, reload, check-config)', () => {
  it('names the home, where its owner is written and every conflict, across tenants', () => {
    const owners = configOwners({
      'acme/a': { owner: { uid: 200010, gid: 200010 } },
      'beta/c': { owner: { uid: 200010, gid: 200010 } },
      'beta/d': {},
      'gamma/e': { owner: { uid: 0, gid: 0 } },
    });
    expect(owners.map((o) => o.home)).toEqual(['acme/a', 'beta/c', 'gamma/e']);
    const problems = existingOwnerProblems(owners, { ...FACTS, holders: owners });
    expect(problems).toEqual([
      'acme/a (configuration homes["acme/a"].owner): owner 200010:200010: uid 200010 belongs to the home beta/c',
      'beta/c (configuration homes["beta/c"].owner): owner 200010:200010: uid 200010 belongs to the home acme/a',
      'gamma/e (configuration homes["gamma/e"].owner): owner 0:0: uid 0 is root: a home is never owned by root',
    ]);
  });

  it('refuses two configured homes of one tenant with one owner, naming both', () => {
    const owners = configOwners({
      'acme/a': { owner: { uid: 200010, gid: 200010 } },
      'acme/b': { owner: { uid: 200010, gid: 200010 } },
      'acme/c': { owner: { uid: 200020, gid: 200020 } },
    });
    expect(existingOwnerProblems(owners, { ...FACTS, holders: owners })).toEqual([
      'acme/a (configuration homes["acme/a"].owner): owner 200010:200010: uid 200010 belongs to the home acme/b',
      'acme/b (configuration homes["acme/b"].owner): owner 200010:200010: uid 200010 belongs to the home acme/a',
    ]);
  });

  it('refuses two configured homes of one tenant that share only a gid', () => {
    const owners = configOwners({
      'acme/a': { owner: { uid: 200010, gid: 200030 } },
      'acme/b': { owner: { uid: 200011, gid: 200030 } },
    });
    expect(existingOwnerProblems(owners, { ...FACTS, holders: owners })).toEqual([
      'acme/a (configuration homes["acme/a"].owner): owner 200010:200030: gid 200030 belongs to the home acme/b',
      'acme/b (configuration homes["acme/b"].owner): owner 200011:200030: gid 200030 belongs to the home acme/a',
    ]);
  });
});

describe('host ids', () => {
  it('parses getent output, first answer per id', () => {
    const m = parseGetent('daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\nbin:x:2:2::/bin:/x\ndup:x:1:1::/:/x\n\ngarbage\n');
    expect([...m]).toEqual([
      [1, 'daemon'],
      [2, 'bin'],
    ]);
  });

  it("leaves out homesfs' own published records (same name and id), never someone else's", () => {
    const ids = { users: new Map([[200000, 't1-web-1234abcd'], [200001, 'alice']]), groups: new Map([[200000, 't1-web-1234abcd']]) };
    const r = withoutOwn(ids, [
      { name: 't1-web-1234abcd', uid: 200000, gid: 200000 },
      { name: 't1-api-99999999', uid: 200001, gid: 200001 },
    ]);
    expect([...r.users]).toEqual([[200001, 'alice']]);
    expect(r.groups.size).toBe(0);
  });

  const dir = mkdtempSync(join(tmpdir(), 'homesfs-getent-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const fake = (name: string, script: string) => {
    const p = join(dir, name);
    writeFileSync(p, `#!/bin/sh\n${script}\n`);
    chmodSync(p, 0o755);
    return p;
  };

  it('asks getent per database; "some key not found" (exit 2) still gives the ones found', async () => {
    const bin = fake('getent-2', 'if [ "$1" = passwd ]; then echo "daemon:x:1:1::/:/x"; else echo "adm:x:4:"; fi; exit 2');
    const r = await getentLookup({ bin })([1, 200000], [4]);
    expect([...r.users]).toEqual([[1, 'daemon']]);
    expect([...r.groups]).toEqual([[4, 'adm']]);
  });

  it('fails (never "unknown") when getent cannot answer', async () => {
    const bin = fake('getent-broken', 'exit 1');
    await expect(getentLookup({ bin })([1], [1])).rejects.toThrow(/getent (passwd|group) failed/);
  });
});
