import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfigSchema, type Config } from '../../src/config/schema.js';
import { loadFuse } from '../../src/fuse/binding.js';
import { HandoverConn, HandoverListener, type HandoverRaw } from '../../src/fuse/handover-channel.js';
import { createRootLogger } from '../../src/log.js';
import { listenForSuccessors, takeOverFrom, takeoverSocket, type Follower, type HandingHost } from '../../src/takeover.js';

/**
 * The takeover conversation's node-table step, both ends in this process over
 * the real root-only handover socket (native/src/handover/handover.c), the
 * session faked: a successor that followed the journal gets no table when the
 * journal is still at the generation it followed, and the export (its
 * follow dropped) when it moved on; a serving daemon of protocol 2 (no
 * journal step) is asked again without it. The drain before the pause: a
 * request held long is waited for serving on, a pause that does not drain at
 * once is given up and tried again, and one held past the deadline is refused
 * without a pause. The real session and daemons:
 * takeover.test.ts and takeover-scale.test.ts.
 */

const isRoot = process.getuid?.() === 0;
const raw = (isRoot ? loadFuse().native : null) as unknown as HandoverRaw;
const log = createRootLogger('silent');
const EXPORT = Buffer.from('the exported node table');
const EMPTY_FS = { files: [], status: [], serials: [], hidden: [], nextFh: 1 };

