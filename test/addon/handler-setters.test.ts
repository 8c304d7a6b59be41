// The binding's handler setters (sys/napi_args.c hs_js_handler_tsfn): a
// JavaScript function once per process, refused with a clear error otherwise.
// In a child process: the handlers are the process's, once set never unset.
import { describe, expect, it } from 'vitest';
import { addonPath } from '../../src/fuse/binding.js';
import { runAsync } from '../helpers/daemon.js';

const SCRIPT = `
const a = require(process.argv[1]);
const out = [];
for (const [n, arg] of [['hs_fastpath_set_settle_handler', 1], ['hs_fastpath_set_settle_handler', () => {}], ['hs_fastpath_set_settle_handler', () => {}],
                        ['hs_fastpath_dp_set_write_handler', 'x'], ['hs_fastpath_dp_set_write_handler', () => {}], ['hs_fastpath_dp_set_write_handler', () => {}]]) {
  try { a[n](arg); out.push('ok'); } catch (e) { out.push(e.code + ': ' + e.message); }
}
console.log(JSON.stringify(out));`;

describe("the binding's handler setters", () => {
  it('take a function once: not a function is EINVAL, a second one EEXIST, and neither keeps the process alive', async () => {
    const r = await runAsync(process.execPath, ['-e', SCRIPT, addonPath('homesfs.node')], { timeoutMs: 20_000 });
    // The process ended by itself: the thread-safe functions are unref'd.
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual([
      'EINVAL: setSettleHandler(fn): fn is a function',
      'ok',
      'EEXIST: setSettleHandler: a handler is already set',
      'EINVAL: setWriteHandler(fn): fn is a function',
      'ok',
      'EEXIST: setWriteHandler: a handler is already set',
    ]);
  });
});
