/**
 * Egress for host and Docker computers: the policy, the proxy, the CA and the audit tied together.
 *
 * How a computer reaches the proxy: it has no network of its own. Its agent (kt-agent, started with
 * `--relay-port <relayPort>`) listens on 127.0.0.1:<relayPort> inside the computer and carries every
 * connection over the agent's private channel to the server (`agent/Relay.ts`), where `serve`
 * serves it with the proxy, knowing which computer it came from. Names are resolved by the proxy,
 * never inside the computer (it has no resolver either).
 *
 * What a backend applies to each computer is one value, `ComputerEgress`:
 * - `relayPort`: the agent's `--relay-port` (Main gives the backend its relay: `serve` on each
 *   relayed connection's socket);
 * - `env`, set for every process (the call's own variables win):
 *     HTTP_PROXY, http_proxy, HTTPS_PROXY, https_proxy = http://127.0.0.1:<relayPort>
 *     NO_PROXY, no_proxy = localhost,127.0.0.1,::1 (services inside the computer stay direct)
 *     NODE_USE_ENV_PROXY = 1 (Node ≥ 22.21 / 24.5 honours the variables above with it)
 *     SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, GIT_SSL_CAINFO,
 *     PIP_CERT = `caBundlePath`
 *   ALL_PROXY is not set: the proxy speaks HTTP and CONNECT only, and some clients read ALL_PROXY
 *   as a SOCKS proxy or use it for protocols it cannot carry.
 * - `caBundle`, written read-only at `caBundlePath` (/etc/ssl/certs/ca-certificates.crt, where
 *   Debian, Ubuntu and Alpine tools look by default): this server's system bundle (Node's roots
 *   when it has none), the `--egress-ca-file` CAs, and the interception CA when there are header
 *   rules. It holds certificates only, never a key or a secret.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Layer from "effect/Layer"
import type * as Scope from "effect/Scope"
import { X509Certificate } from "node:crypto"
import { readFile } from "node:fs/promises"
import { join } from "node:path"
import { rootCertificates } from "node:tls"
import { AuditLog, type AuditLogShape } from "../../services/AuditLog.js"
import { type EgressSettings, Settings } from "../../services/Settings.js"
import * as CertificateAuthority from "./CertificateAuthority.js"
import { EgressError } from "./EgressError.js"
import { CA_BUNDLE_PATH } from "./EgressPaths.js"
import * as EgressPolicy from "./EgressPolicy.js"
import * as EgressProxy from "./EgressProxy.js"
import type { Lookup } from "./Upstream.js"

export { CA_BUNDLE_PATH, CA_CERTIFICATE_PATH } from "./EgressPaths.js"

/** The system bundles looked for on the server, first found wins. */
const SYSTEM_BUNDLES = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"]

/** The variables that point TLS clients at the bundle. */
export const CA_VARIABLES = ["SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT"] as const

/** What a backend applies to each computer (see the module's header). */
export interface ComputerEgress {
  readonly relayPort: number
  readonly env: Readonly<Record<string, string>>
  readonly caBundle: string
  readonly caBundlePath: string
  /**
   * The interception CA alone (PEM), when there are header rules: where the distribution keeps
   * local CAs too (`/usr/local/share/ca-certificates/kilntainers-egress.crt`), so that a bundle
   * rebuilt inside the computer (`update-ca-certificates`) keeps trusting it.
   */
  readonly caCertificate?: string | undefined
}

export interface EgressShape {
  readonly computer: ComputerEgress
  /** The interception CA's certificate (PEM), when there are header rules. */
  readonly caCertificate: string | undefined
  /** The policy in a line, for the startup log (rule texts and header names, never values). */
  readonly summary: string
  /** Serves one connection of `computer` (what the backend's relay does with each relayed socket). */
  readonly serve: EgressProxy.EgressProxy["serve"]
  /** Proxy connections open for a computer now. */
  readonly open: (computer: string) => number
}

export class Egress extends Context.Tag("kilntainers/layers/egress/Egress")<Egress, EgressShape>() {}

/** Whether the settings ask for egress through the proxy. */
export const enabled = (settings: EgressSettings) => settings.allowHosts.length > 0

/** The variables of every process of a computer whose proxy is at 127.0.0.1:`port`. */
export const proxyEnvironment = (port: number, bundlePath = CA_BUNDLE_PATH): Readonly<Record<string, string>> => {
  const proxy = `http://127.0.0.1:${port}`
  const noProxy = "localhost,127.0.0.1,::1"
  const env: Record<string, string> = {
    HTTP_PROXY: proxy,
    http_proxy: proxy,
    HTTPS_PROXY: proxy,
    https_proxy: proxy,
    NO_PROXY: noProxy,
    no_proxy: noProxy,
    NODE_USE_ENV_PROXY: "1"
  }
  for (const name of CA_VARIABLES) env[name] = bundlePath
  return env
}

