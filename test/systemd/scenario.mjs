// Runs inside a container whose PID 1 is Debian's systemd 252 (scripts/test-systemd.sh
// starts it): the real unit file, the real fd store, the real Restart= and ExecReload=.
// /stage holds two builds of this package (a, b: another build id), the agent and node.
// Each step is logged as one JSON line on stdout; any failed check throws (exit 1).
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync, chmodSync } from 'node:fs';

const PKG = '/usr/local/lib/node_modules/homesfs';
const UID = 200001;
const HOME = 't/work';
const OUT = '/run/agents';
const t0 = Date.now();
const say = (step, fields = {}) => process.stdout.write(`${JSON.stringify({ t: ((Date.now() - t0) / 1000).toFixed(1), step, ...fields })}\n`);
const sh = (cmd, args, opts = {}) => {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: opts.timeout ?? 120_000 });
  return { code: r.status, out: (r.stdout ?? '').trim(), err: (r.stderr ?? '').trim() };
};
const must = (cmd, args, opts) => {
  const r = sh(cmd, args, opts);
  if (r.code !== 0) throw new Error(`${cmd} ${args.join(' ')}: exit ${r.code}: ${r.err || r.out}`);
  return r.out;
};
const check = (cond, what, detail = {}) => {
  if (!cond) throw new Error(`check failed: ${what} ${JSON.stringify(detail)}`);
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const prop = (unit, p) => sh('systemctl', ['show', '-p', p, '--value', unit]).out;
const status = () => {
  const r = sh('/usr/local/bin/homesctl', ['--json', 'status'], { timeout: 20_000 });
  return r.code === 0 ? JSON.parse(r.out) : null;
};
const journal = (unit) => sh('journalctl', ['-q', '-o', 'cat', '-u', unit, '--no-pager']).out;
const progress = (mode) => {
  try {
    return JSON.parse(readFileSync(`${OUT}/${mode}.progress`, 'utf8'));
  } catch {
    return null;
  }
};
async function until(what, cond, ms = 60_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await sleep(100);
  }
}
/** The writer acknowledged `more` lines beyond what it had: the agents go on. */
async function agentsGoOn(label, more = 30) {
  const from = progress('writer')?.lines ?? 0;
  const at = await until(`${label}: the writer goes on`, () => {
    const p = progress('writer');
    return p && p.lines >= from + more ? p : null;
  });
  const r = progress('reader');
  say(`${label}: agents go on`, { writerLines: at.lines, writerErrors: at.errors, readerRounds: r?.rounds, readerErrors: r?.errors, maxWaitMs: Math.max(at.maxWaitMs, r?.maxWaitMs ?? 0) });
  check(at.errors === 0 && r?.errors === 0, `${label}: no agent error`, { writer: at, reader: r });
}
function install(build) {
  rmSync(PKG, { recursive: true, force: true });
  mkdirSync('/usr/local/lib/node_modules', { recursive: true });
  cpSync(`/stage/${build}`, PKG, { recursive: true, verbatimSymlinks: true });
  for (const b of ['homesfs', 'homesctl']) {
    rmSync(`/usr/local/bin/${b}`, { force: true });
    // as npm install -g does: the bin links, their targets executable
    chmodSync(`${PKG}/dist/cli/${b}.js`, 0o755);
    symlinkSync(`../lib/node_modules/homesfs/dist/cli/${b}.js`, `/usr/local/bin/${b}`);
  }
}
const storeCount = () => prop('homesfs', 'NFileDescriptorStore');

// --- install: node, build a, the unit as shipped, the example config with one home ---
cpSync('/stage/node', '/usr/local/bin/node');
chmodSync('/usr/local/bin/node', 0o755);
install('a');
const version = (b) => JSON.parse(readFileSync(`/stage/${b}/package.json`, 'utf8')).version;
const aVersion = must('/usr/local/bin/homesfs', ['--version']);
cpSync(`${PKG}/systemd/homesfs.service`, '/etc/systemd/system/homesfs.service');
const config = JSON.parse(readFileSync(`${PKG}/systemd/config.example.json`, 'utf8'));
config.homes = { [HOME]: { owner: { uid: UID, gid: UID }, profile: 'home' } };
mkdirSync('/etc/homesfs', { recursive: true });
writeFileSync('/etc/homesfs/config.json', JSON.stringify(config, null, 2), { mode: 0o600 });
mkdirSync(`${config.backing}/${HOME}`, { recursive: true, mode: 0o700 });
must('systemctl', ['daemon-reload']);
say('installed', { version: aVersion, systemd: must('systemctl', ['--version']).split('\n')[0] });

