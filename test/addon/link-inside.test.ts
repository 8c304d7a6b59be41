// The binding judges a new symlink's target itself (fastpath_walk.c
// fp_link_inside, for fuse.nativeSymlink): this holds it equal to
// TypeScript's symlinkTargetInsideHome, which JavaScript's symlink asks.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadFuse } from '../../src/fuse/binding.js';
import { symlinkTargetInsideHome } from '../../src/policy/profiles.js';

const Fuse = loadFuse();
/** the link's directory, `depth` real components below the home root */
const dirOf = (depth: number): string[] => Array.from({ length: depth }, (_, i) => `d${i}`);
const ts = (depth: number, target: string): boolean => symlinkTargetInsideHome(dirOf(depth), target);

// Components that move the judgement: climbs, no-ops, names that only look like them.
const component = fc.constantFrom('..', '.', '', 'a', 'b', '...', '..a', '.a', 'a..', ' ', 'é');
const relative = fc.array(component, { minLength: 1, maxLength: 9 }).map((cs) => cs.join('/'));
const target = fc.oneof(relative, relative.map((t) => `/${t}`), fc.string({ maxLength: 12 }).filter((s) => !s.includes('\0')));

describe("the binding's judgement of a new symlink's target", () => {
  it('equals symlinkTargetInsideHome (no scope: an absolute target is never the binding\'s) on 20,000 random targets at depths 0-6', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 6 }), target, (depth, t) => {
        expect(Fuse.fastPath.symlinkInside(depth, t), `depth ${depth}, target ${JSON.stringify(t)}`).toBe(ts(depth, t));
      }),
      { numRuns: 20_000 },
    );
  });

  it('on the cases that decide it: a leading climb counted exactly, a climb after a name outside, absolute and empty outside', () => {
    const cases: [number, string, boolean][] = [
      [0, 'a', true],
      [0, '..', false],
      [1, '..', true],
      [1, '../..', false],
      [2, '../../x', true],
      [2, './.././../x/./y', true],
      [3, 'a/../b', false],
      [3, '../a/..', false],
      [0, '/usr/bin/python3', false],
      [0, '', false],
      [0, '.', true],
      [0, 'a//b/', true],
    ];
    for (const [depth, t, inside] of cases) {
      expect(ts(depth, t), `TS ${depth} ${t}`).toBe(inside);
      expect(Fuse.fastPath.symlinkInside(depth, t), `C ${depth} ${t}`).toBe(inside);
    }
  });
});
