/**
 * The Modal backend: a computer is one Modal Sandbox in the App `--modal-app-name`, made from the
 * registry image `--modal-image` (this backend's own flag, default debian:bookworm-slim — never the
 * Docker backend's --image), with --modal-cpu, --modal-memory (MiB), --gpu, --region,
 * --sandbox-timeout and `blockNetwork` unless --network. Modal is reached through ModalGateway (the
 * SDK adapter in ModalSdk.ts); the provider calls are in ModalProvider.ts, a connection's processes
 * and loss watch in ModalConnection.ts. This module builds the `Backend` over them. The kernel owns
 * every lifecycle decision.
 *
 * Sandboxes are named and tagged as SandboxIdentity.ts says. A running sandbox of that name without
 * our tags (or with another computer id) is not ours: creating over it is refused, and it is never
 * touched.
 *
 * Lifetime — what "permanent" means here: a Modal sandbox always ends at its timeout
 * (--sandbox-timeout, default 1 h, at most 24 h, counted from its creation), and its filesystem goes
 * with it; `Instance.endsAt` says when, so that agents are warned before it. A permanent computer
 * is one that closing the server (or its session) leaves running, so that this or another server
 * can find it by id until that timeout; nothing extends it (Modal has no keep-alive for a
 * sandbox's lifetime), so there is no renewal. Temporary sandboxes of a server that crashed are
 * reaped by the next server on the same host, else they end at their timeout.
 *
 * Lifecycle: restart is not offered — Modal cannot restart a sandbox keeping its filesystem, and
 * stop-and-recreate would silently lose the state. Factory reset (the kernel: remove, then create)
 * makes a new sandbox of the same name from the image recorded in its tags. No warm pool: a
 * sandbox's name and tags are fixed at creation, so it cannot be handed out under another id.
 *
 * Checkpoints are Modal filesystem snapshots, kept as Modal images (ModalCheckpoints.ts).
 *
 * The image needs /bin/sh, `env`, `kill`, `cat`, `setsid` (util-linux or busybox) and, for TTYs,
 * `stty`.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import type { ProviderError } from "../../../domain/Errors.js"
import { Unsupported } from "../../../domain/Errors.js"
import { type Capabilities, capabilitiesWithout } from "../../../services/Backend.js"
import { Backend } from "../../../services/Backend.js"
import * as NativeBinaries from "../agent/NativeBinaries.js"
import * as ModalAgent from "./ModalAgent.js"
import * as ModalCheckpoints from "./ModalCheckpoints.js"
import * as ModalConnection from "./ModalConnection.js"
import { BACKEND, modalError } from "./ModalError.js"
import type { ModalGatewayService } from "./ModalGateway.js"
import * as Options from "./ModalOptions.js"
import * as ModalProvider from "./ModalProvider.js"
import * as ModalSdk from "./ModalSdk.js"
import { sandboxName } from "./SandboxIdentity.js"

export * from "./ModalOptions.js"
export { ENDS_TAG } from "./SandboxIdentity.js"
export { sandboxName }

export const NAME = BACKEND
export const HOME = ModalProvider.HOME

/** The capabilities of the Modal backend (see the header for restart; checkpoints: ModalCheckpoints.ts). */
export const capabilities: Capabilities = capabilitiesWithout({ restart: false })

/** The gateway the options ask for: given, over a given client, or over the SDK with the tokens. */
const gatewayFor = (options: Options.ModalBackendOptions) =>
  Effect.gen(function*() {
    if (options.gateway !== undefined) return options.gateway
    if (options.client !== undefined) {
      const logger = ModalSdk.sdkLogger(yield* Effect.runtime<never>())
      return ModalSdk.fromClient(options.client, (message) => logger.warn(message))
    }
    if (options.tokenId === undefined || options.tokenSecret === undefined) {
      return yield* modalError(
        "connect to Modal",
        "Denied",
        "Modal credentials are missing: pass --modal-token-id and --modal-token-secret (or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET); create a token with 'modal token new' or at modal.com/settings/tokens"
      )
    }
    const made: ModalGatewayService = yield* ModalSdk.sdk({
      tokenId: Redacted.value(options.tokenId),
      tokenSecret: Redacted.value(options.tokenSecret)
    })
    yield* Effect.addFinalizer(() => made.close)
    return made
  })

/** The Modal backend. Building it makes no Modal call (credentials are checked on first use). */
export const make = (options: Options.ModalBackendOptions) =>
  Effect.gen(function*() {
    const invalid = Options.invalidOptions(options)
    if (invalid !== undefined) return yield* modalError("start", "Invalid", invalid)
    const gateway = yield* gatewayFor(options)
    // Without the agent's binary sandboxes still work: their processes are then the server's (ModalConnection.ts).
    const binaries = yield* Effect.option(NativeBinaries.locate(NAME, ModalAgent.AGENT_PLATFORM))
    const provider = ModalProvider.make({
      ...options,
      gateway,
      callTimeoutMs: options.callTimeoutMs ?? Options.DEFAULT_CALL_TIMEOUT_MS,
      watchIntervalMs: options.watchIntervalMs ?? Options.DEFAULT_WATCH_INTERVAL_MS
    })
    return Backend.of({
      name: NAME,
      capabilities,
      labelStyle: "dashed",
      image: options.image,
      find: provider.find,
      create: (metadata) =>
        provider.create(metadata).pipe(Effect.tap((instance) =>
          Effect.logInfo(
            `${NAME} backend: created sandbox ${sandboxName(metadata.id)} (${instance.providerId}) from ${metadata.image}${metadata.temporary ? " (temporary)" : ""}`
          )
        )),
      start: provider.start,
      connect: ModalConnection.connect({
        gateway,
        provider,
        sandboxTimeoutSec: options.sandboxTimeoutSec,
        binaries,
        agentArgs: [
          ...(options.retainBytes === undefined ? [] : ["--retain", String(options.retainBytes)]),
          ...(options.maxFinished === undefined ? [] : ["--max-finished", String(options.maxFinished)])
        ]
      }),
      restart: () =>
        Effect.fail(new Unsupported({ backend: NAME, feature: "restart (a Modal sandbox cannot be restarted keeping its files; factory reset recreates it)" })),
      remove: provider.remove,
      checkpoints: ModalCheckpoints.make({ gateway, provider })
    })
  })

/** The Modal backend as a Layer; bad options fail it. */
export const layer = (options: Options.ModalBackendOptions): Layer.Layer<Backend, ProviderError> => Layer.scoped(Backend, make(options))
