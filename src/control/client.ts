import net from 'node:net';
import { LineDecoder } from './framing.js';
import { Reply, type RequestInput } from './protocol.js';

/** Why a request got no usable reply (as opposed to an error reply from the daemon). */
export type ControlClientErrorKind = 'connect' | 'timeout' | 'closed' | 'protocol';

export class ControlClientError extends Error {
  readonly kind: ControlClientErrorKind;
  constructor(kind: ControlClientErrorKind, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ControlClientError';
    this.kind = kind;
  }
}

export interface ControlRequestOptions {
  /** Whole exchange (connect, send, reply) must finish within this. */
  timeoutMs: number;
  /** Largest reply line accepted. Default 64 MiB (replies, e.g. `list`, can be large). */
  maxReplyBytes?: number;
}

/**
 * One request, one reply: connect to the control socket, send `request` as a
 * line, read one reply line, close. Resolves with the reply (ok or error);
 * rejects with `ControlClientError` when there is no usable reply.
 */
export function controlRequest(socketPath: string, request: RequestInput, options: ControlRequestOptions): Promise<Reply> {
  const decoder = new LineDecoder(options.maxReplyBytes ?? 64 * 1024 * 1024);
  return new Promise<Reply>((resolve, reject) => {
    let settled = false;
    const sock = net.createConnection(socketPath);
    const finish = (err: ControlClientError | null, reply?: Reply) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      if (err) reject(err);
      else resolve(reply!);
    };
    const timer = setTimeout(
      () => finish(new ControlClientError('timeout', `no reply from ${socketPath} within ${options.timeoutMs} ms`)),
      options.timeoutMs,
    );

    let connected = false;
    sock.once('connect', () => {
      connected = true;
      sock.write(JSON.stringify(request) + '\n');
    });
    sock.on('error', (err: NodeJS.ErrnoException) => {
      const kind: ControlClientErrorKind = connected ? 'closed' : 'connect';
      const what = kind === 'connect' ? `cannot connect to ${socketPath}` : `connection to ${socketPath} failed`;
      finish(new ControlClientError(kind, `${what}: ${err.code ?? err.message}`, { cause: err }));
    });
    const onEvents = (events: ReturnType<LineDecoder['push']>) => {
      for (const ev of events) {
        if (ev.kind === 'too_long') {
          finish(new ControlClientError('protocol', `reply from ${socketPath} exceeds ${ev.maxBytes} bytes`));
          return;
        }
        if (ev.line.trim() === '') continue;
        let raw: unknown;
        try {
          raw = JSON.parse(ev.line);
        } catch (err) {
          finish(new ControlClientError('protocol', `reply from ${socketPath} is not JSON: ${(err as Error).message}`, { cause: err }));
          return;
        }
        const parsed = Reply.safeParse(raw);
        if (!parsed.success) {
          finish(new ControlClientError('protocol', `reply from ${socketPath} is malformed: ${parsed.error.issues.map((i) => i.message).join('; ')}`));
          return;
        }
        finish(null, parsed.data as Reply);
        return;
      }
    };
    sock.on('data', (chunk: Buffer) => onEvents(decoder.push(chunk)));
    sock.on('end', () => {
      onEvents(decoder.end());
      finish(new ControlClientError('closed', `${socketPath} closed the connection without a reply`));
    });
  });
}
