/**
 * What the envd of a sandbox (E2B's in-sandbox daemon, its version fixed when the template was
 * built) can do, as the SDK decides it (e2b 2.51, `authenticationHeader`, `supportsStdinClose`):
 *   < 0.4.0  no default user: a process start needs `Authorization: Basic base64("user:")`, else
 *            envd answers unauthenticated "no user specified";
 *   < 0.5.2  no CloseStdin: EOF on a pipe goes through our relay (ProcessScript.ts).
 * Pure.
 */

/** The user E2B templates run processes as, and the SDK's default. */
export const DEFAULT_USER = "user"

const parts = (version: string) => version.split(/[.+-]/).slice(0, 3).map((n) => Number.parseInt(n, 10) || 0)

/** Negative, zero or positive as `a` is older than, the same as or newer than `b` (major.minor.patch). */
export const compare = (a: string, b: string): number => {
  const [x, y] = [parts(a), parts(b)]
  for (let i = 0; i < 3; i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0)
    if (d !== 0) return d
  }
  return 0
}

/** Headers a process start needs on this envd. */
export const startHeaders = (version: string): Record<string, string> =>
  compare(version, "0.4.0") < 0 ? { Authorization: `Basic ${Buffer.from(`${DEFAULT_USER}:`).toString("base64")}` } : {}

/** Whether envd can close a process's stdin (CloseStdin). */
export const canCloseStdin = (version: string): boolean => compare(version, "0.5.2") >= 0
