import { describe, expect, it } from 'vitest';
import { buildConfig, ConfigError } from '../../src/config/load.js';
import type { FuseClass } from '../../src/fuse/binding.js';
import { applyNofile } from '../../src/fuse/limits.js';

const MIN = { backing: '/srv/backing', mount: '/srv/homes' } as const;

function issues(raw: Record<string, unknown>): string[] {
  try {
    buildConfig({ ...MIN, ...raw }, null);
  } catch (err) {
    if (err instanceof ConfigError) return err.issues;
    throw err;
  }
  return [];
}

/** RLIMIT_NOFILE as the kernel keeps it, with the rule that only CAP_SYS_RESOURCE raises the hard limit. */
function fakeLimits(soft: number, hard: number, canRaiseHard: boolean) {
  const cur = { soft, hard };
  const nofile = (s = 0, h = 0) => {
    const next = { soft: s || cur.soft, hard: h || cur.hard };
    if (next.soft > next.hard || (next.hard > cur.hard && !canRaiseHard)) return { res: s > next.hard ? -22 : -1, ...cur };
    Object.assign(cur, next);
    return { res: 0, ...cur };
  };
  return { Fuse: { nofile } as unknown as FuseClass, cur };
}

describe('limits (config)', () => {
  it('defaults: the hard limit, a reserve of 2048, 8192 open files per uid, 4096 directory handles per uid and 16384 in all', () => {
    expect(buildConfig(MIN, null).config.limits).toEqual({ reserveFiles: 2048, openFilesPerUid: 8192, dirHandlesPerUid: 4096, dirHandles: 16384 });
  });

  it.each([
    [{ limits: { nofile: 512 } }, 'limits.nofile'],
    [{ limits: { reserveFiles: 1000 } }, 'limits.reserveFiles'],
    [{ limits: { nofile: 2048, reserveFiles: 2000 } }, 'limits'],
    [{ limits: { openFilesPerUid: -1 } }, 'limits.openFilesPerUid'],
    [{ limits: { nofiles: 4096 } }, 'limits'],
  ])('refuses %j', (raw, path) => {
    expect(issues(raw).some((i) => i.startsWith(path))).toBe(true);
  });
});

describe('applyNofile', () => {
  it('sets soft and hard to the configured value when allowed', () => {
    const { Fuse, cur } = fakeLimits(1024, 4096, true);
    expect(applyNofile(Fuse, 65536, 2048)).toEqual({ configured: 65536, soft: 65536, hard: 65536, reserve: 2048, forHandles: 63488 });
    expect(cur).toEqual({ soft: 65536, hard: 65536 });
  });

  it('lowers the soft limit and keeps the hard one', () => {
    const { Fuse, cur } = fakeLimits(20000, 20000, false);
    expect(applyNofile(Fuse, 4096, 1280)).toMatchObject({ soft: 4096, hard: 20000, forHandles: 2816 });
    expect(cur).toEqual({ soft: 4096, hard: 20000 });
  });

  it('without a value, takes the whole hard limit', () => {
    const { Fuse } = fakeLimits(1024, 524288, false);
    expect(applyNofile(Fuse, undefined, 2048)).toMatchObject({ configured: null, soft: 524288, hard: 524288 });
  });

  it('cannot raise the hard limit: runs with it, and says so', () => {
    const { Fuse } = fakeLimits(1024, 20000, false);
    const r = applyNofile(Fuse, 65536, 2048);
    expect(r).toMatchObject({ configured: 65536, soft: 20000, hard: 20000, forHandles: 17952 });
    expect(r.warning).toMatch(/limits.nofile 65536 is above the hard limit 20000.*EPERM.*running with 20000/);
  });
});
