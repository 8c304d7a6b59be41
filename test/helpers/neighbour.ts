import { chmodSync, existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runAsync, SYSTEM_PATH } from './daemon.js';

export type Owner = { uid: number; gid: number };

/** A python script run as `who` (its stdout, trimmed; a non-zero exit throws with its stderr). `tmp` must be readable by every uid. */
export async function pyAs(tmp: string, who: Owner, body: string, ...args: string[]): Promise<string> {
  const file = join(tmp, `s${Math.random().toString(36).slice(2)}.py`);
  writeFileSync(file, body, { mode: 0o644 });
  const r = await runAsync('setpriv', [`--reuid=${who.uid}`, `--regid=${who.gid}`, '--clear-groups', 'python3', file, ...args], { env: { PATH: SYSTEM_PATH }, timeoutMs: 300_000 });
  if (r.code !== 0) throw new Error(`python failed (${r.code}): ${r.stderr}`);
  return r.stdout.trim();
}

export interface NeighbourLatency {
  p99: number;
  max: number;
  /** operations timed */
  n: number;
}

/**
 * Another home's owner at work while something happens elsewhere: a loop of
 * stat, create+write and read in its home, each round timed (the first 20
 * left out as warm-up). Resolves once the loop runs; `stop()` ends it and
 * gives its latencies in ms.
 */
export async function neighbourProbe(tmp: string, who: Owner, home: string): Promise<{ stop(): Promise<NeighbourLatency> }> {
  // Its markers go where it may write: a sticky world-writable directory of the test's.
  const marks = mkdtempSync(join(tmp, 'marks-'));
  chmodSync(marks, 0o1777);
  const ready = join(marks, 'ready');
  const stopFile = join(marks, 'stop');
  const running = pyAs(
    tmp,
    who,
    `
import os, sys, time
home, ready, stop = sys.argv[1:4]
p = os.path.join(home, 'probe.txt')
lat = []
n = 0
while not os.path.exists(stop):
    t = time.monotonic()
    os.stat(home)
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    os.write(fd, b'y' * 100)
    os.close(fd)
    with open(p, 'rb') as f:
        f.read()
    n += 1
    if n > 20:
        lat.append(time.monotonic() - t)
    if n == 20:
        open(ready, 'w').close()
lat.sort()
print(lat[int(len(lat) * 0.99)] * 1000, lat[-1] * 1000, len(lat))
`,
    home,
    ready,
    stopFile,
  );
  running.catch(() => undefined); // awaited by stop(); a failure before then shows there
  for (let i = 0; i < 3000 && !existsSync(ready); i++) {
    await Promise.race([running, new Promise((r) => setTimeout(r, 10))]);
  }
  if (!existsSync(ready)) throw new Error('the neighbour probe never started');
  return {
    stop: async () => {
      writeFileSync(stopFile, '');
      const [p99, max, n] = (await running).split(' ').map(Number) as [number, number, number];
      return { p99, max, n };
    },
  };
}
