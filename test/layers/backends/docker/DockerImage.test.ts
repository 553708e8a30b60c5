/**
 * An image pull read as a Stream. No registry is reachable here, so the engine's answer is the one
 * thing faked: a response of JSON lines as the Engine API sends it (split anywhere), on a real
 * engine client whose `getImage` and `pull` are replaced.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Readable } from "node:stream"
import * as DockerEngine from "../../../../src/layers/backends/docker/DockerEngine.js"
import * as DockerImage from "../../../../src/layers/backends/docker/DockerImage.js"

const missing = Object.assign(new Error("(HTTP code 404) no such image"), { statusCode: 404, json: { message: "No such image: x" } })

/** An engine that has no image and answers a pull with `chunks`. */
const engineAnswering = (chunks: ReadonlyArray<string>) =>
  Effect.map(DockerEngine.make({ engine: "docker", dockerHost: "unix:///nonexistent/docker.sock" }), (engine) => {
    const docker = engine.docker as unknown as Record<string, unknown>
    docker["getImage"] = () => ({ inspect: () => Promise.reject(missing) })
    docker["pull"] = () => Promise.resolve(Readable.from(chunks.map((chunk) => Buffer.from(chunk))))
    return engine
  })

describe("pulling an image", () => {
  it.live("each progress event is one line, in order, however the response is cut", () =>
    Effect.gen(function*() {
      const engine = yield* engineAnswering([
        `{"status":"Pulling from library/debian","id":"bookworm"}\n{"status":"Downlo`,
        `ading","progressDetail":{},"progress":"[=>   ] 1MB/20MB","id":"abc123"}\n`,
        `\n{"status":"Status: Downloaded newer image for debian:bookworm"}\n`
      ])
      const lines: Array<string> = []
      yield* DockerImage.ensure(engine, "debian:bookworm", (line) => lines.push(line))
      assert.deepStrictEqual(lines, [
        "docker: pulling debian:bookworm: bookworm Pulling from library/debian",
        "docker: pulling debian:bookworm: abc123 Downloading [=>   ] 1MB/20MB",
        "docker: pulling debian:bookworm: Status: Downloaded newer image for debian:bookworm"
      ])
    }))

  it.live("an error inside a successful response is the pull's failure, said with the engine's words", () =>
    Effect.gen(function*() {
      const engine = yield* engineAnswering([
        `{"status":"Trying to pull docker.io/library/nope:latest..."}\n`,
        `{"error":"manifest unknown","errorDetail":{"message":"manifest unknown"}}\n`,
        `{"status":"never read"}\n`
      ])
      const lines: Array<string> = []
      const error = yield* Effect.flip(DockerImage.ensure(engine, "nope", (line) => lines.push(line)))
      assert.strictEqual(error._tag, "ProviderError")
      assert.include(error.message, "pulling it failed: manifest unknown")
      assert.deepStrictEqual(lines, ["docker: pulling nope: Trying to pull docker.io/library/nope:latest..."])
    }))
})
