import { constants as C } from 'node:fs';
import { lstat, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BackingStore } from '../../dist/backing/store.js';
import { loadConfig } from '../../dist/config/load.js';
import { HomesError } from '../../dist/errors.js';
import { FsContext } from '../../dist/fs/context.js';
import * as file from '../../dist/fs/file.js';
import { HomeManager } from '../../dist/homes/manager.js';
import { StateStore } from '../../dist/statefile/store.js';
import type { HostIds } from '../../src/users/hostids.js';

/**
 * The home manager on a real backing directory and state file, without a
 * mount or a socket: creation and owners, resolve through the scope cascade,
 * live limits, settings. From dist/ (the ledger scan's worker thread loads
 * its module there); as root (the store chowns homes to their owners).
 */
const asRoot = process.getuid?.() === 0;
const notUsed = () => Promise.reject(new Error('not used by these tests'));

describe.skipIf(!asRoot)('the home manager without a mount', () => {
  let dir: string;
  let ctx: FsContext;
  let homes: HomeManager;
  /** what the "host" knows: ids a new home's owner must skip */
  let host: HostIds;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'homesfs-manager-'));
    host = { users: new Map([[300001, 'alice']]), groups: new Map() };
    const loaded = loadConfig(undefined, { backing: join(dir, 'backing'), mount: join(dir, 'homes'), socket: join(dir, 'admin.sock'), owners: { from: 300000, to: 300003 } });
    const log = pino({ level: 'silent' });
    const store = new BackingStore(join(dir, 'backing'), log, () => undefined);
    await import('node:fs/promises').then((fs) => fs.mkdir(join(dir, 'backing'), { mode: 0o700 }));
    await store.init();
    const state = await StateStore.load(join(dir, 'state.json'));
    let manager: HomeManager | null = null;
    ctx = new FsContext({
      store,
      log,
      profileFor: (ref) => manager!.core.profileFor(ref),
      tenantBudgetFor: (t) => manager!.core.tenantBudgetFor(t).bytes,
      utimensat: notUsed,
      mknod: notUsed,
      fallocate: notUsed,
      renameat2: notUsed,
      mountRoot: join(dir, 'homes'),
    });
    manager = new HomeManager(ctx, state, loaded, log, null, async (uids, gids) => ({
      users: new Map([...host.users].filter(([id]) => uids.includes(id))),
      groups: new Map([...host.groups].filter(([id]) => gids.includes(id))),
    }));
    homes = manager;
  });
  afterEach(async () => {
    await ctx.close();
    await rm(dir, { recursive: true, force: true });
  });

  const code = async (p: Promise<unknown>) => {
    const e = await p.then(
      () => null,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(HomesError);
    return (e as HomesError).code;
  };

  it('create: an owner from the range that skips what the host knows; the directory 0700 and the owner recorded', async () => {
    const a = await homes.lifecycle.create({ home: 'acme/web' });
    const b = await homes.lifecycle.create({ home: 'acme/api' });
    expect([a.owner, b.owner]).toEqual([
      { uid: 300000, gid: 300000 },
      { uid: 300002, gid: 300002 }, // 300001 is the host's alice
    ]);
    const st = await lstat(join(dir, 'backing/acme/api'));
    expect([st.uid, st.mode & 0o7777]).toEqual([300002, 0o700]);
    expect(await code(homes.lifecycle.create({ home: 'acme/web' }))).toBe('EXISTS');
    expect(await code(homes.lifecycle.create({ home: 'acme/../x' }))).toBe('INVALID_NAME');
    expect((await homes.lifecycle.list()).map((h) => `${h.tenant}/${h.key}`).sort()).toEqual(['acme/api', 'acme/web']);
  });

  it('the owner range runs out: INVALID_ARGUMENT (owner-range-exhausted), and nothing is made', async () => {
    for (const k of ['a', 'b', 'c']) await homes.lifecycle.create({ home: `t/${k}` });
    const e = await homes.lifecycle.create({ home: 't/d' }).catch((err: HomesError) => err);
    expect(e).toBeInstanceOf(HomesError);
    expect([(e as HomesError).code, (e as HomesError).details.reason]).toEqual(['INVALID_ARGUMENT', 'owner-range-exhausted']);
    expect((await readdir(join(dir, 'backing/t'))).sort()).toEqual(['a', 'b', 'c']);
  });

  it('resolve: the cascade picks the key; create:false refuses a missing home with the nearest names', async () => {
    await homes.settings.settingsSet({ tenant: 'acme', homeScope: 'user' });
    const r = await homes.lifecycle.resolve({ tenant: 'acme', project: 'web', user: 'alice' });
    expect([r.key, r.scope, r.created]).toEqual(['_user_alice', 'user', true]);
    expect((await homes.lifecycle.resolve({ tenant: 'acme', project: 'api', user: 'alice' })).created).toBe(false);
    await homes.settings.settingsSet({ tenant: 'acme', homeScope: null, yes: true });
    const e = await homes.lifecycle.resolve({ tenant: 'acme', project: 'wbe', create: false }).catch((err: HomesError) => err);
    expect(e).toBeInstanceOf(HomesError);
    expect([(e as HomesError).code, (e as HomesError).details.nearest]).toEqual(['NOT_FOUND', []]);
    await homes.lifecycle.create({ home: 'acme/web' });
    const near = await homes.lifecycle.resolve({ tenant: 'acme', project: 'wbe', create: false }).catch((err: HomesError) => err);
    expect((near as HomesError).details.nearest).toEqual(['acme/web']);
    expect((await homes.lifecycle.list()).length).toBe(2);
  });

  it('a lowered budget holds at once for the next write; lifting the override restores the profile', async () => {
    await homes.lifecycle.create({ home: 'acme/web' });
    const info = await homes.limits.setBudget({ home: 'acme/web', bytes: 10 });
    expect(info.budget).toBe(10);
    const owner = info.owner as { uid: number; gid: number };
    const o = await file.create(ctx, '/acme/web/f', 0o600, C.O_WRONLY | C.O_CREAT, { ...owner, pid: process.pid });
    const refused = await file.write(ctx, o.fh, Buffer.alloc(11), 0).catch((err: HomesError) => err.code);
    expect(refused).toBe('QUOTA_EXCEEDED');
    expect(await file.write(ctx, o.fh, Buffer.alloc(10), 0)).toBe(10);
    await file.release(ctx, o.fh);
    const back = await homes.limits.setBudget({ home: 'acme/web', bytes: null });
    expect(back.budget).toBe(back.profileLimits.budget);
    expect(back.bytes).toBe(10);
  });
});
