import { existsSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { join, posix } from 'node:path';
import { DaemonSet } from 'kubernetes-models/apps/v1/DaemonSet';
import { ConfigMap } from 'kubernetes-models/v1/ConfigMap';
import { Namespace } from 'kubernetes-models/v1/Namespace';
import { Pod } from 'kubernetes-models/v1/Pod';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { buildConfig } from '../../src/config/load.js';
import { startMetricsServer } from '../../src/metrics/server.js';

const ROOT = join(import.meta.dirname, '../..');
const DIR = join(ROOT, 'deploy/kubernetes');

/* eslint-disable @typescript-eslint/no-explicit-any -- manifests are checked field by field below */
function docs(file: string): any[] {
  const parsed = parseAllDocuments(readFileSync(join(DIR, file), 'utf8'));
  for (const d of parsed) expect(d.errors, `${file}: ${d.errors.map((e) => e.message).join('; ')}`).toEqual([]);
  return parsed.map((d) => d.toJS()).filter((d) => d !== null);
}

const one = (file: string, kind: string) => {
  const found = docs(file).filter((d) => d.kind === kind);
  expect(found, `${file}: one ${kind}`).toHaveLength(1);
  return found[0];
};

/** The Kubernetes API schemas (kubernetes-models): types, enums and required fields of every object. */
const MODELS: Record<string, { new (data: any): { validate(): void } }> = {
  'v1/Namespace': Namespace,
  'v1/ConfigMap': ConfigMap,
  'v1/Pod': Pod,
  'apps/v1/DaemonSet': DaemonSet,
};
const validate = (doc: any): void => {
  const Model = MODELS[`${doc.apiVersion}/${doc.kind}`];
  if (!Model) throw new Error(`no schema for ${doc.apiVersion} ${doc.kind}`);
  new Model(doc).validate();
};

const under = (path: string, dir: string) => path === dir || path.startsWith(dir.endsWith('/') ? dir : `${dir}/`);
const BLOCK = 65536;

/** `kubelet:FIRST:COUNT` subordinate-id lines the deploy files tell admins to use. */
function kubeletRanges(text: string): Array<{ first: number; count: number }> {
  return [...text.matchAll(/\bkubelet:(\d+):(\d+)\b/g)].map((m) => ({ first: Number(m[1]), count: Number(m[2]) }));
}

describe('deploy/kubernetes manifests', () => {
  const cm = one('config.yaml', 'ConfigMap');
  const config = buildConfig(JSON.parse(cm.data['config.json']), null).config;
  const ds = one('daemonset.yaml', 'DaemonSet');
  const pod = one('pod-example.yaml', 'Pod');
  const dsSpec = ds.spec.template.spec;
  const container = (spec: any, name: string) => [...(spec.initContainers ?? []), ...spec.containers].find((c: any) => c.name === name);
  const daemon = container(dsSpec, 'homesfs');
  const prepare = container(dsSpec, 'prepare');
  const reloader = container(dsSpec, 'config-reloader');
  const volume = (spec: any, name: string) => spec.volumes.find((v: any) => v.name === name);
  const mountOf = (c: any, name: string) => c.volumeMounts.find((m: any) => m.name === name);
  const envOf = (c: any, name: string) => c.env.find((e: any) => e.name === name)?.value;
  const metricsPort = Number(config.metrics!.listen!.split(':').at(-1));

  it('every object passes the Kubernetes API schema', () => {
    const all = ['config.yaml', 'daemonset.yaml', 'pod-example.yaml'].flatMap((f) => docs(f));
    expect(all.map((d) => d.kind).sort()).toEqual(['ConfigMap', 'DaemonSet', 'Namespace', 'Pod']);
    for (const d of all) validate(d);
  });

  it('the schema check bites: a wrong type, an unknown enum value or a missing field is refused', () => {
    const broken = (edit: (copy: any) => void) => {
      const copy = structuredClone(ds);
      edit(copy);
      return () => validate(copy);
    };
    expect(broken(() => undefined)).not.toThrow();
    expect(broken((c) => (c.spec.template.spec.hostPID = 'yes'))).toThrow(/hostPID/);
    const d = (c: any) => c.spec.template.spec.containers.find((x: any) => x.name === 'homesfs');
    expect(broken((c) => (d(c).volumeMounts[1].mountPropagation = 'Both'))).toThrow(/mountPropagation/);
    expect(broken((c) => delete d(c).readinessProbe.httpGet.port)).toThrow(/port/);
    expect(broken((c) => delete c.spec.selector)).toThrow(/selector/);
  });

  it('the ConfigMap holds a configuration the daemon accepts, read where the daemon is told to read it', () => {
    expect(config.mount).toMatch(/^\//);
    expect(daemon.command.slice(0, 2)).toEqual(['sh', '-c']);
    expect(daemon.command[2]).toMatch(/^CONFIG=\/etc\/homesfs\/config\.json$/m);
    expect(daemon.command[2]).toMatch(/homesfs serve --config "\$CONFIG" &$/m);
    expect(mountOf(daemon, 'config').mountPath).toBe('/etc/homesfs');
    expect(volume(dsSpec, 'config').configMap.name).toBe(cm.metadata.name);
    expect(ds.metadata.namespace).toBe(cm.metadata.namespace);
  });

  it('DaemonSet: privileged, /dev/fuse, every node (all taints tolerated), a rollout surges (the new pod takes the session over from the old one)', () => {
    expect(daemon.securityContext.privileged).toBe(true);
    expect(volume(dsSpec, mountOf(daemon, 'dev-fuse').name).hostPath).toEqual({ path: '/dev/fuse', type: 'CharDevice' });
    expect(mountOf(daemon, 'dev-fuse').mountPath).toBe('/dev/fuse');
    expect(ds.spec.updateStrategy).toEqual({ type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } });
    expect(ds.spec.selector.matchLabels).toEqual(ds.spec.template.metadata.labels);
    // one toleration with operator Exists and no key or effect matches every taint
    expect(dsSpec.tolerations).toContainEqual({ operator: 'Exists' });
    const ns = one('daemonset.yaml', 'Namespace');
    expect(ns.metadata.name).toBe(ds.metadata.namespace);
    expect(ns.metadata.labels['pod-security.kubernetes.io/enforce']).toBe('privileged');
  });

  it('the node pid namespace, so the daemon sees (and FUSE names) the processes of agent pods', () => {
    expect(dsSpec.hostPID).toBe(true);
  });

  it('no container has a liveness probe (a kill takes the mount from every pod on the node); no resource limits', () => {
    for (const c of [...dsSpec.initContainers, ...dsSpec.containers]) {
      expect(c.livenessProbe, c.name).toBeUndefined();
      expect(c.resources?.limits, c.name).toBeUndefined();
    }
  });

  it('readiness: an httpGet of the metrics endpoint on the node loopback (hostNetwork), the port the ConfigMap sets', () => {
    expect(config.metrics?.listen).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(dsSpec.hostNetwork).toBe(true); // the kubelet reaches 127.0.0.1 of the pod only in the node's namespace
    const probe = daemon.readinessProbe.httpGet;
    expect(probe).toMatchObject({ host: '127.0.0.1', port: metricsPort });
    // no declared port: with hostNetwork it would be a hostPort, and a rollout's surge pod
    // could never be scheduled beside the old one holding it
    for (const c of dsSpec.containers) expect(c.ports, c.name).toBeUndefined();
  });

  it('the readiness path is the daemon\'s health endpoint: 200 while it serves, 503 when it does not', async () => {
    let why: string[] = [];
    const server = await startMetricsServer({ listen: '127.0.0.1:0', render: async () => 'homesfs_up_seconds 1\n', health: () => why, log: pino({ level: 'silent' }) });
    try {
      const port = Number(server.addresses[0]!.split(':').at(-1));
      const ask = () =>
        new Promise<number>((resolve, reject) =>
          request({ host: '127.0.0.1', port, path: daemon.readinessProbe.httpGet.path }, (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          })
            .on('error', reject)
            .end(),
        );
      expect(await ask()).toBe(200);
      why = ['mount not answering'];
      expect(await ask()).toBe(503);
    } finally {
      await server.close();
    }
  });

  it('an init container makes the backing and state directories root-owned 0700 before the daemon starts', () => {
    expect(dsSpec.initContainers.map((c: any) => c.name)).toEqual(['prepare']);
    expect(prepare.image).toBe(daemon.image);
    expect(prepare.command.slice(0, 2)).toEqual(['sh', '-ec']);
    const script = prepare.command[2] as string;
    expect(script).toMatch(/install -d -m 0700 -o 0 -g 0 "\$BACKING" "\$STATE"/);
    expect(envOf(prepare, 'BACKING')).toBe(config.backing);
    expect(envOf(prepare, 'STATE')).toBe(posix.dirname(config.stateFile!));
    expect(envOf(prepare, 'MOUNT')).toBe(config.mount);
    // the same host directories the daemon uses
    for (const v of ['backing', 'state', 'shared']) expect(mountOf(prepare, v).mountPath).toBe(mountOf(daemon, v).mountPath);
    expect(script).toMatch(/chattr \+i "\$MOUNT"/);
  });

  it('the mount is a subdirectory of a hostPath shared Bidirectionally, at the same path on the host', () => {
    const shared = mountOf(daemon, 'shared');
    expect(shared.mountPropagation).toBe('Bidirectional');
    expect(volume(dsSpec, 'shared').hostPath.path).toBe(shared.mountPath);
    expect(under(config.mount, shared.mountPath)).toBe(true);
    expect(config.mount).not.toBe(shared.mountPath);
    // backing, state and sockets are host paths too (on node disk here), never inside the mount
    const backing = mountOf(daemon, 'backing');
    expect(volume(dsSpec, 'backing').hostPath.path).toBe(backing.mountPath);
    expect(config.backing).toBe(backing.mountPath);
    expect(under(config.backing, shared.mountPath)).toBe(false);
    expect(config.stateFile).toBeDefined();
    expect(under(posix.dirname(config.stateFile!), mountOf(daemon, 'state').mountPath)).toBe(true);
    expect(volume(dsSpec, 'state').hostPath.path).toBe(mountOf(daemon, 'state').mountPath);
    expect(mountOf(daemon, 'platform-socket').mountPath).toBe(posix.dirname(config.platformSocket));
    expect(mountOf(daemon, 'userdb').mountPath).toBe(config.userdb.dir);
  });

  it('the admin socket lives on a hostPath at the same path, so homesctl on the node reaches it', () => {
    const dir = posix.dirname(config.socket);
    expect(mountOf(daemon, 'admin-socket').mountPath).toBe(dir);
    expect(volume(dsSpec, 'admin-socket').hostPath.path).toBe(dir);
    // and apart from the platform socket, whose directory other services may be given
    expect(dir).not.toBe(posix.dirname(config.platformSocket));
  });

  it('a config-reloader container asks the daemon to reload when the kubelet swaps the ConfigMap files', () => {
    expect(reloader.image).toBe(daemon.image);
    expect(envOf(reloader, 'CONFIG_DIR')).toBe(mountOf(daemon, 'config').mountPath);
    expect(mountOf(reloader, 'config').mountPath).toBe(mountOf(daemon, 'config').mountPath);
    expect(envOf(reloader, 'SOCKET')).toBe(config.socket);
    expect(mountOf(reloader, 'admin-socket').mountPath).toBe(posix.dirname(config.socket));
    expect(reloader.command[2]).toMatch(/homesctl --socket "\$SOCKET" reload/);
    expect(reloader.command[2]).toMatch(/readlink "\$CONFIG_DIR\/\.\.data"/);
  });

  it('owner ids: whole 65536-id blocks above the node\'s own ids, below systemd\'s container ranges, clear of the kubelet\'s range', () => {
    const { from, to } = config.owners;
    expect(from).toBeGreaterThanOrEqual(BLOCK); // 0-65535: system and regular users, homed, DynamicUser, nobody
    expect(to).toBeLessThan(524288); // systemd: 524288 and up are container ranges
    expect(from % BLOCK).toBe(0);
    expect((to + 1) % BLOCK).toBe(0);
    // every kubelet subordinate range the deploy files suggest is one the kubelet accepts
    // (first id a multiple of 65536 and at least 65536, a whole number of blocks for at
    // least the default 110 pods) and leaves the owners alone
    const suggested = [readFileSync(join(DIR, 'config.yaml'), 'utf8'), readFileSync(join(DIR, 'README.md'), 'utf8')].flatMap(kubeletRanges);
    expect(suggested.length).toBeGreaterThan(0);
    for (const { first, count } of suggested) {
      expect(first % BLOCK).toBe(0);
      expect(first).toBeGreaterThanOrEqual(BLOCK);
      expect(count % BLOCK).toBe(0);
      expect(count / BLOCK).toBeGreaterThanOrEqual(110);
      expect(first + count <= from || first > to).toBe(true);
    }
  });

  it('the pod receives one home through that hostPath at /home/user, HostToContainer, as the owner, workspace by its name under it', () => {
    const spec = pod.spec;
    const c = container(spec, 'tools');
    const home = mountOf(c, 'home');
    expect(home.mountPath).toBe('/home/user');
    expect(home.mountPropagation).toBe('HostToContainer');
    const hostPath = volume(spec, 'home').hostPath.path as string;
    expect(under(hostPath, config.mount)).toBe(true);
    expect(posix.relative(config.mount, hostPath).split('/')).toHaveLength(2); // <tenant>/<key>: one home
    expect(spec.securityContext.runAsUser).toBeGreaterThanOrEqual(config.owners.from);
    expect(spec.securityContext.runAsUser).toBeLessThanOrEqual(config.owners.to);
    expect(spec.securityContext.runAsGroup).toBe(spec.securityContext.runAsUser);
    expect(spec.securityContext.runAsNonRoot).toBe(true);
    expect(spec.hostUsers).toBe(true); // the owner is a node uid
    expect(c.securityContext.allowPrivilegeEscalation).toBe(false);
    expect(c.env).toContainEqual({ name: 'HOME', value: '/home/user' });
    const ws = mountOf(c, 'workspace');
    expect(posix.dirname(ws.mountPath)).toBe('/home/user');
    expect(posix.basename(ws.mountPath)).not.toBe('workspace');
    expect(c.workingDir).toBe(ws.mountPath);
  });

  it('the pod waits for the mount: no existence check on the home\'s hostPath, an init container watching its parent', () => {
    const spec = pod.spec;
    const home = volume(spec, 'home').hostPath;
    expect(home.type).toBe(''); // "Directory" would be checked before the init container runs
    expect(spec.initContainers.map((c: any) => c.name)).toEqual(['wait-for-home']);
    const wait = spec.initContainers[0];
    const parent = mountOf(wait, 'homes-parent');
    expect(parent.mountPropagation).toBe('HostToContainer'); // the mount made later shows up in it
    expect(parent.readOnly).toBe(true);
    expect(volume(spec, 'homes-parent').hostPath.path).toBe(parent.mountPath);
    expect(parent.mountPath).toBe(volume(dsSpec, 'shared').hostPath.path);
    expect(envOf(wait, 'MOUNT')).toBe(config.mount);
    expect(envOf(wait, 'HOME_PATH')).toBe(home.path);
    expect(wait.command[2]).toMatch(/fuse\\\.homesfs/);
    expect(spec.restartPolicy).toBe('Never'); // a container restart would skip the wait
    expect(spec.securityContext.runAsNonRoot).toBe(true);
  });
});

describe('deploy/kubernetes/Dockerfile', () => {
  const text = readFileSync(join(DIR, 'Dockerfile'), 'utf8');
  // instructions, with continuation lines joined and comments dropped
  const lines = text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  const stages: Array<{ from: string; name?: string; lines: string[] }> = [];
  const args: Record<string, string> = {};
  for (const l of lines) {
    const from = /^FROM\s+(\S+)(?:\s+AS\s+(\S+))?$/i.exec(l);
    if (from) stages.push({ from: from[1]!.replace(/\$\{(\w+)\}/g, (_, k: string) => args[k] ?? `<${k}>`), ...(from[2] ? { name: from[2] } : {}), lines: [] });
    else if (stages.length === 0 && /^ARG\s+(\w+)=(\S+)$/.test(l)) {
      const [, k, v] = /^ARG\s+(\w+)=(\S+)$/.exec(l)!;
      args[k!] = v!.replace(/\$\{(\w+)\}/g, (_, a: string) => args[a] ?? `<${a}>`); // an ARG's default may name an earlier one
    } else stages.at(-1)?.lines.push(l);
  }
  const aptPackages = (stage: { lines: string[] }) =>
    stage.lines.flatMap((l) => [...l.matchAll(/apt-get install ((?:-\S+\s+)*)([^&]+)/g)].flatMap((m) => m[2]!.trim().split(/\s+/)));
  const build = stages[0]!;
  const runtime = stages.at(-1)!;

  it('two stages on Debian 12 (bookworm) with Node.js 20', () => {
    expect(stages).toHaveLength(2);
    expect(args.NODE_VERSION).toBe('20');
    expect(build).toMatchObject({ from: 'node:20-bookworm', name: 'build' });
    expect(runtime.from).toBe('node:20-bookworm-slim');
  });

  it('the build stage copies, before npm ci, everything the postinstall reads (our C and its build), and .dockerignore lets it in', () => {
    const ci = build.lines.findIndex((l) => /^RUN npm ci\b/.test(l));
    const copied = build.lines.slice(0, ci).filter((l) => l.startsWith('COPY ')).flatMap((l) => l.split(/\s+/).slice(1, -1));
    const ignore = readFileSync(join(DIR, '..', '..', '.dockerignore'), 'utf8').split('\n').filter((l) => l.startsWith('!')).map((l) => l.slice(1));
    for (const need of ['native/binding.gyp', 'native/src/', 'scripts/build-native.mjs']) {
      expect(copied).toContain(need);
      expect(ignore).toContain(need);
    }
  });

  it('the build stage compiles against libfuse-dev and installs the packed tarball; the runtime has libfuse2 only', () => {
    expect(aptPackages(build)).toEqual(expect.arrayContaining(['libfuse-dev', 'pkg-config', 'g++', 'make', 'python3']));
    const buildRuns = build.lines.join('\n');
    expect(buildRuns).toMatch(/RUN npm ci\b/);
    expect(buildRuns).toMatch(/npm pack\b/);
    expect(buildRuns).toMatch(/npm install -g --prefix (\S+) .*homesfs-\*\.tgz/);
    expect(aptPackages(runtime)).toContain('libfuse2');
    expect(aptPackages(runtime)).not.toContain('libfuse-dev');
    expect(aptPackages(runtime)).toContain('e2fsprogs'); // chattr, for the init container
    expect(runtime.lines).toContain('COPY --from=build /opt/homesfs /opt/homesfs');
    // Debian's fuse package (fusermount) conflicts with fuse3 and is not needed as root
    for (const s of stages) expect(aptPackages(s)).not.toContain('fuse');
  });

  it('every file the build copies exists and passes .dockerignore', () => {
    const ignore = readFileSync(join(ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    expect(ignore[0]).toBe('*'); // an allow-list: nothing else reaches the builder
    const allowed = ignore.filter((l) => l.startsWith('!')).map((l) => l.slice(1).replace(/\/$/, ''));
    const sources = build.lines
      .filter((l) => l.startsWith('COPY ') && !l.includes('--from'))
      .flatMap((l) => l.split(/\s+/).slice(1, -1))
      .map((s) => s.replace(/\/$/, ''));
    expect(sources.length).toBeGreaterThan(5);
    for (const s of sources) {
      expect(existsSync(join(ROOT, s)), s).toBe(true);
      expect(allowed.some((a) => s === a || s.startsWith(`${a}/`)), `${s} is kept out by .dockerignore`).toBe(true);
    }
  });

  it('the manifests run the image the README says to build', () => {
    const images = new Set([one('daemonset.yaml', 'DaemonSet')].flatMap((d) => [...d.spec.template.spec.initContainers, ...d.spec.template.spec.containers]).map((c: any) => c.image));
    expect(images.size).toBe(1);
    expect(readFileSync(join(DIR, 'README.md'), 'utf8')).toContain(`-t ${[...images][0]}`);
  });
});
