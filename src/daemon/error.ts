/** A start or a run that ends the daemon, with the exit code it ends with (cli/exitcodes.ts). */
export class DaemonError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
  }
}
