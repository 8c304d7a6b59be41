import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EXIT, NO_RESTART } from '../../src/cli/exitcodes.js';
import { SERVE_WAIT_MS } from '../../src/cli/reload.js';
import { loadConfig, stateFileOf } from '../../src/config/load.js';
import { ConfigSchema } from '../../src/config/schema.js';
import { readmeText, section, shBlocks } from '../helpers/readme-install.js';

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

  it('is a notify service that restarts on failure, with its limits and OOM protection, that only its main and control processes may notify and that never unmounts', () => {
    expect(one('Service', 'Type')).toBe('notify');
    // any process of the unit could otherwise replace the fd store's session, registration and journal;
    // `main` would not give ExecReload= (and so a live upgrade's successor) NOTIFY_SOCKET (scripts/test-systemd.sh)
    expect(one('Service', 'NotifyAccess')).toBe('exec');
    expect(one('Service', 'Restart')).toBe('on-failure');
    // by an absolute path (README "Install" puts it there), never a PATH lookup through env
    expect(one('Service', 'ExecStart')).toBe('/usr/local/bin/homesfs serve --config /etc/homesfs/config.json');
    // the live upgrade (README "Live upgrade"): the installed program, the same config as ExecStart=
    expect(one('Service', 'ExecReload')).toBe('/usr/local/bin/homesfs reload --config /etc/homesfs/config.json');
    // homesfs reload's own bound stays below systemd's for the reload, so the outcome is reload's to report
    expect(Number(one('Service', 'TimeoutStartSec')) * 1000).toBeGreaterThan(SERVE_WAIT_MS + 5_000);
    expect(Number(one('Service', 'LimitNOFILE'))).toBeGreaterThanOrEqual(65536);
    expect(Number(one('Service', 'OOMScoreAdjust'))).toBeLessThan(0);
    // after a crash ExecStopPost= runs before Restart=: an unmount there cuts the session the fd store keeps
    expect(get('Service', 'ExecStopPost')).toEqual([]);
    for (const [s, k, v] of directives.filter(([, k]) => k.startsWith('Exec'))) expect(`${s}.${k}=${v}`).not.toMatch(/umount|fusermount/);
    expect(one('Service', 'NoNewPrivileges')).toBe('yes');
    expect(one('Service', 'CapabilityBoundingSet')).toContain('CAP_SYS_ADMIN');
    expect(one('Unit', 'RequiresMountsFor')).toBe('/var/lib/homesfs');
    expect(get('Unit', 'Before')).toContain('multi-user.target');
    expect(one('Install', 'WantedBy')).toBe('multi-user.target');
  });

  it('does not restart after an exit code a restart cannot heal, and the README says which', () => {
    const codes = one('Service', 'RestartPreventExitStatus').split(/\s+/).map(Number);
    expect([...codes].sort((a, b) => a - b)).toEqual([...NO_RESTART].sort((a, b) => a - b));
    // each is a real exit code, and the ones that may heal stay restartable
    for (const c of codes) expect(Object.values(EXIT)).toContain(c);
    for (const c of [EXIT.INTERNAL, EXIT.MOUNT_LOST, EXIT.CONTROL, EXIT.BACKING]) expect(codes).not.toContain(c);
    // a mount point that is not empty looped every 2 s; a refused kept session comes back on every restart
    for (const c of [EXIT.MOUNT, EXIT.HELD]) expect(codes).toContain(c);
    // README "Under systemd" lists them in prose: "exit codes 2, 3, … and 11"
    const prose = section(readmeText(), 'Under systemd').replace(/\s+/g, ' ');
    const listed = /after exit codes ((?:\d+, )*\d+ and \d+)/.exec(prose);
    expect(listed, 'README "Under systemd": "after exit codes A, B and C"').not.toBeNull();
    expect(listed![1]!.split(/, | and /).map(Number)).toEqual([...NO_RESTART].sort((a, b) => a - b));
  });

  it('may reach loopback TCP (metrics.listen) and nothing else on the network', () => {
    expect(one('Service', 'RestrictAddressFamilies').split(/\s+/).sort()).toEqual(['AF_INET', 'AF_INET6', 'AF_UNIX']);
    expect(one('Service', 'IPAddressDeny')).toBe('any');
    expect(one('Service', 'IPAddressAllow')).toBe('localhost');
    // "localhost" is 127.0.0.0/8 and ::1 (systemd.resource-control(5)): all the config lets metrics.listen name
    const listen = (l: string) => ConfigSchema.safeParse({ backing: '/b', mount: '/m', metrics: { listen: l } }).success;
    expect(listen('127.0.0.1:9464')).toBe(true);
    expect(listen('[::1]:9464')).toBe(true);
    for (const l of ['0.0.0.0:9464', '[::]:9464', '10.0.0.1:9464', 'localhost:9464']) expect(listen(l), l).toBe(false);
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

  /** A stand-in for the installed program: verify refuses an ExecStart= whose program is missing. */
  const stub = () => {
    const bin = join(dir, 'bin');
    mkdirSync(bin, { recursive: true });
    writeFileSync(join(bin, 'homesfs'), '#!/bin/sh\n');
    chmodSync(join(bin, 'homesfs'), 0o755);
    return join(bin, 'homesfs');
  };

  it('accepts the unit without a warning (systemd is installed by scripts/install.sh)', () => {
    // As shipped but for ExecStart's program: /usr/local/bin/homesfs exists only where
    // README "Install" ran (test/integration/install.test.ts checks it is there then).
    const text = readFileSync(UNIT, 'utf8');
    expect(text).toContain('ExecStart=/usr/local/bin/homesfs ');
    mkdirSync(join(dir, 'shipped'), { recursive: true });
    const unit = join(dir, 'shipped', 'homesfs.service');
    writeFileSync(unit, text.replace('ExecStart=/usr/local/bin/homesfs ', `ExecStart=${stub()} `).replace('ExecReload=/usr/local/bin/homesfs ', `ExecReload=${stub()} `));
    const r = verify(unit);
    expect(r.error, 'systemd-analyze is missing: apt-get install systemd').toBeUndefined();
    expect(`${r.stdout}${r.stderr}`).toBe('');
    expect(r.status).toBe(0);
  });

  it("accepts the unit with README's drop-in for another prefix, which replaces ExecStart", () => {
    const unitDir = join(dir, 'dropin');
    mkdirSync(unitDir, { recursive: true });
    writeFileSync(join(unitDir, 'homesfs.service'), readFileSync(UNIT, 'utf8'));
    // README "Under systemd"'s drop-in commands, run as written but into this directory
    // (verify reads drop-ins beside the unit it is given) and with the stand-in on PATH.
    const block = shBlocks(section(readmeText(), 'Under systemd')).find((b) => b.some((c) => c.includes('homesfs.service.d')));
    expect(block, 'README "Under systemd" has the drop-in block').toBeDefined();
    const script = block!
      .filter((c) => !c.startsWith('systemctl '))
      .map((c) => c.replaceAll('/etc/systemd/system/', `${unitDir}/`))
      .join('\n');
    expect(script).not.toContain('/etc/systemd');
    const program = stub();
    const made = spawnSync('sh', ['-ec', script], { encoding: 'utf8', env: { ...process.env, PATH: `${dirname(program)}:${process.env.PATH}` } });
    expect(made.status, made.stderr).toBe(0);
    const dropin = parseUnit(readFileSync(join(unitDir, 'homesfs.service.d', 'prefix.conf'), 'utf8'));
    expect(dropin).toEqual([
      ['Service', 'ExecStart', ''],
      ['Service', 'ExecStart', `${program} serve --config /etc/homesfs/config.json`],
      ['Service', 'ExecReload', ''],
      ['Service', 'ExecReload', `${program} reload --config /etc/homesfs/config.json`],
    ]);
    const r = verify(join(unitDir, 'homesfs.service'));
    expect(`${r.stdout}${r.stderr}`).toBe('');
    expect(r.status).toBe(0);
    // verify does look at the drop-in's program (whether or not /usr/local/bin/homesfs exists here)
    chmodSync(program, 0o644);
    expect(verify(join(unitDir, 'homesfs.service')).stderr).toContain(`Command ${program} is not executable`);
    chmodSync(program, 0o755);
  });

  it('really checks: a misspelt directive and an out-of-range value are reported', () => {
    const unit = join(dir, 'homesfs.service');
    writeFileSync(unit, readFileSync(UNIT, 'utf8').replace('OOMScoreAdjust=-900', 'OOMScoreAdjust=-5000\nNoNewPrivilege=yes'));
    const r = verify(unit);
    expect(r.stderr).toMatch(/OOM score adjust value out of range/);
    expect(r.stderr).toMatch(/Unknown key 'NoNewPrivilege'/);
  });
});
