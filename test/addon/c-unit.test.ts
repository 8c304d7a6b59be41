// The native layer's C unit tests (native/test: utf8.c, dirhandles.c, the
// single-reader lead of channel.c, dataplane.c's handle table, fastpath_write.c's
// write decision, the fast path's references, the session's node table and
// the handover primitives: the node table's and open directories' export and
// import, the root-only handover socket; the filter of resent requests and
// dead handles, handles.c; the fd store's notifications, sdstore.c), built with AddressSanitizer and UndefinedBehaviorSanitizer,
// then with ThreadSanitizer, and run by one command, `npm run test:native-c`
// (make -C native/test).
// No mount, no Node inside.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/daemon.js';

// Two full builds (one of them ThreadSanitizer's) of every test: about a minute on a quiet
// 2-core machine, several under load.
describe('native C unit tests', () => {
  it('build and pass, each test reported', () => {
    const r = spawnSync('make', ['-C', join(ROOT, 'native', 'test'), '--no-print-directory'], { encoding: 'utf8', timeout: 480_000 });
    const out = `${r.stdout}${r.stderr}`;
    const ok = out.split('\n').filter((l) => l.startsWith('ok - '));
    const failed = out.split('\n').filter((l) => l.startsWith('FAIL - '));
    // the whole output on failure: each failed check names its file:line
    expect({ code: r.status, failed }, out).toEqual({ code: 0, failed: [] });
    for (const file of ['test_utf8.c', 'test_dirhandles.c', 'test_lead.c', 'test_dataplane.c', 'test_fastpath_wl.c', 'test_fastpath_refs.c']) {
      expect(ok.filter((l) => l.includes(`${file}:`)).length, `${file} ran no test:\n${out}`).toBeGreaterThan(3);
    }
    for (const file of ['test_nodes.c', 'test_nodes_handover.c', 'test_dirs_handover.c', 'test_handover.c', 'test_sdstore.c']) {
      expect(ok.filter((l) => l.includes(`${file}:`)).length, `${file} ran no test:\n${out}`).toBeGreaterThanOrEqual(3);
    }
    // once under ASan and UBSan, once under ThreadSanitizer
    expect(out).toContain('# native unit tests (build): all passed');
    expect(out).toContain('# native unit tests (build-tsan): all passed');
    expect(out).not.toMatch(/AddressSanitizer|runtime error:|ThreadSanitizer/);
  }, 490_000);
});
