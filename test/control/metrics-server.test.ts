import { connect, type Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_CONNECTIONS, startMetricsServer, type MetricsServer } from '../../src/metrics/server.js';

/**
 * Every connection costs the daemon a descriptor, and the loopback port is open
 * to every local uid (agents included): connections beyond the cap are closed
 * at once, so no client can take the daemon's descriptors through it (issue 8).
 */
describe('metrics endpoint: bounded connections', () => {
  let dir: string;
  let server: MetricsServer;
  let port = 0;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-metrics-'));
    server = await startMetricsServer({ listen: '127.0.0.1:0', render: async () => 'homesfs_up_seconds 1\n', log: pino({ level: 'silent' }) });
    port = Number(server.addresses[0]!.split(':').pop());
  });

  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const scrape = (): Promise<number> =>
    new Promise((resolve, reject) => {
      request({ host: '127.0.0.1', port, path: '/metrics' }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      })
        .on('error', reject)
        .end();
    });

  it(`keeps at most ${MAX_CONNECTIONS} idle connections; the rest are closed, and scrapes work again afterwards`, async () => {
    const socks: Socket[] = [];
    const closed = new Set<Socket>();
    for (let i = 0; i < MAX_CONNECTIONS + 24; i++) {
      const s = connect({ host: '127.0.0.1', port });
      s.on('error', () => undefined);
      s.on('close', () => closed.add(s));
      socks.push(s);
      await new Promise((r) => s.once('connect', r));
    }
    for (let i = 0; i < 100 && closed.size < 24; i++) await new Promise((r) => setTimeout(r, 20));
    expect(closed.size).toBe(24);
    for (const s of socks) s.destroy();
    for (let i = 0; i < 100 && closed.size < socks.length; i++) await new Promise((r) => setTimeout(r, 20));
    let status = 0;
    for (let i = 0; i < 50 && status !== 200; i++) status = await scrape().catch(() => 0);
    expect(status).toBe(200);
  });
});

/** GET /healthz: from the daemon's serving state, cheap enough for a liveness probe. */
describe('metrics endpoint: /healthz', () => {
  let dir: string;
  let server: MetricsServer;
  let reasons: string[] = [];
  let renders = 0;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'homesfs-healthz-'));
    server = await startMetricsServer({
      socket: join(dir, 'run', 'metrics.sock'),
      render: async () => {
        renders++;
        return `homesfs_mount_up ${reasons.length === 0 ? 1 : 0}\n`;
      },
      health: () => reasons,
      log: pino({ level: 'silent' }),
    });
  });

  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const get = (path: string, method = 'GET'): Promise<{ status: number; body: string; type: string | undefined }> =>
    new Promise((resolve, reject) => {
      request({ socketPath: server.addresses[0]!, path, method }, (res) => {
        let body = '';
        res.setEncoding('utf8').on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, type: res.headers['content-type'] }));
      })
        .on('error', reject)
        .end();
    });

  it('answers 200 "ok" while serving and 503 with the reasons otherwise, without rendering the metrics', async () => {
    reasons = [];
    expect(await get('/healthz')).toMatchObject({ status: 200, body: 'ok\n', type: 'text/plain; charset=utf-8' });
    reasons = ['not mounted', 'FUSE loop ended'];
    expect(await get('/healthz')).toMatchObject({ status: 503, body: 'not serving: not mounted, FUSE loop ended\n' });
    expect(await get('/healthz', 'HEAD')).toMatchObject({ status: 503, body: '' });
    expect(renders).toBe(0);
    expect(await get('/metrics')).toMatchObject({ status: 200, body: 'homesfs_mount_up 0\n' });
    reasons = [];
    expect(await get('/healthz?x=1')).toMatchObject({ status: 200, body: 'ok\n' });
    expect((await get('/health')).status).toBe(404);
  });

  it('is 404 on an endpoint started without a health source', async () => {
    const other = await startMetricsServer({ socket: join(dir, 'other', 'm.sock'), render: async () => '', log: pino({ level: 'silent' }) });
    try {
      const r = await new Promise<number>((resolve, reject) => {
        request({ socketPath: other.addresses[0]!, path: '/healthz' }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        })
          .on('error', reject)
          .end();
      });
      expect(r).toBe(404);
    } finally {
      await other.close();
    }
  });
});
