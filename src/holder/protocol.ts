/**
 * The holder's wire format (src/holder/holder.ts serves it, client.ts speaks
 * it): one JSON message per step on the handover channel's root-only
 * SOCK_SEQPACKET socket (src/fuse/handover-channel.ts), descriptors riding
 * in the same message (SCM_RIGHTS). Pure: parsing only, no I/O.
 *
 *   daemon (serving)   REGISTER {reg, journal: N} + [fuse, init memfd, N journal memfds] ─▶ OK
 *   daemon (starting)  CLAIM {backing, mount, pid} ─▶ KEPT {reg, journal: N} + copies of the same
 *                                                     | NONE (nothing held) | REFUSED {reason}
 *   daemon (stopping)  RELEASE {backing, mount, pid} ─▶ OK, and the holder exits
 *   homesctl, tests    STATUS ─▶ {holder, registered, daemonPid, daemonAlive, generation}
 *   anything else      ─▶ ERROR {error}; the holder serves on
 */
import path from 'node:path';
import { z } from 'zod';

export const HOLDER_PROTOCOL = 1;
/** SCM_RIGHTS carries 253 descriptors a message: the session's, INIT's, and the journal's. */
export const MAX_JOURNAL_FDS = 250;

/** Beside the admin socket, in the directory the daemon keeps root-only. */
export function holderSocket(config: { socket: string }): string {
  return path.join(path.dirname(config.socket), 'holder.sock');
}

export function holderLog(config: { socket: string }): string {
  return path.join(path.dirname(config.socket), 'holder.log');
}

const Abs = z.string().min(1).max(4096).refine((p) => path.isAbsolute(p), { message: 'an absolute path' });
const Pid = z.number().int().min(1).max(0x3fffffff);

/** What a serving daemon tells the holder of its session; handed back as is to the claimer. */
export const Registration = z
  .object({
    backing: Abs,
    mount: Abs,
    configPath: z.string().max(4096).nullable(),
    pid: Pid,
    generation: z.number().int().min(1),
    /** the journal's epoch (opaque here) */
    epoch: z.number().int().min(0),
    /** the session's request size */
    bufsize: z.number().int().min(1).max(1 << 30),
    /** the daemon's build (src/build-id.ts) */
    build: z.string().max(200),
  })
  .strict();
export type Registration = z.infer<typeof Registration>;

const Proto = z.literal(HOLDER_PROTOCOL);
const Tree = { backing: Abs, mount: Abs, pid: Pid };

export const Request = z.discriminatedUnion('op', [
  z.object({ op: z.literal('register'), protocol: Proto, reg: Registration, journal: z.number().int().min(0).max(MAX_JOURNAL_FDS) }).strict(),
  z.object({ op: z.literal('claim'), protocol: Proto, ...Tree }).strict(),
  z.object({ op: z.literal('release'), protocol: Proto, ...Tree }).strict(),
  z.object({ op: z.literal('status'), protocol: Proto }).strict(),
]);
export type Request = z.infer<typeof Request>;

/** A request, or why it is not one (one line, for the ERROR reply). */
export function parseRequest(msg: unknown): Request | { error: string } {
  const r = Request.safeParse(msg);
  if (r.success) return r.data;
  return { error: `not a holder request: ${r.error.issues.map((i) => `${i.path.join('.') || '(message)'}: ${i.message}`).join('; ')}`.slice(0, 500) };
}

/** The descriptors of a registration, in the order they travel. */
export function fdCount(journal: number): number {
  return 2 + journal;
}

export interface HolderStatus {
  holder: number;
  registered: boolean;
  daemonPid: number | null;
  /** the registered daemon still runs (its pidfd has not polled readable) */
  daemonAlive: boolean | null;
  generation: number | null;
  mount: string | null;
}

/** Same tree: the paths as the daemon resolves its configuration's. */
export function sameTree(a: { backing: string; mount: string }, b: { backing: string; mount: string }): string | null {
  if (path.resolve(a.backing) !== path.resolve(b.backing)) return `backing ${a.backing} is not the held session's (${b.backing})`;
  if (path.resolve(a.mount) !== path.resolve(b.mount)) return `mount ${a.mount} is not the held session's (${b.mount})`;
  return null;
}
