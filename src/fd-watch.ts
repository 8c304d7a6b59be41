/**
 * A one-shot wait for a descriptor Node cannot wrap (the handover listener's
 * SOCK_SEQPACKET socket, a holder's pidfd) to become readable, on this
 * thread's event loop (native/src/sys/fdwatch.c): the daemon sleeps until the
 * event instead of looking on a timer. It fires once per arm (the poll is
 * level-triggered: a caller not ready for the event yet is not called again
 * until it asks), never keeps the process alive, and is closed before its
 * descriptor is.
 */
import type { AddonRaw } from './addon-raw.js';

export type FdWatchRaw = Pick<AddonRaw, 'hs_fdwatch_open' | 'hs_fdwatch_arm' | 'hs_fdwatch_close'>;

export class FdWatchError extends Error {
  constructor(
    message: string,
    readonly errno: number,
  ) {
    super(message);
  }
}

export class FdWatch {
  private id: number | null;

  /** Armed at once: onReadable(status) (0, or -errno from the poll) when fd is readable. */
  constructor(
    private readonly raw: FdWatchRaw,
    fd: number,
    onReadable: (status: number) => void,
  ) {
    const id = raw.hs_fdwatch_open(fd, 1, (status) => {
      if (this.id !== null) onReadable(status);
    });
    if (id < 0) throw new FdWatchError(`cannot watch descriptor ${fd}: errno ${-id}`, -id);
    this.id = id;
  }

  /** Fires once more (no-op once closed). */
  arm(): void {
    if (this.id === null) return;
    const r = this.raw.hs_fdwatch_arm(this.id);
    if (r < 0) throw new FdWatchError(`cannot watch again: errno ${-r}`, -r);
  }

  get closed(): boolean {
    return this.id === null;
  }

  close(): void {
    if (this.id === null) return;
    this.raw.hs_fdwatch_close(this.id);
    this.id = null;
  }
}
