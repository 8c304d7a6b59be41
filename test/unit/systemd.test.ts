import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig, stateFileOf } from '../../src/config/load.js';

const DIR = join(import.meta.dirname, '../../systemd');
const UNIT = join(DIR, 'homesfs.service');

/** [section, key, value] for every directive line (comments and blank lines skipped, continuations joined). */
function parseUnit(text: string): Array<[string, string, string]> {
  const out: Array<[string, string, string]> = [];
  let section = '';
  const lines = text.replace(/\\\n/g, ' ').split('\n');
  for (const raw of lines) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    const sec = /^\[(.+)\]$/.exec(line);
    if (sec) {
      section = sec[1]!;
      continue;
    }
    const eq = line.indexOf('=');
    if (eq < 0) throw new Error(`not a directive: ${line}`);
    out.push([section, line.slice(0, eq).trim(), line.slice(eq + 1).trim()]);
  }
  return out;
}

/**
 * Directives that give the service its own mount namespace (systemd.exec(5)):
 * the /homes mount would exist only inside it, invisible to the host. Plus
 * MemoryDenyWriteExecute (Node's JIT aborts) and device filters (they would
 * close /dev/fuse).
 */
const FORBIDDEN = [
  'PrivateMounts', 'PrivateTmp', 'PrivateDevices', 'PrivateNetwork', 'PrivateUsers', 'PrivateIPC',
  'ProtectSystem', 'ProtectHome', 'ProtectKernelTunables', 'ProtectKernelModules', 'ProtectKernelLogs',
  'ProtectControlGroups', 'ProtectClock', 'ProtectHostname', 'ProtectProc', 'ProcSubset',
  'ReadOnlyPaths', 'ReadWritePaths', 'InaccessiblePaths', 'ExecPaths', 'NoExecPaths', 'TemporaryFileSystem',
  'BindPaths', 'BindReadOnlyPaths', 'RootDirectory', 'RootImage', 'RootImageOptions', 'MountImages', 'ExtensionImages',
  'ExtensionDirectories', 'MountAPIVFS', 'MountFlags', 'NetworkNamespacePath', 'IPCNamespacePath', 'DynamicUser',
  'PrivateUsersEx', 'MemoryDenyWriteExecute', 'DevicePolicy', 'DeviceAllow',
  // the posix profile keeps setuid/setgid bits (specialBits): this seccomp filter would refuse them
  'RestrictSUIDSGID',
];

describe('systemd/homesfs.service', () => {
  const text = readFileSync(UNIT, 'utf8');
  const directives = parseUnit(text);
  const get = (section: string, key: string) => directives.filter(([s, k]) => s === section && k === key).map(([, , v]) => v);
  const one = (section: string, key: string) => {
    const v = get(section, key);
    expect(v, `${section}.${key}`).toHaveLength(1);
    return v[0]!;
  };

  it('has no directive that would hide the mount in a namespace, nor MemoryDenyWriteExecute or a device filter', () => {
    const found = directives.filter(([, k]) => FORBIDDEN.includes(k)).map(([s, k, v]) => `${s}.${k}=${v}`);
    expect(found).toEqual([]);
    // a syscall filter that denies mount(2) would break the daemon too
    for (const v of get('Service', 'SystemCallFilter')) expect(v).not.toMatch(/~.*@mount|~.*\bmount\b/);
  });

  it('is a notify service that restarts on failure, with its limits, OOM protection and a dead-mount cleanup', () => {
    expect(one('Service', 'Type')).toBe('notify');
    expect(one('Service', 'NotifyAccess')).toBe('all');
    expect(one('Service', 'Restart')).toBe('on-failure');
    expect(one('Service', 'ExecStart')).toMatch(/homesfs serve --config \/etc\/homesfs\/config\.json$/);
    expect(one('Service', 'ExecReload')).toMatch(/kill -HUP \$MAINPID/);
    expect(Number(one('Service', 'LimitNOFILE'))).toBeGreaterThanOrEqual(65536);
    expect(Number(one('Service', 'OOMScoreAdjust'))).toBeLessThan(0);
    expect(one('Service', 'ExecStopPost')).toMatch(/^-.*umount --lazy \/homes/);
    // exit codes that a retry cannot heal: usage, config, state, lock
    expect(one('Service', 'RestartPreventExitStatus').split(/\s+/).sort()).toEqual(['10', '2', '3', '9']);
    expect(one('Service', 'NoNewPrivileges')).toBe('yes');
    expect(one('Service', 'CapabilityBoundingSet')).toContain('CAP_SYS_ADMIN');
    expect(one('Unit', 'RequiresMountsFor')).toBe('/var/lib/homesfs');
    expect(get('Unit', 'Before')).toContain('multi-user.target');
    expect(one('Install', 'WantedBy')).toBe('multi-user.target');
  });

  it('agrees with the example config: mount, backing under RequiresMountsFor, a stop timeout longer than the grace', () => {
    const { config } = loadConfig(join(DIR, 'config.example.json'), {});
    expect(config.mount).toBe('/homes');
    expect(config.backing.startsWith(`${one('Unit', 'RequiresMountsFor')}/`)).toBe(true);
    expect(stateFileOf(config)).toBe('/var/lib/homesfs/backing/.homesfs/state.json');
    expect(Number(one('Service', 'TimeoutStopSec')) * 1000).toBeGreaterThan(config.shutdownGraceMs + 10_000);
    // The daemon cannot raise its descriptor limit past LimitNOFILE (no CAP_SYS_RESOURCE in the
    // bounding set): the configured limit fits under it and leaves room beside the reserve.
    expect(one('Service', 'CapabilityBoundingSet')).not.toContain('CAP_SYS_RESOURCE');
    const limit = Number(one('Service', 'LimitNOFILE'));
    expect(config.limits.nofile ?? limit).toBeLessThanOrEqual(limit);
    expect((config.limits.nofile ?? limit) - config.limits.reserveFiles).toBeGreaterThanOrEqual(64 * 1024);
  });

  it('the consumer drop-in orders a platform service after homesfs and binds it to it', () => {
    const d = parseUnit(readFileSync(join(DIR, 'homes-consumer.conf'), 'utf8'));
    expect(d).toEqual(
      expect.arrayContaining([
        ['Unit', 'After', 'homesfs.service'],
        ['Unit', 'Requires', 'homesfs.service'],
      ]),
    );
  });
});

describe('systemd-analyze verify', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-unit-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const verify = (file: string) => spawnSync('systemd-analyze', ['verify', file], { encoding: 'utf8', timeout: 60_000 });

  it('accepts the unit without a warning (systemd is installed by scripts/install.sh)', () => {
    const unit = join(dir, 'homesfs.service');
    copyFileSync(UNIT, unit);
    const r = verify(unit);
    expect(r.error, 'systemd-analyze is missing: apt-get install systemd').toBeUndefined();
    expect(`${r.stdout}${r.stderr}`).toBe('');
    expect(r.status).toBe(0);
  });

  it('really checks: a misspelt directive and an out-of-range value are reported', () => {
    const unit = join(dir, 'homesfs.service');
    writeFileSync(unit, readFileSync(UNIT, 'utf8').replace('OOMScoreAdjust=-900', 'OOMScoreAdjust=-5000\nNoNewPrivilege=yes'));
    const r = verify(unit);
    expect(r.stderr).toMatch(/OOM score adjust value out of range/);
    expect(r.stderr).toMatch(/Unknown key 'NoNewPrivilege'/);
  });
});
