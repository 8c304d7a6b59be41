/**
 * The journal's side of the holder's registration (src/holder/client.ts):
 * its descriptors (memfds the holder keeps, opaque to it) and its epoch.
 * None yet: the journal is not built; a registration then carries the
 * session's descriptor and INIT only.
 */

/** The journal's memfds to hand the holder (this process's: copies go). */
export function journalFds(): number[] {
  return [];
}

/** The journal's epoch, told to the holder with each registration. */
export function journalEpoch(): number {
  return 0;
}
