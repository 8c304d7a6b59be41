import { fstatSync, closeSync } from 'node:fs';
import { z } from 'zod';
import type { FsContext } from './context.js';
import type { FileHandle, OpenInode } from './state.js';

/**
 * What of the fs context a live upgrade carries to the successor, beside the
 * session (node table, open directories: native/src/session/) and the
 * descriptors: every open file under its kernel handle number, with what a
 * handle knows that its descriptor does not (its caller's uid for the caps,
 * write and append, a text file's cut character), the status files' texts,
 * the names of files unlinked while open, and the counters that make the
 * successor's numbers the ones the kernel already holds.
 *
 * Not carried: ledgers (the successor's start-up scan builds them from the
 * disk, and adds the bytes of files unlinked while open, which no name
 * reaches: scan.ts), and everything the binding is told by publication (the
 * successor publishes its homes and these handles anew).
 */

const HandedFile = z
  .object({
    fh: z.number().int().positive(),
    home: z.string().regex(/^[^/]+\/[^/]+$/),
    writable: z.boolean(),
    append: z.boolean(),
    uid: z.number().int().min(0),
    rel: z.array(z.string()),
    linked: z.boolean(),
    incompleteTail: z.boolean(),
    leftIncompleteTail: z.boolean(),
  })
  .strict();

export const HandedFs = z
  .object({
    files: z.array(HandedFile),
    status: z.array(z.tuple([z.number().int(), z.string()])),
    serials: z.array(z.tuple([z.string(), z.string().regex(/^\d+$/)])),
    /** hidden name (virtual path) -> the handle number of one of its inode's handles */
    hidden: z.array(z.tuple([z.string(), z.number().int().positive()])),
    nextFh: z.number().int().min(0),
    /**
     * The session's map of a dead daemon's handles to ours (base64 of its
     * u64 pairs, src/resume.ts), present only after a crash's reopens: the
     * successor maps them to the handles it adopts here.
     */
    deadHandles: z.string().base64().optional(),
    /** every loaded home's ledger, exact at the pause (home-registry.ts adoptLedgers): the successor scans none of them */
    ledgers: z
      .array(z.object({ home: z.string(), ino: z.string().regex(/^\d+$/), bytes: z.number().int().min(0), inodes: z.number().int().min(0) }).strict())
      .optional(),
  })
  .strict();
export type HandedFs = z.infer<typeof HandedFs>;

/**
 * The successor parses the handed-over state inside the pause, and zod's
 * first parses of a schema run cold: 22 ms for 1,000 files, 4-8 ms once
 * warm (the 2-core test machine). Warmed here, before the pause, on a
 * made-up state of the same shape.
 */
export function warmHandedFs(): void {
  const files = Array.from({ length: 200 }, (_, i) => ({
    fh: i + 1,
    home: 'warm/up',
    writable: i % 2 === 0,
    append: i % 3 === 0,
    uid: i,
    rel: ['d', `f${i}`],
    linked: i % 5 !== 0,
    incompleteTail: false,
    leftIncompleteTail: false,
  }));
  const ledgers = Array.from({ length: 200 }, (_, i) => ({ home: `warm/h${i}`, ino: String(1000 + i), bytes: i * 4096, inodes: i }));
  for (let i = 0; i < 5; i++) HandedFs.parse({ files, status: [[1, 'eA==']], serials: [['warm/up', '1']], hidden: [['/warm/up/.f', 1]], nextFh: 201, ledgers });
}

/**
 * The fs context's part of a handover, and the descriptors of its files (in
 * the order of `files`; they stay open here). Called with the session
 * paused: no request is in flight, and everything the binding queued for
 * JavaScript (RELEASEs, native opens) was taken first, so the table is whole.
 */
