/**
 * `--backend auto` decided before anything else, so that the startup checks (shell, state
 * directory, other backends' flags) judge the backend that will really run: docker when an engine
 * answers, else host.
 */
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { ConfigRefused } from "./CliError.js"
import type { BackendName } from "./Flag.js"
import type { FlagValues } from "./FlagTable.js"

export interface BackendChoice {
  readonly backend: BackendName
  /** Why, when `auto` chose it. */
  readonly reason: string | undefined
}

/** The engine address is checked here for auto (an address that cannot work is no "no engine"). */
export const chooseBackend = (values: FlagValues): Effect.Effect<BackendChoice, ConfigRefused> => {
  if (values.backend === "go_busybox") return Effect.succeed({ backend: "toolset", reason: undefined })
  if (values.backend !== "auto") return Effect.succeed({ backend: values.backend, reason: undefined })
  const engine = values.engine
  // Loaded only for auto, as the composition root does: the Docker client is not small.
  return Effect.promise(() => import("../layers/backends/docker/DockerBackend.js")).pipe(
    Effect.tap(({ connectionOptions }) =>
      Either.match(connectionOptions({ engine, dockerHost: values.dockerHost }), {
        onLeft: (reason) => Effect.fail(new ConfigRefused({ message: `--docker-host: ${reason}` })),
        onRight: () => Effect.void
      })
    ),
    Effect.flatMap(({ ping }) => ping({ engine, dockerHost: values.dockerHost })),
    Effect.map((reachable): BackendChoice =>
      reachable
        ? { backend: "docker", reason: `a ${engine} engine answered; --backend host to use the host sandbox instead` }
        : { backend: "host", reason: `no ${engine} engine answered; --backend docker to insist` }
    )
  )
}
