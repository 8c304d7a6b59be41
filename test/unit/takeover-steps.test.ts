import { closeSync, fstatSync, mkdirSync, mkdtempSync, openSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import type { Config } from '../../src/config/schema.js';
import { loadFuse } from '../../src/fuse/binding.js';
import type { HandoverRaw } from '../../src/fuse/handover-channel.js';
import type { HandedFs } from '../../src/fs/handover.js';
import { listenForSuccessors, takeOverFrom, type HandingHost } from '../../src/takeover.js';

/**
 * The live upgrade's protocol (src/takeover.ts), step by step, without a
 * mount: both ends in this process over the real root-only socket, with real
 * descriptors passed. The serving end's daemon is a recorder of what the
 * protocol asks of it, in order, so each step's place is asserted: nothing
 * is paused before HELLO is checked, the state is flushed inside the pause,
 * the supervisor hears of the successor before the connection closes, and a
 * successor that gives up leaves the daemon serving with its control back.
 */
const asRoot = process.getuid?.() === 0;
const log = pino({ level: 'silent' });

function tree(dir: string, name: string): Config {
  const root = join(dir, name);
  mkdirSync(join(root, 'run'), { recursive: true });
  return loadConfig(undefined, { backing: join(root, 'backing'), mount: join(root, 'homes'), socket: join(root, 'run', 'admin.sock') }).config;
}

describe.skipIf(!asRoot)('the takeover protocol, step by step', () => {
  let dir: string;
  let raw: HandoverRaw;
  let config: Config;
  let steps: string[];
  let files: { session: number; lock: number; open: number };
  let host: HandingHost;
  let stop: () => void;
  let serving: Promise<void>;
  let servingDone: () => void;

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-takeover-'));
    raw = loadFuse().native;
    config = tree(dir, 'a');
    for (const f of ['session', 'lock', 'open']) writeFileSync(join(dir, f), f);
    files = { session: openSync(join(dir, 'session'), 'r'), lock: openSync(join(dir, 'lock'), 'r'), open: openSync(join(dir, 'open'), 'r') };
    steps = [];
    let paused = false;
    serving = new Promise((res) => (servingDone = res));
    host = {
      config,
      generation: 4,
      log,
      quiesceControl: async () => {
        steps.push('quiesce');
        return async () => void steps.push('control back');
      },
      pause: () => {
        steps.push('pause');
        paused = true;
      },
      paused: () => paused,
      resume: () => {
        steps.push('resume');
        paused = false;
        servingDone();
      },
      oldestRequestMs: () => 0,
      controlBusy: () => false,
      freesInBackground: (on) => void steps.push(`frees early ${on}`),
      handed: (withNodes) => {
        steps.push(`handed nodes=${withNodes}`);
        return { fd: files.session, bufsize: 1 << 17, init: Buffer.from('INIT'), nodes: Buffer.from('NODES'), dirs: Buffer.from('DIRS'), epoch: 3 };
      },
      exportFs: () => {
        steps.push('export fs');
        return { state: { homes: ['t/a'] } as unknown as HandedFs, fds: [files.open] };
      },
      journalFds: () => [],
      journalGen: () => null,
      nodeCount: () => 7,
      flushState: async () => void steps.push('flush state'),
      locks: () => {
        steps.push('locks');
        return [{ file: join(dir, 'lock'), fd: files.lock }];
      },
      handedOver: (pauseMs, pid) => void steps.push(`handed over ${pauseMs} ${pid === process.pid}`),
      successorNamed: async () => {
        steps.push('successor named');
        servingDone();
      },
    };
    const l = listenForSuccessors(raw, host);
    stop = () => l.close();
  });

  afterEach(() => {
    stop();
    for (const fd of Object.values(files)) closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  });

  it('hands the session, the locks, the values and the open files over, in order, and names the successor before it lets go', async () => {
    const got = await takeOverFrom(raw, config, log, (v) => v as HandedFs);
    expect([got.generation, got.session.bufsize, got.session.epoch]).toEqual([5, 1 << 17, 3]);
    expect([got.session.init, got.session.nodes, got.session.dirs].map((b) => b.toString())).toEqual(['INIT', 'NODES', 'DIRS']);
    expect(got.fs).toEqual({ homes: ['t/a'] });
    // the very files, as copies of the descriptors
    expect(fstatSync(got.session.fd).ino).toBe(statSync(join(dir, 'session')).ino);
    expect(got.locks.map((l) => [l.file, fstatSync(l.fd).ino])).toEqual([[join(dir, 'lock'), statSync(join(dir, 'lock')).ino]]);
    expect(got.fsFds.map((fd) => fstatSync(fd).ino)).toEqual([statSync(join(dir, 'open')).ino]);
    expect(steps).toEqual(['frees early true', 'quiesce', 'pause', 'handed nodes=true', 'export fs', 'flush state', 'locks']);
    await got.ready(12);
    await serving;
    expect(steps.slice(7)).toEqual(['handed over 12 true', 'successor named']);
    for (const fd of [got.session.fd, ...got.locks.map((l) => l.fd), ...got.fsFds]) closeSync(fd);
  });

  it('refuses a successor that serves another tree before anything pauses', async () => {
    const other = tree(dir, 'b');
    const err = await takeOverFrom(raw, { ...other, socket: config.socket }, log, (v) => v as HandedFs).catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(/refused the takeover: backing .* is not this daemon's/);
    expect(steps).toEqual([]);
  });

  it('a successor that gives up after the state came leaves the daemon serving, its control and frees back', async () => {
    const got = await takeOverFrom(raw, config, log, (v) => v as HandedFs);
    got.abandon('could not adopt');
    await serving;
    await new Promise((res) => setTimeout(res, 20));
    expect(steps.slice(7)).toEqual(['resume', 'frees early false', 'control back']);
    expect(steps.some((s) => s.startsWith('handed over'))).toBe(false);
    for (const fd of [got.session.fd, ...got.locks.map((l) => l.fd), ...got.fsFds]) closeSync(fd);
  });
});
