/**
 * Building an image from a recipe through the Engine API, on Docker and on Podman: the engine's
 * output line by line, the recipe's hash as a label, the build's own failure as the error, and the
 * same hash for the same recipe.
 */
import { assert, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as DockerEngine from "../../../../src/layers/backends/docker/DockerEngine.js"
import * as DockerImageBuild from "../../../../src/layers/backends/docker/DockerImageBuild.js"
import { docker, engineWorks, requirement, TEST_IMAGE, type TestEngine } from "../../../support/Docker.js"
import { describeIf } from "../../../support/Requirements.js"

const recipe = (dockerfile: string, extra: Record<string, string> = {}) => {
  const dir = mkdtempSync(join(tmpdir(), "kt-recipe-"))
  writeFileSync(join(dir, "Dockerfile"), dockerfile)
  for (const [name, content] of Object.entries(extra)) writeFileSync(join(dir, name), content)
  return dir
}

it("the recipe's hash follows its files' names and contents, nothing else", () => {
  const a = recipe("FROM x\n", { "note.txt": "one" })
  const b = recipe("FROM x\n", { "note.txt": "one" })
  const c = recipe("FROM x\n", { "note.txt": "two" })
  const d = recipe("FROM x\n", { "other.txt": "one" })
  assert.strictEqual(DockerImageBuild.recipeHash(a), DockerImageBuild.recipeHash(b))
  assert.notStrictEqual(DockerImageBuild.recipeHash(a), DockerImageBuild.recipeHash(c))
  assert.notStrictEqual(DockerImageBuild.recipeHash(a), DockerImageBuild.recipeHash(d))
  assert.match(DockerImageBuild.recipeHash(a), /^[0-9a-f]{16}$/)
})

for (const engine of ["docker", "podman"] as const satisfies ReadonlyArray<TestEngine>) {
  describeIf(engineWorks(engine), requirement(engine))(`image builds on ${engine}`, () => {
    const tag = `kilntainers-test/build-${engine}:${process.pid}`
    const make = DockerEngine.make({ engine, dockerHost: undefined })

    it.live("a recipe is built on its base, its output shown line by line, its hash on the image", () =>
      Effect.gen(function*() {
        const dir = recipe("ARG BASE\nFROM ${BASE}\nCOPY note.txt /note.txt\nRUN echo \"step ran on $(cat /etc/debian_version)\"\n", {
          "note.txt": "copied\n"
        })
        const lines: Array<string> = []
        const built = yield* DockerImageBuild.build(yield* make, {
          recipe: dir,
          tag,
          base: TEST_IMAGE,
          onProgress: (line) => Effect.sync(() => void lines.push(line))
        })
        assert.strictEqual(built.tag, tag)
        assert.strictEqual(built.recipe, DockerImageBuild.recipeHash(dir))
        assert.isTrue(lines.some((line) => /^step ran on 12\./.test(line)), lines.join("\n"))
        const info = yield* Effect.promise(() => docker(engine).getImage(tag).inspect())
        assert.strictEqual(info.Id, built.id)
        assert.strictEqual(info.Config.Labels?.[DockerImageBuild.RECIPE_LABEL], built.recipe)
        assert.strictEqual(info.Config.Labels?.["kilntainers-image.base"], TEST_IMAGE)
      }).pipe(Effect.ensuring(Effect.promise(() => docker(engine).getImage(tag).remove({ force: true }).catch(() => undefined)))), 120_000)

    it.live("a step that fails fails the build with the engine's words; a missing base is said before anything is sent", () =>
      Effect.gen(function*() {
        const failing = recipe("ARG BASE\nFROM ${BASE}\nRUN echo about to fail && exit 3\n")
        const lines: Array<string> = []
        const error = yield* Effect.flip(DockerImageBuild.build(yield* make, {
          recipe: failing,
          tag,
          base: TEST_IMAGE,
          onProgress: (line) => Effect.sync(() => void lines.push(line))
        }))
        assert.strictEqual(error.reason, "Failed")
        assert.match(error.message, /exit (code|status)[: ]*3|returned a non-zero code: 3/)
        assert.isTrue(lines.some((line) => line.includes("about to fail")), lines.join("\n"))
        const gone = yield* Effect.flip(DockerImageBuild.build(yield* make, {
          recipe: failing,
          tag,
          base: "kilntainers-test/no-such-base:1",
          onProgress: () => Effect.void
        }))
        assert.strictEqual(gone.reason, "NotFound")
        assert.include(gone.message, "its base image 'kilntainers-test/no-such-base:1' is not on the")
        const empty = yield* Effect.flip(DockerImageBuild.build(yield* make, {
          recipe: mkdtempSync(join(tmpdir(), "kt-recipe-")),
          tag,
          base: TEST_IMAGE,
          onProgress: () => Effect.void
        }))
        assert.include(empty.message, "has no Dockerfile")
      }), 120_000)
  })
}
