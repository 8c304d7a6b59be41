import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * The README's install and systemd commands as the tests run them: taken from
 * the README's own code blocks, so an edit there that breaks a command breaks
 * a test.
 */

export const README = join(import.meta.dirname, '../../README.md');

/** The body of a `### heading` section, up to the next heading of level 1-3 (a `#` line in a code block is none). */
export function section(readme: string, heading: string): string {
  const lines = readme.split('\n');
  const start = lines.indexOf(`### ${heading}`);
  if (start < 0) throw new Error(`README has no "### ${heading}" section`);
  let fenced = false;
  let end = start + 1;
  for (; end < lines.length; end++) {
    if (lines[end]!.startsWith('```')) fenced = !fenced;
    else if (!fenced && /^#{1,3} /.test(lines[end]!)) break;
  }
  return lines.slice(start + 1, end).join('\n');
}

/** The ```sh blocks of a text, each as its shell commands: blank and comment-only lines dropped, continuations joined. */
export function shBlocks(text: string): string[][] {
  return [...text.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) =>
    m[1]!
      .replace(/\\\n/g, ' ')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l !== '' && !l.startsWith('#')),
  );
}

export function readmeText(): string {
  return readFileSync(README, 'utf8');
}

/** The commands of "On a node > Install", in order (its one sh block). */
export function installCommands(readme = readmeText()): string[] {
  const blocks = shBlocks(section(readme, 'Install'));
  if (blocks.length !== 1) throw new Error(`README "Install" should have one sh block, has ${blocks.length}`);
  return blocks[0]!;
}

/** The apt-get line of the Install block and the packages it names. */
export function aptLine(commands: string[]): { line: string; packages: string[] } {
  const apt = commands.filter((c) => /^apt-get\b/.test(c));
  if (apt.length !== 1) throw new Error(`README "Install" should have one apt-get line, has ${apt.length}`);
  const line = apt[0]!;
  // --no-upgrade: a node's installed packages stay as they are (an upgradable libnss-systemd would pull a new systemd).
  const m = /^apt-get install -y --no-upgrade((?: [a-z0-9][a-z0-9+.-]*)+)$/.exec(line);
  if (!m) throw new Error(`not a plain "apt-get install -y --no-upgrade PKG…" line: ${line}`);
  return { line, packages: m[1]!.trim().split(' ') };
}

/** The --prefix of the Install block's `npm install -g` (where the programs land). */
export function installPrefix(commands: string[]): string {
  const inst = commands.filter((c) => /^npm install -g\b/.test(c));
  if (inst.length !== 1) throw new Error(`README "Install" should have one npm install -g line, has ${inst.length}`);
  const m = /--prefix[= ](\/\S*)/.exec(inst[0]!);
  if (!m) throw new Error(`npm install -g without an absolute --prefix: ${inst[0]}`);
  return m[1]!;
}

/** The package arrays scripts/install.sh installs, by name (runtime, build, tests). */
export function installShPackages(name: 'runtime' | 'build' | 'tests'): string[] {
  const text = readFileSync(join(import.meta.dirname, '../../scripts/install.sh'), 'utf8');
  const m = new RegExp(`^${name}=\\(([^)]*)\\)$`, 'm').exec(text);
  if (!m) throw new Error(`scripts/install.sh has no ${name}=(…) array`);
  return m[1]!.trim().split(/\s+/);
}