describe.skipIf(!isRoot)('takeover protocol: the node table from the journal or the export', () => {
  let dir: string;
  let config: Config;
  let listener: HandoverListener | null = null;
  const opened: number[] = [];

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-tproto-'));
    config = ConfigSchema.parse({ backing: join(dir, 'b'), mount: join(dir, 'm'), socket: join(dir, 'run', 'admin.sock') });
  });
  afterEach(() => {
    listener?.close();
    listener = null;
    for (const fd of opened.splice(0)) closeSync(fd);
    rmSync(dir, { recursive: true, force: true });
  });

  /** A serving daemon whose journal writes generation `gen` (null: no journal); what it was asked is recorded. */
  const serve = (gen: number | null, over: Partial<HandingHost> = {}) => {
    const calls = { handed: [] as boolean[], resumed: 0 };
    const journal = gen === null ? [] : [raw.hs_handover_memfd(Buffer.from('j0')), raw.hs_handover_memfd(Buffer.from('j1'))];
    const session = openSync('/dev/null', 'r');
    opened.push(session, ...journal);
    const host: HandingHost = {
      config,
      generation: 1,
      log,
      quiesceControl: async () => async () => undefined,
      pause: () => undefined,
      paused: () => true,
      resume: () => void calls.resumed++,
      oldestRequestMs: () => 0,
      controlBusy: () => false,
      freesInBackground: () => undefined,
      handed: (withNodes) => {
        calls.handed.push(withNodes);
        return { fd: session, bufsize: 4096, init: Buffer.from('init'), nodes: withNodes ? EXPORT : Buffer.alloc(0), dirs: Buffer.from('dirs'), epoch: 0 };
      },
      exportFs: () => ({ state: EMPTY_FS, fds: [] }),
      flushState: async () => undefined,
      locks: () => [],
      handedOver: () => undefined,
      successorNamed: async () => undefined,
      journalFds: () => journal,
      journalGen: () => gen,
      nodeCount: () => 7,
      ...over,
    };
    runDir();
    listener = listenForSuccessors(raw, host);
    return calls;
  };
  /** The control socket's directory, where the takeover socket lives. */
  const runDir = () => mkdirSync(join(dir, 'run'), { recursive: true, mode: 0o700 });

  /** A follower that says it followed `gen` and records what it was asked to do. */
  const follower = (gen: number | null) => {
    const did: string[] = [];
    const f: Follower = {
      start: (fds) => {
        did.push(`start ${fds.length}`);
        for (const fd of fds) raw.hs_handover_close(fd);
        return gen;
      },
      finish: () => (did.push('finish'), null),
      drop: () => void did.push('drop'),
    };
    return { f, did };
  };

  const take = async (f: Follower) => {
    const nodesRead: Buffer[] = [];
    const r = await takeOverFrom(raw, config, log, (v) => v as typeof EMPTY_FS, (b) => nodesRead.push(b), f);
    r.abandon('test');
    raw.hs_handover_close(r.session.fd);
    return { r, nodesRead };
  };

  it('a journal still at the generation followed: no table is exported, and the follow is caught up', async () => {
    const calls = serve(5);
    const { f, did } = follower(5);
    const { r, nodesRead } = await take(f);
    expect(calls.handed).toEqual([false]);
    expect(r.session.nodes.length).toBe(0);
    expect(nodesRead).toEqual([]);
    expect(did).toEqual(['start 2', 'finish']);
    expect(r.marks.toJSON()).toHaveProperty('nodesCaughtUp');
  });

  it('a journal that moved on (compacted since the follow): the table is exported and imported, the follow dropped', async () => {
    const calls = serve(6);
    const { f, did } = follower(5);
    const { r, nodesRead } = await take(f);
    expect(calls.handed).toEqual([true]);
    expect(r.session.nodes.equals(EXPORT)).toBe(true);
    expect(nodesRead.map((b) => b.toString())).toEqual([EXPORT.toString()]);
    expect(did).toEqual(['start 2', 'drop']);
  });

  it('no journal (crash survival off): nothing to follow, the table is exported', async () => {
    const calls = serve(null);
    const { f, did } = follower(5);
    const { r } = await take(f);
    expect(calls.handed).toEqual([true]);
    expect(r.session.nodes.equals(EXPORT)).toBe(true);
    expect(did).toEqual([]);
  });

  it('a serving daemon of protocol 2 refuses protocol 3: asked again without the journal step, the table handed over', async () => {
    runDir();
    // What a daemon of the previous protocol answers: protocol 2 only, then its state.
    const l = HandoverListener.listen(raw, takeoverSocket(config));
    listener = l;
    const hellos: number[] = [];
    const session = openSync('/dev/null', 'r');
    opened.push(session);
    l.start(
      async (c: HandoverConn) => {
        const { msg } = await c.recv(5_000);
        const hello = msg as { hello: number };
        hellos.push(hello.hello);
        if (hello.hello !== 2) return c.send({ refused: `protocol ${hello.hello} is not 2` });
        const blobs = [Buffer.from('init'), EXPORT, Buffer.from('dirs'), Buffer.from(JSON.stringify(EMPTY_FS))].map((b) => raw.hs_handover_memfd(b));
        await c.send({ state: 2, generation: 2, pausedAt: Date.now(), bufsize: 4096, epoch: 0, locks: [], files: 0 });
        await c.sendFds([session, ...blobs]);
        for (const fd of blobs) raw.hs_handover_close(fd);
        await c.recv(5_000).catch(() => undefined);
      },
      () => undefined,
    );
    const { f, did } = follower(5);
    const { r } = await take(f);
    expect(hellos).toEqual([3, 2]);
    expect(r.session.nodes.equals(EXPORT)).toBe(true);
    expect(did).toEqual([]);
  });

  describe('the drain: waited for serving on, the session paused only for a moment', () => {
    /** A serving daemon whose drain is recorded: when it paused, resumed, closed and reopened its sockets, let the frees go. */
    const drained = (held: () => number, paused: (pauses: number) => boolean = () => true) => {
      const t0 = performance.now();
      const at = (what: string) => log.push(`${what}@${Math.round(performance.now() - t0)}`);
      const log: string[] = [];
      let pauses = 0;
      const calls = serve(null, {
        oldestRequestMs: held,
        paused: () => paused(pauses),
        pause: () => (pauses++, at('pause')),
        resume: () => at('resume'),
        quiesceControl: async () => (at('quiesce'), async () => void at('restart')),
        freesInBackground: (on) => at(on ? 'freesLetGo' : 'freesAwaited'),
      });
      return { calls, log };
    };
    const names = (log: string[]) => log.map((l) => l.slice(0, l.indexOf('@')));
    const ms = (log: string[], what: string) => Number(log.find((l) => l.startsWith(`${what}@`))!.split('@')[1]);

    it('a request held long: the frees go to the background at once, the pause waits, serving on, until it is answered', async () => {
      const until = performance.now() + 400;
      const { log } = drained(() => (performance.now() < until ? 400 : 0));
      const { r } = await take(follower(null).f);
      expect(r.session.init.toString()).toBe('init');
      expect(names(log).slice(0, 3)).toEqual(['freesLetGo', 'quiesce', 'pause']);
      expect(ms(log, 'quiesce')).toBeGreaterThanOrEqual(ms(log, 'freesLetGo') + 300);
    });

    it('a pause that does not drain at once: resumed, the sockets reopened, and tried again', async () => {
      // the first try never drains (a request held turned out long), the second at once
      const { log } = drained(
        () => 0,
        (pauses) => pauses > 1,
      );
      await take(follower(null).f);
      expect(names(log).slice(0, 6)).toEqual(['freesLetGo', 'quiesce', 'pause', 'resume', 'restart', 'quiesce']);
      expect(names(log).filter((x) => x === 'pause')).toHaveLength(2);
    });

    it('a request held past the deadline: refused without ever pausing, the frees awaited again', async () => {
      const { log, calls } = drained(() => 60_000);
      await expect(take(follower(null).f)).rejects.toThrow(/requests in flight did not finish in time/);
      expect(names(log)).toEqual(['freesLetGo', 'freesAwaited']);
      expect(calls.handed).toEqual([]);
    }, 20_000);
  });
});
