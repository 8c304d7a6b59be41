// Cost of the per-request instrumentation in the op table (src/fuse/ops.ts): one start() and
// one observe() per request, against the same loop without them.
// Usage: npm run build && node bench/metrics-overhead.mjs [iterations]
import { OpMetrics } from '../dist/metrics/ops.js';

const N = Number(process.argv[2] ?? 5_000_000);
const OPS = ['getattr', 'write', 'read', 'create', 'readdir', 'release', 'open', 'flush'];
const m = new OpMetrics();

function bare() {
  let x = 0;
  for (let i = 0; i < N; i++) x += OPS[i & 7].length;
  return x;
}
function instrumented() {
  let x = 0;
  for (let i = 0; i < N; i++) {
    const t0 = m.start();
    x += OPS[i & 7].length;
    m.observe(OPS[i & 7], t0, false);
  }
  return x;
}
const median = (a) => a.sort((p, q) => p - q)[a.length >> 1];
const time = (fn) => {
  const t = process.hrtime.bigint();
  fn();
  return Number(process.hrtime.bigint() - t) / N;
};
for (let i = 0; i < 2; i++) (bare(), instrumented()); // warm up
const b = [], s = [];
for (let r = 0; r < 7; r++) (b.push(time(bare)), s.push(time(instrumented)));
const heapBefore = process.memoryUsage().heapUsed;
instrumented();
const heapAfter = process.memoryUsage().heapUsed;
console.log(`per request: bare ${median(b).toFixed(1)} ns, instrumented ${median(s).toFixed(1)} ns, overhead ${(median(s) - median(b)).toFixed(1)} ns (N=${N}, median of 7)`);
console.log(`heap growth over ${N} observations: ${((heapAfter - heapBefore) / 1024).toFixed(0)} KiB`);
