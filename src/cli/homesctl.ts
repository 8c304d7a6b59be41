#!/usr/bin/env node
/**
 * homesctl [--socket PATH | --config FILE] [--json] [--timeout MS] <command> [args]
 *
 * The installed entry point (package.json bin): it only wires the process to
 * homesctl/run.ts (argv, environment, stdio, Ctrl-C, the exit code) and keeps
 * the module's exports in one place for importers. The parts: args.ts checks
 * words, commands.ts (with commands-homes.ts and commands-names.ts) declares
 * each command, command-line.ts turns argv into a request or a help text,
 * render.ts prints replies for people, run.ts talks to the daemon, outage.ts
 * asks the holder or systemd when the daemon does not answer. Adding a
 * command: one entry in a command family and its line in commands.ts.
 */
import { realpathSync, writeSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import type { LocalIo } from './exec.js';
import { commandIndex } from './homesctl/args.js';
import { isWatching, main, type Io } from './homesctl/run.js';

export { formatBytes } from './size.js';
export type { SocketSource } from './sockets.js';
export { clean, formatDuration, formatTable } from './homesctl/render.js';
export { closest, DEFAULT_SOCKET, parseSize } from './homesctl/args.js';
export { parseCommandLine } from './homesctl/command-line.js';
export { EXIT, explainClientError, main, notServing, type Io } from './homesctl/run.js';

function isEntryPoint(): boolean {
  const script = process.argv[1];
  if (!script) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(script)).href;
  } catch {
    // argv[1] does not name a readable file (e.g. `node -e`): not run as the CLI.
    return false;
  }
}

if (isEntryPoint()) {
  const argv = process.argv.slice(2);
  // exec passes signals on to its command and dies the way the command did.
  const execing = argv[commandIndex(argv)] === 'exec';
  // Ctrl-C ends a watch cleanly (exit 0); a single request is short enough to just end.
  const stop = new AbortController();
  if (!execing) {
    process.once('SIGINT', () => {
      if (!isWatching()) process.exit(130);
      stop.abort();
      process.once('SIGINT', () => process.exit(130));
    });
  }
  // exec's child shares our stdio: opening process.stdout/stderr on a pipe
  // would make it non-blocking under the child, so exec writes synchronously.
  const io: Io & LocalIo = {
    stdout: execing ? { write: (s: string) => writeSync(1, s) } : process.stdout,
    stderr: execing ? { write: (s: string) => writeSync(2, s) } : process.stderr,
    raise: (signal) => {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    },
  };
  main(argv, process.env, io, stop.signal).then(
    (code) => {
      process.exitCode = code;
      // a pending request must not keep a Ctrl-C'd watch alive
      if (stop.signal.aborted) process.exit(code);
    },
    (err: unknown) => {
      process.stderr.write(`homesctl: internal error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exitCode = 70;
    },
  );
}
