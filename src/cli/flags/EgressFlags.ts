/** The egress proxy's flags (host and Docker computers) and the audit log's (every backend). */
import * as Either from "effect/Either"
import * as EgressPolicy from "../../layers/egress/EgressPolicy.js"
import * as HostPattern from "../../layers/egress/HostPattern.js"
import { defaultSettings } from "../../services/Settings.js"
import * as Flag from "../Flag.js"

const problem = <A>(result: Either.Either<A, string>) => (Either.isLeft(result) ? result.left : undefined)
const egress = defaultSettings.egress

export const egressFlags = {
  allowHost: Flag.commaList("allow-host", {
    group: "egress options",
    metavar: "PATTERN",
    alsoFrom: ["KILNTAINERS_ALLOW_HOSTS", "SANDBOX_ALLOWED_DOMAINS"],
    // e2b and modal: enforced by the provider (CloudEgress.ts).
    backends: ["host", "docker", "e2b", "modal"],
    each: (item) => problem(HostPattern.parse(item)),
    help: "Reach only these hosts, via our proxy: x.com, *.x.com, :PORT, *"
  }),
  egressResolve: Flag.list("egress-resolve", {
    group: "egress options",
    metavar: "NAME=IP",
    backends: ["host", "docker"],
    each: (item) => problem(EgressPolicy.parsePin(item)),
    more: true,
    help: "The proxy connects to IP for NAME, like curl --resolve; repeatable"
  }),
  egressHeader: Flag.list("egress-header", {
    group: "egress options",
    metavar: "RULE",
    backends: ["host", "docker", "e2b"],
    each: (item) => problem(EgressPolicy.parseHeaderRule(item)),
    help: "PATTERN:HEADER=ENV_VAR: the proxy sets HEADER to $ENV_VAR"
  }),
  egressCaFile: Flag.list("egress-ca-file", {
    group: "egress options",
    metavar: "PATH",
    backends: ["host", "docker"],
    more: true,
    help: "A CA (PEM) trusted for upstreams besides the system's, and by computers too (internal services), repeatable"
  }),
  egressRelayPort: Flag.integer("egress-relay-port", {
    group: "egress options",
    default: egress.relayPort,
    min: 1,
    max: 65535,
    backends: ["host", "docker"],
    more: true,
    help: "Loopback port of the proxy inside each computer"
  }),
  egressMaxConnections: Flag.integer("egress-max-connections", {
    group: "egress options",
    default: egress.maxConnections,
    min: 1,
    max: 4096,
    backends: ["host", "docker"],
    more: true,
    help: "Most proxy connections open at once per computer"
  }),
  egressIdleTimeout: Flag.integer("egress-idle-timeout", {
    group: "egress options",
    default: egress.idleTimeoutMs / 1000,
    min: 1,
    unit: "seconds",
    backends: ["host", "docker"],
    more: true,
    help: "Seconds without a byte before a proxy connection is closed"
  }),
  auditLog: Flag.optionalText("audit-log", {
    group: "egress options",
    metavar: "PATH",
    help: "Append an audit trail here: JSON lines, secrets redacted"
  }),
  auditLogMaxSize: Flag.text("audit-log-max-size", {
    group: "egress options",
    default: "16m",
    metavar: "SIZE",
    more: true,
    help: "Rotate the audit log before it grows past this size"
  }),
  auditLogKeep: Flag.integer("audit-log-keep", {
    group: "egress options",
    default: defaultSettings.auditLog.keep,
    min: 0,
    max: 100,
    more: true,
    help: "Rotated audit logs kept (PATH.1 … PATH.N)"
  })
}
