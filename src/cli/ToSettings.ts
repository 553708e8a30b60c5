/** The resolved flags as the server's `Settings` and the HTTP transport's options. */
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import { homedir } from "node:os"
import { join } from "node:path"
import { defaultSettings, type EgressHeaderSetting, type SettingsShape } from "../services/Settings.js"
import { parseSize } from "../domain/Size.js"
import type { PrincipalToken } from "../layers/mcp/BearerAuth.js"
import { maxMessageBytes } from "../layers/mcp/Limits.js"
import * as EgressPolicy from "../layers/egress/EgressPolicy.js"
import { ConfigRefused } from "./CliError.js"
import type { FlagValues, Source } from "./FlagTable.js"
import { filesystemPolicy } from "./MountChecks.js"

/** `$XDG_STATE_HOME/kilntainers`, else `~/.local/state/kilntainers`. */
export const defaultStateDir = Config.string("XDG_STATE_HOME").pipe(
  Config.map((dir) => join(dir, "kilntainers")),
  Config.orElse(() => Config.string("HOME").pipe(Config.map((home) => join(home, ".local", "state", "kilntainers")))),
  Config.orElse(() => Config.succeed(join(homedir(), ".local", "state", "kilntainers")))
)

/**
 * The tokens of `--auth-principal NAME=VARIABLE`, read once from the server's environment (through
 * Config). A missing variable, a token a bearer header cannot carry, or one token for two principals
 * is refused: either would leave a client unable to tell which identity it has.
 */
const principalTokens = (pairs: Readonly<Record<string, string>>, authToken: string | undefined) =>
  Effect.gen(function*() {
    // Loaded here, not with the CLI: --help and refused flags answer before any server module loads.
    const { anonymous, defaultPrincipal, principalName, validateToken } = yield* Effect.promise(() => import("../layers/mcp/BearerAuth.js"))
    // Names a principal cannot take: `--auth-token`'s, and that of requests without a token.
    const reservedPrincipals = new Set([defaultPrincipal, anonymous])
    const tokens: Array<PrincipalToken> = []
    const seen = new Set(authToken === undefined ? [] : [authToken])
    for (const [principal, variable] of Object.entries(pairs)) {
      const rule = `--auth-principal ${principal}=${variable}`
      if (!principalName.test(principal) || reservedPrincipals.has(principal)) {
        return yield* new ConfigRefused({
          message: `${rule}: a principal is named with letters, digits, '.', '_' and '-' (at most 64), and not ` +
            `${[...reservedPrincipals].join(" or ")}`
        })
      }
      const value = yield* Config.option(Config.redacted(variable)).pipe(Effect.orElseSucceed(() => Option.none()))
      if (Option.isNone(value)) {
        return yield* new ConfigRefused({ message: `${rule}: the server's environment has no ${variable}; export it before starting kilntainers` })
      }
      const token = Redacted.value(value.value)
      const checked = validateToken(token, `${rule}: ${variable}`)
      if (Either.isLeft(checked)) return yield* new ConfigRefused({ message: checked.left })
      if (seen.has(token)) return yield* new ConfigRefused({ message: `${rule}: ${variable} is another principal's token too` })
      seen.add(token)
      tokens.push({ principal, token })
    }
    return tokens
  })

const mib = 1024 * 1024

/**
 * The HTTP transport's part of the flags (see `HttpServer.HttpOptions`). A per-principal cap left
 * unset is the server's with one principal (nobody to share with) and half of it with several.
 */
export const httpOptions = (values: FlagValues) =>
  Effect.gen(function*() {
    const authToken = values.authToken === undefined ? undefined : Redacted.value(values.authToken)
    const principals = yield* principalTokens(values.authPrincipal, authToken)
    const several = principals.length + (authToken === undefined ? 0 : 1) > 1
    const share = (total: number) => several ? Math.ceil(total / 2) : total
    const perPrincipalMiB = values.maxBodyMemoryPerPrincipal ?? share(values.maxBodyMemory)
    if (perPrincipalMiB > values.maxBodyMemory) {
      return yield* new ConfigRefused({
        message: `--max-body-memory-per-principal (${perPrincipalMiB} MiB) is more than --max-body-memory (${values.maxBodyMemory} MiB)`
      })
    }
    return {
      host: values.host,
      port: values.port,
      sessionTimeoutMs: values.sessionTimeout * 1000,
      authToken,
      principals,
      allowUnauthenticated: values.allowUnauthenticatedHttp,
      maxSessions: values.maxSessions,
      maxSessionsPerPrincipal: Math.min(values.maxSessions, values.maxSessionsPerPrincipal ?? share(values.maxSessions)),
      maxBodyBytes: maxMessageBytes,
      bodyMemory: { total: values.maxBodyMemory * mib, perPrincipal: perPrincipalMiB * mib }
    }
  })

/**
 * The secrets of `--egress-header` rules, read once from the server's environment (through Config).
 * A variable that is missing, empty or not a header value is refused: a rule that silently sends
 * nothing would look like a broken service.
 */
const egressHeaders = (rules: ReadonlyArray<string>) =>
  Effect.forEach(rules, (rule) =>
    Effect.gen(function*() {
      const spec = EgressPolicy.parseHeaderRule(rule)
      if (Either.isLeft(spec)) return yield* new ConfigRefused({ message: `--egress-header: ${spec.left}` })
      const variable = spec.right.variable
      const value = yield* Config.option(Config.redacted(variable)).pipe(Effect.orElseSucceed(() => Option.none()))
      if (Option.isNone(value)) {
        return yield* new ConfigRefused({
          message: `--egress-header ${rule}: the server's environment has no ${variable}; export it before starting kilntainers`
        })
      }
      const problem = EgressPolicy.headerValueProblem(Redacted.value(value.value))
      if (problem !== undefined) return yield* new ConfigRefused({ message: `--egress-header ${rule}: ${variable} ${problem}` })
      return { rule, value: value.value } satisfies EgressHeaderSetting
    }))

