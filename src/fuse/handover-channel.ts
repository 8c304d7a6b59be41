/**
 * The socket between a serving daemon and its successor (native/src/session/
 * handover.c: a root-only SOCK_SEQPACKET socket that carries descriptors,
 * which Node's sockets cannot). Every call here is non-blocking on the
 * JavaScript thread: the listener and a conversation wait for their socket on
 * the event loop (FdWatch), so the daemon that hands its session over keeps
 * answering what JavaScript answers meanwhile.
 *
 * Framing: one JSON message (≤ 60 KiB) per step; a larger value goes as a
 * descriptor of a sealed anonymous file (`blobFd`, `readBlob`), among the
 * others; descriptors go in batches of at most 253 (SCM_RIGHTS), each batch a
 * message whose payload is its index.
 */
import { closeSync, fstatSync, lstatSync, readSync, statSync, unlinkSync } from 'node:fs';
import type { AddonRaw } from '../addon-raw.js';
import { FdWatch, type FdWatchError, type FdWatchRaw } from '../fd-watch.js';

type HandoverRaw = Pick<AddonRaw, 'hs_handover_listen' | 'hs_handover_accept' | 'hs_handover_connect' | 'hs_handover_send' | 'hs_handover_recv' | 'hs_handover_close' | 'hs_handover_memfd' | 'hs_handover_reserve_fds'> & FdWatchRaw;

const MAX_FDS = 253;
const EAGAIN = 11;
const ETIMEDOUT = 110;
const POLL_MS = 2;

export class HandoverError extends Error {
  constructor(
    message: string,
    readonly errno?: number,
  ) {
    super(message);
  }
}

/** One end of a handover conversation. */
export class HandoverConn {
  private closed = false;
  /** ends the wait for the socket in progress (its watch closed first), if any */
  private waiting: (() => void) | null = null;
  constructor(
    private readonly raw: HandoverRaw,
    readonly fd: number,
  ) {}

  /** A message (and descriptors, which stay open here). */
  async send(msg: unknown, fds: number[] = []): Promise<void> {
    await this.sendBuf(Buffer.from(JSON.stringify(msg)), fds);
  }

  private async sendBuf(data: Buffer, fds: number[] = []): Promise<void> {
    const res = this.raw.hs_handover_send(this.fd, data, fds, 5000);
    if (res < 0) throw new HandoverError(`handover send failed: errno ${-res}`, -res);
  }

  /** The next message (and the descriptors it carried), or a HandoverError past `timeoutMs`. */
  async recv(timeoutMs: number): Promise<{ msg: unknown; fds: number[] }> {
    const r = await this.recvRaw(timeoutMs);
    let msg: unknown;
    try {
      msg = JSON.parse(r.data.toString('utf8'));
    } catch {
      for (const fd of r.fds) this.raw.hs_handover_close(fd);
      throw new HandoverError('handover: a message that is not JSON');
    }
    return { msg, fds: r.fds };
  }

  private async recvRaw(timeoutMs: number): Promise<{ data: Buffer; fds: number[] }> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const r = this.raw.hs_handover_recv(this.fd, 0);
      if (r.res >= 0 && r.data) return { data: r.data, fds: r.fds };
      if (r.res !== -EAGAIN && r.res !== -ETIMEDOUT) throw new HandoverError(`handover receive failed: errno ${-r.res}`, -r.res);
      if (Date.now() >= until) throw new HandoverError('handover: the other side did not answer in time', ETIMEDOUT);
      await this.readable(until);
    }
  }

  /**
   * Until the socket is readable (a message, or the other end closed), or
   * `until`: the next message is taken the moment it comes, mid-pause
   * included, where a poll on a timer would add up to its period to each step.
   */
  private readable(until: number): Promise<void> {
    return new Promise<void>((resolve) => {
      let timer: NodeJS.Timeout | null = null;
      let watch: FdWatch | null = null;
      const done = (): void => {
        watch?.close();
        if (timer !== null) clearTimeout(timer);
        this.waiting = null;
        resolve();
      };
      this.waiting = done;
      try {
        watch = new FdWatch(this.raw, this.fd, done);
      } catch {
        // Not watchable (never for a socket): looked at again shortly, as before.
        timer = setTimeout(done, POLL_MS);
        return;
      }
      timer = setTimeout(done, Math.max(0, until - Date.now()));
    });
  }

  /** Descriptors in batches; the receiver gets them back in this order. */
  async sendFds(fds: number[]): Promise<void> {
    await this.send({ fds: fds.length });
    for (let at = 0, i = 0; at < fds.length; at += MAX_FDS, i++) await this.sendBuf(Buffer.from(String(i)), fds.slice(at, at + MAX_FDS));
  }

  async recvFds(timeoutMs: number): Promise<number[]> {
    const { msg } = await this.recv(timeoutMs);
    const n = (msg as { fds?: unknown }).fds;
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) throw new HandoverError('handover: a descriptor count was expected');
    const out: number[] = [];
    try {
      while (out.length < n) {
        const r = await this.recvRaw(timeoutMs);
        out.push(...r.fds);
        if (r.fds.length === 0) throw new HandoverError('handover: a descriptor batch without descriptors');
      }
    } catch (err) {
      for (const fd of out) this.raw.hs_handover_close(fd);
      throw err;
    }
    if (out.length !== n) {
      for (const fd of out) this.raw.hs_handover_close(fd);
      throw new HandoverError('handover: more descriptors than announced');
    }
    return out;
  }

  /** Resolves when the other side closed its end (its process exited). */
  async gone(timeoutMs: number): Promise<boolean> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const r = this.raw.hs_handover_recv(this.fd, 0);
      if (r.res >= 0 || r.fds.length > 0) for (const fd of r.fds) this.raw.hs_handover_close(fd);
      if (r.res < 0 && r.res !== -EAGAIN && r.res !== -ETIMEDOUT) return true;
      if (r.res === 0) return true;
      if (Date.now() >= until) return false;
      await this.readable(until);
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    // The watch goes before the descriptor: a number reused by another file must never be watched as this one.
    this.waiting?.();
    this.raw.hs_handover_close(this.fd);
  }
}