export function exportFs(ctx: FsContext): { state: HandedFs; fds: number[] } {
  ctx.settle();
  const files: HandedFs['files'] = [];
  const fds: number[] = [];
  const anyHandle = new Map<object, number>();
  for (const h of ctx.handles.values()) {
    files.push({
      fh: h.fh,
      home: h.home.backing.id,
      writable: h.writable,
      append: h.append,
      uid: h.slot.uid,
      rel: [...h.rel],
      linked: !h.inode.unlinked,
      incompleteTail: h.inode.incompleteTail,
      leftIncompleteTail: h.leftIncompleteTail,
    });
    fds.push(h.fd);
    anyHandle.set(h.inode, h.fh);
  }
  const hidden: HandedFs['hidden'] = [];
  for (const [path, node] of ctx.hidden) {
    const fh = anyHandle.get(node.inode);
    if (fh !== undefined) hidden.push([path, fh]);
  }
  return {
    state: {
      files,
      status: ctx.statusFiles.entries().map(([fh, text]) => [fh, text.toString('base64')]),
      serials: ctx.statusFiles.serials(),
      hidden,
      nextFh: ctx.handles.nextNumber,
      ledgers: ctx.handLedgers(),
    },
    fds,
  };
}

/**
 * The successor takes the files over under the numbers the kernel holds,
 * before its session serves a request. A file whose home cannot be served
 * any more is closed and its number kept out of use until the kernel's
 * RELEASE of it (every request on it is EBADF). -> files adopted, refused.
 */
export async function adoptFs(ctx: FsContext, s: HandedFs, fds: readonly number[]): Promise<{ adopted: number; refused: number }> {
  // Before any home is opened here (the files' homes are): each takes its ledger instead of a scan.
  if (s.ledgers) ctx.adoptLedgers(s.ledgers);
  ctx.statusFiles.restoreSerials(s.serials);
  for (const [fh, text] of s.status) ctx.statusFiles.restore(fh, Buffer.from(text, 'base64'));
  const byFh = new Map<number, FileHandle>();
  let refused = 0;
  for (let i = 0; i < s.files.length; i++) {
    const f = s.files[i]!;
    const fd = fds[i]!;
    try {
      byFh.set(f.fh, await adoptFile(ctx, f, fd));
    } catch (err) {
      refused++;
      ctx.deps.log.warn({ fh: f.fh, home: f.home, err: (err as Error).message }, 'a handed-over open file could not be taken over: its requests get EBADF');
      closeSync(fd);
      ctx.handles.bury(f.fh);
    }
  }
  const orphaned = new Set<OpenInode>();
  for (const [path, fh] of s.hidden) {
    const h = byFh.get(fh);
    if (!h) continue;
    ctx.hidden.set(path, { inode: h.inode, home: h.home });
    // A hidden file's extra link is its orphan (hidden.ts): its handles' fgetattr is JavaScript's.
    h.inode.orphaned = true;
    orphaned.add(h.inode);
  }
  if (orphaned.size > 0) for (const h of byFh.values()) if (orphaned.has(h.inode)) ctx.deps.attrs?.handle(h);
  ctx.handles.resumeAt(s.nextFh);
  return { adopted: byFh.size, refused };
}

async function adoptFile(ctx: FsContext, f: HandedFs['files'][number], fd: number): Promise<FileHandle> {
  const [tenant, key] = f.home.split('/') as [string, string];
  const hs = await ctx.home({ tenant, key });
  const st = fstatSync(fd, { bigint: true });
  const inode = ctx.adoptInode(hs, st.dev, st.ino, Number(st.size), f.linked);
  const slot = ctx.openFiles.adopt(hs, f.uid);
  let h: FileHandle;
  try {
    h = ctx.handles.claim(f.fh, (fh) => ({
      fh,
      fd,
      home: hs,
      inode,
      writable: f.writable,
      append: f.append,
      rel: f.rel,
      leftIncompleteTail: f.leftIncompleteTail,
      jsFlush: false,
      slot,
      published: 0,
    }));
  } catch (err) {
    slot.release();
    throw err;
  }
  inode.handles++;
  if (f.writable) inode.writers++;
  inode.fds.add(fd);
  if (f.incompleteTail) inode.incompleteTail = true;
  ctx.gateFlush(h);
  ctx.publishData(h);
  ctx.deps.attrs?.handle(h);
  return h;
}
