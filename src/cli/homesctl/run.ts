/**
 * Runs one homesctl invocation and turns the outcome into output and an exit
 * code: the commands that run here (exec, passwd) are handed to exec.ts, the
 * rest become one control request whose reply is printed as a table or as
 * JSON, with the way out under every failure (a socket nobody listens on, a
 * BUSY home and who holds it, a settings change that needs --yes); list
 * --watch and top repeat the request and redraw. `main` takes argv, the
 * environment and the streams as arguments, so the entry point (homesctl.ts)
 * is the only code that touches the process itself.
 */
import type { HolderInfo, HomeInfo, StatusReport } from '../../control/api.js';
import { ControlClientError, controlRequest } from '../../control/client.js';
import type { CommandName, ErrorReply } from '../../control/protocol.js';
import { notServingReasons } from '../../metrics/health.js';
import { execCli, passwdCli, type LocalIo } from '../exec.js';
import { formatBytes } from '../size.js';
import { chooseSocket, describeOrigin, SocketConfigError, type SocketChoice } from '../sockets.js';
import { commandIndex, DEFAULT_TIMEOUT_MS, GLOBAL_OPTIONS, listView, parseStrict, UsageError } from './args.js';
import { parseCommandLine, type Invocation, type Parsed } from './command-line.js';
import { specOf } from './commands.js';
import { explainOutage } from './outage.js';
import { clean, processTable, renderList, sortHomes } from './render.js';

export const EXIT = {
  OK: 0,
  /** The daemon answered with an error reply. */
  ERROR_REPLY: 1,
  /** Bad command line. */
  USAGE: 2,
  /** No usable answer: cannot connect, timeout, connection dropped, malformed reply. */
  UNREACHABLE: 3,
  /** `status`: the daemon answers but does not serve (not mounted, FUSE loop ended, self-check failed). */
  NOT_SERVING: 4,
  /** `status`: no daemon answers, but its session is kept (a holder, or systemd restarting it): the next start resumes it */
  SESSION_KEPT: 5,
} as const;

/** Why a status reply is not a serving daemon, or null: what makes `homesctl status` a health probe. */
export function notServing(s: StatusReport): string | null {
  const why = notServingReasons({ mounted: s.mount.mounted, loop: s.mount.loop, selfCheck: s.native.selfCheck });
  return why.length ? why.join(', ') : null;
}

/**
 * What went wrong talking to the daemon, and the way out: which socket was
 * tried (and where its path came from), whether the daemon is running, the
 * --socket / HOMESFS_SOCKET switch, and the admin group for EACCES.
 */
export function explainClientError(err: ControlClientError, socket: string, from: SocketChoice, timeoutMs: number): { message: string; hints: string[] } {
  const code = (err.cause as NodeJS.ErrnoException | undefined)?.code;
  const other = `point homesctl at the right daemon with --socket PATH, HOMESFS_SOCKET=PATH or --config FILE (this path was ${describeOrigin('admin', from)})`;
  if (err.kind === 'connect') {
    switch (code) {
      case 'ENOENT':
        return {
          message: `cannot connect to ${socket}: ENOENT: no socket there`,
          hints: ['is the homesfs daemon running? (systemctl status homesfs; it creates the socket when it starts serving)', other],
        };
      case 'ECONNREFUSED':
        return {
          message: `cannot connect to ${socket}: ECONNREFUSED: nothing is listening on it`,
          hints: ['the homesfs daemon that created it has stopped: start it again (systemctl start homesfs)', other],
        };
      case 'EACCES':
      case 'EPERM':
        return {
          message: `cannot connect to ${socket}: ${code}: permission denied`,
          hints: [
            "the admin socket is for root, and for the daemon's adminGroup when its config sets one: run as root (sudo homesctl …) or join that group (then log in again)",
            'the platform socket serves only status and resolve',
          ],
        };
      case 'ENOTSOCK':
      case 'ENOTDIR':
        return { message: `cannot connect to ${socket}: ${code}: not a socket`, hints: [other] };
      default:
        return { message: err.message, hints: [other] };
    }
  }
  if (err.kind === 'timeout') {
    return {
      message: `no reply from ${socket} within ${timeoutMs} ms`,
      hints: ['the homesfs daemon may be busy or stuck: see its log (journalctl -u homesfs); --timeout MS waits longer'],
    };
  }
  return { message: err.message, hints: ['is the homesfs daemon at this socket the version this homesctl belongs to? See its log (journalctl -u homesfs)'] };
}