/**
 * A listening handover socket: a connection is accepted when the socket
 * becomes readable (FdWatch: no timer wakes an idle daemon), one at a time:
 * the watch is armed again only once the connection in hand is done. Its
 * file is removed when it closes, if it is still the one this listener made
 * (a successor that serves has made its own at the same path: that one stays).
 */
export class HandoverListener {
  private watch: FdWatch | null = null;
  private closed = false;
  constructor(
    private readonly raw: HandoverRaw,
    private readonly fd: number,
    private readonly path: string,
    /** the socket file's identity right after bind, or null if it could not be read */
    private readonly made: { dev: number; ino: number } | null,
  ) {}

  static listen(raw: HandoverRaw, path: string): HandoverListener {
    const fd = raw.hs_handover_listen(path);
    if (fd < 0) throw new HandoverError(`handover socket ${path}: errno ${-fd}`, -fd);
    let made: { dev: number; ino: number } | null = null;
    try {
      const st = statSync(path);
      made = { dev: st.dev, ino: st.ino };
    } catch {
      made = null; // then it is never removed: better a stale file than another daemon's socket gone
    }
    return new HandoverListener(raw, fd, path, made);
  }

  /** `onConn` for each root peer (others are refused by handover.c); one at a time. */
  start(onConn: (c: HandoverConn) => Promise<void>, onRefused: (errno: number) => void): void {
    if (this.closed || this.watch !== null) return;
    // Every connection waiting is taken before the watch is armed again: a
    // refused peer's (not root) or a connection gone before its accept must
    // not leave the next one waiting for an event that already came.
    const next = (): void => {
      for (;;) {
        if (this.watch === null) return;
        const fd = this.raw.hs_handover_accept(this.fd);
        if (fd === -EAGAIN) return this.watch.arm();
        if (fd < 0) {
          onRefused(-fd);
          continue;
        }
        const c = new HandoverConn(this.raw, fd);
        void onConn(c).finally(() => {
          c.close();
          next();
        });
        return;
      }
    };
    try {
      this.watch = new FdWatch(this.raw, this.fd, () => next());
    } catch (err) {
      throw new HandoverError(`handover socket ${this.path}: ${(err as Error).message}`, (err as FdWatchError).errno);
    }
  }

  close(): void {
    this.watch?.close();
    this.watch = null;
    if (this.closed) return;
    this.closed = true;
    // Unlinked before the descriptor closes: while ours listens, no other
    // daemon's listen has replaced the file (a successor binds only after this
    // daemon handed over and closed), and the identity check keeps it so anyway.
    if (this.made !== null) {
      try {
        const st = lstatSync(this.path);
        if (st.isSocket() && st.dev === this.made.dev && st.ino === this.made.ino) unlinkSync(this.path);
      } catch {
        // gone already, or unreadable: nothing of ours to remove, and a close never fails
      }
    }
    this.raw.hs_handover_close(this.fd);
  }
}

/** A value of any size as one descriptor to send (a sealed memfd: handover.c); the caller closes it once sent. */
export function blobFd(raw: HandoverRaw, b: Buffer): number {
  const fd = raw.hs_handover_memfd(b);
  if (fd < 0) throw new HandoverError(`handover: no descriptor for a value: errno ${-fd}`, -fd);
  return fd;
}

/** The value a received blob descriptor holds; the descriptor is closed. */
export function readBlob(fd: number, max = 1 << 30): Buffer {
  try {
    const size = fstatSync(fd).size;
    if (size > max) throw new HandoverError('handover: a value larger than expected');
    const out = Buffer.allocUnsafe(size);
    for (let at = 0; at < size; ) {
      const n = readSync(fd, out, at, size - at, at);
      if (n === 0) throw new HandoverError('handover: a value shorter than its file');
      at += n;
    }
    return out;
  } finally {
    closeSync(fd);
  }
}

export function handoverConnect(raw: HandoverRaw, path: string): HandoverConn {
  const fd = raw.hs_handover_connect(path);
  if (fd < 0) throw new HandoverError(`cannot reach the serving daemon's handover socket ${path}: errno ${-fd}`, -fd);
  return new HandoverConn(raw, fd);
}

export type { HandoverRaw };