const errorText = (error: unknown) => (error instanceof Error ? error.message : String(error))

/** The PEM certificates of a file, each checked; refused when it holds none. */
export const readCertificates = (path: string): Effect.Effect<ReadonlyArray<string>, EgressError> =>
  Effect.tryPromise({
    try: async () => {
      const text = await readFile(path, "utf8")
      const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? []
      if (blocks.length === 0) throw new Error("no PEM certificate in it")
      for (const block of blocks) new X509Certificate(block)
      return blocks
    },
    catch: (error) => new EgressError({ reason: `--egress-ca-file ${path}: ${errorText(error)}` })
  })

const systemBundle = Effect.promise(async () => {
  for (const path of SYSTEM_BUNDLES) {
    const text = await readFile(path, "utf8").catch(() => undefined)
    if (text !== undefined && text.includes("-----BEGIN CERTIFICATE-----")) return text.trimEnd()
  }
  return rootCertificates.join("\n")
})

export interface EgressInput {
  readonly settings: EgressSettings
  /** The server's state directory: the CA lives in `<stateDir>/egress`. */
  readonly stateDir: string
  readonly audit: AuditLogShape
  readonly limits?: Partial<EgressProxy.ProxyLimits> | undefined
  /** Name lookups (default: DNS). */
  readonly lookup?: Lookup | undefined
}

/** Sets egress up; the proxy's connections end with the Scope. */
export const make = (input: EgressInput): Effect.Effect<EgressShape, EgressError, Scope.Scope> =>
  Effect.gen(function*() {
    const { settings } = input
    const policy = EgressPolicy.make({
      allow: settings.allowHosts,
      pins: settings.resolve,
      headers: settings.headers.map((header) => ({ spec: header.rule, value: header.value }))
    })
    if (Either.isLeft(policy)) return yield* new EgressError({ reason: policy.left })
    if (policy.right.allow.length === 0) return yield* new EgressError({ reason: "no --allow-host rule: there is nothing to proxy" })
    const extra = (yield* Effect.forEach(settings.upstreamCaFiles, readCertificates)).flat()
    const ca = policy.right.headers.length === 0
      ? undefined
      : yield* CertificateAuthority.make({ dir: join(input.stateDir, "egress") })
    const limits: EgressProxy.ProxyLimits = {
      ...EgressProxy.defaultLimits,
      maxConnectionsPerComputer: settings.maxConnections,
      idleTimeoutMs: settings.idleTimeoutMs,
      ...input.limits
    }
    const proxy = yield* EgressProxy.make({
      policy: policy.right,
      ca,
      upstreamCa: extra,
      audit: input.audit.record,
      limits,
      lookup: input.lookup
    })
    const bundle = [
      yield* systemBundle,
      ...extra.map((pem) => `# --egress-ca-file\n${pem}`),
      ...(ca === undefined ? [] : [`# kilntainers egress interception CA\n${ca.certificate.trim()}`])
    ].join("\n") + "\n"
    const headers = policy.right.headers.map((rule) => `${rule.pattern.text}: ${rule.header} from $${rule.variable}`)
    return {
      computer: {
        relayPort: settings.relayPort,
        env: proxyEnvironment(settings.relayPort),
        caBundle: bundle,
        caBundlePath: CA_BUNDLE_PATH,
        caCertificate: ca?.certificate
      },
      caCertificate: ca?.certificate,
      summary: `egress allowlist ${policy.right.allow.map((pattern) => pattern.text).join(", ")}` +
        (policy.right.pins.size === 0 ? "" : `; pinned ${[...policy.right.pins].map(([name, ip]) => `${name}=${ip}`).join(", ")}`) +
        (headers.length === 0 ? "" : `; headers ${headers.join(", ")}`),
      serve: proxy.serve,
      open: proxy.open
    }
  })

/** Egress from the server's settings; build it only when `enabled(settings.egress)`. */
export const layer: Layer.Layer<Egress, EgressError, Settings | AuditLog> = Layer.scoped(
  Egress,
  Effect.gen(function*() {
    const settings = yield* Settings
    const audit = yield* AuditLog
    const egress = yield* make({ settings: settings.egress, stateDir: settings.stateDir, audit })
    yield* Effect.logInfo(egress.summary)
    return egress
  })
)
