import { readFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { buildConfig } from '../../src/config/load.js';

const DIR = join(import.meta.dirname, '../../deploy/kubernetes');

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

const under = (path: string, dir: string) => path === dir || path.startsWith(dir.endsWith('/') ? dir : `${dir}/`);

describe('deploy/kubernetes manifests', () => {
  const cm = one('config.yaml', 'ConfigMap');
  const config = buildConfig(JSON.parse(cm.data['config.json']), null).config;
  const ds = one('daemonset.yaml', 'DaemonSet');
  const pod = one('pod-example.yaml', 'Pod');
  const dsSpec = ds.spec.template.spec;
  const daemon = dsSpec.containers[0];
  const volume = (spec: any, name: string) => spec.volumes.find((v: any) => v.name === name);
  const mountOf = (c: any, name: string) => c.volumeMounts.find((m: any) => m.name === name);

  it('the ConfigMap holds a valid daemon configuration', () => {
    expect(config.mount).toMatch(/^\//);
    expect(daemon.command).toEqual(['homesfs', 'serve', '--config', '/etc/homesfs/config.json']);
    expect(mountOf(daemon, 'config').mountPath).toBe('/etc/homesfs');
    expect(volume(dsSpec, 'config').configMap.name).toBe(cm.metadata.name);
  });

  it('DaemonSet: privileged, /dev/fuse, restarts only on delete, probes through homesctl status', () => {
    expect(daemon.securityContext.privileged).toBe(true);
    expect(volume(dsSpec, mountOf(daemon, 'dev-fuse').name).hostPath).toEqual({ path: '/dev/fuse', type: 'CharDevice' });
    expect(mountOf(daemon, 'dev-fuse').mountPath).toBe('/dev/fuse');
    expect(ds.spec.updateStrategy).toEqual({ type: 'OnDelete' });
    for (const probe of [daemon.readinessProbe, daemon.livenessProbe]) {
      expect(probe.exec.command[0]).toBe('homesctl');
      expect(probe.exec.command.at(-1)).toBe('status');
      expect(probe.exec.command).toContain(config.socket);
    }
    expect(ds.spec.selector.matchLabels).toEqual(ds.spec.template.metadata.labels);
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
    expect(mountOf(daemon, 'platform-socket').mountPath).toBe(posix.dirname(config.platformSocket));
    expect(mountOf(daemon, 'userdb').mountPath).toBe(config.userdb.dir);
  });

  it('the pod receives one home through that hostPath at /home/user, HostToContainer, as the owner, workspace by its name under it', () => {
    const spec = pod.spec;
    const c = spec.containers[0];
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
    expect(c.securityContext.allowPrivilegeEscalation).toBe(false);
    expect(c.env).toContainEqual({ name: 'HOME', value: '/home/user' });
    const ws = mountOf(c, 'workspace');
    expect(posix.dirname(ws.mountPath)).toBe('/home/user');
    expect(posix.basename(ws.mountPath)).not.toBe('workspace');
    expect(c.workingDir).toBe(ws.mountPath);
  });
});
