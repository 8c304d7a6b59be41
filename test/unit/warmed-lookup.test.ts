import { describe, expect, it } from 'vitest';
import { warmedLookup, type HostIds } from '../../src/users/hostids.js';

/** A host that knows uid/gid 1 and 2, and counts how often it was asked. */
function host() {
  const asked: Array<[number[], number[]]> = [];
  const known = new Map([
    [1, 'one'],
    [2, 'two'],
  ]);
  const inner = async (uids: readonly number[], gids: readonly number[]): Promise<HostIds> => {
    asked.push([[...uids], [...gids]]);
    const pick = (ids: readonly number[]) => new Map(ids.filter((i) => known.has(i)).map((i) => [i, known.get(i)!] as const));
    return { users: pick(uids), groups: pick(gids) };
  };
  return { asked, inner };
}

describe('warmedLookup: a live upgrade asks the host before the pause', () => {
  it('the first lookup within the warmed ids is answered from the warm answer, with only the ids it asked', async () => {
    const h = host();
    const w = warmedLookup(h.inner);
    await w.warm([1, 2, 3], [1, 2, 3]);
    expect(await w.lookup([2, 3], [1])).toEqual({ users: new Map([[2, 'two']]), groups: new Map([[1, 'one']]) });
    expect(h.asked).toHaveLength(1);
  });

  it('a lookup of an id not warmed, and every lookup after the first, asks the host', async () => {
    const h = host();
    const w = warmedLookup(h.inner);
    await w.warm([1], [1]);
    expect((await w.lookup([1, 2], [1])).users).toEqual(new Map([[1, 'one'], [2, 'two']]));
    expect(h.asked).toHaveLength(2);
    await w.warm([1], [1]);
    await w.lookup([1], [1]);
    await w.lookup([1], [1]);
    expect(h.asked).toHaveLength(4);
  });
});
