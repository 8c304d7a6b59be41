import { chmod, lstat, unlink } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { prepareSocketDir, removeStaleSocket } from '../control/server.js';
import type { Logger } from '../log.js';

/** Scrapers at once per listener (Prometheus uses one). */
export const MAX_CONNECTIONS = 16;

export interface MetricsServerOptions {
  /** Unix socket path (its directory is made 0700, or 0750 with `group`, before listen; the socket 0600/0660) */
  socket?: string;
  /** "127.0.0.1:PORT" or "[::1]:PORT" (port 0 = any free port: see `addresses`) */
  listen?: string;
  group?: number;
  render: () => Promise<string>;
  /** why the daemon does not serve (empty: it does), for GET /healthz; without it /healthz is 404 */
  health?: () => string[];
  log: Logger;
}

export interface MetricsServer {
  /** where it listens: socket paths and host:port */
  readonly addresses: string[];
  close(): Promise<void>;
}

export function parseListen(listen: string): { host: string; port: number } {
  const m = /^(127\.0\.0\.1|\[::1\]):([0-9]{1,5})$/.exec(listen);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) throw new Error(`metrics.listen must be 127.0.0.1:PORT or [::1]:PORT (loopback only), got ${JSON.stringify(listen)}`);
  return { host: m[1] === '[::1]' ? '::1' : m[1]!, port };
}

/**
 * The Prometheus endpoint: GET /metrics (or /) on a Unix socket and/or a
 * loopback port. Every scrape renders a fresh snapshot. GET /healthz answers
 * 200 "ok" while the daemon serves and 503 with the reasons otherwise, from
 * state in memory (a liveness probe may ask often). Anything else is 404/405.
 */
export async function startMetricsServer(opts: MetricsServerOptions): Promise<MetricsServer> {
  const servers: Server[] = [];
  const addresses: string[] = [];
  const make = (): Server => {
    const server = createServer((req, res) => {
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.writeHead(405, { allow: 'GET, HEAD' }).end();
        return;
      }
      const url = (req.url ?? '/').split('?')[0];
      if (url === '/healthz' && opts.health) {
        const why = opts.health();
        const body = why.length === 0 ? 'ok\n' : `not serving: ${why.join(', ')}\n`;
        res.writeHead(why.length === 0 ? 200 : 503, { 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store' }).end(req.method === 'HEAD' ? undefined : body);
        return;
      }
      if (url !== '/metrics' && url !== '/') {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: scrape /metrics\n');
        return;
      }
      opts.render().then(
        (body) => res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(req.method === 'HEAD' ? undefined : body),
        (err: unknown) => {
          opts.log.error({ err }, 'metrics: rendering failed');
          res.writeHead(500).end();
        },
      );
    });
    // Every connection is a daemon descriptor, and a loopback port is open to
    // every local uid: beyond this many, new connections are closed at once.
    server.maxConnections = MAX_CONNECTIONS;
    return server;
  };
  const listen = (server: Server, arg: { path: string } | { host: string; port: number }): Promise<void> =>
    new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(arg, () => {
        server.off('error', reject);
        server.on('error', (err) => opts.log.error({ err }, 'metrics server error'));
        resolve();
      });
    });
  let socketPath: string | undefined;
  try {
    if (opts.socket !== undefined) {
      socketPath = path.resolve(opts.socket);
      await prepareSocketDir(path.dirname(socketPath), opts.group === undefined ? 0o700 : 0o750, opts.group, 'metrics socket');
      await removeStaleSocket(socketPath, 'metrics socket');
      const s = make();
      servers.push(s);
      await listen(s, { path: socketPath });
      await chmod(socketPath, opts.group === undefined ? 0o600 : 0o660);
      addresses.push(socketPath);
    }
    if (opts.listen !== undefined) {
      const { host, port } = parseListen(opts.listen);
      const s = make();
      servers.push(s);
      await listen(s, { host, port });
      const a = s.address() as AddressInfo;
      addresses.push(a.family === 'IPv6' ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`);
    }
  } catch (err) {
    for (const s of servers) await new Promise<void>((r) => s.close(() => r()));
    throw err;
  }
  opts.log.info({ addresses }, 'metrics endpoint listening');
  return {
    addresses,
    async close() {
      for (const s of servers) {
        s.closeAllConnections();
        await new Promise<void>((r) => s.close(() => r()));
      }
      if (socketPath !== undefined) {
        const st = await lstat(socketPath).catch(() => null);
        if (st?.isSocket()) await unlink(socketPath).catch(() => undefined);
      }
    },
  };
}