/** `exec` and `passwd`, with the global options given before them; undefined when argv names another command. */
function runLocal(argv: string[], env: NodeJS.ProcessEnv, io: Io & Partial<LocalIo>): Promise<number> | undefined {
  const i = commandIndex(argv);
  const name = argv[i];
  if (name !== 'exec' && name !== 'passwd') return undefined;
  let g;
  try {
    g = parseStrict(argv.slice(0, i), GLOBAL_OPTIONS, false);
  } catch (err) {
    io.stderr.write(`homesctl: ${(err as Error).message}
`);
    return Promise.resolve(name === 'exec' ? 125 : EXIT.USAGE);
  }
  const t = g.values.timeout;
  const timeoutMs = typeof t === 'string' && /^[0-9]+$/.test(t) && Number(t) > 0 ? Number(t) : undefined;
  const socket = typeof g.values.socket === 'string' ? g.values.socket : undefined;
  const config = typeof g.values.config === 'string' ? g.values.config : undefined;
  if (name === 'exec') {
    return execCli(argv.slice(i + 1), { ...(socket !== undefined ? { socket } : {}), ...(config !== undefined ? { config } : {}), ...(timeoutMs !== undefined ? { timeoutMs } : {}) }, env, io);
  }
  let chosen;
  try {
    chosen = chooseSocket('admin', { socket, config }, env);
  } catch (err) {
    if (!(err instanceof SocketConfigError)) throw err;
    io.stderr.write(`homesctl: ${clean(err.message)}\n`);
    return Promise.resolve(EXIT.USAGE);
  }
  return passwdCli(argv.slice(i + 1), { socket: chosen.path, timeoutMs: timeoutMs ?? DEFAULT_TIMEOUT_MS }, io);
}

export interface Io {
  stdout: { write(s: string): unknown; isTTY?: boolean };
  stderr: { write(s: string): unknown };
}

/** --json given before the command or after it (also when the rest of the line does not parse). */
function wantsJson(argv: string[]): boolean {
  const end = argv.indexOf('--');
  return (end < 0 ? argv : argv.slice(0, end)).includes('--json');
}

