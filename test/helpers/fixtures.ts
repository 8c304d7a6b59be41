import type { HomeInfo, StatusReport, TenantUsage } from '../../src/control/api.js';
import { HomesError, type HomesCode } from '../../src/errors.js';

/** Canned daemon answers for tests of the control layer (no mount behind them). */
export const STATUS: StatusReport = {
  version: '0.1.0-test',
  build: '0123456789abcdef',
  pid: 4242,
  uptimeSec: 3723,
  backing: '/srv/homes',
  configPath: null,
  mount: { path: '/homes', mounted: true, loop: 'running', lastProbeAt: '2025-01-01T00:00:00.000Z', lastProbeOk: true },
  native: { abi: 6, selfCheck: 'ok', maxWriteRequest: 1048576, protocol: { minor: 38, kernelMinor: 45, maxWrite: 1048576, maxPages: 256, flags: 0, largestRead: 0, largestWrite: 1048576, lookups: 0, readdirplus: 0, reads: 0, ioUringOffered: false,
      passthrough: { negotiated: true, offered: true, active: true, opens: 3, opensDirect: 0, refused: 0, idsOpened: 3, idsClosed: 2, idFailures: 0, lastError: 0, disabled: false, files: 1 } } },
  homes: [
    { tenant: 'acme', key: 'web', scan: 'done', bytes: 1048576, inodes: 12 },
    { tenant: 'acme', key: '_tenant', scan: 'scanning' },
  ],
};

export const HOME: HomeInfo = {
  tenant: 'acme',
  key: 'web',
  scope: 'project',
  path: '/homes/acme/web',
  owner: { uid: 20001, gid: 20001 },
  profile: 'default',
  profileSource: 'default',
  bytes: 1048576,
  budget: 1073741824,
  fileCap: 104857600,
  inodes: 12,
  inodeCap: 10000,
  percent: 0.1,
  limitSources: { budget: 'profile', inodeCap: 'profile', fileCap: 'profile' },
  profileLimits: { budget: 1073741824, inodeCap: 10000, fileCap: 104857600 },
  soft: { bytes: 0, inodes: 0, overBytes: false, overInodes: false, sources: { bytes: 'profile', inodes: 'profile' }, profile: { bytes: 0, inodes: 0 } },
  openHandles: 2,
  cwdProcesses: 0,
  tenantBytes: 3145728,
  tenantBudget: 0,
  scan: 'done',
  orphan: false,
  flags: ['BUSY'],
};

export const TENANT: TenantUsage = {
  tenant: 'acme',
  bytes: 3145728,
  budget: 10485760,
  budgetSource: 'override',
  homes: [
    { key: 'web', bytes: 1048576 },
    { key: '_tenant', bytes: 2097152 },
  ],
};

/** The HomesError code `fn` throws ('OK' when it returns, 'NOT_HOMES_ERROR' for anything else). */
export function codeOf(fn: () => unknown): HomesCode | 'OK' | 'NOT_HOMES_ERROR' {
  try {
    fn();
    return 'OK';
  } catch (err) {
    return err instanceof HomesError ? err.code : 'NOT_HOMES_ERROR';
  }
}
