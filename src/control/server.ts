import net from 'node:net';
import path from 'node:path';
import { constants as fsConstants } from 'node:fs';
import { lstat, mkdir, open, unlink, chmod, chown } from 'node:fs/promises';
import { isHomesError } from '../errors.js';
import type { Logger } from '../log.js';
import { LineDecoder, type LineEvent } from './framing.js';
import {
  COMMAND_NAMES,
  DEFAULT_MAX_LINE_BYTES,
  Request,
  RequestId,
  isCommandName,
  type CommandName,
  type ErrorReply,
  type Reply,
} from './protocol.js';
import { handlerFor, type CommandContext, type CommandTable, type DaemonCommands, type HomeCommands } from './commands.js';

export interface ControlServerOptions {
  /** Path of the Unix socket. Its directory is dedicated to the daemon (see `dirMode`). */
  socketPath: string;
  /** Final mode of the socket file, e.g. 0o600 or 0o660. No bits for "other". */
  socketMode: number;
  /** Group id given to the socket (and to its directory, see `dirMode`). */
  socketGroup?: number;
  /**
   * Mode of the socket's directory, set BEFORE listen so the socket is never
   * reachable with a wider mode. Default 0o700, or 0o750 when `socketGroup` is
   * given (the directory then gets that group as well).
   */
  dirMode?: number;
  /** the command table (commands.ts) */
  commands: CommandTable;
  /**
   * Commands served on this socket (default: all). Any other known command is
   * answered ACCESS_DENIED before its arguments are looked at. The daemon runs
   * an admin socket with every command and a platform socket with
   * `PLATFORM_COMMANDS`.
   */
  allowed?: ReadonlySet<CommandName>;
  /** what the commands call: the home manager's functions and the daemon's own */
  homes: HomeCommands;
  daemon: DaemonCommands;
  log: Logger;
  /** Maximum request line in bytes, newline excluded. Default 64 KiB. */
  maxLineBytes?: number;
  /** A connection without a complete line for this long is closed. Default 30 s. */
  idleTimeoutMs?: number;
  /** Handler time limit; past it the client gets TIMEOUT. Default 30 s. */
  requestTimeoutMs?: number;
  /**
   * Awaited after each command, before its reply (success or refusal): what
   * the command changed behind the kernel's caches has reached them, so the
   * caller's next `stat` sees it.
   */
  settle?: () => Promise<unknown>;
  /**
   * Run before each command, right before its function is called: the daemon
   * carries out what the kernel already did (RELEASEs the binding answered,
   * writes it reported), so usage, open counts, BUSY checks and limits never
   * count a file its caller has closed.
   */
  beforeCommand?: () => void;
  /** Concurrent connections; the excess get one BUSY line and are closed. Default 64. */
  maxConnections?: number;
}

export interface ControlServer {
  /** Stops accepting, drops open connections, removes the socket file. Idempotent. */
  close(): Promise<void>;
  /** Resolves once no command is running (a handover waits for that before it pauses the mount). */
  idle(): Promise<void>;
  /** Whether a command runs now (a handover waits, serving on, until none does before it closes the socket). */
  busy(): boolean;
  /** The socket path being served. */
  readonly address: string;
}

/** Requests buffered per connection before the server stops reading from it. */
const MAX_QUEUED_REQUESTS = 64;

