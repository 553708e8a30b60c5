import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { createHash } from "node:crypto"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as NativeChecksums from "../../../../src/layers/backends/agent/NativeChecksums.js"

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex")

/** A package directory with helpers under `where` (prebuilt or native/build) and their manifest. */
const writeHelpers = (root: string, where: string, platform: string, dir: string, files: Record<string, string>) => {
  mkdirSync(join(root, where, dir), { recursive: true })
  const records: Record<string, { sha256: string; bytes: number }> = {}
  for (const [name, content] of Object.entries(files)) {
    writeFileSync(join(root, where, dir, name), content)
    records[name] = { sha256: sha256(content), bytes: content.length }
  }
  writeFileSync(join(root, where, "manifest.json"), JSON.stringify({ schema: 1, platforms: { [platform]: { dir, files: records } } }))
}

describe("NativeChecksums", () => {
  const base = mkdtempSync(join(tmpdir(), "kt-checksums-"))
  afterAll(() => rmSync(base, { recursive: true, force: true }))
  let n = 0
  const packageDir = () => {
    const dir = join(base, `pkg-${n++}`)
    mkdirSync(dir)
    return dir
  }

  it.effect("finds a prebuilt helper whose bytes match its manifest", () =>
    Effect.gen(function*() {
      const root = packageDir()
      writeHelpers(root, "prebuilt", "linux-arm64", "linux-arm64", { "kt-agent": "arm agent", "kt-sandbox": "arm sandbox" })
      const found = yield* NativeChecksums.find("host", root, "kt-sandbox", "linux-arm64")
      assert.deepStrictEqual(found, {
        _tag: "Verified",
        path: join(root, "prebuilt", "linux-arm64", "kt-sandbox"),
        sha256: sha256("arm sandbox"),
        manifest: join(root, "prebuilt", "manifest.json"),
        bytes: Buffer.from("arm sandbox")
      })
    }))

  it.effect("prefers helpers compiled from source (native/build) to prebuilt ones", () =>
    Effect.gen(function*() {
      const root = packageDir()
      writeHelpers(root, "prebuilt", "linux-x64", "linux-x64", { "kt-agent": "shipped" })
      writeHelpers(root, "native/build", "linux-x64", ".", { "kt-agent": "local" })
      const found = yield* NativeChecksums.find("host", root, "kt-agent", "linux-x64")
      assert.strictEqual(found._tag === "Verified" && found.path, join(root, "native", "build", "kt-agent"))
      // Another platform's helper still comes from prebuilt/.
      writeHelpers(root, "prebuilt", "linux-arm64", "linux-arm64", { "kt-agent": "arm" })
      const arm = yield* NativeChecksums.find("docker", root, "kt-agent", "linux-arm64")
      assert.strictEqual(arm._tag === "Verified" && arm.path, join(root, "prebuilt", "linux-arm64", "kt-agent"))
    }))

  it.effect("refuses a helper changed after it was built, naming both hashes, and does not fall back", () =>
    Effect.gen(function*() {
      const root = packageDir()
      writeHelpers(root, "native/build", "linux-x64", ".", { "kt-agent": "built here" })
      writeHelpers(root, "prebuilt", "linux-x64", "linux-x64", { "kt-agent": "shipped" })
      writeFileSync(join(root, "native", "build", "kt-agent"), "built here, then changed")
      const error = yield* Effect.flip(NativeChecksums.find("host", root, "kt-agent", "linux-x64"))
      assert.strictEqual(error._tag, "ProviderError")
      assert.strictEqual(error.reason, "Invalid")
      assert.include(error.detail, `refusing to run ${join(root, "native", "build", "kt-agent")}`)
      assert.include(error.detail, sha256("built here, then changed"))
      assert.include(error.detail, sha256("built here"))
      assert.include(error.detail, "reinstall kilntainers")
    }))

  it.effect("hands out the bytes it checked: a file changed after the check changes nothing handed out", () =>
    Effect.gen(function*() {
      const root = packageDir()
      writeHelpers(root, "native/build", "linux-x64", ".", { "kt-agent": "checked" })
      const found = yield* NativeChecksums.find("host", root, "kt-agent", "linux-x64")
      writeFileSync(join(root, "native", "build", "kt-agent"), "changed since")
      assert.strictEqual(found._tag, "Verified")
      if (found._tag !== "Verified") return
      assert.strictEqual(Buffer.from(found.bytes).toString(), "checked")
      assert.strictEqual(createHash("sha256").update(found.bytes).digest("hex"), found.sha256)
    }))

  it.effect("refuses a helper the manifest lists but that is gone", () =>
    Effect.gen(function*() {
      const root = packageDir()
      writeHelpers(root, "prebuilt", "linux-x64", "linux-x64", { "kt-agent": "a", "kt-sandbox": "s" })
      rmSync(join(root, "prebuilt", "linux-x64", "kt-sandbox"))
      const error = yield* Effect.flip(NativeChecksums.find("host", root, "kt-sandbox", "linux-x64"))
      assert.include(error.detail, "prebuilt/linux-x64/kt-sandbox is missing")
      // Its sibling is still fine.
      const agent = yield* NativeChecksums.find("host", root, "kt-agent", "linux-x64")
      assert.strictEqual(agent._tag, "Verified")
    }))

  it.effect("says which platforms are prebuilt when this one is not, and that other systems need Linux", () =>
    Effect.gen(function*() {
      const root = packageDir()
      writeHelpers(root, "prebuilt", "linux-x64", "linux-x64", { "kt-agent": "a" })
      const riscv = yield* NativeChecksums.find("host", root, "kt-agent", "linux-riscv64")
      assert.strictEqual(riscv._tag, "Absent")
      assert.match(riscv._tag === "Absent" ? riscv.reason : "", /no native helpers for linux-riscv64: .*prebuilt for linux-x64 and linux-arm64.*C compiler/)
      const mac = yield* NativeChecksums.find("host", root, "kt-agent", "darwin-arm64")
      assert.match(mac._tag === "Absent" ? mac.reason : "", /Linux programs and this machine is darwin-arm64/)
      const empty = yield* NativeChecksums.find("host", packageDir(), "kt-agent", "linux-x64")
      assert.strictEqual(empty._tag, "Absent")
    }))

  it.effect("refuses a manifest it cannot read as one", () =>
    Effect.gen(function*() {
      const root = packageDir()
      mkdirSync(join(root, "prebuilt"))
      writeFileSync(join(root, "prebuilt", "manifest.json"), JSON.stringify({ schema: 1, platforms: { "linux-x64": { dir: ".", files: { "kt-agent": { sha256: "not hex", bytes: 1 } } } } }))
      const error = yield* Effect.flip(NativeChecksums.find("host", root, "kt-agent", "linux-x64"))
      assert.include(error.detail, "is not a manifest of the native helpers")
    }))

  it("names the platform as Node does, and a container engine's as its helpers need", () => {
    assert.strictEqual(NativeChecksums.platformKey("linux", "x64"), "linux-x64")
    assert.strictEqual(NativeChecksums.platformKey(), `${process.platform}-${process.arch}`)
    assert.deepStrictEqual(["x86_64", "amd64", "aarch64", "arm64", "s390x"].map(NativeChecksums.platformOfEngine), [
      "linux-x64",
      "linux-x64",
      "linux-arm64",
      "linux-arm64",
      "linux-s390x"
    ])
  })
})
