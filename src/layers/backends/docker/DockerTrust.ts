/**
 * The egress CA bundle in containers: put into each container as it is connected to (created,
 * reset, restarted or an existing permanent one attached), before its agent starts, so every
 * process finds it where `ComputerEgress.env` points (`/etc/ssl/certs/ca-certificates.crt`, made
 * when the image has no `/etc/ssl/certs`, as debian:bookworm-slim does not). The interception CA
 * alone also goes to `/usr/local/share/ca-certificates/kilntainers-egress.crt`, so that an
 * `apt-get install ca-certificates` inside, whose `update-ca-certificates` rewrites the bundle,
 * keeps trusting it. Certificates only: nothing here is secret.
 *
 * A container whose root is read-only (`--docker-run-flag --read-only`) cannot take it, nor the
 * agent whose relay is its only network: the connection is then refused (DockerConnection).
 */
import * as Effect from "effect/Effect"
import type { ComputerEgress } from "../../egress/Egress.js"
import { CA_CERTIFICATE_PATH } from "../../egress/EgressPaths.js"
import { containerName } from "./DockerContainers.js"
import type { Engine } from "./DockerEngine.js"
import { archive, type UstarEntry } from "./Ustar.js"

const directories = (path: string): Array<UstarEntry> => {
  const parts = path.split("/").filter((part) => part !== "").slice(0, -1)
  // The top level (etc, usr) exists in every image; the rest is made (or kept: root's, 0755) as needed.
  return parts.slice(1).map((_, index) => ({ name: `${parts.slice(0, index + 2).join("/")}/`, mode: 0o755 }))
}

/** The archive of what a container gets. */
export const trustArchive = (egress: ComputerEgress): Buffer => {
  const entries: Array<UstarEntry> = [
    ...directories(egress.caBundlePath),
    { name: egress.caBundlePath.slice(1), mode: 0o644, data: Buffer.from(egress.caBundle) }
  ]
  if (egress.caCertificate !== undefined) {
    entries.push(...directories(CA_CERTIFICATE_PATH), {
      name: CA_CERTIFICATE_PATH.slice(1),
      mode: 0o644,
      data: Buffer.from(egress.caCertificate)
    })
  }
  return archive(entries)
}

/** Puts the bundle into a running container; a container that refuses it is said on stderr. */
export const install = (engine: Engine, providerId: string, computerId: string, egress: ComputerEgress) =>
  engine.call("put the egress CA bundle", (signal) =>
    engine.docker.getContainer(providerId).putArchive(trustArchive(egress), { path: "/", abortSignal: signal })).pipe(
      Effect.asVoid,
      Effect.catchAll((error) =>
        Effect.logWarning(
          `${engine.name} backend: ${containerName(computerId)}: cannot put the egress CA bundle at ${egress.caBundlePath} (${error.detail}); TLS clients there will not trust intercepted hosts`
        )
      )
    )
