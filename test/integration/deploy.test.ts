import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { get } from 'node:http';
import { join, posix } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { HOMESCTL, SYSTEM_PATH, canMount, runAs, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';

// The shell scripts of deploy/kubernetes run here as written, against a real daemon: the
// node's host paths are mapped under a temporary directory (the scripts take their paths
// from the environment the manifests give them).
const DIR = join(import.meta.dirname, '../../deploy/kubernetes');

/* eslint-disable @typescript-eslint/no-explicit-any -- manifests are read field by field */
function doc(file: string, kind: string): any {
  return parseAllDocuments(readFileSync(join(DIR, file), 'utf8'))
    .map((d) => d.toJS())
    .find((d) => d?.kind === kind);
}
const ds = doc('daemonset.yaml', 'DaemonSet').spec.template.spec;
const pod = doc('pod-example.yaml', 'Pod').spec;
const deployConfig = JSON.parse(doc('config.yaml', 'ConfigMap').data['config.json']) as Record<string, any>;
const containerOf = (spec: any, name: string) => [...(spec.initContainers ?? []), ...spec.containers].find((c: any) => c.name === name);
const scriptOf = (c: any): string[] => c.command as string[];
const envOf = (c: any): Record<string, string> => Object.fromEntries(c.env.map((e: any) => [e.name, e.value]));

const isMounted = (path: string) =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .some((l) => l.split(' ')[4] === path);

async function until<T>(what: string, fn: () => Promise<T | undefined> | T | undefined, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe.skipIf(!canMount)(`deploy/kubernetes scripts on a node ${skipReason}`, () => {
  const root = mkdtempSync('/tmp/homesfs-k8s-');
  chmodSync(root, 0o755);
  /** a node path, under the temporary root */
  const host = (p: string) => join(root, p);
  const config = {
    ...deployConfig,
    backing: host(deployConfig.backing),
    mount: host(deployConfig.mount),
    socket: host(deployConfig.socket),
    platformSocket: host(deployConfig.platformSocket),
    stateFile: host(deployConfig.stateFile),
    userdb: { ...deployConfig.userdb, dir: host(deployConfig.userdb.dir) },
    // any free loopback port: the manifests' own port may be taken on a test machine
    metrics: { listen: '127.0.0.1:0' },
  };
  const mapEnv = (env: Record<string, string>) => Object.fromEntries(Object.entries(env).map(([k, v]) => [k, v.startsWith('/') ? host(v) : v]));
  const prepare = containerOf(ds, 'prepare');
  const runPrepare = () => {
    const [sh, flags, script] = scriptOf(prepare);
    return runAsync(sh!, [flags!, script!], { env: { PATH: SYSTEM_PATH, ...mapEnv(envOf(prepare)) } });
  };
  let daemon: RunningDaemon | null = null;
  const lastReload = async () => {
    const r = await runAsync(process.execPath, [HOMESCTL, '--socket', config.socket, '--json', 'status']);
    if (r.code !== 0) throw new Error(`homesctl status: ${r.stderr}`);
    return (JSON.parse(r.stdout) as { lastReload: { ok: boolean; message: string; applied?: string[]; needsRestart?: string[] } | null }).lastReload;
  };
  const children: ChildProcess[] = [];

  afterAll(async () => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
    if (daemon && daemon.proc.exitCode === null && daemon.proc.signalCode === null) await daemon.stopKeep();
    if (isMounted(config.mount)) spawnSync('umount', ['-l', config.mount]);
    spawnSync('chattr', ['-i', config.mount]);
    rmSync(root, { recursive: true, force: true });
  });

  it('on a fresh node, prepare makes the kubelet\'s 0755 backing and state directories root-owned 0700 and the unmounted mount point immutable (and refuses one with content)', async () => {
    // what the kubelet makes of a missing DirectoryOrCreate hostPath
    for (const v of ['backing', 'state', 'shared']) mkdirSync(host(ds.volumes.find((x: any) => x.name === v).hostPath.path), { recursive: true, mode: 0o755 });
    // a home a runtime made on the node's disk before this guard existed: the mount would fail (not empty)
    mkdirSync(join(config.mount, 'acme', 'web'), { recursive: true });
    const refused = await runPrepare();
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('is not empty');
    rmSync(join(config.mount, 'acme'), { recursive: true });
    const r = await runPrepare();
    expect(r.code, r.stderr).toBe(0);
    for (const d of [config.backing, posix.dirname(config.stateFile)]) {
      const st = statSync(d);
      expect(st.mode & 0o7777, d).toBe(0o700);
      expect(st.uid).toBe(0);
    }
    expect(r.stdout).toContain('made immutable');
    // a container runtime creating a pod's missing hostPath (mkdir -p) while nothing is mounted
    expect(() => mkdirSync(join(config.mount, 'acme', 'web'), { recursive: true })).toThrow(/EPERM/);
    // every start runs it again
    const again = await runPrepare();
    expect(again.code, again.stderr).toBe(0);
  });

  it('the daemon then serves; the pod\'s init container waits for the mount and the home, then lets the pod start', async () => {
    const wait = containerOf(pod, 'wait-for-home');
    const uid = pod.securityContext.runAsUser as number;
    const waiting = runAs(uid, pod.securityContext.runAsGroup as number, scriptOf(wait)[2]!, { env: mapEnv(envOf(wait)), timeoutMs: 50_000 });
    let waited = false;
    void waiting.then(() => (waited = true));
    await new Promise((r) => setTimeout(r, 2500));
    expect(waited).toBe(false); // nothing mounted yet: still waiting

    daemon = await startDaemon({ dir: root, fresh: true, config });
    expect(isMounted(config.mount)).toBe(true);
    // the platform resolves the home as the example's comment says; the pod's path and uid are its answer
    const resolved = await runAsync(process.execPath, [HOMESCTL, '--socket', config.platformSocket, '--json', 'resolve', '--tenant', 'acme', '--project', 'web']);
    expect(resolved.code, resolved.stderr).toBe(0);
    const answer = JSON.parse(resolved.stdout) as { home: string; owner: { uid: number; gid: number } };
    expect(answer.home).toBe(host(pod.volumes.find((v: any) => v.name === 'home').hostPath.path));
    expect(answer.owner).toEqual({ uid, gid: uid });
    const r = await waiting;
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain('waiting for the homesfs mount');
  });

  it('the readiness probe\'s path answers 200 on the daemon\'s loopback metrics port', async () => {
    const listening = await daemon!.waitForLog((l) => l.msg === 'metrics endpoint listening');
    const address = (listening.addresses as string[])[0]!;
    const probe = containerOf(ds, 'homesfs').readinessProbe.httpGet;
    const status = await new Promise<number>((resolve, reject) =>
      get({ host: probe.host, port: Number(address.split(':').at(-1)), path: probe.path }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      }).on('error', reject),
    );
    expect(status).toBe(200);
  });

  it('the config reloader applies a ConfigMap update as the kubelet makes it (a new ..data), and reports a restart-only change refused', async () => {
    // the kubelet's layout of a ConfigMap volume: config.json -> ..data/config.json -> ..<timestamp>/config.json
    const cfgDir = root;
    const version = (name: string, cfg: object) => {
      mkdirSync(join(cfgDir, name));
      writeFileSync(join(cfgDir, name, 'config.json'), JSON.stringify(cfg));
      symlinkSync(name, join(cfgDir, '..data_tmp'));
      renameSync(join(cfgDir, '..data_tmp'), join(cfgDir, '..data')); // atomic, as the kubelet swaps it
    };
    const first = JSON.parse(readFileSync(join(cfgDir, 'config.json'), 'utf8')) as Record<string, any>;
    rmSync(join(cfgDir, 'config.json'));
    version('..2026_01_01_00_00_00.1', first);
    symlinkSync('..data/config.json', join(cfgDir, 'config.json'));

    const bin = join(root, 'bin');
    mkdirSync(bin);
    writeFileSync(join(bin, 'homesctl'), `#!/bin/sh\nexec ${process.execPath} ${HOMESCTL} "$@"\n`, { mode: 0o755 });
    const reloader = containerOf(ds, 'config-reloader');
    const env = { ...envOf(reloader), CONFIG_DIR: cfgDir, SOCKET: config.socket, INTERVAL: '1' };
    let out = '';
    const proc = spawn(scriptOf(reloader)[0]!, scriptOf(reloader).slice(1), { env: { PATH: `${bin}:${SYSTEM_PATH}`, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(proc);
    proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
    proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
    await until('the reloader to start', () => (out.includes('watching') ? true : undefined));

    expect(first.logLevel).toBe('debug');
    version('..2026_01_01_00_01_00.2', { ...first, logLevel: 'warn' });
    const applied = await until('the reload', async () => {
      const last = await lastReload();
      return last?.ok ? last : undefined;
    });
    expect(applied.applied).toContain('logLevel');
    expect(out).toContain('configuration changed (..2026_01_01_00_01_00.2)');

    version('..2026_01_01_00_02_00.3', { ...first, logLevel: 'warn', owners: { from: 131072, to: 196607 } });
    const refused = await until('the refusal', async () => {
      const last = await lastReload();
      return last && !last.ok ? last : undefined;
    });
    expect(refused.needsRestart).toEqual(['owners']);
    await until('the reloader to say so', () => (out.includes('the old configuration stays') ? true : undefined));
    expect(daemon!.proc.exitCode).toBeNull(); // still serving
    proc.kill('SIGTERM');
    version('..2026_01_01_00_03_00.4', first); // what the next start reads
  });

  it('after a crash, prepare leaves the dead mount to the daemon, which clears it and serves again', async () => {
    daemon!.proc.kill('SIGKILL');
    await daemon!.exited;
    expect(isMounted(config.mount)).toBe(true); // dead: ENOTCONN
    const r = await runPrepare();
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain('is mounted: a daemon serves');
    daemon = await startDaemon({ dir: root, fresh: false });
    expect(isMounted(config.mount)).toBe(true);
    expect(existsSync(join(config.mount, 'acme', 'web'))).toBe(true);
    expect(await daemon.stopKeep()).toBe(0);
    expect(isMounted(config.mount)).toBe(false);
  });
});
