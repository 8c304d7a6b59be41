import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canMount, skipReason } from '../helpers/daemon.js';
import { ROOT, configMap, consumerPod, daemonPod, fstypeAt, must, run, until, writeYaml } from '../helpers/kube.js';

/**
 * The Kubernetes manifests on this machine, under `podman kube play` (podman 4.3, as
 * scripts/install.sh installs it; test/helpers/kube.ts says what is converted and why):
 * the image deploy/kubernetes/local-image.sh builds, the DaemonSet's pod (privileged,
 * /dev/fuse, hostPID, hostNetwork, Bidirectional propagation of the shared hostPath), and
 * pod-example.yaml's consumer pod started after it (HostToContainer), whose agent works in
 * its home. The "node" is a temporary directory made a shared mount (`mount --bind D D &&
 * mount --make-rshared D`): propagation out of a container needs a shared source.
 */

if (!canMount) console.warn(`kubernetes suite skipped: ${skipReason}`);

const CONF_DIR = mkdtempSync('/tmp/homesfs-k8s-conf-');
const ENV = { ...process.env, CONTAINERS_CONF: join(CONF_DIR, 'containers.conf') };
const podman = (args: string[], timeoutMs = 120_000) => run('podman', args, { env: ENV, timeoutMs });
const podmanMust = (args: string[], timeoutMs = 120_000) => must('podman', args, { env: ENV, timeoutMs });

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

async function healthz(port: number): Promise<number | null> {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(2000) });
    return r.status;
  } catch {
    return null;
  }
}

interface Agent {
  lines: number;
  rounds: number;
  errors: number;
  lastError: string;
  maxWaitMs: number;
}