export async function startControlServer(opts: ControlServerOptions): Promise<ControlServer> {
  const socketPath = path.resolve(opts.socketPath);
  const maxLineBytes = opts.maxLineBytes ?? DEFAULT_MAX_LINE_BYTES;
  const idleTimeoutMs = opts.idleTimeoutMs ?? 30_000;
  const requestTimeoutMs = opts.requestTimeoutMs ?? 30_000;
  const maxConnections = opts.maxConnections ?? 64;
  const dirMode = opts.dirMode ?? (opts.socketGroup === undefined ? 0o700 : 0o750);
  const log = opts.log;
  const allowed: ReadonlySet<CommandName> = new Set(opts.allowed ?? COMMAND_NAMES);
  for (const c of allowed) {
    if (!isCommandName(c)) throw new RangeError(`control socket: allowed names an unknown command ${JSON.stringify(c)}`);
  }

  checkMode('socketMode', opts.socketMode, 0o007);
  checkMode('dirMode', dirMode, 0o027);
  for (const [name, v] of [['maxLineBytes', maxLineBytes], ['idleTimeoutMs', idleTimeoutMs], ['requestTimeoutMs', requestTimeoutMs], ['maxConnections', maxConnections]] as const) {
    if (!Number.isSafeInteger(v) || v < 1) throw new RangeError(`control socket: ${name} must be a positive integer, got ${v}`);
  }

  await prepareSocketDir(path.dirname(socketPath), dirMode, opts.socketGroup);
  await removeStaleSocket(socketPath);

  const server = net.createServer({ allowHalfOpen: true });
  const connections = new Set<Connection>();
  let nextId = 1;
  const shared: ConnectionShared = {
    commands: opts.commands,
    allowed,
    served: COMMAND_NAMES.filter((c) => allowed.has(c)),
    homes: opts.homes,
    daemon: opts.daemon,
    beforeCommand: opts.beforeCommand,
    log,
    maxLineBytes,
    idleTimeoutMs,
    requestTimeoutMs,
    settle: opts.settle,
    running: 0,
    idleWaiters: [],
  };

  server.on('connection', (sock) => {
    const id = nextId++;
    if (connections.size >= maxConnections) {
      log.warn({ conn: id, limit: maxConnections }, 'control connection refused: too many connections');
      sock.on('error', (err) => log.debug({ conn: id, err }, 'refused control connection error'));
      const busy: ErrorReply = { ok: false, code: 'BUSY', message: `too many control connections (limit ${maxConnections}); retry later` };
      sock.end(JSON.stringify(busy) + '\n', () => sock.destroy());
      // A peer that never reads must not keep the refused socket alive.
      setTimeout(() => sock.destroy(), 5_000).unref();
      return;
    }
    const conn = new Connection(id, sock, shared, () => connections.delete(conn));
    connections.add(conn);
  });
  server.on('error', (err) => log.error({ err }, 'control server error'));

  await new Promise<void>((resolve, reject) => {
    const onError = (err: Error) => reject(err);
    server.once('error', onError);
    server.listen(socketPath, () => {
      server.off('error', onError);
      resolve();
    });
  });

  let socketIno: number;
  try {
    // The directory's mode covers the moment between bind and these calls.
    await chmod(socketPath, opts.socketMode);
    if (opts.socketGroup !== undefined) await chown(socketPath, -1, opts.socketGroup);
    const st = await lstat(socketPath);
    if (!st.isSocket()) throw new Error(`control socket: ${socketPath} is not our socket after listen`);
    socketIno = st.ino;
  } catch (err) {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await unlink(socketPath).catch((e: unknown) => log.warn({ err: e }, 'control socket: cannot remove socket after failed start'));
    throw err;
  }

  log.info(
    { socket: socketPath, mode: opts.socketMode.toString(8), group: opts.socketGroup ?? null, commands: allowed.size === COMMAND_NAMES.length ? 'all' : shared.served },
    'control socket listening',
  );

  let closing: Promise<void> | undefined;
  return {
    address: socketPath,
    busy: () => shared.running > 0,
    idle: () => (shared.running === 0 ? Promise.resolve() : new Promise<void>((r) => shared.idleWaiters.push(r))),
    close() {
      closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        for (const c of connections) c.destroy();
        await closed;
        try {
          const st = await lstat(socketPath);
          if (st.isSocket() && st.ino === socketIno) await unlink(socketPath);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'ENOENT') log.warn({ err }, 'control socket: cannot remove socket file');
        }
        log.info({ socket: socketPath }, 'control socket closed');
      })();
      return closing;
    },
  };
}

function checkMode(name: string, mode: number, forbidden: number): void {
  if (!Number.isInteger(mode) || mode < 0 || mode > 0o777) throw new RangeError(`control socket: ${name} must be a permission mode (0..0o777), got ${mode}`);
  if ((mode & forbidden) !== 0) {
    throw new RangeError(`control socket: ${name} ${mode.toString(8).padStart(4, '0')} grants too much (bits ${forbidden.toString(8).padStart(4, '0')} must be clear)`);
  }
}

/**
 * Make the socket's directory exist with its final mode before anything is
 * bound in it. The directory is opened with O_NOFOLLOW and changed through the
 * descriptor, so a symlink swapped in between check and chmod is refused.
 */
