import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { controlRequest } from '../../src/control/client.js';
import { canMount, skipReason, SYSTEM_PATH } from '../helpers/daemon.js';
import { ownerSuite } from '../helpers/owner-suite.js';

/**
 * A profile switch reaches every open handle before `set-profile` answers,
 * including handles the binding opened or created natively while the command
 * was on its way (not adopted by the daemon yet): once the switch to the
 * UTF-8-only profile has answered, no write of invalid bytes succeeds, on any
 * descriptor, opened before or after.
 */

const BASE = 530_000 + Math.floor(Math.random() * 60) * 10_000;
const U = { uid: BASE + 5, gid: BASE + 5 };
const T = 'ps';
const ROUNDS = 40;

if (!canMount) console.warn(`policy-switch integration suite skipped: ${skipReason}`);

// Creates new files as fast as it can (natively, in a binary home), writes 0xFF into each and keeps the
// last 16 open (and named), until 'stop'; then only overwrites what it holds (writes the binding serves
// without the daemon, so nothing makes the daemon look at the handles). On 'mark' (sent once set-profile
// answered) every held descriptor and a new file are written 0xFF once more: each result is printed.
// On 'go' it starts over; on 'end' it exits.
const WRITER = `import os,sys,errno,select,fcntl
h=sys.argv[1]
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
  while b'\\n' not in buf:
    p=os.path.join(h, 'w%d' % n); n+=1
    try:
      fd=os.open(p, os.O_WRONLY|os.O_CREAT|os.O_EXCL, 0o600)
    except OSError: fd=-1
    if fd >= 0:
      held.append(fd); made.append(p)
      res(fd)
    if len(held) > 16:
      os.close(held.pop(0)); os.unlink(made.pop(0))
    poll()
  assert line()=='stop'
  while b'\\n' not in buf:
    for fd in held: res(fd)
    poll()
  assert line()=='mark'
  out=[res(fd) for fd in held]
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
  const s = ownerSuite(U, { homes: { [`${T}/sw`]: { owner: U, profile: 'home' } }, config: { owners: { from: BASE, to: BASE + 9_999 } } });
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
        // Creating natively by now (the daemon grants the binding create slots after the first create).
        await new Promise((resolve) => setTimeout(resolve, 100));
        // The writer stops creating a moment after the command reached the daemon (and before its
        // reply): files it made just then are the binding's and not yet the daemon's when the switch applies.
        const reply = controlRequest(s.d.socket, { cmd: 'set-profile', args: { home: `${T}/sw`, profile: 'scratch' } }, { timeoutMs: 20_000 });
        await new Promise((resolve) => setTimeout(resolve, round % 4));
        p.stdin.write('stop\n');
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
