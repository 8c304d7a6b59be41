import { afterEach, describe, expect, it } from 'vitest';
import { canMount, runAs, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';
import { readdirTypesScript } from '../helpers/dirent.js';
import { ownerRange } from '../helpers/owner-ids.js';

if (!canMount) console.warn(`metadata-paths integration suite skipped: ${skipReason}`);

/** this file's own owner ids (helpers/owner-ids.ts) */
const BASE = ownerRange(import.meta.filename).from;
const OWNER = { uid: BASE + 61, gid: BASE + 61 };


describe.skipIf(!canMount)('metadata paths: d_type in listings, metadata syscalls on or off the JS thread', () => {
  let d: RunningDaemon | undefined;
  afterEach(async () => {
    await d?.stop();
    d = undefined;
  });

  it.each([true, false])('with syncMetadata %s, real tools see the same tree, and listings carry d_type', async (syncMetadata) => {
    d = await startDaemon({ create: ['t/p'], homes: { 't/p': { owner: OWNER, profile: 'posix' } }, config: { syncMetadata } });
    const h = d.home('t', 'p');
    const script = [
      `cd ${h}`,
      'mkdir -p a/b/c && printf one > a/f1 && printf two > a/b/f2 && ln -s f1 a/l',
      'mv a/b/f2 a/b/c/f3 && cp a/f1 a/b/c/f4 && rm a/f1 && touch -d @1000000000 a/b/c/f4',
      'find . | sort | tr "\\n" " "; echo',
      'stat -c "%n %s %Y" a/b/c/f3 a/b/c/f4',
      `python3 -c "${readdirTypesScript(`${h}/a`).replace(/"/g, '\\"')}"`,
      'rm -rf a && ls -A | wc -l',
    ].join('\n');
    const r = await runAs(OWNER.uid, OWNER.gid, script);
    expect(r.stderr).toBe('');
    const lines = r.stdout.trim().split('\n');
    expect(lines[0]!.trim()).toBe('. ./a ./a/b ./a/b/c ./a/b/c/f3 ./a/b/c/f4 ./a/l');
    expect(lines[1]).toMatch(/^a\/b\/c\/f3 3 \d+$/);
    expect(lines[2]).toBe('a/b/c/f4 3 1000000000');
    // DT_DIR 4, DT_LNK 10
    expect(JSON.parse(lines[3]!)).toEqual({ '.': 4, '..': 4, b: 4, l: 10 });
    expect(lines[4]).toBe('0');
    const st = (await d.status()) as { homes: Array<{ key: string; bytes: number; inodes: number }> };
    expect(st.homes.find((x) => x.key === 'p')).toMatchObject({ bytes: 0, inodes: 0 });
  });
});