export async function prepareSocketDir(dir: string, mode: number, gid: number | undefined, label = 'control socket'): Promise<void> {
  const depth = dir.split('/').filter(Boolean).length;
  if (depth < 2) {
    throw new Error(`${label}: directory ${dir} is a system directory; put the socket in a dedicated directory such as /run/homesfs`);
  }
  let created = false;
  try {
    await mkdir(dir, { mode });
    created = true;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') {
      await mkdir(dir, { recursive: true, mode });
      created = true;
    } else if (code !== 'EEXIST') {
      throw new Error(`${label}: cannot create directory ${dir}: ${(err as Error).message}`, { cause: err });
    }
  }
  const lst = await lstat(dir);
  if (lst.isSymbolicLink()) throw new Error(`${label}: ${dir} is a symlink; refusing to use it as the socket directory`);
  if (!lst.isDirectory()) throw new Error(`${label}: ${dir} exists and is not a directory`);

  let fh;
  try {
    fh = await open(dir, fsConstants.O_RDONLY | fsConstants.O_DIRECTORY | fsConstants.O_NOFOLLOW);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ELOOP') throw new Error(`${label}: ${dir} is a symlink; refusing to use it as the socket directory`, { cause: err });
    if (code === 'ENOTDIR') throw new Error(`${label}: ${dir} exists and is not a directory`, { cause: err });
    throw new Error(`${label}: cannot open directory ${dir}: ${(err as Error).message}`, { cause: err });
  }
  try {
    const st = await fh.stat();
    const uid = process.getuid?.();
    if (uid !== undefined && st.uid !== uid) {
      throw new Error(`${label}: directory ${dir} is owned by uid ${st.uid}, not by this daemon (uid ${uid}); refusing to use it`);
    }
    if (!created && (st.mode & 0o1002) !== 0) {
      throw new Error(`${label}: directory ${dir} is shared (world-writable or sticky); put the socket in a dedicated directory`);
    }
    await fh.chmod(mode);
    if (gid !== undefined) await fh.chown(-1, gid);
    const after = await fh.stat();
    if ((after.mode & 0o7777) !== mode) {
      throw new Error(`${label}: directory ${dir} has mode ${(after.mode & 0o7777).toString(8)} after chmod, expected ${mode.toString(8)}`);
    }
  } finally {
    await fh.close();
  }
}

