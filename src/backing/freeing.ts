import * as fs from 'node:fs';
import type { BigIntStats } from 'node:fs';
import { promisify } from 'node:util';
import { Turns } from '../policy/turns.js';

/**
 * Closing the last reference to a file that has no name left (the daemon's
 * O_PATH descriptor of a node it just unlinked or renamed over, or the last
 * handle of a file unlinked while open) frees its blocks, inside close(2),
 * in time proportional to the file's extents: written one byte every 8 KiB
 * and fsynced, a 384 MiB file (49,152 extents) took 4.5-5 s to free on the
 * idle ext4 of this project's test VMs, a 1 GiB one 96 s on a busy one. On the JS thread (the
 * metadata calls are synchronous there, see sys.ts) or under the binding's
 * lock, every home would wait that long. So such closes
 * run on the libuv threadpool, a bounded number at a time, and the binding
 * leaves such unlinks to JS (the same threshold is handed to it).
 */

/**
 * Up to this many allocated bytes a file is freed inline: at most 16 extents
 * of 4 KiB (about 0.6 ms each measured on the test VMs' ext4 once written
 * back), so the common small file keeps the fast synchronous path and a
 * bigger one pays a threadpool round trip (~20 us) it cannot notice. The
 * binding gets this value (hs_fastpath_set_free_inline_max).
 */
export const INLINE_FREE_MAX_BYTES = 64 * 1024;

/** Whether dropping this node's last name or descriptor could take long: a regular file with many allocated blocks. */
export function slowToFree(st: Pick<BigIntStats, 'blocks'> & { isFile(): boolean }): boolean {
  return st.isFile() && st.blocks * 512n > BigInt(INLINE_FREE_MAX_BYTES);
}

/**
 * slowToFree of an open descriptor, read synchronously: the caller decides in
 * the same step as it acts (a release must not yield before its record lets go).
 */
export function slowToFreeFd(fd: number): boolean {
  return slowToFree(fs.fstatSync(fd, { bigint: true }));
}

/**
 * At most PER_HOME slow frees of one home run at once, and TOTAL in all: a home
 * removing many huge files waits for its own (its `rm` is slow, as on any disk),
 * never takes more than a few of the threadpool's threads from other homes'
 * reads and writes (UV_THREADPOOL_SIZE is 16), and cannot hold up the event loop.
 */
const PER_HOME = 1;
const TOTAL = 4;

const closeAsync = promisify(fs.close) as (fd: number) => Promise<void>;

/**
 * Closes that may free a big file's blocks: on the threadpool, in turns per home.
 *
 * A caller awaits its close (its `rm` is slow, as on any disk) except while
 * the daemon hands its session over (takeover.ts): then every close awaited
 * is answered at once and finishes in the background, and so is every close
 * issued until `awaitAgain`. What the caller does after its await (the
 * ledger giving the bytes back) is then done before the ledgers go to the
 * successor, and no request waits for a free: the handover never does. The
 * daemon that handed over exits once `finished` resolves (its exit would wait
 * for the threadpool anyway: libuv joins its threads at exit).
 */
export class SlowFrees {
  private readonly turns = new Turns(PER_HOME, TOTAL);
  /** closes done this way since start (status `background.slowFrees`) */
  done = 0;
  /** closes that failed after their caller was answered (none expected: the descriptors are O_PATH or read-only) */
  failedUnawaited = 0;
  private readonly issued = new Set<Promise<void>>();
  /** the callers still awaiting their close: each answered at once by `letGo` */
  private readonly awaiting = new Set<() => void>();
  private lettingGo = false;

  /** `closeFd`: close(2) on the threadpool; a test's stand-in decides when each ends */
  constructor(private readonly closeFd: (fd: number) => Promise<void> = closeAsync) {}

  get inFlight(): number {
    return this.turns.inFlight;
  }

  get waiting(): number {
    return this.turns.waiting;
  }

  /** closes issued and not finished, their callers answered or not */
  get unfinished(): number {
    return this.issued.size;
  }

  async close(home: string, fd: number): Promise<void> {
    const closed = this.turns.run(home, () => this.closeFd(fd)).finally(() => {
      this.done++;
      this.issued.delete(closed);
    });
    this.issued.add(closed);
    if (this.lettingGo) return this.unawaited(closed);
    let answer!: () => void;
    const early = new Promise<'early'>((r) => (answer = () => r('early')));
    this.awaiting.add(answer);
    try {
      if ((await Promise.race([closed, early])) === 'early') this.unawaited(closed);
    } finally {
      this.awaiting.delete(answer);
    }
  }

  /** From now until `awaitAgain`: no caller waits for its close, those waiting now included. */
  letGo(): void {
    this.lettingGo = true;
    for (const answer of this.awaiting) answer();
  }

  /** The callers await their closes again (a handover that did not happen). */
  awaitAgain(): void {
    this.lettingGo = false;
  }

  /** Resolves once every close issued so far has finished. */
  async finished(): Promise<void> {
    while (this.issued.size > 0) await Promise.allSettled([...this.issued]);
  }

  private unawaited(closed: Promise<void>): void {
    closed.catch(() => this.failedUnawaited++);
  }
}
