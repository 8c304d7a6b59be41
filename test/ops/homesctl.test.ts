import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { HomesError } from '../../src/errors.js';
import { createRootLogger } from '../../src/log.js';
import type { DaemonApi, StatusReport } from '../../src/control/api.js';
import { commands } from '../../src/control/registry.js';
import { startControlServer, type ControlServer } from '../../src/control/server.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
// The installed entry point, exactly as package.json publishes it.
const BIN = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { bin: Record<string, string> }).bin.homesctl!;
const CLI = path.join(ROOT, BIN);

const STATUS: StatusReport = {
  version: '0.1.0-test',
  pid: 4242,
  uptimeSec: 3723,
  backing: '/srv/homes',
  configPath: '/etc/homesfs/config.json',
  mount: { path: '/homes', mounted: true, loop: 'running', lastProbeAt: '2025-01-01T00:00:00.000Z', lastProbeOk: true },
  native: { patch: 3, selfCheck: 'ok', maxWriteRequest: 131072 },
  homes: [
    { tenant: 'acme', key: 'web', scan: 'done', bytes: 1048576, inodes: 12 },
    { tenant: 'acme', key: '_tenant', scan: 'scanning' },
    { tenant: 'globex-corporation', key: '_user_alice', scan: 'done', bytes: 512, inodes: 3 },
  ],
};

