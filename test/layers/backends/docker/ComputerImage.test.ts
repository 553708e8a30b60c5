/**
 * The Docker backend's default image, had on first use: built once from its recipe when the engine
 * lacks it (callers at once share the build and hear its steps as progress), used as it is when the
 * engine has it, and a failed build said with what to do and tried again by the next computer. A
 * small recipe of the same shape stands in for images/computer, so a build takes seconds.
 */
import { assert, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Scope } from "effect"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as ComputerImage from "../../../../src/layers/backends/docker/ComputerImage.js"
import { COMPUTER_IMAGE, recipeDirectory } from "../../../../src/layers/backends/docker/ComputerRecipe.js"
import * as DockerBackend from "../../../../src/layers/backends/docker/DockerBackend.js"
import * as DockerEngine from "../../../../src/layers/backends/docker/DockerEngine.js"
import { CurrentCallBudget, CurrentProgress } from "../../../../src/services/Progress.js"
import { docker, engineWorks, requirement, TEST_ENGINE, TEST_IMAGE } from "../../../support/Docker.js"
import { describeIf } from "../../../support/Requirements.js"

const recipe = (dockerfile: string) => {
  const dir = mkdtempSync(join(tmpdir(), "kt-computer-recipe-"))
  writeFileSync(join(dir, "Dockerfile"), dockerfile)
  return dir
}

it("the computer image is the Docker backend's default, with the recipe shipped beside the code", () => {
  assert.strictEqual(DockerBackend.DEFAULT_IMAGE, COMPUTER_IMAGE)
  assert.isDefined(recipeDirectory())
})

