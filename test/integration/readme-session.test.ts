import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOMESCTL, ROOT, canMount, runAsync, skipReason, startDaemon, type RunningDaemon } from '../helpers/daemon.js';

if (!canMount) console.warn(`docs/homesctl.md admin session skipped: ${skipReason}`);

/**
 * The worked admin session of docs/homesctl.md is executed here, command by
 * command, against a real daemon, so the page cannot drift from the tool. Format of
 * the ```console block after the `admin-session` marker:
 *   `$ cmd`      a command (`homesctl` is this checkout's, on the test daemon's
 *                socket; `/homes` is the test daemon's mount point)
 *   lines        its output (stdout and stderr), each of which must appear in
 *                that order in the real output, numbers and runs of blanks aside
 *                (uids, times and column widths differ from run to run)
 *   `[exit N]`   the exit code when it is not 0
 */
interface Step {
  command: string;
  output: string[];
  exit: number;
}

function readSession(): Step[] {
  const readme = readFileSync(join(ROOT, 'docs/homesctl.md'), 'utf8');
  const at = readme.indexOf('<!-- admin-session');
  if (at < 0) throw new Error('docs/homesctl.md has no <!-- admin-session --> block');
  const open = readme.indexOf('```console\n', at);
  const close = readme.indexOf('\n```', open + 1);
  const steps: Step[] = [];
  for (const line of readme.slice(open + '```console\n'.length, close).split('\n')) {
    if (line.startsWith('$ ')) steps.push({ command: line.slice(2), output: [], exit: 0 });
    else if (/^\[exit \d+\]$/.test(line)) steps.at(-1)!.exit = Number(/\d+/.exec(line)![0]);
    else if (line.trim() !== '') steps.at(-1)!.output.push(line);
  }
  return steps;
}

const mask = (s: string) => s.replace(/[0-9]+(\.[0-9]+)?/g, 'N').replace(/\s+/g, ' ').trim();

describe.skipIf(!canMount)('docs/homesctl.md: the worked admin session runs as written', () => {
  let d: RunningDaemon;
  const steps = readSession();

  beforeAll(async () => {
    // (owners from this file's own ids: startDaemon's default)
    d = await startDaemon();
  });
  afterAll(async () => {
    await d?.stop();
  });

  it('has a session that creates, watches usage, raises and resets a budget, renames, shows the forward and deletes', () => {
    const cmds = steps.map((s) => s.command).join('\n');
    for (const re of [/homesctl create /, /homesctl (list|top|usage)/, /homesctl set-budget .* default/, /homesctl rename-project /, /homesctl resolve /, /homesctl forwards/, /homesctl delete-home /]) {
      expect(cmds).toMatch(re);
    }
  });

  it.each(steps.map((s, i) => [i + 1, s.command, s] as const))('step %d: %s', async (_n, _c, step) => {
    const cmd = step.command.replace(/^homesctl /, `${process.execPath} ${HOMESCTL} --socket ${d.socket} `).replaceAll('/homes/', `${d.mount}/`);
    const r = await runAsync('sh', ['-c', `${cmd} 2>&1`]);
    expect(r.code, r.stdout).toBe(step.exit);
    const got = r.stdout.replaceAll(d.mount, '/homes').split('\n').map(mask);
    let from = 0;
    for (const want of step.output.map(mask)) {
      const at = got.indexOf(want, from);
      expect(at, `docs/homesctl.md line "${want}" not found (in order) in:\n${r.stdout}`).toBeGreaterThanOrEqual(0);
      from = at + 1;
    }
  });
});