function printJson(io: Io, value: unknown): void {
  io.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

/** Extra lines under an error reply that say the way out. */
function errorHints(reply: ErrorReply, command: CommandName): string[] {
  const d = reply.details ?? {};
  switch (reply.code) {
    case 'BUSY': {
      const ps = Array.isArray(d.processes) ? (d.processes as HolderInfo[]) : [];
      const counts = typeof d.openFiles === 'number' && typeof d.cwdProcesses === 'number' ? [`${d.openFiles} open file${d.openFiles === 1 ? '' : 's'}, ${d.cwdProcesses} working director${d.cwdProcesses === 1 ? 'y' : 'ies'} inside`] : [];
      const held =
        ps.length > 0
          ? ['held by:', ...processTable(ps, true).trimEnd().split('\n')]
          : counts.length > 0
            ? ['no holder is visible from here (another pid namespace?)']
            : [];
      return [...counts, ...held, ...(specOf(command).force ? ['(--force goes ahead anyway)'] : [])];
    }
    case 'RENAMED':
      return [
        `the home now lives at ${clean(String(d.to))}${typeof d.path === 'string' ? ` (${clean(d.path)})` : ''}: use its new name, or free the old one with: homesctl release-name ${clean(String(d.from))}`,
      ];
    case 'CONFIRM_REQUIRED': {
      const homes = Array.isArray(d.homes) ? (d.homes as Array<{ home: string; bytes: number }>) : [];
      return [
        `homes that would be left unused (${formatBytes(homes.reduce((a, h) => a + h.bytes, 0))} in all):`,
        ...homes.map((h) => `  ${clean(h.home)}  ${formatBytes(h.bytes)}`),
        'nothing changed: add --yes to go ahead (the homes stay as orphans: list --orphans, delete-home), or --dry-run to preview',
      ];
    }
    default:
      return [];
  }
}

async function request(inv: Invocation, io: Io, env: NodeJS.ProcessEnv): Promise<{ ok: true; data: unknown } | { ok: false; exit: number }> {
  let reply;
  try {
    reply = await controlRequest(inv.socket, { cmd: inv.command, args: inv.args } as Parameters<typeof controlRequest>[1], { timeoutMs: inv.timeoutMs });
  } catch (err) {
    if (!(err instanceof ControlClientError)) throw err;
    const { message, hints } = explainClientError(err, inv.socket, inv.socketFrom, inv.timeoutMs);
    // `status` is the health probe: when nothing listens, say whether the session outlived the daemon.
    const outage = inv.command === 'status' && err.kind === 'connect' ? await explainOutage(inv.socket, env) : null;
    if (outage !== null && (outage.kind === 'kept' || outage.kind === 'restarting')) {
      const { message: said, kind: state, ...rest } = outage;
      if (inv.json) printJson(io, { ok: false, code: 'SESSION_KEPT', socket: inv.socket, message: said, state, ...rest, unreachable: message });
      else io.stdout.write(`${clean(said)}\n`);
      io.stderr.write(`homesctl: ${clean(message)}\n`);
      return { ok: false, exit: EXIT.SESSION_KEPT };
    }
    const all = outage !== null ? [outage.message, ...hints] : hints;
    if (inv.json) printJson(io, { ok: false, code: 'UNREACHABLE', kind: err.kind, socket: inv.socket, message, hints: all, ...(outage !== null ? { outage: (({ message: _m, kind: state, ...o }) => ({ state, ...o }))(outage) } : {}) });
    io.stderr.write(`homesctl: ${clean(message)}\n${all.map((h) => `  ${clean(h)}\n`).join('')}`);
    return { ok: false, exit: EXIT.UNREACHABLE };
  }
  if (!reply.ok) {
    if (inv.json) printJson(io, reply);
    io.stderr.write(`homesctl: ${reply.code}: ${clean(reply.message)}\n`);
    if (!inv.json) {
      const hints = errorHints(reply, inv.command);
      const rendered = reply.code === 'CONFIRM_REQUIRED' || reply.code === 'RENAMED' || (reply.code === 'BUSY' && Array.isArray(reply.details?.processes));
      if (reply.details && Object.keys(reply.details).length > 0 && !rendered) io.stderr.write(`  details: ${clean(JSON.stringify(reply.details))}\n`);
      for (const h of hints) io.stderr.write(`  ${h}\n`);
    }
    return { ok: false, exit: EXIT.ERROR_REPLY };
  }
  return { ok: true, data: reply.data };
}

/** Resolves after `ms`, or at once when `signal` aborts. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** Set while a list --watch or top runs. */
let watching = false;

/** A watch is on: the entry point's Ctrl-C handler then stops it cleanly instead of exiting 130. */
export function isWatching(): boolean {
  return watching;
}

/**
 * list --watch / top: redraw the table every interval, busiest first (bytes
 * per second since the previous frame), until `signal` aborts (Ctrl-C) or
 * --count frames are drawn. A terminal gets the screen cleared per frame; a
 * pipe gets frames one after another.
 */
async function watch(inv: Invocation, io: Io, env: NodeJS.ProcessEnv, signal: AbortSignal | undefined): Promise<number> {
  const view = listView(inv.values);
  watching = true;
  let prev: { at: number; bytes: Map<string, number> } | undefined;
  for (let frame = 0; frame < view.count && !signal?.aborted; frame++) {
    const r = await request(inv, io, env);
    if (!r.ok) return r.exit;
    if (signal?.aborted) break;
    const now = Date.now();
    const homes = r.data as HomeInfo[];
    const bytes = new Map(homes.map((h) => [`${h.tenant}/${h.key}`, h.bytes]));
    const rates = new Map<string, number>();
    if (prev) {
      const secs = Math.max(0.001, (now - prev.at) / 1000);
      for (const [id, b] of bytes) {
        const before = prev.bytes.get(id);
        if (before !== undefined) rates.set(id, (b - before) / secs);
      }
    }
    prev = { at: now, bytes };
    const shown = sortHomes(homes, view.sort, rates).slice(0, view.limit);
    const more = homes.length > shown.length ? ` (${shown.length} of ${homes.length} homes)` : '';
    const head = `homesctl top: ${new Date(now).toISOString()}, every ${view.intervalMs / 1000}s, sorted by ${view.sort}${more}; Ctrl-C quits\n\n`;
    io.stdout.write((io.stdout.isTTY ? '\x1b[H\x1b[2J' : frame > 0 ? '\n' : '') + head + renderList(shown, rates));
    if (frame + 1 < view.count) await pause(view.intervalMs, signal);
  }
  return EXIT.OK;
}

export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env, io: Io & Partial<LocalIo> = process, signal?: AbortSignal): Promise<number> {
  const local = runLocal(argv, env, io);
  if (local !== undefined) return local;
  let inv: Parsed;
  try {
    inv = parseCommandLine(argv, env);
  } catch (err) {
    if (err instanceof SocketConfigError) {
      if (wantsJson(argv)) printJson(io, { ok: false, code: 'CONFIG', message: err.message });
      io.stderr.write(`homesctl: ${clean(err.message)}\n  --socket PATH (or HOMESFS_SOCKET) names the socket without reading a configuration\n`);
      return EXIT.USAGE;
    }
    if (!(err instanceof UsageError)) throw err;
    const cmd = err.command ? `${err.command} ` : '';
    if (wantsJson(argv)) printJson(io, { ok: false, code: 'USAGE', message: err.message });
    io.stderr.write(`homesctl: ${err.message}\nTry 'homesctl ${cmd}--help'.\n`);
    return EXIT.USAGE;
  }
  if (inv.kind === 'help') {
    io.stdout.write(inv.text);
    return EXIT.OK;
  }
  if (inv.values.watch === true) return watch(inv, io, env, signal);

  const r = await request(inv, io, env);
  if (!r.ok) return r.exit;
  const spec = specOf(inv.command);
  if (inv.json) printJson(io, spec.json ? spec.json(r.data, inv.args, inv.values) : r.data);
  else io.stdout.write(spec.human(r.data, inv.args, inv.values));
  if (inv.command === 'status') {
    const why = notServing(r.data as StatusReport);
    if (why !== null) {
      io.stderr.write(`homesctl: the daemon answers but does not serve: ${why}\n`);
      return EXIT.NOT_SERVING;
    }
  }
  return EXIT.OK;
}
