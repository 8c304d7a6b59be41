import { spawn, type ChildProcess } from 'node:child_process';

/** A `homesfs serve --takeover` child (or, with `takeover` false, a plain `homesfs serve`): its JSON log lines as they come. */
export interface Successor {
  proc: ChildProcess;
  logs: Array<Record<string, unknown>>;
  exited: Promise<number | null>;
  stderr: () => string;
}

export function startSuccessor(bin: string, config: string, takeover = true, env: NodeJS.ProcessEnv = {}): Successor {
  const proc = spawn(process.execPath, [bin, 'serve', '--config', config, ...(takeover ? ['--takeover'] : [])], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  const logs: Array<Record<string, unknown>> = [];
  let buf = '';
  let err = '';
  proc.stdout!.on('data', (d: Buffer) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) !== -1) {
      try {
        logs.push(JSON.parse(buf.slice(0, i)) as Record<string, unknown>);
      } catch {
        /* not a log line */
      }
      buf = buf.slice(i + 1);
    }
  });
  proc.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const exited = new Promise<number | null>((r) => proc.on('exit', (c) => r(c)));
  return { proc, logs, exited, stderr: () => err };
}

export async function waitFor<T>(what: string, f: () => T | undefined, ms = 30_000): Promise<T> {
  const until = Date.now() + ms;
  for (;;) {
    const v = f();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Resolves once the successor logs `serving`; throws with its last words if it exits first. */
export function serving(s: Successor, ms = 30_000): Promise<true> {
  return waitFor(
    'the successor serving',
    () => {
      if (s.logs.some((l) => l.msg === 'serving')) return true as const;
      if (s.proc.exitCode !== null) throw new Error(`successor exited ${s.proc.exitCode}: ${s.stderr()} ${JSON.stringify(s.logs.slice(-5))}`);
      return undefined;
    },
    ms,
  );
}
