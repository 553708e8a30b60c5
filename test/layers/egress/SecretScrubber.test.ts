/** The scrubber masks a secret wherever it falls in the chunks, keeping every length. */
import { assert, describe, it } from "@effect/vitest"
import { Readable } from "node:stream"
import { maskForms, scrubHeader, scrubText, SecretScrubber } from "../../../src/layers/egress/SecretScrubber.js"

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

describe("SecretScrubber's forms of a secret", () => {
  it("masks the value and its credential without the scheme prefix, in any ASCII case", () => {
    assert.deepStrictEqual(maskForms(["Bearer abc123", "token  xyz", "plain-key", "  "]), ["Bearer abc123", "token  xyz", "plain-key", "abc123", "xyz"])
    assert.strictEqual(scrubText("x BEARER ABC123 y abc123 z AbC123", ["Bearer abc123"]), "x ************* y ****** z ******")
  })

  it("masks every form split across any chunks", async () => {
    const text = "<ABC123>bearer abc123<aBc123>"
    for (const size of [1, 2, 3, 5]) {
      const chunks = text.match(new RegExp(`[\\s\\S]{1,${size}}`, "g"))!
      assert.strictEqual(await through(chunks, ["Bearer abc123"]), "<******>*************<******>", `chunks of ${size}`)
    }
  })

  it("masks a non-ASCII secret as its Latin-1 and its UTF-8 bytes", async () => {
    const secret = "clé-42"
    const latin1 = Buffer.from(`a ${secret} b`, "latin1").toString("latin1")
    assert.strictEqual(scrubText(latin1, [secret]), "a ****** b")
    assert.strictEqual(await through([`a ${secret} b`], [secret]), "a ******* b")
  })
})
