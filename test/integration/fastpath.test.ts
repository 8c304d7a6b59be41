// The native getattr/lookup fast path (binding patch 4, src/fuse/fastpath.ts)
// must change time, never behaviour. A random tree per profile is lstat'ed
// path by path through a daemon with the fast path and through one without,
// on the same backing, and every field must match.
import { spawn } from 'node:child_process';
import { readFileSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILTIN_PROFILES } from '../../src/policy/profiles.js';
import { canMount, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';

if (!canMount) console.warn(`fastpath integration suite skipped: ${skipReason}`);

const TREE = join(import.meta.dirname, 'fixtures', 'fastpath_tree.py');
const BASE = 300000 + Math.floor(Math.random() * 60) * 10000;
const OWNER = { uid: BASE + 17, gid: BASE + 17 };
const OWNERS = { from: BASE, to: BASE + 9999 };
// Every builtin profile, and one whose presentation is neither "asked" nor "owner".
const HOMES: Record<string, string> = { 't/home': 'home', 't/posix': 'posix', 't/scratch': 'scratch', 't/odd': 'odd' };
const PROFILES = { odd: { ...BUILTIN_PROFILES.home, chmod: 'allow', fileMode: 0o640, dirMode: 'asked', allowUserExec: true } };

function rewriteConfig(d: RunningDaemon, change: (c: Record<string, unknown>) => void): void {
  const file = join(d.dir, 'config.json');
  const c = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  change(c);
  writeFileSync(file, JSON.stringify(c));
}

async function fastPathStats(d: RunningDaemon): Promise<{ answered: number; fallbacks: number } | undefined> {
  const s = (await d.status()) as { native: { fastPath?: { answered: number; fallbacks: number } } };
  return s.native.fastPath;
}

type Row = [string, ...Array<number | string>];

async function lstatAll(paths: string[]): Promise<Map<string, Row>> {
  const r = await runAsync('python3', [TREE, 'stat'], { input: paths.join('\n') + '\n', timeoutMs: 60_000 });
  expect(r.stderr).toBe('');
  const rows = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as Row);
  return new Map(rows.map((row) => [row[0], row]));
}

/** Holds `held` open in every home (through the mount) until the returned function is called. */
async function holdOpen(d: RunningDaemon): Promise<() => Promise<void>> {
  const files = Object.keys(HOMES).map((h) => join(d.mount, h, 'held'));
  const code = `import os,sys\nfds=[os.open(p, os.O_RDWR) for p in sys.argv[1:]]\nprint('open', flush=True)\nsys.stdin.read()\n[os.close(f) for f in fds]`;
  const p = spawn('python3', ['-c', code, ...files], { stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    p.stdout.once('data', () => resolve());
    p.once('exit', (c) => reject(new Error(`holder exited with ${c}`)));
  });
  return () =>
    new Promise<void>((resolve) => {
      p.once('exit', () => resolve());
      p.stdin.end();
    });
}

describe.skipIf(!canMount)('native getattr fast path: identical answers with and without it', () => {
  let d: RunningDaemon;
  const paths: string[] = [];

  beforeAll(async () => {
    d = await startDaemon({
      create: Object.keys(HOMES),
      homes: Object.fromEntries(Object.entries(HOMES).map(([h, profile]) => [h, { owner: OWNER, profile }])),
      config: { owners: OWNERS, profiles: PROFILES, fuse: { attrTimeout: 0, entryTimeout: 0, negativeTimeout: 0, nativeFastPath: true } },
    });
    await d.stopKeep();
    let seed = 1 + Math.floor(Math.random() * 1e6);
    for (const h of Object.keys(HOMES)) {
      const r = await runAsync('python3', [TREE, 'build', d.backingOf(...(h.split('/') as [string, string])), String(seed++), String(OWNER.uid), String(OWNER.gid)]);
      expect(r.stderr).toBe('');
      const m = join(d.mount, h);
      for (const rel of r.stdout.trim().split('\n')) paths.push(join(m, rel));
      // names that do not exist, that only JS knows, or that lead through a file or a symlink
      for (const rel of ['', 'nope', 'd0/nope', 'f0/x', 'held/x', '.homesfs/status', '.homesfs/nope', 'sl4/x', 'x'.repeat(300), '.fuse_hidden0000000100000002', 'd0/../f1']) {
        paths.push(rel === '' ? m : `${m}/${rel}`);
      }
    }
    paths.push(d.mount, join(d.mount, 't'), join(d.mount, 'nope'), join(d.mount, 't', 'nope'));
  }, 60_000);

  afterAll(async () => {
    await d?.stop();
  });

  it('answers every path of a random tree per profile exactly as JavaScript does, open files included', async () => {
    const runs: Array<Map<string, Row>> = [];
    for (const fast of [true, false]) {
      rewriteConfig(d, (c) => ((c.fuse as Record<string, unknown>).nativeFastPath = fast));
      d = await startDaemon({ dir: d.dir });
      for (const h of Object.keys(HOMES)) writeFileSync(join(d.backing, h, 'held'), 'h'.repeat(5000));
      const release = await holdOpen(d);
      // Behind the daemon's back: the charged size (5000) is what the mount shows while the file is open.
      for (const h of Object.keys(HOMES)) truncateSync(join(d.backing, h, 'held'), 100);
      runs.push(await lstatAll(paths));
      await release();
      const stats = await fastPathStats(d);
      if (fast) {
        // The run did exercise the native path (and handed the rest to JS).
        expect(stats!.answered).toBeGreaterThan(paths.length / 2);
        expect(stats!.fallbacks).toBeGreaterThan(0);
      } else {
        expect(stats).toBeUndefined();
      }
      await d.stopKeep();
    }
    const [fast, js] = runs as [Map<string, Row>, Map<string, Row>];
    expect(fast.size).toBe(paths.length);
    let compared = 0;
    for (const p of paths) {
      let a = fast.get(p)!;
      let b = js.get(p)!;
      const rel = p.slice(d.mount.length).split('/').length;
      // Times of the rewritten file and of the daemon's own levels are not the tree's;
      // the status file is made up by JS at each start (its text says when).
      const keep = p.endsWith('/.homesfs/status') ? 4 : p.endsWith('/held') || rel < 4 ? 7 : a.length;
      a = a.slice(0, keep) as Row;
      b = b.slice(0, keep) as Row;
      expect(a, p).toEqual(b);
      compared++;
    }
    expect(compared).toBe(paths.length);
    for (const h of Object.keys(HOMES)) {
      const held = fast.get(join(d.mount, h, 'held'))!;
      expect(held[4], `${h}/held size`).toBe(5000);
    }
    // The differences the profiles make are visible (the comparison is not of two empty answers).
    const modes = new Set([...fast.values()].filter((r) => r.length > 2).map((r) => r[1]));
    expect(modes.size).toBeGreaterThan(8);
  }, 180_000);
});
