// FdWatch (src/fd-watch.ts over native/src/sys/fdwatch.c): the daemon waits
// for its handover listener and its holder's pidfd on the event loop instead
// of a timer. Real descriptors of the addon's root-only handover socket
// (native/src/handover/handover.c), in this process: nothing here mounts.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { AddonRaw } from '../../src/addon-raw.js';
import { FdWatch, FdWatchError } from '../../src/fd-watch.js';
import { loadFuse } from '../../src/fuse/binding.js';
import { HandoverConn, HandoverListener, handoverConnect } from '../../src/fuse/handover-channel.js';

const isRoot = process.getuid?.() === 0;
const raw = (isRoot ? loadFuse().native : null) as unknown as AddonRaw;
const EAGAIN = 11;

/** A few turns of the event loop (a level-triggered poll that was not stopped fires at each). */
const turns = async (n = 5): Promise<void> => {
  for (let i = 0; i < n; i++) await new Promise<void>((r) => setImmediate(r));
};

describe.skipIf(!isRoot)('FdWatch: one-shot readiness on the event loop', () => {
  let dir: string;
  const fds: number[] = [];
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-fdwatch-'));
  });
  afterEach(() => {
    for (const fd of fds.splice(0)) raw.hs_handover_close(fd);
    rmSync(dir, { recursive: true, force: true });
    expect(raw.hs_fdwatch_count()).toBe(0);
  });

  const listen = (): number => {
    const fd = raw.hs_handover_listen(join(dir, 'l.sock'));
    expect(fd).toBeGreaterThanOrEqual(0);
    fds.push(fd);
    return fd;
  };

  it('fires once when its descriptor becomes readable, again only when armed, never after close', async () => {
    const lfd = listen();
    const fired: number[] = [];
    const w = new FdWatch(raw, lfd, (status) => fired.push(status));
    await turns();
    expect(fired).toEqual([]);
    fds.push(raw.hs_handover_connect(join(dir, 'l.sock')));
    for (let i = 0; i < 200 && fired.length === 0; i++) await turns(1);
    expect(fired).toEqual([0]);
    // Still readable (nothing accepted): a level-triggered poll not stopped would fire at every turn.
    await turns(20);
    expect(fired).toEqual([0]);
    w.arm();
    await turns(20);
    expect(fired).toEqual([0, 0]);
    const c = raw.hs_handover_accept(lfd);
    expect(c).toBeGreaterThanOrEqual(0);
    fds.push(c);
    expect(raw.hs_handover_accept(lfd)).toBe(-EAGAIN);
    w.arm();
    await turns(20);
    expect(fired).toEqual([0, 0]);
    w.close();
    fds.push(raw.hs_handover_connect(join(dir, 'l.sock')));
    await turns(20);
    expect(fired).toEqual([0, 0]);
    expect(w.closed).toBe(true);
    w.arm(); // a no-op once closed
  });

  it('a stale id finds nothing; a descriptor epoll cannot watch is refused with its errno', () => {
    const lfd = listen();
    const id = raw.hs_fdwatch_open(lfd, 1, () => undefined);
    expect(id).toBeGreaterThan(0);
    expect(raw.hs_fdwatch_close(id)).toBe(0);
    expect(raw.hs_fdwatch_close(id)).toBe(-2);
    expect(raw.hs_fdwatch_arm(id)).toBe(-2);
    // The slot is used again under another generation: the old id still finds nothing.
    const id2 = raw.hs_fdwatch_open(lfd, 1, () => undefined);
    expect(id2).not.toBe(id);
    expect(raw.hs_fdwatch_arm(id)).toBe(-2);
    expect(raw.hs_fdwatch_close(id2)).toBe(0);
    // A regular file (a memfd): epoll refuses it (EPERM).
    const mfd = raw.hs_handover_memfd(Buffer.from('x'));
    fds.push(mfd);
    let err: unknown = null;
    try {
      new FdWatch(raw, mfd, () => undefined);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(FdWatchError);
    expect((err as FdWatchError).errno).toBe(1);
    expect(raw.hs_fdwatch_open(-1, 1, () => undefined)).toBe(-9);
  });

  it('a conversation closed while it waits for a message: the watch goes before the descriptor, and the wait ends at once', async () => {
    const lfd = listen();
    const peer = handoverConnect(raw, join(dir, 'l.sock'));
    const fd = raw.hs_handover_accept(lfd);
    expect(fd).toBeGreaterThanOrEqual(0);
    const c = new HandoverConn(raw, fd);
    const got = c.recv(600_000).then(
      () => 'message',
      (err: Error) => err.message,
    );
    await turns();
    expect(raw.hs_fdwatch_count()).toBe(1);
    c.close();
    // Closed with it, not at the wait's deadline: a watch left on a closed number would follow whatever file takes it next.
    expect(raw.hs_fdwatch_count()).toBe(0);
    expect(await got).toMatch(/^handover receive failed: errno \d+$/);
    peer.close();
  });

  describe('the handover listener', () => {
    afterEach(() => {
      vi.useRealTimers();
    });

    it('takes each waiting successor as its connection comes, with every timer frozen, one at a time', async () => {
      const path = join(dir, 'takeover.sock');
      const l = HandoverListener.listen(raw, path);
      // No timer runs: a listener that looked for connections on one would never see these.
      vi.useFakeTimers({ toFake: ['setInterval', 'setTimeout'] });
      try {
        let active = 0;
        let most = 0;
        const served: number[] = [];
        let release!: () => void;
        const held = new Promise<void>((r) => (release = r));
        let firstIn!: () => void;
        const first = new Promise<void>((r) => (firstIn = r));
        let done!: () => void;
        const all = new Promise<void>((r) => (done = r));
        l.start(
          async (c: HandoverConn) => {
            active++;
            most = Math.max(most, active);
            served.push(c.fd);
            // The first conversation is held until the other two wait in the backlog.
            if (served.length === 1) {
              firstIn();
              await held;
            }
            active--;
            if (served.length === 3) done();
          },
          () => undefined,
        );
        const conns = [handoverConnect(raw, path)];
        await first;
        conns.push(handoverConnect(raw, path), handoverConnect(raw, path));
        await turns(20);
        expect(served).toHaveLength(1);
        release();
        await all;
        expect(served).toHaveLength(3);
        expect(most).toBe(1);
        for (const x of conns) x.close();
      } finally {
        vi.useRealTimers();
        l.close();
      }
    });
  });
});
