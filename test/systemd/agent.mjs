// An agent in a home, run inside the systemd container as the home's owner
// (scripts/test-systemd.sh, test/systemd/scenario.mjs), its working directory in the home.
//   writer: appends "<n>\n" to FILE and fsyncs, every ~10 ms; n counts the lines fsync acknowledged.
//   reader: every ~20 ms reads FILE whole, lists the directory and stats it.
// Every failed call is counted (errors, lastError); the longest a call took is
// maxWaitMs. Progress goes to OUT/<mode>.progress; on SIGTERM the summary goes to
// OUT/<mode>.json and it exits 0.
import { closeSync, fsyncSync, openSync, readdirSync, readFileSync, statSync, writeFileSync, writeSync, constants } from 'node:fs';

const [mode, file, out] = process.argv.slice(2);
let n = 0;
let errors = 0;
let lastError = '';
let maxWaitMs = 0;
let rounds = 0;
let stop = false;
process.on('SIGTERM', () => (stop = true));
const timed = (f) => {
  const t0 = Date.now();
  try {
    return f();
  } catch (err) {
    errors++;
    lastError = `${new Date().toISOString()} ${err.code ?? ''} ${err.message}`;
    return undefined;
  } finally {
    maxWaitMs = Math.max(maxWaitMs, Date.now() - t0);
  }
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const fd = mode === 'writer' ? openSync(file, constants.O_WRONLY | constants.O_CREAT | constants.O_APPEND, 0o600) : null;
let lastProgress = 0;
while (!stop) {
  if (mode === 'writer') {
    const ok = timed(() => {
      writeSync(fd, `${n}\n`);
      fsyncSync(fd);
      return true;
    });
    if (ok) n++;
    await sleep(10);
  } else {
    timed(() => readFileSync(file));
    timed(() => readdirSync('.'));
    timed(() => statSync('.'));
    rounds++;
    await sleep(20);
  }
  if (Date.now() - lastProgress > 100) {
    lastProgress = Date.now();
    writeFileSync(`${out}/${mode}.progress`, JSON.stringify({ lines: n, rounds, errors, lastError, maxWaitMs }));
  }
}
if (fd !== null) closeSync(fd);
writeFileSync(`${out}/${mode}.json`, JSON.stringify({ lines: n, rounds, errors, lastError, maxWaitMs }));
process.exit(0);