// --- start: READY only once it serves ---
must('systemctl', ['start', 'homesfs'], { timeout: 100_000 });
check(prop('homesfs', 'ActiveState') === 'active', 'active after start');
let s = await until('status answers', status, 30_000);
check(s.session.startMode === 'fresh' && s.holder?.keeper === 'systemd' && s.holder?.registered === true, 'fresh, stored in the fd store', s.holder);
// What the daemon stored at its start (the session, its registration, the journal, the ledgers): the whole store.
const wholeStore = storeCount();
say('started', { pid: s.pid, mainPid: Number(prop('homesfs', 'MainPID')), nFdStore: wholeStore, generation: s.session.generation });
check(Number(prop('homesfs', 'MainPID')) === s.pid, 'the daemon is the main process');

// --- agents: a writer and a reader, as the home's owner, working directory in the home ---
mkdirSync(OUT, { recursive: true, mode: 0o777 });
chmodSync(OUT, 0o777);
for (const mode of ['writer', 'reader']) {
  // the reader reads the writer's file: once it is there
  if (mode === 'reader') await until('the writer writes', () => (progress('writer')?.lines ?? 0) > 5);
  must('systemd-run', [`--unit=agent-${mode}`, `--uid=${UID}`, `--gid=${UID}`, `--working-directory=/homes/${HOME}`, '-p', 'KillMode=mixed', '/usr/local/bin/node', '/stage/test/agent.mjs', mode, `/homes/${HOME}/log`, OUT]);
}
await until('agents write', () => (progress('writer')?.lines ?? 0) > 20 && progress('reader'));
await agentsGoOn('started');

// --- an intruder in the unit's cgroup cannot touch the fd store (NotifyAccess=exec: main and control processes only) ---
{
  const cg = prop('homesfs', 'ControlGroup');
  const procs = ['/sys/fs/cgroup/systemd', '/sys/fs/cgroup/unified', '/sys/fs/cgroup'].map((r) => `${r}${cg}/cgroup.procs`).filter((p) => existsSync(p));
  check(procs.length > 0, "the unit's cgroup", { cg });
  // systemd-notify sends as from its parent: this shell, moved into the unit's cgroup(s) first.
  const r = sh('sh', ['-c', `for p in ${procs.join(' ')}; do echo $$ > $p; done; cat /proc/$$/cgroup | grep homesfs >&2; export NOTIFY_SOCKET=/run/systemd/notify; systemd-notify FDSTOREREMOVE=1 FDNAME=homesfs-fuse; systemd-notify FDSTOREREMOVE=1 FDNAME=homesfs-registration; echo $$`]);
  // the journal may lag behind systemd's refusal
  const refusedLines = () => journal('homesfs').split('\n').filter((l) => l.includes('reception only permitted for main PID'));
  await until('the refusals are logged', () => refusedLines().length >= 2, 10_000).catch(() => undefined);
  const refused = refusedLines();
  say('intruder', { pid: r.out.split('\n').pop(), cgroup: r.err, refused: refused.length, nFdStore: storeCount() });
  check(refused.length >= 2 && Number(wholeStore) > 0 && storeCount() === wholeStore, 'systemd refused the intruder, the store is whole (NotifyAccess=exec)');
}

