/**
 * Strings that reach the operating system as C strings (a command, its arguments, a working
 * directory, environment entries, paths) end at their first NUL: the program would silently get
 * less than was sent. They are refused instead.
 */
export const nulProblem = (what: string, value: string | undefined): string | undefined =>
  value !== undefined && value.includes("\0")
    ? `${what} must not contain NUL characters (a C string ends at the first one, so the rest would be lost)`
    : undefined

/** The first of several named strings that contains a NUL, said as `nulProblem` says it. */
export const firstNulProblem = (fields: ReadonlyArray<readonly [string, string | undefined]>): string | undefined => {
  for (const [what, value] of fields) {
    const problem = nulProblem(what, value)
    if (problem !== undefined) return problem
  }
  return undefined
}
