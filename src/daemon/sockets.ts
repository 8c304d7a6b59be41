import type { Config } from '../config/schema.js';
import { commands, PLATFORM_COMMANDS, type DaemonCommands, type HomeCommands } from '../control/commands.js';
import { startControlServer, type ControlServer } from '../control/server.js';
import type { FsContext } from '../fs/context.js';
import type { kernelCache } from '../fuse/mount.js';
import type { Logger } from '../log.js';
import { renderMetrics } from '../metrics/exposition.js';
import { notServingReasons, type ServingState } from '../metrics/health.js';
import type { OpMetrics } from '../metrics/ops.js';
import { startMetricsServer, type MetricsServer } from '../metrics/server.js';
import { metricsSnapshot } from '../metrics/snapshot.js';

export interface SocketsOptions {
  config: Config;
  log: Logger;
  homes: HomeCommands;
  daemon: DaemonCommands;
  ctx: FsContext;
  kernel: ReturnType<typeof kernelCache>;
  /** null: no metrics endpoint (per-operation counting is off) */
  opMetrics: OpMetrics | null;
  started: number;
  servingState: () => ServingState;
  /** A socket that cannot be served: close what the start opened, and the error to throw. */
  failed: (what: string, err: unknown) => Promise<Error>;
}

/**
 * The daemon's sockets: the admin and the platform control socket and the
 * metrics endpoint. Started once the session serves, closed first at stop,
 * and closed and started again around a handover that did not happen.
 */
export class DaemonSockets {
  private readonly controls: ControlServer[] = [];
  private metricsServer: MetricsServer | null = null;

  constructor(private readonly o: SocketsOptions) {}

  /** The control sockets and the metrics endpoint: at start, and again after a handover that did not happen. */
  async start(): Promise<void> {
    const { config, log, ctx, kernel, opMetrics } = this.o;
    const listeners = [
      { name: 'admin', socketPath: config.socket, group: config.adminGroup },
      { name: 'platform', socketPath: config.platformSocket, group: config.platformGroup, allowed: PLATFORM_COMMANDS },
    ];
    try {
      const controlLog = log.child({ component: 'control' });
      for (const l of listeners) {
        this.controls.push(
          await startControlServer({
            socketPath: l.socketPath,
            // With a group the socket is 0660 (its directory 0750); without, owner only.
            socketMode: l.group === undefined ? 0o600 : 0o660,
            ...(l.group !== undefined ? { socketGroup: l.group } : {}),
            ...(l.allowed ? { allowed: l.allowed } : {}),
            commands,
            homes: this.o.homes,
            daemon: this.o.daemon,
            // Every command sees the handles as the kernel does: RELEASEs the binding
            // answered (and writes it reported) are carried out first, so usage, open
            // counts, BUSY checks and limits never count a file its caller has closed.
            beforeCommand: () => ctx.settle(),
            ...(kernel ? { settle: () => kernel.settled() } : {}),
            log: controlLog.child({ listener: l.name }),
          }),
        );
      }
    } catch (err) {
      await this.stop();
      throw await this.o.failed('control socket', err);
    }
    if (opMetrics !== null) {
      try {
        this.metricsServer = await startMetricsServer({
          ...(config.metrics?.socket !== undefined ? { socket: config.metrics.socket } : {}),
          ...(config.metrics?.listen !== undefined ? { listen: config.metrics.listen } : {}),
          ...(config.adminGroup !== undefined ? { group: config.adminGroup } : {}),
          render: async () => {
            ctx.settle();
            return renderMetrics(await metricsSnapshot(ctx, opMetrics, this.o.started, notServingReasons(this.o.servingState()).length === 0));
          },
          health: () => notServingReasons(this.o.servingState()),
          log: log.child({ component: 'metrics' }),
        });
      } catch (err) {
        await this.stop();
        throw await this.o.failed('metrics endpoint', err);
      }
    }
  }

  async stop(): Promise<void> {
    for (const c of this.controls.splice(0)) await c.close().catch(() => undefined);
    await this.metricsServer?.close().catch(() => undefined);
    this.metricsServer = null;
  }

  /** The control servers open now (a handover closes them, then waits for their commands). */
  open(): ControlServer[] {
    return [...this.controls];
  }

  /** Whether a command runs now. */
  busy(): boolean {
    return this.controls.some((c) => c.busy());
  }
}
