/**
 * The node table's journal (native/src/handover/nodes_journal.c) as the
 * daemon holds it: two memfds the session appends every change of its node
 * table to, which the holder keeps beside the /dev/fuse descriptor, so that
 * a daemon started after this one died rebuilds the table the kernel still
 * refers to (src/resume.ts). Opened only with crash survival on: without a
 * holder nobody would read it.
 */

import { closeSync } from 'node:fs';
import type { AddonRaw } from './addon-raw.js';

/** The addon's journal and handle-epoch exports. */
export type JournalRaw = Pick<AddonRaw, 'hs_handover_journal_open' | 'hs_handover_journal_recover' | 'hs_handover_journal_follow' | 'hs_handover_journal_follow_finish' | 'hs_handover_journal_follow_drop' | 'hs_handover_journal_gen' | 'hs_session_fh_epoch' | 'hs_handover_journal_epoch' | 'hs_handover_journal_recovered'>;

/** What a recovery read and how long its two parts took (nodes_journal.h: hs_journal_recovered). */
export interface JournalRecovery {
  snapshotNodes: number;
  snapshotMiB: number;
  records: number;
  logMiB: number;
  importMs: number;
  replayMs: number;
  /** the recovering thread's CPU time for both (a loaded machine inflates the wall times) */
  cpuMs: number;
}

/** The last recovery's figures, for the resumed daemon's log. */
export function journalRecovery(raw: JournalRaw): JournalRecovery {
  const [snapBytes, snapNodes, logBytes, records, importNs, replayNs, cpuNs] = raw.hs_handover_journal_recovered() as [number, number, number, number, number, number, number];
  const mib = (b: number) => Math.round((b / 1048576) * 10) / 10;
  const ms = (ns: number) => Math.round(ns / 1e5) / 10;
  return { snapshotNodes: snapNodes, snapshotMiB: mib(snapBytes), records, logMiB: mib(logBytes), importMs: ms(importNs), replayMs: ms(replayNs), cpuMs: ms(cpuNs) };
}

let fds: number[] = [];

/** Starts journaling into two new memfds (a snapshot of the table as it is, then every change). */
export function openJournal(raw: JournalRaw): void {
  const r = raw.hs_handover_journal_open();
  if (typeof r === 'number') throw new Error(`the node table's journal could not be opened: errno ${-r}`);
  fds = [...r];
  // From its first record on, the journal names the epoch this daemon's handles carry.
  storeEpoch(raw, raw.hs_session_fh_epoch());
}

/**
 * Handle epochs have one owner: the journal's header, in the memfds the
 * keeper holds. Every daemon that serves a session with a new epoch stores
 * it there before the session reads its first request (resume.ts), and a
 * daemon that opens a journal stores its own at once; the keeper's
 * registration comes later (after the sockets), so a daemon that dies
 * before registering still leaves its epoch where the next one looks.
 */
export function storeEpoch(raw: JournalRaw, epoch: number): void {
  const r = raw.hs_handover_journal_epoch(epoch);
  if (r !== epoch) throw new Error(`the epoch could not be stored in the node table's journal: ${r < 0 ? `errno ${-r}` : `it holds ${r}`}`);
}

/**
 * Rebuilds the node table from a dead daemon's journal (the table must be
 * fresh: nothing served yet) and journals on into the same memfds, which
 * are this process's from now on. -> the epoch its header holds (0: a
 * journal written before the header held one).
 */
export function recoverJournal(raw: JournalRaw, kept: number[]): number {
  // A third descriptor is the ledgers' area (fs/ledger-area.ts), the daemon's to map.
  if (kept.length !== 2 && kept.length !== 3) throw new Error(`the holder kept ${kept.length} journal descriptors, not 2 or 3: the node table cannot be rebuilt`);
  const r = raw.hs_handover_journal_recover(kept[0]!, kept[1]!);
  if (r < 0) throw new Error(`the node table's journal could not be replayed: errno ${-r}`);
  fds = kept.slice(0, 2);
  return r;
}

/** The journal's memfds to hand the holder (this process's: copies go); none when not journaling. */
export function journalFds(): number[] {
  return fds;
}

/**
 * A live upgrade's successor, before it asks for the pause: the serving
 * daemon's table loaded from its journal (the memfds it sent, closed here:
 * the addon keeps them mapped). -> the generation followed, for the serving
 * daemon to compare with its own, or the errno (the table is then handed
 * over as before).
 */
export function followJournal(raw: JournalRaw, fds: readonly number[]): { gen: number } | { errno: number } {
  try {
    if (fds.length !== 2) return { errno: 22 };
    const r = raw.hs_handover_journal_follow(fds[0]!, fds[1]!);
    return r < 0 ? { errno: -r } : { gen: r };
  } finally {
    for (const fd of fds) closeSync(fd);
  }
}

/** The generation this daemon's journal writes now, or null (no journal). */
export function journalGen(raw: JournalRaw): number | null {
  const g = raw.hs_handover_journal_gen();
  return g > 0 ? g : null;
}

/** The epoch this daemon's file handles carry (session/handles.h), told to the holder with each registration. */
export function journalEpoch(raw: JournalRaw): number {
  return raw.hs_session_fh_epoch();
}
