import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { controlRequest } from '../../src/control/client.js';
import { canMount, skipReason, SYSTEM_PATH } from '../helpers/daemon.js';
import { ownerRange } from '../helpers/owner-ids.js';
import { ownerSuite } from '../helpers/owner-suite.js';

/**
 * A profile switch reaches every open handle before `set-profile` answers,
 * including handles the binding opened or created natively while the command
 * was on its way (not adopted by the daemon yet): once the switch to the
 * UTF-8-only profile has answered, no write of invalid bytes succeeds, on any
 * descriptor, opened before or after.
 */

/** this file's own owner ids (helpers/owner-ids.ts) */
const OWNERS = ownerRange(import.meta.filename);
const BASE = OWNERS.from;
const U = { uid: BASE + 5, gid: BASE + 5 };
const T = 'ps';
const ROUNDS = 24;

if (!canMount) console.warn(`policy-switch integration suite skipped: ${skipReason}`);

// In a subdirectory (a create in the home's root makes the kernel ask the daemon about the root, and any
// request lets the daemon catch up on the binding's handles): creates a file every 10 ms, natively, up to
// 8, and writes two bytes 0xFF into each; then waits (the daemon hears nothing and polls the binding's
// queue only every second or so). On 'burst D' it creates one a millisecond for D ms, then does nothing.
// On 'mark' (sent once set-profile answered) every held descriptor, newest first, and a new file are
// written 0xFF at offset 1 (no growth, so no byte budget is consulted): each result is printed. Then 'go'
// starts over, 'end' exits.
const WRITER = `import os,sys,errno,select,fcntl,time
h=os.path.join(sys.argv[1], 'd')
os.makedirs(h, exist_ok=True)
fcntl.fcntl(0, fcntl.F_SETFL, fcntl.fcntl(0, fcntl.F_GETFL) | os.O_NONBLOCK)
n=0; buf=b''
def poll():
  global buf
  try:
    chunk=os.read(0, 100)
    if not chunk: sys.exit(0)
    buf+=chunk
  except BlockingIOError: pass
def line():
  global buf
  while b'\\n' not in buf:
    select.select([0],[],[],None); poll()
  l,buf=buf.split(b'\\n',1)
  return l.decode()
def res(fd):
  try:
    os.pwrite(fd, b'\\xff', 1); return 'ok'
  except OSError as e: return errno.errorcode[e.errno]
while True:
  held=[]; made=[]
  print('creating', flush=True)
  def make():
    global n
    p=os.path.join(h, 'w%d' % n); n+=1
    try:
      fd=os.open(p, os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o600)
    except OSError: return
    held.append(fd); made.append(p)
    # Two bytes now: the overwrites below (at 1) never grow the file, so no byte budget is asked about.
    try: os.pwrite(fd, b'\\xff\\xff', 0)
    except OSError: pass
  while b'\\n' not in buf:
    if len(held) < 8: make()
    time.sleep(0.01)
    poll()
  cmd=line().split()
  assert cmd[0]=='burst'
  end=time.monotonic()+float(cmd[1])/1000
  while len(held) < 30 and time.monotonic() < end:
    make(); time.sleep(0.001)
  assert line()=='mark'
  # Newest first: a write that reaches the daemon lets it catch up on every handle, so the ones
  # the binding may still hold on its own come first.
  out=[res(fd) for fd in reversed(held)]
  p=os.path.join(h, 'after%d' % n); n+=1
  fd=os.open(p, os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o600); held.append(fd); made.append(p)
  out.append(res(fd))
  print(' '.join(out), flush=True)
  for fd in held: os.close(fd)
  for p in made: os.unlink(p)
  if line()=='end': break
`;

type Stats = { fastPath: { createAnswered: number; writesDecided: number } };

describe.skipIf(!canMount)('set-profile reaches handles the binding opened natively before it answers', () => {
  const s = ownerSuite({ homes: { [`${T}/sw`]: { owner: U, profile: 'home' } }, config: { owners: OWNERS } });
  const native = async (): Promise<Stats> => ((await s.d.status()) as { native: Stats }).native;

  it(`over ${ROUNDS} switches to scratch under a writer creating files natively, every write of 0xFF after the reply fails with EILSEQ`, async () => {
    const before = await native();
    const p = spawn('setpriv', [`--reuid=${U.uid}`, `--regid=${U.gid}`, '--clear-groups', 'python3', '-c', WRITER, s.d.home(T, 'sw')], {
      stdio: ['pipe', 'pipe', 'inherit'],
      env: { PATH: SYSTEM_PATH },
    });
    const exited = new Promise((resolve) => p.once('exit', resolve));
    const lines = createInterface({ input: p.stdout });
    const queue: string[] = [];
    const waiters: Array<(l: string) => void> = [];
    lines.on('line', (l) => (waiters.length > 0 ? waiters.shift()!(l) : queue.push(l)));
    let gone = false;
    void exited.then(() => {
      gone = true;
      for (const w of waiters.splice(0)) w('exited');
    });
    const next = () => new Promise<string>((resolve) => (queue.length > 0 ? resolve(queue.shift()!) : gone ? resolve('exited') : waiters.push(resolve)));
    const bad: string[] = [];
    let checked = 0;
    try {
      for (let round = 0; round < ROUNDS; round++) {
        expect(await next()).toBe('creating');
        // Creating natively by now (the daemon grants the binding create slots after the first create), and
        // long enough that the daemon, hearing nothing, polls the binding's queue only every second or so.
        await new Promise((resolve) => setTimeout(resolve, 1200));
        // A burst of native creates as the command arrives, ending somewhere in the first 8 ms of it (round by
        // round): files made then are the binding's, not yet the daemon's, when the switch applies.
        const reply = controlRequest(s.d.socket, { cmd: 'set-profile', args: { home: `${T}/sw`, profile: 'scratch' } }, { timeoutMs: 20_000 });
        p.stdin.write(`burst ${round % 9}\n`);
        expect((await reply).ok).toBe(true);
        p.stdin.write('mark\n');
        const results = (await next()).split(' ');
        checked += results.length;
        if (results.some((r) => r !== 'EILSEQ')) bad.push(`round ${round}: ${results.join(' ')}`);
        await s.ctl('set-profile', `${T}/sw`, '--clear');
        p.stdin.write(round === ROUNDS - 1 ? 'end\n' : 'go\n');
      }
    } finally {
      p.stdin.end();
      await exited;
    }
    expect(bad).toEqual([]);
    expect(checked).toBeGreaterThan(ROUNDS);
    // The writer's files were made, and written, by the binding: the race this guards is there.
    const after = await native();
    expect(after.fastPath.createAnswered - before.fastPath.createAnswered).toBeGreaterThan(ROUNDS);
    expect(after.fastPath.writesDecided - before.fastPath.writesDecided).toBeGreaterThan(ROUNDS);
  }, 240_000);
});