/** Remove a socket left by a crashed run; refuse anything that is not a dead socket. */
export async function removeStaleSocket(socketPath: string, label = 'control socket'): Promise<void> {
  let st;
  try {
    st = await lstat(socketPath);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  if (st.isSymbolicLink()) throw new Error(`${label}: ${socketPath} is a symlink; refusing to replace it`);
  if (!st.isSocket()) throw new Error(`${label}: ${socketPath} exists and is not a socket; refusing to replace it`);
  if (await socketAnswers(socketPath)) {
    throw new Error(`${label}: ${socketPath} is in use by a running process (another daemon?)`);
  }
  try {
    await unlink(socketPath);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

function socketAnswers(socketPath: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createConnection(socketPath);
    const timer = setTimeout(() => {
      s.destroy();
      resolve(true); // accepted or hanging: someone holds it, do not steal it
    }, 1_000);
    s.once('connect', () => {
      clearTimeout(timer);
      s.destroy();
      resolve(true);
    });
    s.once('error', () => {
      clearTimeout(timer);
      s.destroy();
      resolve(false);
    });
  });
}

interface ConnectionShared {
  commands: CommandTable;
  allowed: ReadonlySet<CommandName>;
  /** `allowed` in protocol order, for UNKNOWN_COMMAND's details. */
  served: readonly CommandName[];
  homes: HomeCommands;
  daemon: DaemonCommands;
  beforeCommand: (() => void) | undefined;
  log: Logger;
  maxLineBytes: number;
  idleTimeoutMs: number;
  requestTimeoutMs: number;
  settle: (() => Promise<unknown>) | undefined;
  /** commands running, and who waits for there to be none */
  running: number;
  idleWaiters: Array<() => void>;
}

const TIMED_OUT = Symbol('timed out');

/**
 * One client. Lines are answered strictly in order, one at a time; every
 * connection has its own decoder, queue and timers, so a slow or silent client
 * only ever holds up itself.
 */
class Connection {
  private readonly decoder: LineDecoder;
  private readonly queue: LineEvent[] = [];
  private readonly log: Logger;
  private idleTimer: NodeJS.Timeout | undefined;
  private inflight: AbortController | undefined;
  private pumping = false;
  private peerEnded = false;
  private closed = false;
  private requests = 0;
  private readonly openedAt = Date.now();

  constructor(
    readonly id: number,
    private readonly sock: net.Socket,
    private readonly shared: ConnectionShared,
    private readonly onClose: () => void,
  ) {
    this.decoder = new LineDecoder(shared.maxLineBytes);
    this.log = shared.log.child({ conn: id });
    sock.on('data', (chunk: Buffer) => this.enqueue(this.decoder.push(chunk)));
    sock.on('end', () => {
      this.peerEnded = true;
      this.enqueue(this.decoder.end());
      this.maybeFinish();
    });
    sock.on('error', (err) => this.log.debug({ err }, 'control connection error'));
    sock.on('close', () => this.handleClose());
    this.armIdle();
  }

  destroy(): void {
    this.sock.destroy();
  }

  private enqueue(events: LineEvent[]): void {
    if (this.closed) return;
    for (const ev of events) {
      if (ev.kind === 'line' && ev.line.trim() === '') continue; // blank lines are not requests
      this.queue.push(ev);
    }
    if (this.queue.length === 0) return;
    this.clearIdle();
    if (this.queue.length >= MAX_QUEUED_REQUESTS && !this.sock.isPaused()) this.sock.pause();
    void this.pump();
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (!this.closed && this.queue.length > 0) {
        const ev = this.queue.shift()!;
        if (this.queue.length < MAX_QUEUED_REQUESTS / 2 && this.sock.isPaused() && !this.peerEnded) this.sock.resume();
        const reply = await this.handle(ev);
        if (this.closed) break;
        await this.write(reply);
      }
    } finally {
      this.pumping = false;
    }
    if (!this.closed) {
      this.armIdle();
      this.maybeFinish();
    }
  }

  private maybeFinish(): void {
    if (this.peerEnded && !this.pumping && this.queue.length === 0 && !this.closed) this.sock.end();
  }

  private write(reply: Reply): Promise<void> {
    let line: string;
    try {
      line = JSON.stringify(reply) + '\n';
    } catch (err) {
      this.log.error({ err, cmd: 'reply' }, 'control reply not serialisable');
      line = JSON.stringify(errorReply(reply.id, 'INTERNAL', 'internal error: reply could not be serialised')) + '\n';
    }
    if (this.sock.destroyed || !this.sock.writable) return Promise.resolve();
    if (this.sock.write(line)) return Promise.resolve();
    // The client is not reading: stop processing its requests until it does,
    // and drop it if it does not within the idle timeout.
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.log.debug({ ms: this.shared.idleTimeoutMs }, 'control client not reading replies; closing');
        this.sock.destroy();
      }, this.shared.idleTimeoutMs);
      const done = () => {
        clearTimeout(timer);
        this.sock.off('drain', done);
        this.sock.off('close', done);
        resolve();
      };
      this.sock.on('drain', done);
      this.sock.on('close', done);
    });
  }

  private async handle(ev: LineEvent): Promise<Reply> {
    this.requests++;
    if (ev.kind === 'too_long') {
      return this.bad(undefined, 'LINE_TOO_LONG', `request line exceeds ${ev.maxBytes} bytes; discarded up to the next newline`, { maxBytes: ev.maxBytes });
    }
    const bytes = Buffer.byteLength(ev.line);
    let raw: unknown;
    try {
      raw = JSON.parse(ev.line);
    } catch (err) {
      return this.bad(undefined, 'BAD_JSON', `invalid JSON: ${(err as Error).message}`, undefined, { bytes });
    }
    const id = extractId(raw);
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
      return this.bad(id, 'BAD_REQUEST', 'a request must be a JSON object with a "cmd" field', undefined, { bytes });
    }
    const cmd = (raw as { cmd?: unknown }).cmd;
    if (typeof cmd === 'string' && !isCommandName(cmd)) {
      return this.bad(id, 'UNKNOWN_COMMAND', `unknown command ${JSON.stringify(cmd.slice(0, 64))}`, { commands: [...this.shared.served] }, { cmd: cmd.slice(0, 64) });
    }
    if (typeof cmd === 'string' && !this.shared.allowed.has(cmd as CommandName)) {
      // Checked before the arguments: this socket says nothing about the command beyond its name.
      return this.bad(id, 'ACCESS_DENIED', `${cmd} is not served on this socket`, undefined, { cmd });
    }
    const parsed = Request.safeParse(raw);
    if (!parsed.success) {
      const issues = parsed.error.issues.map((i) => ({ path: i.path.map((p) => (typeof p === 'symbol' ? p.toString() : p)).join('.'), message: i.message }));
      return this.bad(id, 'BAD_REQUEST', `invalid request: ${issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join('; ')}`, { issues }, { cmd: typeof cmd === 'string' ? cmd : undefined });
    }
    return this.dispatch(parsed.data);
  }

  private bad(id: RequestId | undefined, code: ErrorReply['code'], message: string, details?: Record<string, unknown>, logFields?: Record<string, unknown>): ErrorReply {
    this.log.warn({ code, ...logFields, ...(details && 'issues' in details ? { issues: details.issues } : {}) }, 'bad control request');
    return errorReply(id, code, message, details);
  }

  private async dispatch(req: Request): Promise<Reply> {
    const started = Date.now();
    const ac = new AbortController();
    this.inflight = ac;
    const ctx: CommandContext = {
      homes: this.shared.homes,
      daemon: this.shared.daemon,
      log: this.log.child({ cmd: req.cmd, reqId: req.id }),
      signal: ac.signal,
      connectionId: this.id,
      requestId: req.id,
    };
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<typeof TIMED_OUT>((resolve) => {
      timer = setTimeout(() => resolve(TIMED_OUT), this.shared.requestTimeoutMs);
    });
    const shared = this.shared;
    const settle = shared.settle;
    shared.running++;
    const run = (async () => {
      try {
        shared.beforeCommand?.();
        return await handlerFor(shared.commands, req.cmd)(req.args, ctx);
      } finally {
        // A refused command may have changed something before it was refused.
        if (settle) await settle();
        if (--shared.running === 0) for (const w of shared.idleWaiters.splice(0)) w();
      }
    })();
    try {
      const result = await Promise.race([run, timeout]);
      if (result === TIMED_OUT) {
        ac.abort(new Error(`${req.cmd} timed out after ${this.shared.requestTimeoutMs} ms`));
        run.catch((err: unknown) => ctx.log.warn({ err }, 'control handler failed after its timeout'));
        ctx.log.warn({ code: 'TIMEOUT', ms: this.shared.requestTimeoutMs }, 'control request timed out');
        return errorReply(req.id, 'TIMEOUT', `${req.cmd} did not finish within ${this.shared.requestTimeoutMs} ms`);
      }
      ctx.log.debug({ ms: Date.now() - started }, 'control request done');
      return okReply(req.id, result === undefined ? null : result);
    } catch (err) {
      if (isHomesError(err)) {
        ctx.log.info({ code: err.code, ms: Date.now() - started }, `control request refused: ${err.message}`);
        return errorReply(req.id, err.code, err.message, Object.keys(err.details).length > 0 ? err.details : undefined);
      }
      ctx.log.error({ err }, 'control handler failed');
      return errorReply(req.id, 'INTERNAL', `internal error while running ${req.cmd}; see the daemon log`);
    } finally {
      clearTimeout(timer);
      if (this.inflight === ac) this.inflight = undefined;
    }
  }

  private armIdle(): void {
    this.clearIdle();
    if (this.closed || this.peerEnded) return;
    this.idleTimer = setTimeout(() => {
      this.log.debug({ ms: this.shared.idleTimeoutMs }, 'control connection idle; closing');
      this.sock.destroy();
    }, this.shared.idleTimeoutMs);
    this.idleTimer.unref();
  }

  private clearIdle(): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
  }

  private handleClose(): void {
    if (this.closed) return;
    this.closed = true;
    this.clearIdle();
    this.queue.length = 0;
    this.inflight?.abort(new Error('control connection closed'));
    this.onClose();
    this.log.debug({ requests: this.requests, ms: Date.now() - this.openedAt }, 'control connection closed');
  }
}

function extractId(raw: unknown): RequestId | undefined {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return undefined;
  const r = RequestId.safeParse((raw as { id?: unknown }).id);
  return r.success ? r.data : undefined;
}

function okReply(id: RequestId | undefined, data: unknown): Reply {
  return id === undefined ? { ok: true, data } : { id, ok: true, data };
}

function errorReply(id: RequestId | undefined, code: ErrorReply['code'], message: string, details?: Record<string, unknown>): ErrorReply {
  const r: ErrorReply = id === undefined ? { ok: false, code, message } : { id, ok: false, code, message };
  if (details !== undefined) r.details = details;
  return r;
}
