/**
 * Turns per home: at most `perHome` tasks of one home and `total` in all run at
 * once; the rest wait in order. A home that starts many slow tasks (frees of
 * huge files, listings of huge directories) waits for its own, and never holds
 * up another home's, whose first waiter goes as soon as there is room.
 */
interface Waiter {
  home: string;
  go: () => void;
}

export class Turns {
  private running = 0;
  private readonly perHomeRunning = new Map<string, number>();
  private readonly queue: Waiter[] = [];

  constructor(
    private readonly perHome: number,
    private readonly total: number,
  ) {}

  get inFlight(): number {
    return this.running;
  }

  get waiting(): number {
    return this.queue.length;
  }

  async run<T>(home: string, task: () => Promise<T>): Promise<T> {
    // The turn is taken synchronously, by this call or by the wake that lets it go:
    // no other finish can hand the same turn out in between.
    if (this.mayStart(home)) this.take(home);
    else await new Promise<void>((go) => this.queue.push({ home, go }));
    try {
      return await task();
    } finally {
      this.running--;
      const n = (this.perHomeRunning.get(home) ?? 1) - 1;
      if (n === 0) this.perHomeRunning.delete(home);
      else this.perHomeRunning.set(home, n);
      this.wakeNext();
    }
  }

  private take(home: string): void {
    this.running++;
    this.perHomeRunning.set(home, (this.perHomeRunning.get(home) ?? 0) + 1);
  }

  private mayStart(home: string): boolean {
    return this.running < this.total && (this.perHomeRunning.get(home) ?? 0) < this.perHome;
  }

  /** Waiters whose home has room go next, in order: one home's queue never blocks another's. */
  private wakeNext(): void {
    for (let i = 0; i < this.queue.length && this.running < this.total; ) {
      const w = this.queue[i]!;
      if (!this.mayStart(w.home)) {
        i++;
        continue;
      }
      this.queue.splice(i, 1);
      this.take(w.home);
      w.go();
    }
  }
}
