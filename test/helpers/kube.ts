/**
 * The Kubernetes manifests (deploy/kubernetes/) run under `podman kube play` on this
 * machine: podman 4.3 plays Pods and Deployments, not DaemonSets, so the DaemonSet's pod
 * template becomes a Pod here; every hostPath moves under a temporary "node root" (the
 * host side only: the paths inside the containers stay those of the manifests), the
 * ConfigMap becomes a file podman hands over with --configmap, the images become the
 * one deploy/kubernetes/local-image.sh built, the daemon's declared ports go (podman
 * refuses ports with hostNetwork), and the pod's shared pid namespace stands in for the
 * node's (podman 4.3 ignores hostPID). Nothing else of the manifests changes.
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments, stringify } from 'yaml';

export const ROOT = join(import.meta.dirname, '../..');
export const DEPLOY = join(ROOT, 'deploy/kubernetes');

/* eslint-disable @typescript-eslint/no-explicit-any -- manifests are plain YAML objects */
type Obj = Record<string, any>;

export function docs(file: string): Obj[] {
  return parseAllDocuments(readFileSync(join(DEPLOY, file), 'utf8')).map((d) => d.toJS() as Obj);
}

/**
 * podman 4.3 removes an init container once it has run ("once"), and races with its exit
 * ("failed to remove once init container ... it is running", podman issue 18477, fixed
 * in 4.6); "always" keeps it and runs it again at each start of the pod, as a kubelet
 * runs init containers at each start of a pod's sandbox.
 */
const INIT_ALWAYS = { 'io.podman.annotations.init.container.type': 'always' };

/** Host paths of the manifests, moved under `nodeRoot`, except devices (/dev/fuse). */
function remapHostPaths(spec: Obj, nodeRoot: string): void {
  for (const v of spec.volumes ?? []) {
    if (v.hostPath && !String(v.hostPath.path).startsWith('/dev/')) v.hostPath.path = join(nodeRoot, v.hostPath.path);
  }
}

function setImage(spec: Obj, image: string): void {
  for (const c of [...(spec.initContainers ?? []), ...(spec.containers ?? [])]) c.image = image;
}

/**
 * The DaemonSet's pod template as a Pod named `name`, its hostPaths under `nodeRoot`, its
 * containers on `image`.
 */
export function daemonPod(opts: { name: string; nodeRoot: string; image: string }): Obj {
  const ds = docs('daemonset.yaml').find((d) => d.kind === 'DaemonSet')!;
  const template = structuredClone(ds.spec.template) as Obj;
  const spec = template.spec as Obj;
  remapHostPaths(spec, opts.nodeRoot);
  setImage(spec, opts.image);
  // podman refuses port declarations with the host's network ("PortMappings can only be
  // used with Bridge or slirp4netns networking"); Kubernetes only records them there.
  if (spec.hostNetwork) for (const c of spec.containers) delete c.ports;
  // podman 4.3 ignores hostPID (kube play has it from 4.5): each container would get a pid
  // namespace of its own, and the holder could not identify the daemon registering with
  // it. The pod's own shared pid namespace stands in for the node's (both containers in
  // one namespace, as under hostPID); a rollout's two pods see each other through their
  // sockets (the takeover), as under hostPID.
  if (spec.hostPID) spec.shareProcessNamespace = true;
  return { apiVersion: 'v1', kind: 'Pod', metadata: { name: opts.name, labels: template.metadata.labels, annotations: INIT_ALWAYS }, spec };
}

/** The ConfigMap of config.yaml with its config.json changed by `edit`. */
export function configMap(edit: (config: Obj) => void): Obj {
  const cm = structuredClone(docs('config.yaml').find((d) => d.kind === 'ConfigMap')!);
  const config = JSON.parse(cm.data['config.json']) as Obj;
  edit(config);
  cm.data['config.json'] = JSON.stringify(config, null, 2);
  return cm;
}

/**
 * pod-example.yaml's Pod, named `name`, its hostPaths under `nodeRoot`, running as `uid`
 * on `image`; `tools` replaces the tools container's command (the example leaves it to
 * its image), `extraVolumes` adds hostPath volumes mounted into the tools container.
 */
export function consumerPod(opts: {
  name: string;
  nodeRoot: string;
  image: string;
  uid: number;
  gid: number;
  homePath: string;
  tools: string[];
  extraVolumes?: Array<{ name: string; hostPath: string; mountPath: string }>;
}): Obj {
  const pod = structuredClone(docs('pod-example.yaml').find((d) => d.kind === 'Pod')!);
  pod.metadata = { name: opts.name, annotations: INIT_ALWAYS };
  const spec = pod.spec as Obj;
  delete spec.nodeName;
  spec.securityContext.runAsUser = opts.uid;
  spec.securityContext.runAsGroup = opts.gid;
  for (const c of spec.initContainers) for (const e of c.env ?? []) if (e.name === 'HOME_PATH') e.value = opts.homePath;
  for (const v of spec.volumes) if (v.name === 'home') v.hostPath.path = opts.homePath;
  remapHostPaths(spec, opts.nodeRoot);
  setImage(spec, opts.image);
  const tools = spec.containers.find((c: Obj) => c.name === 'tools');
  tools.command = opts.tools;
  for (const x of opts.extraVolumes ?? []) {
    spec.volumes.push({ name: x.name, hostPath: { path: x.hostPath, type: 'Directory' } });
    tools.volumeMounts.push({ name: x.name, mountPath: x.mountPath });
  }
  return pod;
}

export function writeYaml(file: string, objs: Obj[]): string {
  writeFileSync(file, objs.map((o) => stringify(o)).join('---\n'));
  return file;
}
/* eslint-enable @typescript-eslint/no-explicit-any */

export interface Run {
  code: number | null;
  out: string;
  err: string;
}

/** A command to its end, or killed after `timeoutMs`. */
export function run(cmd: string, args: string[], opts: { timeoutMs?: number; env?: NodeJS.ProcessEnv; input?: string } = {}): Promise<Run> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { stdio: [opts.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'], env: opts.env ?? process.env });
    let out = '';
    let err = '';
    p.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => p.kill('SIGKILL'), opts.timeoutMs ?? 120_000);
    p.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
    if (opts.input !== undefined) p.stdin!.end(opts.input);
  });
}

export async function must(cmd: string, args: string[], opts: { timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): Promise<string> {
  const r = await run(cmd, args, opts);
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')}: exit ${r.code}: ${r.err.slice(-2000) || r.out.slice(-2000)}`);
  return r.out;
}

/** The filesystem type mounted exactly at `path` in this mount namespace, or null. */
export function fstypeAt(path: string): string | null {
  const r = spawnSync('findmnt', ['-rn', '-o', 'FSTYPE', '--mountpoint', path], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim().split('\n').at(-1) ?? null : null;
}

export async function until<T>(what: string, f: () => T | null | undefined | false | Promise<T | null | undefined | false>, ms: number, everyMs = 100): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
