/**
 * Issue 19, item 10: an upstream that echoes the injected credential cannot hand it to the guest.
 * The echo is masked in the status phrase, header names and values, and the body — the whole value
 * and the token without its `Bearer ` prefix, in any letter case, split across any chunks of a
 * streamed body, and inside a body the upstream compressed although the proxy asked for identity.
 * A coding the proxy cannot decode is refused (502) rather than passed on unmasked. What cannot be
 * masked (URL-, base64- or otherwise encoded echoes) is documented in the README. Every attack runs
 * against the proxy in a process of its own run as root and as an unprivileged user (EgressRig.ts).
 */
import { brotliDecompressSync, gunzipSync, inflateSync } from "node:zlib"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import { describeIf } from "../support/Requirements.js"
import { curl, echoes, holdsToken, proxyProcessAvailable, proxyProcessNeeds, type Rig, SECRET, startRig, TOKEN } from "./EgressRig.js"
import { modes } from "./HostServer.js"

/** Splits curl's `-i` output into the last response's head and body (bytes as latin1). */
const lastResponse = (out: string) => {
  const parts = out.split("\r\n\r\n")
  const heads = parts.filter((part) => /^HTTP\/1\.1 \d+/.test(part))
  const head = heads.at(-1) ?? ""
  return { head, body: out.slice(out.lastIndexOf(head) + head.length + 4) }
}

/** The body as the guest could read it: undoing a Content-Encoding the proxy passed on. */
const decoded = (head: string, body: string) => {
  const coding = /^content-encoding: *(.+)$/im.exec(head)?.[1]?.trim().toLowerCase()
  const bytes = Buffer.from(body, "latin1")
  const undo: Record<string, (data: Buffer) => Buffer> = { gzip: gunzipSync, deflate: inflateSync, br: brotliDecompressSync }
  if (coding === undefined) return bytes.toString("latin1")
  return coding.split(",").map((one) => one.trim()).reverse().reduce<Buffer>((data, one) => undo[one]!(data), bytes).toString("latin1")
}

describeIf(proxyProcessAvailable, proxyProcessNeeds)("echoes of the credential are masked in every form the proxy can see", () => {
  for (const mode of modes) {
    describe(`the proxy run as ${mode === "root" ? "root" : "an unprivileged user"}`, () => {
      let rig: Rig
      let base: string

      beforeAll(async () => {
        rig = await startRig({ mode, allow: ["api.test"], pins: ["api.test=127.0.0.1"], headers: ["api.test:Authorization=KT_SECRET"] })
        base = `https://api.test:${rig.upstreams.httpsPort}`
      }, 60_000)
      afterAll(() => rig?.close(), 30_000)

      it("in the status phrase, header names and values, and the body, with or without its prefix, in any case", async () => {
        const answer = await curl(rig, "-i", `${base}/reflect`)
        assert.strictEqual(answer.code, 0, answer.err)
        const { body, head } = lastResponse(answer.out)
        assert.match(head, /^HTTP\/1\.1 200 OK \*+\r\n/)
        assert.isFalse(holdsToken(answer.out), answer.out)
        const stars = (text: string) => "*".repeat(text.length)
        const forms = echoes(SECRET)
        assert.strictEqual(body, [
          `full=${stars(forms.full)}`,
          `bare=${stars(forms.bare)}`,
          `upper=${stars(forms.upper)}`,
          `lower=${stars(forms.lower)}`,
          `mixed=${stars(forms.mixed)}`
        ].join("\n") + "\n")
        assert.include(head, `x-bare: ${stars(TOKEN)}`)
        assert.include(head, `x-upper: ${stars(SECRET)}`)
        assert.include(head, `set-cookie: session=${stars(TOKEN)}`)
        assert.include(head, `x-${stars(TOKEN)}: named`)
        const upstream = rig.upstreams.seen.find((seen) => seen.url === "/reflect")
        assert.strictEqual(upstream?.headers.authorization, SECRET, "the upstream did get the credential")
      }, 60_000)

      it("across the chunk boundaries of a streamed body", async () => {
        const expected = lastResponse((await curl(rig, "-i", `${base}/reflect`)).out).body
        for (const size of [1, 2, 3, 5, 7, 11]) {
          const answer = await curl(rig, `${base}/stream?size=${size}`)
          assert.strictEqual(answer.code, 0, answer.err)
          assert.strictEqual(answer.out, expected, `writes of ${size} bytes`)
          assert.include(answer.out, `bare=${"*".repeat(TOKEN.length)}\nupper=`, `writes of ${size} bytes`)
          assert.isFalse(holdsToken(answer.out), `writes of ${size} bytes`)
        }
      }, 60_000)

      it("inside a body compressed although the proxy asked for identity: decoded, masked, passed on plain", async () => {
        for (const path of ["/gzip", "/deflate", "/br", "/gzip-br"]) {
          const answer = await curl(rig, "-i", `${base}${path}`)
          assert.strictEqual(answer.code, 0, answer.err)
          const { body, head } = lastResponse(answer.out)
          const text = decoded(head, body)
          assert.notMatch(head, /^content-encoding:/im, path)
          assert.include(text, `full=${"*".repeat(SECRET.length)}`, path)
          assert.isFalse(holdsToken(text), `${path}: ${text}`)
        }
        for (const seen of rig.upstreams.seen.filter((one) => one.url === "/gzip")) assert.strictEqual(seen.headers["accept-encoding"], "identity")
      }, 60_000)

      it("a coding the proxy cannot decode is refused with a 502, never passed on unmasked", async () => {
        const answer = await curl(rig, "-i", `${base}/compress`)
        assert.strictEqual(answer.code, 0, answer.err)
        const { body, head } = lastResponse(answer.out)
        assert.match(head, /^HTTP\/1\.1 502 /)
        assert.include(body, "Content-Encoding 'compress', which the proxy cannot decode")
        assert.isFalse(holdsToken(answer.out))
      }, 60_000)
    })
  }
})
