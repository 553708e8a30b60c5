/**
 * The egress CA bundle in host computers: written once per server start to
 * `<stateDir>/egress/ca-bundle.crt` (0644, certificates only; the directory is 0700, which a bind
 * mount does not mind) and bound read-only over `/etc/ssl/certs/ca-certificates.crt` after the
 * sandbox's /etc view, where every variable of `ComputerEgress.env` points. The bundle is too large
 * for one `--kt-data` argument (128 KiB), hence a file.
 */
import * as Effect from "effect/Effect"
import { chmod, mkdir, writeFile } from "node:fs/promises"
import { join, resolve } from "node:path"
import { type ProviderError, providerError } from "../../../domain/Errors.js"
import type { ComputerEgress } from "../../egress/Egress.js"
import type { Bind } from "./Launcher.js"

/** Writes the bundle and gives the bind every sandbox gets. */
export const binds = (stateDir: string, egress: ComputerEgress): Effect.Effect<ReadonlyArray<Bind>, ProviderError> =>
  Effect.tryPromise({
    try: async () => {
      const dir = resolve(stateDir, "egress")
      await mkdir(dir, { recursive: true, mode: 0o700 })
      const file = join(dir, "ca-bundle.crt")
      await writeFile(file, egress.caBundle, { mode: 0o644 })
      await chmod(file, 0o644)
      return [{ source: file, dest: egress.caBundlePath, mode: "read-only" as const }]
    },
    catch: (error) => providerError("host", "write the egress CA bundle", "Failed", String(error), error)
  })
