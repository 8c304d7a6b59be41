import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { RepairPolicy, RepairResult } from '../backing/repair.js';
import type { BackingStore } from '../backing/store.js';
import type { Logger } from '../log.js';
import type { ScanJob, ScanReply, ScanResult } from './scan-walk.js';
import type { HomeState } from './state.js';

export type { ScanResult } from './scan-walk.js';

const WORKER = new URL('./scan-worker.js', import.meta.url);

interface Pending {
  job: ScanJob;
  onProgress: ((p: { bytes: number; inodes: number }) => void) | undefined;
  resolve: (r: ScanResult | RepairResult) => void;
  reject: (err: Error) => void;
}

/**
 * Scans run on a few worker threads, one home per worker at a time, so homes
 * are measured in parallel and the JS thread only hears progress and results.
 * Workers start on first use and are unref'd: they never keep the daemon alive.
 */
class ScanPool {
  private readonly idle: Worker[] = [];
  private readonly busy = new Map<Worker, Pending>();
  private readonly queue: Pending[] = [];
  private started = 0;
  private nextId = 1;

  constructor(private readonly size: number) {}

  run(rootFd: number, exclude: string[], onProgress?: (p: { bytes: number; inodes: number }) => void): Promise<ScanResult>;
  run(rootFd: number, exclude: string[], onProgress: undefined, repair: RepairPolicy): Promise<RepairResult>;
  run(rootFd: number, exclude: string[], onProgress?: (p: { bytes: number; inodes: number }) => void, repair?: RepairPolicy): Promise<ScanResult | RepairResult> {
    return new Promise((resolve, reject) => {
      this.queue.push({ job: { id: this.nextId++, rootFd, exclude, ...(repair ? { repair } : {}) }, onProgress, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.queue.length > 0) {
      const w = this.idle.pop() ?? (this.started < this.size ? this.spawn() : undefined);
      if (!w) return;
      const p = this.queue.shift()!;
      this.busy.set(w, p);
      w.ref(); // a scan in progress is work
      w.postMessage(p.job);
    }
  }

  private spawn(): Worker {
    this.started++;
    const w = new Worker(WORKER);
    w.on('message', (m: ScanReply) => {
      const p = this.busy.get(w);
      if (!p || p.job.id !== m.id) return;
      if ('progress' in m) return p.onProgress?.(m.progress);
      this.busy.delete(w);
      w.unref();
      this.idle.push(w);
      if ('result' in m) p.resolve(m.result);
      else if ('repaired' in m) p.resolve(m.repaired);
      else p.reject(new Error(m.error));
      this.pump();
    });
    const lost = (err: Error) => {
      const p = this.busy.get(w);
      this.busy.delete(w);
      const i = this.idle.indexOf(w);
      if (i >= 0) this.idle.splice(i, 1);
      this.started--;
      p?.reject(err);
      this.pump();
    };
    w.on('error', lost);
    w.on('exit', (code) => lost(new Error(`scan worker exited (${code})`)));
    w.unref();
    return w;
  }
}

let pool: ScanPool | null = null;

/**
 * Measure a home's backing tree (see walkTree) on a scan worker. Files whose
 * key is in `exclude` count as inodes; their bytes are left to the caller (a
 * rescan charges open files at their record's size), and they are listed.
 */
export function measureTree(rootFd: number, opts: { onProgress?: (r: { bytes: number; inodes: number }) => void; exclude?: Iterable<string> } = {}): Promise<ScanResult> {
  return scanPool().run(rootFd, [...(opts.exclude ?? [])], opts.onProgress);
}

/** repairTreeSync (backing/repair.ts) of a home's backing tree, on a scan worker. */
export function repairTree(rootFd: number, policy: RepairPolicy): Promise<RepairResult> {
  return scanPool().run(rootFd, [], undefined, policy);
}

function scanPool(): ScanPool {
  return (pool ??= new ScanPool(Math.max(1, Math.min(4, availableParallelism()))));
}

/** What the start-up scan of a home needs from the registry that opened it (HomeRegistry). */
export interface ScanHost {
  readonly log: Logger;
  readonly store: BackingStore;
  replaceLedger(hs: HomeState, counts: { bytes: number; inodes: number }): void;
}

export async function scanHome(ctx: ScanHost, hs: HomeState): Promise<void> {
  const log = ctx.log.child({ home: hs.backing.id });
  hs.scan = 'scanning';
  const started = Date.now();
  try {
    const r = await ctx.store.useHome(hs.backing, (fd) =>
      measureTree(fd, {
        onProgress: (p) => {
          hs.scanProgress = { bytes: p.bytes, inodes: p.inodes };
          log.info({ bytes: p.bytes, inodes: p.inodes }, 'scan progress');
        },
      }),
    );
    // A file unlinked while open has no name the walk could meet: its bytes stay charged until its last
    // close (as a rescan counts them). Only a live upgrade hands such files over before the ledger is
    // built (an unlink waits for it); read with no await before the swap, as the records stand now.
    let unlinkedOpen = 0;
    for (const inode of hs.inodes.values()) if (inode.unlinked) unlinkedOpen += inode.size;
    ctx.replaceLedger(hs, { bytes: r.bytes + unlinkedOpen, inodes: r.inodes });
    hs.scan = 'done';
    log.info({ bytes: r.bytes, inodes: r.inodes, ms: Date.now() - started, profile: hs.profileName, depth: r.walk?.depth, maxOpen: r.walk?.maxOpen, scanner: r.scanner }, 'home ledger built');
  } catch (err) {
    hs.scan = 'failed';
    hs.scanError = (err as Error).message;
    log.error({ err }, 'home scan failed: writes to this home are refused until a rescan succeeds');
  }
}