describe.skipIf(!canMount)('Kubernetes manifests under podman kube play', () => {
  const id = `${process.pid}`;
  let dir = '';
  let node = '';
  let image = '';
  let port = 0;
  const played: string[] = []; // YAML files played, for teardown (newest first)
  const playedPods = new Map<string, string[]>();
  const out = () => join(dir, 'out');
  const mountOnNode = () => join(node, '/var/lib/homesfs/shared/homes');
  // The agents rewrite their progress files in place: a read may catch one half written,
  // and then the last whole one stands.
  const lastProgress = new Map<string, Agent>();
  const agent = (mode: string): Agent | null => {
    try {
      lastProgress.set(mode, JSON.parse(readFileSync(join(out(), `${mode}.progress`), 'utf8')) as Agent);
    } catch {
      // not there yet, or half written
    }
    return lastProgress.get(mode) ?? null;
  };

  beforeAll(async () => {
    // podman configured as on this host (runc, cgroupfs, ...): test/systemd/containers.sh
    await must('bash', ['-c', `source ${ROOT}/test/systemd/containers.sh && containers_conf ${CONF_DIR}`]);
    const t0 = Date.now();
    const built = await must(join(ROOT, 'deploy/kubernetes/local-image.sh'), [], { env: ENV, timeoutMs: 900_000 });
    image = built.trim().split('\n').at(-1)!;
    console.log(`image ${image}: ${Date.now() - t0} ms`);
    dir = mkdtempSync('/tmp/homesfs-k8s-');
    node = join(dir, 'node');
    mkdirSync(node);
    await must('mount', ['--bind', node, node]);
    await must('mount', ['--make-rshared', node]);
    for (const d of ['out', 'agent']) mkdirSync(join(dir, d), { mode: 0o777 });
    chmodSync(out(), 0o777);
    copyFileSync(join(ROOT, 'test/systemd/agent.mjs'), join(dir, 'agent/agent.mjs'));
    port = await freePort();
  }, 1_000_000);

  afterAll(async () => {
    // podman stop (SIGTERM: the daemon unmounts), then remove: podman kill or a bare
    // kube down would leave a stale mount.
    const t0 = Date.now();
    try {
      for (const yaml of played.reverse()) {
        for (const pod of playedPods.get(yaml) ?? []) await stopPod(pod).catch((err: Error) => console.warn(err.message));
        await podman(['kube', 'down', yaml], 120_000);
      }
    } finally {
      cleanNode();
      console.log(`teardown: ${Date.now() - t0} ms`);
    }
  }, 300_000);

  function cleanNode(): void {
    if (dir) {
      if (fstypeAt(mountOnNode())) spawnSync('umount', ['-l', mountOnNode()]);
      // the DaemonSet's init container makes the mount point immutable
      if (existsSync(mountOnNode())) spawnSync('chattr', ['-i', mountOnNode()]);
      spawnSync('umount', ['-R', '-l', node]);
      rmSync(dir, { recursive: true, force: true });
    }
    rmSync(CONF_DIR, { recursive: true, force: true });
  }

  /** Plays `objs` as `name`.yaml; teardown stops its pods and takes it down. */
  async function play(name: string, objs: Array<Record<string, any>>, extra: string[] = []): Promise<string> {
    const file = writeYaml(join(dir, `${name}.yaml`), objs);
    played.push(file);
    playedPods.set(file, objs.filter((o) => o.kind === 'Pod').map((o) => o.metadata.name));
    await podmanMust(['kube', 'play', ...extra, file], 300_000);
    return file;
  }

  /**
   * As the kubelet stops a pod: SIGTERM, up to the grace period. The daemon's container
   * first: podman tears a pod's shared pid namespace (our stand-in for hostPID) down as
   * soon as one of its containers has exited, SIGKILLing the others, so a daemon still
   * unmounting would be killed (under hostPID no pid namespace ends with the pod).
   */
  async function stopPod(pod: string): Promise<void> {
    if (pod.startsWith('homesfs-')) await podman(['stop', '-t', '60', `${pod}-homesfs`], 120_000);
    await podmanMust(['pod', 'stop', '-t', '60', pod], 120_000);
  }

  const daemonName = (n: string) => `homesfs-${n}-${id}`;
  const consumerName = `acme-web-${id}`;
  const tools = `${consumerName}-tools`;
  let cmFile = '';
  let resolved: { home: string; owner: { uid: number; gid: number } } = { home: '', owner: { uid: 0, gid: 0 } };
  const homesctl = (pod: string, args: string[]) => podmanMust(['exec', `${pod}-homesfs`, 'homesctl', ...args]);
  interface Status {
    pid: number;
    version: string;
    session: { generation: number; startMode: string };
    holder?: { crashSurvival: boolean; keeper?: string; pid: number | null; registered: boolean };
  }
  const status = async (pod: string) => JSON.parse(await homesctl(pod, ['--json', 'status'])) as Status;
  /** The cgroups of a pid of the daemon's pod (its shared pid namespace), naming its container. */
  const cgroupOf = (pod: string, pid: number) => podmanMust(['exec', `${pod}-holder`, 'cat', `/proc/${pid}/cgroup`]);
  /** The pod's startup probe, run as the kubelet runs it: 0 once this pod's own daemon serves. */
  const started = async (pod: string) => {
    const spec = daemonPod({ name: pod, nodeRoot: node, image }).spec as { containers: Array<{ name: string; startupProbe: { exec: { command: string[] } } }> };
    const probe = spec.containers.find((c) => c.name === 'homesfs')!.startupProbe.exec.command;
    return (await podman(['exec', `${pod}-homesfs`, ...probe])).code === 0;
  };
  /** The writer acknowledged `more` lines beyond what it had, with no error. */
  async function agentsGoOn(label: string, more = 50): Promise<Agent> {
    const from = agent('writer')?.lines ?? 0;
    const at = await until(`${label}: the writer goes on`, () => ((agent('writer')?.lines ?? 0) >= from + more ? agent('writer') : null), 60_000);
    const r = agent('reader');
    console.log(`${label}: writer ${at.lines} lines, ${at.errors} errors, longest call ${at.maxWaitMs} ms; reader ${r?.rounds} rounds, ${r?.errors} errors`);
    expect({ writer: at.errors, reader: r?.errors, lastError: at.lastError || r?.lastError }).toEqual({ writer: 0, reader: 0, lastError: '' });
    return at;
  }
  async function playDaemon(n: string, img: string): Promise<void> {
    const daemon = daemonPod({ name: daemonName(n), nodeRoot: node, image: img });
    await play(daemonName(n), [daemon], ['--configmap', cmFile]);
  }

  it('the DaemonSet pod mounts, the mount reaches the node and a consumer pod started after it, whose agent works in its home', async () => {
    // the daemon's config with a free metrics port (hostNetwork: the node's loopback)
    cmFile = writeYaml(join(dir, 'configmap.yaml'), [configMap((c) => (c.metrics = { listen: `127.0.0.1:${port}` }))]);
    const t0 = Date.now();
    await playDaemon('a', image);
    await until('the daemon answers /healthz with 200', async () => (await healthz(port)) === 200, 90_000, 200);
    await until("the pod's startup probe passes", () => started(daemonName('a')), 30_000, 200);
    console.log(`daemon pod ready: ${Date.now() - t0} ms`);
    // the mount propagated out to the node (Bidirectional through a shared hostPath)
    expect(fstypeAt(mountOnNode())).toBe('fuse.homesfs');

    // the platform resolves a home on the node's platform socket
    resolved = JSON.parse(await homesctl(daemonName('a'), ['--socket', '/run/homesfs-platform/platform.sock', '--json', 'resolve', '--tenant', 'acme', '--project', 'web'])) as typeof resolved;
    expect(resolved.home).toBe('/var/lib/homesfs/shared/homes/acme/web');

    // the consumer: pod-example.yaml with that home; its tools container runs a writer
    // (append + fsync every 10 ms) and a reader (reads, lists, stats) in the home
    const consumer = consumerPod({
      name: consumerName,
      nodeRoot: node,
      image,
      uid: resolved.owner.uid,
      gid: resolved.owner.gid,
      homePath: resolved.home,
      tools: [
        'sh',
        '-c',
        'cd /home/user && node /agent/agent.mjs writer /home/user/log /out & w=$!; ' +
          'until [ -s /home/user/log ]; do sleep 0.1; done; ' +
          'cd /home/user && node /agent/agent.mjs reader /home/user/log /out & r=$!; ' +
          'trap "kill -TERM $w $r; wait $w $r; exit 0" TERM; wait',
      ],
      extraVolumes: [
        { name: 'agent', hostPath: join(dir, 'agent'), mountPath: '/agent' },
        { name: 'out', hostPath: out(), mountPath: '/out' },
      ],
    });
    const t1 = Date.now();
    await play('consumer', [consumer]);
    await until('the agents write and read', () => (agent('writer')?.lines ?? 0) >= 20 && (agent('reader')?.rounds ?? 0) >= 10 && agent('writer'), 90_000);
    console.log(`consumer pod at work: ${Date.now() - t1} ms`);
    await agentsGoOn('started');

    // in the consumer: the home is the homesfs mount, its files are the agent's
    const ls = await podmanMust(['exec', tools, 'sh', '-c', 'id -u; grep " /home/user " /proc/self/mountinfo; ls -ln /home/user; tail -n 1 /home/user/log']);
    const [uid, mountinfo, ...rest] = ls.trim().split('\n');
    expect(Number(uid)).toBe(resolved.owner.uid);
    expect(mountinfo).toMatch(/ - fuse\.homesfs /);
    expect(rest.join('\n')).toMatch(new RegExp(`^-rw------- 1 ${resolved.owner.uid} ${resolved.owner.gid} .* log$`, 'm'));
    // the same file on the node, through the propagated mount
    expect(existsSync(join(mountOnNode(), 'acme/web/log'))).toBe(true);
  }, 300_000);

  it("a crash of the daemon's container is survived: the pod's holder container keeps the session, the restarted container resumes it, agents see no error", async () => {
    const pod = daemonName('a');
    const before = await status(pod);
    expect(before.holder).toMatchObject({ crashSurvival: true, keeper: 'holder', registered: true });
    // the holder that keeps it runs in the holder container, not in the daemon's
    const holderCtr = (await podmanMust(['inspect', '--format', '{{.Id}}', `${pod}-holder`])).trim();
    const daemonCtr = (await podmanMust(['inspect', '--format', '{{.Id}}', `${pod}-homesfs`])).trim();
    expect(await cgroupOf(pod, before.holder!.pid!)).toContain(holderCtr);
    expect(await cgroupOf(pod, before.pid)).toContain(daemonCtr);
    const restarts = async () => Number((await podmanMust(['inspect', '--format', '{{.RestartCount}}', `${pod}-homesfs`])).trim());
    const restartsBefore = await restarts();

    // kill -9 of the daemon: its container exits (137) and is restarted
    const t0 = Date.now();
    await podmanMust(['exec', `${pod}-holder`, 'kill', '-KILL', String(before.pid)]);
    const after = await until(
      'the restarted container serves',
      async () => {
        if (!(await started(pod))) return null;
        const s = await status(pod).catch(() => null);
        return s && s.pid !== before.pid ? s : null;
      },
      120_000,
      250,
    );
    console.log(`crash: serving again ${Date.now() - t0} ms after the kill`);
    expect(await restarts()).toBe(restartsBefore + 1);
    expect(after.session).toMatchObject({ startMode: 'resumed', generation: before.session.generation + 1 });
    expect(after.holder).toMatchObject({ keeper: 'holder', pid: before.holder!.pid, registered: true });
    expect(fstypeAt(mountOnNode())).toBe('fuse.homesfs');
    await agentsGoOn('resumed after the crash');
  }, 300_000);

  it('a rollout is a live upgrade: a second pod of another build takes the session over, the first exits 0 without unmounting, agents see no error', async () => {
    // another build of the image: another version string (another build id)
    const upgrade = `${image}-k8s-upgrade`;
    writeFileSync(
      join(dir, 'Containerfile.upgrade'),
      `FROM ${image}\nRUN sed -i -E "s/export const VERSION = [^;]+;/export const VERSION = 'k8s-upgrade';/" /opt/homesfs/lib/node_modules/homesfs/dist/version.js && homesfs --version | grep -q k8s-upgrade\n`,
    );
    await podmanMust(['build', '-q', '--network', 'none', '-f', join(dir, 'Containerfile.upgrade'), '-t', upgrade, dir], 300_000);
    const before = await status(daemonName('a'));

    // the rollout's surge pod, beside the old one; ready once its own daemon serves
    const t0 = Date.now();
    await playDaemon('b', upgrade);
    await until("the new pod's startup probe passes", () => started(daemonName('b')), 120_000, 250);
    console.log(`rollout: new pod serving ${Date.now() - t0} ms after kube play`);
    const after = await status(daemonName('b'));
    expect(after).toMatchObject({ version: 'k8s-upgrade', session: { generation: before.session.generation + 1, startMode: 'taken over' } });
    expect(after.pid).not.toBe(before.pid);
    // the old pod's daemon exited 0 without unmounting; its container waits for deletion
    await until("the old pod's daemon handed over", async () => (await podman(['logs', `${daemonName('a')}-homesfs`])).out.includes('the session went to a successor'), 30_000, 250);
    expect(fstypeAt(mountOnNode())).toBe('fuse.homesfs');
    expect(await started(daemonName('a'))).toBe(false); // the old pod serves nothing now
    await agentsGoOn('taken over');

    // the controller deletes the old pod: it stops at once, and nothing is unmounted
    const t1 = Date.now();
    await stopPod(daemonName('a'));
    expect(Date.now() - t1).toBeLessThan(30_000);
    // (its container's own exit code says nothing here: podman's pod stop tears the pod's
    // shared pid namespace down while some of its containers still exit, SIGKILLing them)
    expect(fstypeAt(mountOnNode())).toBe('fuse.homesfs');
    const last = await status(daemonName('b'));
    expect(last.pid).toBe(after.pid);
    await agentsGoOn('old pod deleted');
  }, 400_000);

  it("after the rollout the new daemon registers with its own pod's holder once the old pod's is gone, and a crash then is survived", async () => {
    const pod = daemonName('b');
    // The old pod's holder went with it (test above); the new pod's holder loop starts its own
    // within about 5 s, and the daemon registers with it (holder: external, src/holder/link.ts).
    const t0 = Date.now();
    // (soft: a daemon that never registers goes on to the crash below, which shows what that costs)
    const registered = await until(
      'the new daemon registered with a holder again',
      async () => {
        const s = await status(pod).catch(() => null);
        return s?.holder?.registered ? s : null;
      },
      60_000,
      250,
    ).catch(async (err: Error) => {
      expect.soft(err.message, 'registered with the new pod\'s holder').toBe('');
      return status(pod);
    });
    // the daemon's account: the old pod's holder refused it or took it, went, and the next one took it
    const holderLines = (await podman(['logs', `${pod}-homesfs`])).out.split('\n').filter((l) => l.includes('"component":"holder"'));
    console.log(`after the rollout: registered ${Date.now() - t0} ms after the old pod stopped; holder ${JSON.stringify(registered.holder)}; the daemon's holder lines:\n${holderLines.join('\n')}`);
    expect.soft(holderLines.at(-1)).toMatch(/"msg":"session registered with the holder( again)?"/);
    const holderCtr = (await podmanMust(['inspect', '--format', '{{.Id}}', `${pod}-holder`])).trim();
    expect(await cgroupOf(pod, registered.holder!.pid!)).toContain(holderCtr);

    // kill -9 of the new pod's daemon under the agents: its container restarts and resumes
    const restarts = async () => Number((await podmanMust(['inspect', '--format', '{{.RestartCount}}', `${pod}-homesfs`])).trim());
    const restartsBefore = await restarts();
    const t1 = Date.now();
    await podmanMust(['exec', `${pod}-holder`, 'kill', '-KILL', String(registered.pid)]);
    const resumed = await until(
      'the restarted container serves',
      async () => {
        if (!(await started(pod))) return null;
        const s = await status(pod).catch(() => null);
        return s && s.pid !== registered.pid ? s : null;
      },
      120_000,
      250,
    );
    console.log(`crash after the rollout: serving again ${Date.now() - t1} ms after the kill`);
    const entry = (await podman(['logs', '--timestamps', '--since', new Date(t1 - 1000).toISOString(), `${pod}-homesfs`])).out.split('\n');
    console.log(`the restarted container:\n${entry.filter((l) => /homesfs-pod:|"msg":"(serving|session resumed after a crash|the session of a daemon that died was kept: resuming it)"/.test(l)).join('\n')}`);
    expect(await restarts()).toBe(restartsBefore + 1);
    expect(resumed.session).toMatchObject({ startMode: 'resumed', generation: registered.session.generation + 1 });
    expect(resumed.holder).toMatchObject({ keeper: 'holder', pid: registered.holder!.pid, registered: true });
    expect(fstypeAt(mountOnNode())).toBe('fuse.homesfs');
    await agentsGoOn('resumed after a crash after the rollout');
  }, 300_000);

  it('stop: the agents saw no error and every line they fsynced is there; the daemon pod stops on SIGTERM and unmounts', async () => {
    // stop the agents, read their summaries
    await podmanMust(['kill', '--signal', 'TERM', tools]);
    await until('the agents stopped', () => existsSync(join(out(), 'writer.json')) && existsSync(join(out(), 'reader.json')), 30_000);
    const writer = JSON.parse(readFileSync(join(out(), 'writer.json'), 'utf8')) as Agent;
    const reader = JSON.parse(readFileSync(join(out(), 'reader.json'), 'utf8')) as Agent;
    console.log(`agents: writer ${writer.lines} lines, longest call ${writer.maxWaitMs} ms; reader ${reader.rounds} rounds, longest ${reader.maxWaitMs} ms`);
    expect({ writer: writer.errors, reader: reader.errors, lastError: writer.lastError || reader.lastError }).toEqual({ writer: 0, reader: 0, lastError: '' });
    // every acknowledged line, once and in order, in the backing file
    const last = daemonName('b');
    const log = await podmanMust(['exec', `${last}-homesfs`, 'cat', '/var/lib/homesfs/backing/acme/web/log']);
    const lines = log.split('\n').filter((l) => l !== '');
    expect(lines.length).toBeGreaterThanOrEqual(writer.lines);
    expect(lines.slice(0, writer.lines)).toEqual(Array.from({ length: writer.lines }, (_, i) => String(i)));

    // the daemon's pod stops cleanly: SIGTERM, the daemon unmounts, the node sees no mount
    const t2 = Date.now();
    await stopPod(consumerName);
    const t3 = Date.now();
    await stopPod(last);
    console.log(`pods stopped: consumer ${t3 - t2} ms, daemon ${Date.now() - t3} ms`);
    // every container of the daemon's pod heeds SIGTERM (none waits out the grace period)
    expect(Date.now() - t3).toBeLessThan(30_000);
    expect(fstypeAt(mountOnNode())).toBeNull();
  }, 120_000);
});
