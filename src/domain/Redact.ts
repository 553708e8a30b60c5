/**
 * What of a command line or an error message may go into a span. Traces leave the server for an
 * operator's collector, so they carry no environment values, file contents or tokens: commands are
 * cut short and credential-looking words are masked (assignments to secret-named variables,
 * secret-named options, Authorization headers, URL passwords, well-known token shapes). This is a
 * safety net for what an agent may type, not a promise: a secret in a command can take any form.
 */

const MASK = "***"

/** Names that say "secret": API_TOKEN, DB_PASSWORD, AWS_SECRET_ACCESS_KEY, STRIPE_KEY, api-key, … (not PATH or PWD). */
const SECRET_NAME = String.raw`[\w.-]*(?:token|secret|passw(?:or)?d|api[_-]?key|[_-]key|credential|auth|cookie|session)[\w.-]*`
/** A shell word: quoted, or up to the next blank. */
const WORD = String.raw`(?:'[^']*'|"(?:[^"\\]|\\.)*"|[^\s'"]+)`

const rules: ReadonlyArray<readonly [RegExp, string]> = [
  // NAME=value (assignments, env prefixes, --name=value)
  [new RegExp(String.raw`(\b${SECRET_NAME}\s*=\s*)${WORD}`, "gi"), `$1${MASK}`],
  // --name value / -name value
  [new RegExp(String.raw`(\s--?${SECRET_NAME}\s+)(?!-)${WORD}`, "gi"), `$1${MASK}`],
  // -u user:password, --user user:password (curl, wget)
  [/(\s(?:-u|--user)\s+['"]?[^\s:'"]+:)[^\s'"]+/g, `$1${MASK}`],
  // Authorization-like headers, in any quoting: -H 'Authorization: Bearer x', "X-Api-Key: x"
  [/((?:proxy-)?authorization|x-[\w-]*(?:key|token)|cookie)(\s*:\s*)[^'"\r\n]+/gi, `$1$2${MASK}`],
  [/\b(bearer|basic|token)(\s+)[\w.~+/=-]{8,}/gi, `$1$2${MASK}`],
  // scheme://user:password@host
  [/(\b[a-z][\w+.-]*:\/\/[^\s/:@]*:)[^\s/@]+@/gi, `$1${MASK}@`],
  // Token shapes: GitHub, OpenAI-style, Slack, AWS access key ids, JWTs, private keys.
  [/\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|sk-[\w-]{20,}|xox[abprs]-[\w-]{10,}|AKIA[0-9A-Z]{16})\b/g, MASK],
  [/\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,}/g, MASK],
  [/-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)/g, MASK]
]

/** The text with credential-looking words masked. */
export const redact = (text: string): string => rules.reduce((current, [pattern, replacement]) => current.replace(pattern, replacement), text)

const cut = (text: string, max: number) => (text.length > max ? `${text.slice(0, max)}…` : text)

/** How long a command is in a span: enough to recognise it. */
export const COMMAND_CHARS = 160

/** A command line as a span shows it: masked first (so a cut never exposes half a secret), then cut. */
export const commandCut = (command: string): string => cut(redact(command).replace(/\s+/g, " ").trim(), COMMAND_CHARS)

/**
 * An error as a span shows it: its tag and the first line of its message, masked and cut. Later
 * lines are left out: a Schema decoding error lists the rejected values there.
 */
export const errorSummary = (tag: string, message: string): string => {
  const first = message.split("\n", 1)[0] ?? ""
  return cut(redact(first === "" ? tag : `${tag}: ${first}`), 300)
}
