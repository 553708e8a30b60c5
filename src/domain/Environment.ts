/**
 * The environment every process starts with. The server's own environment (and its secrets) is
 * never inherited: processes get this allowlist, then --env values, then what the call sets.
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
  NPM_CONFIG_YES: "true",
  CI: "true",
  TERM: "dumb"
}

export interface EnvironmentOptions {
  readonly home: string
  readonly shell: string
  readonly tty: boolean
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
  ...options.server,
  ...options.call
})