/**
 * process-mcp's DOCKER_CONTAINER names the container it creates unless DOCKER_USE_EXISTING=true:
 * only then is it a container to adopt. `--docker-container` (or KILNTAINERS_DOCKER_CONTAINER) always is.
 */
const adoptedContainer = (values: FlagValues, sources: { readonly dockerContainer?: Source } | undefined) => {
  const source = sources?.dockerContainer
  if (source?._tag === "Variable" && source.name === "DOCKER_CONTAINER" && !values.dockerUseExisting) return undefined
  return values.dockerContainer
}

export const toSettings = (values: FlagValues, sources?: { readonly dockerContainer?: Source }) =>
  Effect.gen(function*() {
    const stateDir = values.stateDir ?? (yield* Effect.orDie(defaultStateDir))
    const settings: SettingsShape = {
      ...defaultSettings,
      backend: values.backend === "go_busybox" ? "toolset" : values.backend,
      transport: values.transport,
      timeout: values.timeout,
      outputLimit: values.outputLimit,
      shell: values.shell,
      network: values.network,
      toolInstructionOverride: values.toolInstructionOverride,
      extendedToolInstruction: values.extendedToolInstruction,
      stateDir,
      unsafeNoSandbox: values.unsafeNoSandbox,
      bwrapPath: values.bwrapPath,
      spawnTimeoutMs: Math.min(values.spawnTimeoutMs, values.maxTimeoutMs),
      maxTimeoutMs: values.maxTimeoutMs,
      maxCallMs: Math.min(values.maxCallMs, values.maxTimeoutMs),
      inlineBytes: values.inlineBytes,
      stdinYieldMs: values.stdinYieldMs,
      psFinished: values.psFinished,
      warmPool: values.warmPool,
      maxCheckpoints: values.maxCheckpoints,
      maxFinished: values.maxFinished,
      headBytes: values.headBytes,
      tailBytes: values.tailBytes,
      retainBytes: values.retainBytes,
      cols: values.cols,
      rows: values.rows,
      killGraceMs: values.killGraceMs,
      env: values.env,
      engine: values.engine,
      dockerHost: values.dockerHost,
      image: values.image,
      cpu: values.cpu,
      memory: values.memory,
      pidsLimit: values.pidsLimit,
      dockerRunFlags: values.dockerRunFlag,
      fly: {
        app: values.flyApp,
        token: values.flyToken,
        image: values.flyImage,
        region: values.flyRegion,
        cpuKind: values.flyCpuKind,
        cpus: values.flyCpus,
        memoryMb: values.flyMemory,
        rootfsSizeGb: values.flyRootfsSize,
        previewPorts: values.flyPreviewPort.map(Number),
        apiUrl: values.flyApiUrl ?? defaultSettings.fly.apiUrl,
        rateLimit: { perSecond: values.flyRateLimit, burst: values.flyRateBurst }
      },
      e2b: {
        apiKey: values.e2bApiKey,
        template: values.e2bTemplate,
        sandboxTimeoutSec: values.e2bSandboxTimeout,
        maxRuntimeSec: values.e2bMaxRuntime,
        metadata: values.e2bMetadata,
        envs: values.e2bEnv,
        apiUrl: values.e2bApiUrl,
        sandboxUrl: values.e2bSandboxUrl,
        domain: values.e2bDomain,
        home: values.e2bHome
      },
      modal: {
        tokenId: values.modalTokenId,
        tokenSecret: values.modalTokenSecret,
        appName: values.modalAppName,
        image: values.modalImage,
        cpu: values.modalCpu,
        memoryMb: values.modalMemory,
        gpu: values.gpu,
        region: values.region,
        previewPorts: values.modalPreviewPort.map(Number),
        sandboxTimeoutSec: values.sandboxTimeout
      },
      kubernetes: {
        kubeconfig: values.k8sKubeconfig,
        context: values.k8sContext,
        namespace: values.k8sNamespace,
        template: values.k8sTemplate,
        image: values.k8sImage,
        runtimeClass: values.k8sRuntimeClass,
        cpu: values.k8sCpu,
        memory: values.k8sMemory,
        nodeSelector: values.k8sNodeSelector,
        warmPool: values.k8sWarmPool
      },
      wasmPath: values.wasmPath,
      wasmMaxMemoryMb: values.wasmMaxMemory,
      wasmMaxDiskBytes: parseSize(values.wasmMaxDisk) ?? defaultSettings.wasmMaxDiskBytes,
      wasmTimeoutMs: values.wasmTimeoutMs,
      otel: { endpoint: values.otelEndpoint, serviceName: values.otelServiceName },
      egress: {
        allowHosts: values.allowHost,
        resolve: values.egressResolve,
        headers: yield* egressHeaders(values.egressHeader),
        upstreamCaFiles: values.egressCaFile,
        relayPort: values.egressRelayPort,
        maxConnections: values.egressMaxConnections,
        idleTimeoutMs: values.egressIdleTimeout * 1000
      },
      preview: { ...defaultSettings.preview, host: values.previewHost, port: values.previewPort },
      auditLog: {
        path: values.auditLog,
        maxBytes: parseSize(values.auditLogMaxSize) ?? defaultSettings.auditLog.maxBytes,
        keep: values.auditLogKeep
      },
      filesystem: filesystemPolicy(values),
      workdir: values.workdir,
      dockerContainer: adoptedContainer(values, sources)
    }
    return settings
  })
