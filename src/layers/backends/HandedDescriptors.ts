/**
 * How the server hands descriptors to kt-sandbox (and through it to bubblewrap): at fixed numbers
 * above the ones kt-sandbox takes for itself, so that its own dup2s never land on them.
 */

/**
 * The first descriptor number handed to kt-sandbox: 3 and 4 are its channel once it moved it, 7 the
 * agent's stderr and 8 the setup handshake (kt-sandbox.c's CHANNEL_IN, CHANNEL_OUT, AGENT_ERR, SYNC_FD).
 */
export const FIRST_FD = 9

/** A child's stdio: `head` (stdin, stdout, stderr…), then `fds` from FIRST_FD on. */
export const handOn = <A>(head: ReadonlyArray<A>, fds: ReadonlyArray<number>): Array<A | "ignore" | number> =>
  fds.length === 0 ? [...head] : [...head, ...Array.from({ length: FIRST_FD - head.length }, () => "ignore" as const), ...fds]