// --- a crash: SIGKILL of the main process, Restart= resumes from the fd store ---
const killAndResume = async (label, restartsBefore, generationBefore) => {
  const pid = Number(prop('homesfs', 'MainPID'));
  const killedAt = Date.now();
  must('systemctl', ['kill', '-s', 'KILL', '--kill-who=main', 'homesfs']);
  await until(`${label}: restarted`, () => Number(prop('homesfs', 'NRestarts')) === restartsBefore + 1 && prop('homesfs', 'ActiveState') === 'active', 60_000);
  const st = await until(`${label}: status answers`, () => {
    const x = status();
    return x && x.pid !== pid ? x : null;
  }, 30_000);
  say(`${label}: resumed`, { killed: pid, pid: st.pid, startMode: st.session.startMode, generation: st.session.generation, keeper: st.holder?.keeper, registered: st.holder?.registered, servingAfterMs: Date.now() - killedAt, nFdStore: storeCount() });
  check(st.session.startMode === 'resumed', `${label}: resumed by systemd from the fd store`, st.session);
  check(st.session.generation === generationBefore + 1, `${label}: the stored registration was the latest`, { before: generationBefore, now: st.session.generation });
  check(st.holder?.keeper === 'systemd' && st.holder?.registered === true, `${label}: stored again`, st.holder);
  check(journal('homesfs').includes('session resumed after a crash'), `${label}: the log says resumed`);
  await agentsGoOn(label);
  return st;
};
s = await killAndResume('kill -9', 0, s.session.generation);

// --- a live upgrade: another build installed, systemctl reload ---
install('b');
const bVersion = must('/usr/local/bin/homesfs', ['--version']);
check(bVersion !== aVersion, 'b is another build', { aVersion, bVersion });
const before = s.pid;
const rl = sh('systemctl', ['reload', 'homesfs'], { timeout: 100_000 });
check(rl.code === 0, 'systemctl reload exits 0', rl);
s = await until('the successor answers', () => {
  const x = status();
  return x && x.pid !== before ? x : null;
}, 30_000);
say('reload: upgraded', { from: before, pid: s.pid, mainPid: Number(prop('homesfs', 'MainPID')), version: s.version, startMode: s.session.startMode, pauseMs: s.session.lastHandoverPauseMs, generation: s.session.generation, registered: s.holder?.registered });
check(s.session.startMode === 'taken over' && Number(prop('homesfs', 'MainPID')) === s.pid && prop('homesfs', 'ActiveState') === 'active', 'the successor is the main process', s.session);
check(s.holder?.registered === true, "the successor's registration is in the fd store", s.holder);
await agentsGoOn('reload');
// The successor's fd store entries were taken (NotifyAccess=exec; with main it would have no NOTIFY_SOCKET): a crash now resumes its session, not its predecessor's.
s = await killAndResume('kill -9 after the upgrade', 1, s.session.generation);
check(s.version === JSON.parse(must('/usr/local/bin/homesctl', ['--json', 'status'])).version, 'b serves');

const refusedAll = journal('homesfs').split('\n').filter((l) => l.includes('reception only permitted for main PID'));
check(refusedAll.length === 2, 'no notification of the daemons was refused (only the intruder\'s two)', { refusedAll });

// --- the agents stop: not one error, every fsynced line there, once and in order ---
for (const mode of ['writer', 'reader']) must('systemctl', ['stop', `agent-${mode}`]);
const w = JSON.parse(readFileSync(`${OUT}/writer.json`, 'utf8'));
const r = JSON.parse(readFileSync(`${OUT}/reader.json`, 'utf8'));
const lines = readFileSync(`${config.backing}/${HOME}/log`, 'utf8').split('\n').filter(Boolean);
const inOrder = lines.slice(0, w.lines).every((l, i) => l === String(i));
say('agents', { writer: w, reader: r, linesOnDisk: lines.length, inOrder });
check(w.errors === 0 && r.errors === 0, 'agents: 0 errors', { w, r });
check(lines.length >= w.lines && inOrder, 'every fsynced line there, once and in order');

// --- systemctl stop: unmounted, the store empty ---
must('systemctl', ['stop', 'homesfs'], { timeout: 60_000 });
const mounted = sh('findmnt', ['--mountpoint', '/homes']).code === 0;
say('stopped', { active: prop('homesfs', 'ActiveState'), mounted, nFdStore: storeCount(), result: prop('homesfs', 'Result') });
check(!mounted, 'unmounted after stop');
check(prop('homesfs', 'ActiveState') === 'inactive' && prop('homesfs', 'Result') === 'success', 'stopped cleanly');
// systemd 252 cannot show the store (NFileDescriptorStore= came in 254): the next start says whether it got anything back.
check(['', '0'].includes(storeCount()), 'the fd store is empty');
must('systemctl', ['start', 'homesfs'], { timeout: 100_000 });
const fresh = await until('status answers', status, 30_000);
say('started again', { startMode: fresh.session.startMode, generation: fresh.session.generation });
check(fresh.session.startMode === 'fresh' && fresh.session.generation === 1, 'nothing was left in the fd store: a fresh session');

