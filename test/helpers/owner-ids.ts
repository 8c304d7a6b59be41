import { randomInt } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Owner uids (and gids, the same numbers) of the test files. Each file takes
 * every owner it names, and every range it gives a daemon to allocate from,
 * out of a block of its own, so no two files ever share an id: a process or a
 * file that one leaves behind never looks like another's owner (a busy
 * check, the processes a delete reports, a backing file's owner).
 *
 * A file's slot is its place among all test files (their paths under test/,
 * sorted): two files never have the same one. Inside the slot, each run takes
 * one of LANES blocks at random, so that runs of other checkouts on the same
 * machine at the same time rarely meet either. Blocks start at FIRST: above
 * the daemon's default range (200000–299999), the Kubernetes manifests' range
 * that deploy.test.ts runs as shipped (65536–524287), and every host account.
 * startDaemon gives a daemon its file's range unless the test says otherwise;
 * test/unit/owner-ids.test.ts checks that no test writes an owner id as a
 * number (host accounts aside).
 */
export const OWNER_BLOCK = 1000;
export const LANES = 100;
export const FIRST = 1_000_000;

export interface OwnerRange {
  from: number;
  to: number;
}

const TEST_ROOT = resolve(import.meta.dirname, '..');

/** Every test file, as its path under test/, sorted: a file's index is its slot. */
export function testFiles(dir = TEST_ROOT): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.isDirectory()) out.push(...testFiles(join(dir, e.name)));
    else if (e.name.endsWith('.test.ts')) out.push(relative(TEST_ROOT, join(dir, e.name)));
  }
  return out.sort();
}

/** The block of `slot` in `lane`. PURE. */
export function ownerBlock(slot: number, lane: number): OwnerRange {
  const from = FIRST + (slot * LANES + lane) * OWNER_BLOCK;
  return { from, to: from + OWNER_BLOCK - 1 };
}

/** This run's lane (one per process: a file and the helpers it calls agree). */
const LANE = randomInt(LANES);
let slots: Map<string, number> | undefined;

/** The owner ids of the test file `file` (its path or file: URL, e.g. `import.meta.filename`). */
export function ownerRange(file: string): OwnerRange {
  slots ??= new Map(testFiles().map((f, i) => [f, i]));
  const rel = relative(TEST_ROOT, file.startsWith('file:') ? fileURLToPath(file) : file);
  const slot = slots.get(rel);
  if (slot === undefined) throw new Error(`${file} is not a test file under ${TEST_ROOT}: it has no owner range`);
  return ownerBlock(slot, LANE);
}
