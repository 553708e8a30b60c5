/**
 * The environment every process starts with. The server's own environment (and its secrets) is
 * never inherited: processes get this allowlist, then the backend's own variables (the egress
 * proxy's), then --env values, then what the call sets.
 */
export const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/** Set for processes without a terminal, so nothing can hang on a pager or a prompt. */
export const nonInteractive: Readonly<Record<string, string>> = {
  PAGER: "cat",
  GIT_PAGER: "cat",
  MANPAGER: "cat",
  SYSTEMD_PAGER: "",
  LESS: "-FRX",
  GIT_TERMINAL_PROMPT: "0",
  GIT_ASKPASS: "",
  SSH_ASKPASS: "",
  GCM_INTERACTIVE: "never",
  DEBIAN_FRONTEND: "noninteractive",
  PIP_NO_INPUT: "1",
  // Python writes its output as it prints it, not when a pipe's buffer fills: a server's ready line
  // reaches a spawn pattern (both peers pass the host's on; ours is a clean environment).
  PYTHONUNBUFFERED: "1",
  NPM_CONFIG_YES: "true",
  CI: "true",
  TERM: "dumb"
}

export interface EnvironmentOptions {
  readonly home: string
  readonly shell: string
  readonly tty: boolean
  /** The backend's variables for every process (`Backend.environment`: the egress proxy and CA bundle). */
  readonly backend?: Readonly<Record<string, string>> | undefined
  readonly server: Readonly<Record<string, string>>
  readonly call: Readonly<Record<string, string>> | undefined
}

export const processEnvironment = (options: EnvironmentOptions): Record<string, string> => ({
  PATH: basePath,
  HOME: options.home,
  SHELL: options.shell,
  LANG: "C.UTF-8",
  LC_ALL: "C.UTF-8",
  ...(options.tty ? { TERM: "xterm-256color", COLORTERM: "truecolor" } : nonInteractive),
  ...options.backend,
  ...options.server,
  ...options.call
})

/** The rule for environment variable names, as callers are told it. */
export const envNameRule = "a name must be non-empty and contain neither '=' nor NUL"

/** Why an environment cannot be given to a process, if it cannot: a bad name, or a NUL in a value. */
export const envProblem = (env: Readonly<Record<string, string>> | undefined, what = "env"): string | undefined => {
  for (const [name, value] of Object.entries(env ?? {})) {
    if (name === "" || name.includes("=") || name.includes("\0")) {
      return `${what}: ${JSON.stringify(name)} is not a valid environment variable name (${envNameRule})`
    }
    if (value.includes("\0")) return `${what}: the value of ${name} contains a NUL character, which would cut it short`
  }
  return undefined
}
