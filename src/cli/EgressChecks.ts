/**
 * The startup checks of the egress flags and the audit log. An allowlist that a backend would
 * ignore is refused, never warned about: computers with more network than the user asked for fail
 * open. Only `*` alone (it restricts nothing) is accepted with a warning where it cannot apply.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Redacted from "effect/Redacted"
import { stat } from "node:fs/promises"
import { dirname } from "node:path"
import * as EgressPolicy from "../layers/egress/EgressPolicy.js"
import * as HostPattern from "../layers/egress/HostPattern.js"
import { parseSize } from "../domain/Size.js"
import type { SettingsShape } from "../services/Settings.js"
import type { BackendChoice } from "./BackendChoice.js"
import { ConfigRefused } from "./CliError.js"
import type { ResolvedFlags } from "./ResolvedFlags.js"

const refuse = (message: string) => Effect.fail(new ConfigRefused({ message }))

/** Backends that carry the allowlist through our proxy, those whose provider enforces it, and why the others cannot. */
const ENFORCED = new Set(["host", "docker"])
const PROVIDER_ENFORCED = new Set(["e2b", "modal"])
const WHY_NOT: Record<string, string> = {
  fly: "Fly Machines have no egress controls kilntainers can set",
  kubernetes: "pods have the cluster's network; a NetworkPolicy of the cluster's own restricts it",
  wasm: "WASM computers have no network at all",
  toolset: "toolset computers have no network at all"
}

const checkAuditLog = (resolved: ResolvedFlags) =>
  Effect.gen(function*() {
    const { auditLog, auditLogMaxSize } = resolved.values
    const size = parseSize(auditLogMaxSize)
    if (size === undefined || size < 4096) {
      return yield* refuse(`--audit-log-max-size must be a size of at least 4k, such as 16m (got ${JSON.stringify(auditLogMaxSize)})`)
    }
    if (auditLog === undefined) return
    const parent = yield* Effect.tryPromise(() => stat(dirname(auditLog))).pipe(Effect.option)
    if (parent._tag === "None" || !parent.value.isDirectory()) {
      return yield* refuse(`--audit-log ${auditLog}: the directory ${dirname(auditLog)} does not exist`)
    }
    const file = yield* Effect.tryPromise(() => stat(auditLog)).pipe(Effect.option)
    if (file._tag === "Some" && !file.value.isFile()) return yield* refuse(`--audit-log ${auditLog} is not a regular file`)
  })

/** Refuses what cannot work; returns warnings. */
export const egressChecks = (resolved: ResolvedFlags, choice: BackendChoice, settings: SettingsShape) =>
  Effect.gen(function*() {
    yield* checkAuditLog(resolved)
    const values = resolved.values
    const { egress } = settings
    const warnings: Array<string> = []
    const extras = [
      ["--egress-header", egress.headers.length],
      ["--egress-resolve", egress.resolve.length],
      ["--egress-ca-file", egress.upstreamCaFiles.length]
    ].filter(([, count]) => count !== 0).map(([name]) => name)
    if (egress.allowHosts.length === 0) {
      if (extras.length > 0) {
        return yield* refuse(`${extras.join(", ")} need${extras.length === 1 ? "s" : ""} --allow-host: without an allowlist there is no egress proxy`)
      }
      return warnings
    }
    const policy = EgressPolicy.make({ allow: egress.allowHosts, pins: egress.resolve, headers: egress.headers.map((h) => ({ spec: h.rule, value: h.value })) })
    if (Either.isLeft(policy)) return yield* refuse(policy.left)
    const everything = policy.right.allow.length === 1 && policy.right.allow[0]!.text === "*" && extras.length === 0
    if (PROVIDER_ENFORCED.has(choice.backend)) {
      if (values.network) {
        return yield* refuse("--network gives computers direct network access, which --allow-host takes away: use one or the other")
      }
      const cloud = yield* Effect.promise(() => import("../layers/egress/CloudEgress.js"))
      const mapped: Either.Either<unknown, string> = choice.backend === "e2b" ? cloud.e2bNetwork(egress) : cloud.modalOutbound(egress)
      if (Either.isLeft(mapped)) return yield* refuse(`${mapped.left} (--backend ${choice.backend}); use --backend host or docker for the full egress proxy`)
      if (mapped.right === undefined) warnings.push(`--allow-host '*' has no effect on --backend ${choice.backend}: its own network settings apply`)
      return warnings
    }
    if (!ENFORCED.has(choice.backend)) {
      if (everything) {
        warnings.push(`--allow-host '*' has no effect on --backend ${choice.backend}: its own network settings apply`)
        return warnings
      }
      return yield* refuse(
        `--allow-host cannot be enforced on --backend ${choice.backend} (${WHY_NOT[choice.backend] ?? "no egress control"}); ` +
          `use --backend host or docker, or drop the egress flags`
      )
    }
    if (values.network) {
      return yield* refuse("--network gives computers direct network access, which --allow-host takes away: use one or the other")
    }
    if (choice.backend === "host" && values.unsafeNoSandbox) {
      return yield* refuse("--allow-host cannot be enforced with --unsafe-no-sandbox: unsandboxed processes use this host's network directly")
    }
    const files = yield* Effect.promise(() => import("../layers/egress/Egress.js"))
    for (const path of egress.upstreamCaFiles) {
      const read = yield* Effect.either(files.readCertificates(path))
      if (Either.isLeft(read)) return yield* refuse(read.left.reason)
    }
    for (const rule of policy.right.headers) {
      const secret = Redacted.value(rule.value)
      if (rule.variable in settings.env || Object.values(settings.env).some((value) => value.includes(secret))) {
        return yield* refuse(
          `--egress-header: ${rule.variable} is also given to computers by --env; the point of the rule is that its value never enters a computer`
        )
      }
      if (rule.pattern.match._tag === "Exact") {
        const target = { host: rule.pattern.match.host, port: rule.pattern.port ?? 443 }
        if (EgressPolicy.decide(policy.right, target)._tag === "Denied") {
          warnings.push(
            `--egress-header ${rule.pattern.text}:${rule.header}: no --allow-host rule allows ${HostPattern.formatAuthority(target)}, so it is never sent`
          )
        }
      }
    }
    return warnings
  })
