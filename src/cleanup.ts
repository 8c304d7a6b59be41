import type { Logger } from './log.js';

/**
 * A disposal stack (Node 20 has no AsyncDisposableStack): whatever is opened
 * registers its clean-up once, right where it is opened, and `disposeAll`
 * runs them in reverse order, so whatever was opened last closes first. A
 * clean-up that fails is logged and the rest still run; `disposeAll` never
 * throws, so the error that made a caller clean up is the one it reports.
 */
export class Cleanup {
  private readonly steps: Array<{ what: string; fn: () => unknown }> = [];
  private disposing: Promise<void> | null = null;
  /** The errors of the clean-ups that failed, by what they were cleaning up. */
  readonly errors: Array<{ what: string; error: unknown }> = [];

  constructor(private readonly log: Pick<Logger, 'warn'>) {}

  /** Register `fn` (named `what` in the log line of its failure) to run at disposal. */
  defer(what: string, fn: () => unknown): void {
    if (this.disposing) throw new Error(`clean-up "${what}" registered after disposal began`);
    this.steps.push({ what, fn });
  }

  /** How many clean-ups are registered and not run. */
  get size(): number {
    return this.steps.length;
  }

  /**
   * Run every clean-up, last registered first, each awaited before the next;
   * failures are logged (and returned) and never stop the rest. A second call
   * waits for the first and runs nothing again.
   */
  disposeAll(): Promise<void> {
    this.disposing ??= this.run();
    return this.disposing;
  }

  private async run(): Promise<void> {
    for (let step = this.steps.pop(); step !== undefined; step = this.steps.pop()) {
      try {
        await step.fn();
      } catch (error) {
        this.errors.push({ what: step.what, error });
        this.log.warn({ cleanup: step.what, err: error instanceof Error ? error.message : String(error) }, `clean-up failed: ${step.what}`);
      }
    }
  }
}
