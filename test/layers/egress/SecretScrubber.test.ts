/** The scrubber masks a secret wherever it falls in the chunks, keeping every length. */
import { assert, describe, it } from "@effect/vitest"
import { Readable } from "node:stream"
import { scrubHeader, SecretScrubber } from "../../../src/layers/egress/SecretScrubber.js"

const through = async (chunks: ReadonlyArray<string>, secrets: ReadonlyArray<string>) => {
  const out: Array<Buffer> = []
  for await (const chunk of Readable.from(chunks.map((c) => Buffer.from(c))).pipe(new SecretScrubber(secrets))) out.push(chunk as Buffer)
  return Buffer.concat(out).toString()
}

describe("SecretScrubber", () => {
  it("masks every occurrence, split across chunks or not, keeping the length", async () => {
    const secret = "tok-123456"
    const text = `a ${secret} b ${secret}${secret} c`
    for (const size of [1, 2, 3, 7, 64]) {
      const chunks = text.match(new RegExp(`[\\s\\S]{1,${size}}`, "g"))!
      const out = await through(chunks, [secret, "other-secret"])
      assert.strictEqual(out, text.split(secret).join("*".repeat(secret.length)), `chunks of ${size}`)
    }
  })

  it("passes bytes without secrets through unchanged, and ends with the held tail", async () => {
    assert.strictEqual(await through(["hello ", "world", " tok-12345"], ["tok-123456"]), "hello world tok-12345")
    assert.strictEqual(await through([], ["x"]), "")
  })

  it("masks header values", () => {
    assert.strictEqual(scrubHeader("Bearer s3cret", ["s3cret"]), "Bearer ******")
    assert.deepStrictEqual(scrubHeader(["a=s3cret", "b"], ["s3cret"]), ["a=******", "b"])
  })
})
