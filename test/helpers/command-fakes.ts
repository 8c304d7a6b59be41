import type { DaemonCommands, HomeCommands } from '../../src/control/commands.js';

/** Every function a control command calls, by name: what a fake records and answers. */
export type CommandFunctions = HomeCommands['lifecycle'] & HomeCommands['limits'] & HomeCommands['settings'] & DaemonCommands;
export type CommandFunction = keyof CommandFunctions;

/**
 * What `startControlServer` is given to call (`homes`, `daemon`), from one flat
 * fake that has a function for every name it serves (names it lacks throw
 * when called).
 */
export function fakeTargets(fake: Partial<CommandFunctions>): { homes: HomeCommands; daemon: DaemonCommands } {
  const all = fake as CommandFunctions;
  return { homes: { lifecycle: all, limits: all, settings: all }, daemon: all };
}