// --- systemctl restart: a full stop, then a start: the store is dropped, agents in the old mount get ENOTCONN ---
rmSync(`${OUT}/reader.progress`, { force: true });
rmSync(`${OUT}/reader.json`, { force: true });
must('systemd-run', [`--unit=agent-reader2`, `--uid=${UID}`, `--gid=${UID}`, `--working-directory=/homes/${HOME}`, '/usr/local/bin/node', '/stage/test/agent.mjs', 'reader', `/homes/${HOME}/log`, OUT]);
await until('the reader reads', () => (progress('reader')?.rounds ?? 0) > 10);
must('systemctl', ['restart', 'homesfs'], { timeout: 100_000 });
await until('the reader sees the restart', () => (progress('reader')?.errors ?? 0) > 0, 20_000);
await sleep(500);
const afterRestart = progress('reader');
must('systemctl', ['stop', 'agent-reader2']);
say('restart', { reader: afterRestart, active: prop('homesfs', 'ActiveState'), startMode: status()?.session.startMode });
check(/ENOTCONN|ECONNABORTED/.test(afterRestart.lastError), 'a restart ends the session: ENOTCONN');

// --- a crash whose restart exits with a code no restart can fix (3: the configuration broke meanwhile):
// no restart loop; the unit fails, which drops the fd store, and the dead mount waits for the next start ---
{
  const good = readFileSync('/etc/homesfs/config.json');
  writeFileSync('/etc/homesfs/config.json', '{');
  const restarts = Number(prop('homesfs', 'NRestarts'));
  must('systemctl', ['kill', '-s', 'KILL', '--kill-who=main', 'homesfs']);
  await until('the restart fails', () => prop('homesfs', 'ActiveState') === 'failed', 30_000);
  await sleep(3000);
  const dead = sh('stat', ['-f', '/homes']);
  say('crash, then exit 3', { active: prop('homesfs', 'ActiveState'), status: prop('homesfs', 'ExecMainStatus'), restarts: Number(prop('homesfs', 'NRestarts')) - restarts, nFdStore: storeCount(), statfs: dead.err });
  check(prop('homesfs', 'ExecMainStatus') === '3' && Number(prop('homesfs', 'NRestarts')) === restarts + 1, 'one restart, exit 3, no more');
  check(storeCount() === '0' && /not connected/.test(dead.err), 'the failed unit dropped the store: the mount is dead');
  writeFileSync('/etc/homesfs/config.json', good);
  sh('systemctl', ['reset-failed', 'homesfs']);
  must('systemctl', ['start', 'homesfs'], { timeout: 100_000 });
  const st = await until('status answers', status, 30_000);
  check(st.session.startMode === 'fresh' && journal('homesfs').includes('clearing a stale FUSE mount'), 'the next start cleared the dead mount and mounted afresh');
  say('dead mount cleared by the start', { startMode: st.session.startMode });
}

// --- exit 5 (mount point not empty) does not loop ---
must('systemctl', ['stop', 'homesfs'], { timeout: 60_000 });
writeFileSync('/homes/stray', 'x');
const restartsBefore = Number(prop('homesfs', 'NRestarts'));
sh('systemctl', ['start', 'homesfs'], { timeout: 100_000 });
await sleep(5000);
say('not empty', { active: prop('homesfs', 'ActiveState'), status: prop('homesfs', 'ExecMainStatus'), restarts: Number(prop('homesfs', 'NRestarts')) - restartsBefore });
check(prop('homesfs', 'ActiveState') === 'failed' && prop('homesfs', 'ExecMainStatus') === '5' && Number(prop('homesfs', 'NRestarts')) === restartsBefore, 'exit 5 fails the unit without a restart loop');
rmSync('/homes/stray');
sh('systemctl', ['reset-failed', 'homesfs']);
say('passed');
