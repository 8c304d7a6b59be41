import type { BigIntStats } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { chmodMasks, dirModeMasks, fileModeMasks, presentationMasks } from '../../src/fuse/fastpath.js';
import { presentedMode } from '../../src/fs/present.js';
import { BUILTIN_PROFILES, chmodDecision, effectiveDirMode, effectiveFileMode, type Profile } from '../../src/policy/profiles.js';

const TYPES = { fifo: 0o01, chr: 0o02, dir: 0o04, blk: 0o06, reg: 0o10, lnk: 0o12, sock: 0o14 };

describe('native getattr presentation masks', () => {
  const odd: Profile = { ...BUILTIN_PROFILES.home, chmod: 'allow', fileMode: 0o640, dirMode: 0o711, allowUserExec: false };
  for (const [name, profile] of [...Object.entries(BUILTIN_PROFILES), ['odd', odd] as const]) {
    it(`reproduce presentedMode of profile ${name} for every type and all 4096 permission values`, () => {
      const { types, masks } = presentationMasks(profile);
      for (const t of Object.values(TYPES)) {
        expect(types & (1 << t), `type ${t} published`).not.toBe(0);
        for (let perms = 0; perms <= 0o7777; perms++) {
          const want = presentedMode(profile, { mode: BigInt((t << 12) | perms) } as BigIntStats);
          expect((t << 12) | (perms & masks[t]!) | masks[16 + t]!).toBe(want);
        }
      }
    });
  }

  it('are what the profiles say: owner bits in home, everything as stored in posix, links 0777', () => {
    const home = presentationMasks(BUILTIN_PROFILES.home);
    expect([home.masks[TYPES.reg], home.masks[16 + TYPES.reg]]).toEqual([0o700, 0]);
    expect([home.masks[TYPES.lnk], home.masks[16 + TYPES.lnk]]).toEqual([0, 0o777]);
    const posix = presentationMasks(BUILTIN_PROFILES.posix);
    expect([posix.masks[TYPES.reg], posix.masks[16 + TYPES.reg]]).toEqual([0o7777, 0]);
    const scratch = presentationMasks(BUILTIN_PROFILES.scratch);
    expect([scratch.masks[TYPES.reg], scratch.masks[16 + TYPES.reg]]).toEqual([0, 0o600]);
    expect([scratch.masks[TYPES.fifo], scratch.masks[16 + TYPES.fifo]]).toEqual([0, 0o600]);
  });
});

describe('native chmod masks', () => {
  const forced: Profile = { ...BUILTIN_PROFILES.home, chmod: 'ignore', fileMode: 0o640 };
  const asked: Profile = { ...BUILTIN_PROFILES.posix, chmod: 'allow', specialBits: 'drop' };

  it('are published only where chmodDecision is a plain mask: home (owner bits), posix (all stored bits), not scratch (refusals) nor a forced mode', () => {
    expect(chmodMasks(BUILTIN_PROFILES.home)).toEqual({ m: 0o700, k: 0o777 });
    expect(chmodMasks(BUILTIN_PROFILES.posix)).toEqual({ m: 0o7777, k: 0o7777 });
    expect(chmodMasks(BUILTIN_PROFILES.scratch)).toBeNull();
    expect(chmodMasks(forced)).toBeNull();
    expect(chmodMasks(asked)).toEqual({ m: 0o777, k: 0o777 });
  });

  for (const [name, profile] of [...Object.entries(BUILTIN_PROFILES), ['asked', asked] as const]) {
    it(`give chmodDecision's answer for profile ${name}, for every current and asked mode of a file and a directory`, () => {
      const masks = chmodMasks(profile);
      if (masks === null) return expect(profile.chmod === 'deny-widen' || profile.chmod === 'ignore').toBe(true);
      // Every current mode against a spread of asked ones (the masks were found on the transposed set).
      for (const isDir of [false, true]) {
        for (let current = 0; current <= 0o7777; current++) {
          for (const ask of [0, 0o7777, 0o644, 0o4755, 0o1777, current, current ^ 0o100]) {
            const d = chmodDecision(profile, isDir, current, ask);
            const want = ask & masks.m;
            expect(d).toEqual(want === (current & masks.k) ? { action: 'keep' } : { action: 'apply', mode: want });
          }
        }
      }
    });
  }
});

describe('native create mode masks', () => {
  const forced: Profile = { ...BUILTIN_PROFILES.home, fileMode: 0o640 };
  const asked: Profile = { ...BUILTIN_PROFILES.posix, specialBits: 'keep' };
  for (const [name, profile] of [...Object.entries(BUILTIN_PROFILES), ['forced', forced] as const, ['asked', asked] as const]) {
    it(`give effectiveFileMode's answer for profile ${name}, for every asked mode (or none, and the create stays with JavaScript)`, () => {
      const masks = fileModeMasks(profile);
      if (masks === null) return;
      // The binding's form (fastpath_create.c fp_create_in): permissions only in `or`, the asked bits through `m`.
      expect(masks.or & ~0o777).toBe(0);
      for (let ask = 0; ask <= 0o7777; ask++) expect((ask & masks.m) | masks.or).toBe(effectiveFileMode(profile, ask));
    });
  }

  it('exist for the built-in profiles, so that their creates can be the binding\'s', () => {
    for (const profile of Object.values(BUILTIN_PROFILES)) expect(fileModeMasks(profile)).not.toBeNull();
  });

  for (const [name, profile] of [...Object.entries(BUILTIN_PROFILES), ['forced', forced] as const, ['asked', asked] as const]) {
    it(`give effectiveDirMode's answer for profile ${name}, for every asked mode (the mkdir's form, fastpath_create.c hs_fastpath_mkdir)`, () => {
      const masks = dirModeMasks(profile);
      if (masks === null) return;
      for (let ask = 0; ask <= 0o7777; ask++) expect((ask & masks.m) | masks.or).toBe(effectiveDirMode(profile, ask));
    });
  }

  it('exist for the built-in profiles, so that their mkdirs can be the binding\'s', () => {
    for (const profile of Object.values(BUILTIN_PROFILES)) expect(dirModeMasks(profile)).not.toBeNull();
  });
});