let mode: 'ok' | 'error' | 'hang' = 'ok';
const api: DaemonApi = {
  async status() {
    if (mode === 'error') throw new HomesError('NOT_FOUND', 'no such home', { home: 'acme/nope' });
    if (mode === 'hang') return new Promise<StatusReport>(() => {});
    return STATUS;
  },
};

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function homesctl(args: string[], env: Record<string, string | undefined> = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      env: { ...process.env, HOMESFS_SOCKET: undefined, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

let tmp: string;
let server: ControlServer;
let sock: string;

beforeAll(async () => {
  if (!existsSync(CLI)) {
    throw new Error(
      `${CLI} (package.json bin.homesctl) is missing: build first with 'npx tsc -p tsconfig.json' (npm test does this), ` +
        `and check that tsconfig's rootDir/outDir put src/cli/homesctl.ts there`,
    );
  }
  tmp = await mkdtemp(path.join(os.tmpdir(), 'homesctl-'));
  server = await startControlServer({
    socketPath: path.join(tmp, 'run', 'admin.sock'),
    socketMode: 0o600,
    commands,
    api,
    log: createRootLogger('silent'),
    requestTimeoutMs: 10_000,
  });
  sock = server.address;
});

afterAll(async () => {
  await server?.close();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

describe('homesctl status', () => {
  it('prints a human summary and a homes table by default', async () => {
    mode = 'ok';
    const r = await homesctl(['--socket', sock, 'status']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const out = r.stdout;
    expect(out).toMatch(/^Mount:\s+\/homes$/m);
    expect(out).toMatch(/^Mounted:\s+yes$/m);
    expect(out).toMatch(/^Loop:\s+running$/m);
    expect(out).toMatch(/^Native:\s+ok \(patch 3, max write 128\.0 KiB\)$/m);
    expect(out).toMatch(/^Uptime:\s+1h 2m 3s$/m);
    expect(out).toMatch(/^Config:\s+\/etc\/homesfs\/config\.json$/m);
    const lines = out.trimEnd().split('\n');
    const header = lines.findIndex((l) => l.startsWith('TENANT'));
    expect(header).toBeGreaterThan(0);
    expect(lines[header]!.split(/\s+/)).toEqual(['TENANT', 'KEY', 'SCAN', 'BYTES', 'INODES']);
    const rows = lines.slice(header + 1).map((l) => l.split(/\s{2,}/).map((c) => c.trim()));
    expect(rows).toEqual([
      ['acme', 'web', 'done', '1.0 MiB', '12'],
      ['acme', '_tenant', 'scanning', '-', '-'],
      ['globex-corporation', '_user_alice', 'done', '512 B', '3'],
    ]);
    // Columns line up: every row starts its KEY column where the header does.
    const keyCol = lines[header]!.indexOf('KEY');
    for (const l of lines.slice(header + 1)) expect(l[keyCol - 1]).toBe(' ');
  });

  it('prints the raw data with --json (before or after the command)', async () => {
    mode = 'ok';
    for (const args of [['--json', '--socket', sock, 'status'], ['status', '--json', `--socket=${sock}`]]) {
      const r = await homesctl(args);
      expect(r.code).toBe(0);
      expect(JSON.parse(r.stdout)).toEqual(STATUS);
    }
  });

  it('takes the socket from HOMESFS_SOCKET; the flag wins', async () => {
    mode = 'ok';
    const viaEnv = await homesctl(['status', '--json'], { HOMESFS_SOCKET: sock });
    expect(viaEnv.code).toBe(0);
    const flagWins = await homesctl(['--socket', path.join(tmp, 'missing.sock'), 'status'], { HOMESFS_SOCKET: sock });
    expect(flagWins.code).toBe(3);
  });
});

describe('homesctl exit codes', () => {
  it('1 and "homesctl: CODE: message" on stderr for an error reply', async () => {
    mode = 'error';
    try {
      const r = await homesctl(['--socket', sock, 'status']);
      expect(r.code).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr.split('\n')[0]).toBe('homesctl: NOT_FOUND: no such home');
      const j = await homesctl(['--socket', sock, '--json', 'status']);
      expect(j.code).toBe(1);
      expect(JSON.parse(j.stdout)).toMatchObject({ ok: false, code: 'NOT_FOUND', details: { home: 'acme/nope' } });
    } finally {
      mode = 'ok';
    }
  });

  it('3 when the socket does not exist', async () => {
    const r = await homesctl(['--socket', path.join(tmp, 'nope', 'admin.sock'), 'status']);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/^homesctl: cannot connect to .*admin\.sock: ENOENT/);
  });

  it('3 when the daemon does not answer within --timeout', async () => {
    mode = 'hang';
    try {
      const t0 = Date.now();
      const r = await homesctl(['--socket', sock, '--timeout', '300', 'status']);
      expect(r.code).toBe(3);
      expect(r.stderr).toMatch(/no reply .* within 300 ms/);
      expect(Date.now() - t0).toBeLessThan(5000);
    } finally {
      mode = 'ok';
    }
  });

  it('2 for usage errors, with a hint on stderr', async () => {
    const cases = [
      [],
      ['frobnicate'],
      ['--bogus', 'status'],
      ['status', '--bogus'],
      ['status', 'extra'],
      ['--timeout', 'soon', 'status'],
      ['--timeout', '0', 'status'],
      ['--socket'],
    ];
    for (const args of cases) {
      const r = await homesctl(['--socket', sock, ...args]);
      expect(r.code, JSON.stringify(args)).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(/^homesctl: .*\nTry 'homesctl (status )?--help'\.\n$/);
    }
  });

  it('0 and usage on stdout for --help and <command> --help', async () => {
    const main = await homesctl(['--help']);
    expect(main.code).toBe(0);
    expect(main.stdout).toMatch(/^Usage: homesctl \[--socket PATH\] \[--json\] \[--timeout MS\] <command> \[args\]/);
    expect(main.stdout).toMatch(/^\s+status\s+Mount liveness/m);
    expect(main.stdout).toContain('/run/homesfs/admin.sock');
    const cmd = await homesctl(['status', '--help']);
    expect(cmd.code).toBe(0);
    expect(cmd.stdout).toMatch(/^Usage: homesctl \[global options\] status/);
    const viaHelp = await homesctl(['help', 'status']);
    expect(viaHelp.stdout).toBe(cmd.stdout);
  });
});