describeIf(engineWorks(TEST_ENGINE), requirement())(`the computer image on first use (${TEST_ENGINE})`, () => {
  const tag = `kilntainers-test/computer-${TEST_ENGINE}:${process.pid}`
  const engine = DockerEngine.make({ engine: TEST_ENGINE, dockerHost: undefined })
  const removeImage = Effect.promise(() => docker().getImage(tag).remove({ force: true }).catch(() => undefined))

  it.live("a missing image is built once for computers that ask at once, and each hears the build's steps", () =>
    Effect.gen(function*() {
      yield* removeImage
      const lines: Array<string> = []
      const image = yield* ComputerImage.make(yield* engine, {
        tag,
        base: TEST_IMAGE,
        recipe: recipe("ARG BASE\nFROM ${BASE}\nRUN echo built > /built\n"),
        onProgress: (line) => void lines.push(line)
      })
      const heard: Array<Array<string>> = [[], []]
      const asking = (n: number) =>
        Effect.locally(image.ready, CurrentProgress, (p) => Effect.sync(() => void heard[n]!.push(p.message ?? "")))
      yield* Effect.all([asking(0), asking(1)], { concurrency: "unbounded" })
      assert.strictEqual(lines.filter((line) => line.includes(`building ${tag}, the computer image`)).length, 1, lines.join("\n"))
      assert.isTrue(lines.some((line) => /built .* in \d+ s/.test(line)), lines.join("\n"))
      for (const messages of heard) assert.isTrue(messages.some((m) => /Step|STEP|building/.test(m)), messages.join("\n"))
      const info = yield* Effect.promise(() => docker().getImage(tag).inspect())
      assert.isDefined(info.Id)
      // Once had, it is not looked for again.
      yield* image.ready
      assert.strictEqual(lines.filter((line) => line.includes(`building ${tag}, the computer image`)).length, 1)
    }).pipe(Effect.ensuring(removeImage)), 300_000)

  it.live("a caller that hears no progress is answered within its budget, told the build goes on; one that listens hears it every second", () =>
    Effect.gen(function*() {
      yield* removeImage
      const scope = yield* Scope.make()
      const lines: Array<string> = []
      const image = yield* ComputerImage.make(yield* engine, {
        tag,
        base: TEST_IMAGE,
        recipe: recipe("ARG BASE\nFROM ${BASE}\nRUN sleep 6 && echo built > /built\n"),
        onProgress: (line) => void lines.push(line)
      }, scope)
      // A client without a progress token (its request times out at 60 s): answered at its budget.
      const asked = Date.now()
      const early = yield* Effect.flip(Effect.locally(image.ready, CurrentCallBudget, 1_500))
      assert.isBelow(Date.now() - asked, 5_000)
      assert.strictEqual(early.reason, "Unavailable")
      assert.match(early.message, new RegExp(`its image ${tag.replace(/[/.]/g, "\\$&")} is being built, the first time on this engine`))
      assert.include(early.message, "and the build goes on. Call again in a minute or two")
      // A client that listens: the latest step again every second, with the time so far, numbered upwards.
      const heard: Array<{ progress: number; message?: string }> = []
      yield* Effect.locally(image.ready, CurrentProgress, (p) => Effect.sync(() => void heard.push(p)))
      const beats = heard.filter((p) => / \(\d+ s so far\)$/.test(p.message ?? ""))
      assert.isAtLeast(beats.length, 2, JSON.stringify(heard))
      assert.isTrue(heard.every((p, i) => i === 0 || p.progress > heard[i - 1]!.progress), JSON.stringify(heard))
      // One build, which the first caller's answer did not end.
      assert.strictEqual(lines.filter((line) => line.includes(`building ${tag}, the computer image`)).length, 1, lines.join("\n"))
      assert.isDefined((yield* Effect.promise(() => docker().getImage(tag).inspect())).Id)
      yield* Scope.close(scope, Exit.void)
    }).pipe(Effect.ensuring(removeImage)), 300_000)

  it.live("an image the engine has is used as it is, even when built from another recipe", () =>
    Effect.gen(function*() {
      yield* Effect.promise(() => docker().getImage(TEST_IMAGE).tag({ repo: tag.split(":")[0]!, tag: tag.split(":")[1]! }))
      const lines: Array<string> = []
      const image = yield* ComputerImage.make(yield* engine, {
        tag,
        base: TEST_IMAGE,
        recipe: recipe("ARG BASE\nFROM ${BASE}\nRUN echo a different recipe\n"),
        onProgress: (line) => void lines.push(line)
      })
      yield* image.ready
      assert.deepStrictEqual(lines, [])
    }).pipe(Effect.ensuring(removeImage)), 60_000)

  it.live("a failed build says what to do, and the next computer tries again", () =>
    Effect.gen(function*() {
      yield* removeImage
      const lines: Array<string> = []
      const image = yield* ComputerImage.make(yield* engine, {
        tag,
        base: TEST_IMAGE,
        recipe: recipe("ARG BASE\nFROM ${BASE}\nRUN exit 7\n"),
        onProgress: (line) => void lines.push(line)
      })
      const first = yield* Effect.flip(image.ready)
      assert.include(first.message, `${tag} is not on the ${TEST_ENGINE} engine and building it failed`)
      assert.include(first.message, "kilntainers image build")
      yield* Effect.flip(image.ready)
      assert.strictEqual(lines.filter((line) => line.includes(`building ${tag}, the computer image`)).length, 2, lines.join("\n"))
      const missing = yield* ComputerImage.make(yield* engine, { tag, base: TEST_IMAGE, recipe: undefined })
      const said = yield* Effect.flip(missing.ready)
      assert.strictEqual(said.reason, "NotFound")
      assert.include(said.message, "its recipe (images/computer) is not in this installation")
    }).pipe(Effect.ensuring(removeImage)), 300_000)

  it.live("a build started in the backend's scope outlives the call that started it", () =>
    Effect.gen(function*() {
      yield* removeImage
      const scope = yield* Scope.make()
      const lines: Array<string> = []
      const image = yield* ComputerImage.make(yield* engine, {
        tag,
        base: TEST_IMAGE,
        recipe: recipe("ARG BASE\nFROM ${BASE}\nRUN sleep 2 && echo built > /built\n"),
        onProgress: (line) => void lines.push(line)
      }, scope)
      const call = yield* Effect.fork(image.ready)
      yield* Effect.sleep("500 millis")
      yield* Fiber.interrupt(call)
      // A later caller joins the same build, which went on.
      yield* image.ready
      assert.strictEqual(lines.filter((line) => line.includes(`building ${tag}, the computer image`)).length, 1, lines.join("\n"))
      const info = yield* Effect.promise(() => docker().getImage(tag).inspect())
      assert.isDefined(info.Id)
      yield* Scope.close(scope, Exit.void)
    }).pipe(Effect.ensuring(removeImage)), 300_000)
})
