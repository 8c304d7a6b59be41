#!/usr/bin/env node
/**
 * The holder's entry: `node dist/holder/main.js --socket PATH --log FILE`,
 * spawned detached by a serving daemon (client.ts) when none runs for its
 * configuration. A file of its own rather than a `homesfs` subcommand: it
 * loads the addon and holder.ts and nothing of the daemon (no config,
 * backing or state modules), and `ps` names it for what it is.
 *
 * It leaves at once (exit 0) when another holder already answers on the
 * socket; otherwise it serves until the session is released or gone, or a
 * SIGTERM/SIGINT (which close the session's copy: processes waiting in the
 * mount then get ENOTCONN).
 */
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { loadFuse } from '../fuse/binding.js';
import { Holder } from './holder.js';

function main(): void {
  const { values } = parseArgs({ options: { socket: { type: 'string' }, log: { type: 'string' } } });
  if (values.socket === undefined) {
    process.stderr.write('usage: node dist/holder/main.js --socket PATH [--log FILE]\n');
    process.exit(2);
  }
  process.title = 'homesfs-holder';
  process.chdir('/');
  // Its log file and socket: root's alone.
  process.umask(0o077);
  const log = pino(
    { base: { pid: process.pid, component: 'holder' }, timestamp: pino.stdTimeFunctions.isoTime, formatters: { level: (label) => ({ level: label }) } },
    values.log !== undefined ? pino.destination({ dest: values.log, sync: true }) : pino.destination({ fd: 2, sync: true }),
  );
  const raw = loadFuse().native;
  // One holder per socket: a second one spawned in a race leaves the first in place.
  const probe = raw.hs_handover_connect(values.socket);
  if (probe >= 0) {
    raw.hs_handover_close(probe);
    log.info({ socket: values.socket }, 'a holder already answers on this socket: leaving');
    process.exit(0);
  }
  const holder = new Holder(raw, values.socket, log, (code) => process.exit(code));
  for (const sig of ['SIGTERM', 'SIGINT'] as const) process.on(sig, () => holder.stop(0, `${sig}: the session's copy is closed`));
  process.on('SIGHUP', () => undefined);
  holder.start();
}

try {
  main();
} catch (err) {
  process.stderr.write(`homesfs-holder: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
}
