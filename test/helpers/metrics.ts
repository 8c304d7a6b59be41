import { request } from 'node:http';

/** GET /metrics from a daemon's metrics endpoint on a Unix socket: the body. */
export function scrapeMetrics(socketPath: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path: '/metrics', method: 'GET' }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve(body));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The value of one series (name with its labels) in an exposition body; 0 when absent. */
export function metricSample(body: string, series: string): number {
  const line = body.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}
