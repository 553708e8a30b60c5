import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { createHash } from "node:crypto"
import { chmodSync, chownSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll } from "vitest"
import * as PrivateHelpers from "../../../../src/layers/backends/agent/PrivateHelpers.js"

const asRoot = process.geteuid?.() === 0

describe("PrivateHelpers", () => {
  const base = mkdtempSync(join(tmpdir(), "kt-private-helpers-"))
  afterAll(() => rmSync(base, { recursive: true, force: true }))
  let n = 0
  const stateDir = () => {
    const dir = join(base, `state-${n++}`)
    mkdirSync(dir)
    return dir
  }
  const bytes = (text: string) => new Uint8Array(Buffer.from(text))
  const copyName = (name: string, text: string) => `${name}-${createHash("sha256").update(text).digest("hex").slice(0, 16)}`

  it.effect("copies the checked bytes into a directory only the server's user can write, as a file only it can run", () =>
    Effect.gen(function*() {
      const dir = PrivateHelpers.helpersDir(stateDir())
      const path = yield* PrivateHelpers.install("host", dir, "kt-agent", bytes("agent bytes"))
      assert.strictEqual(path, join(dir, copyName("kt-agent", "agent bytes")))
      assert.strictEqual(readFileSync(path, "utf8"), "agent bytes")
      assert.strictEqual(statSync(path).mode & 0o777, 0o500)
      assert.strictEqual(statSync(dir).mode & 0o777, 0o700)
    }))

  it.effect("closes a directory left open to others", () =>
    Effect.gen(function*() {
      const dir = PrivateHelpers.helpersDir(stateDir())
      mkdirSync(dir, { mode: 0o777 })
      chmodSync(dir, 0o777)
      yield* PrivateHelpers.install("host", dir, "kt-sandbox", bytes("sandbox"))
      assert.strictEqual(statSync(dir).mode & 0o777, 0o700)
    }))

  it.effect("keeps each version's copy: servers of two versions can share a state directory", () =>
    Effect.gen(function*() {
      const dir = PrivateHelpers.helpersDir(stateDir())
      const old = yield* PrivateHelpers.install("host", dir, "kt-agent", bytes("version 1"))
      const next = yield* PrivateHelpers.install("host", dir, "kt-agent", bytes("version 2"))
      assert.notStrictEqual(old, next)
      assert.strictEqual(readFileSync(old, "utf8"), "version 1")
      assert.strictEqual(readFileSync(next, "utf8"), "version 2")
      // Installing the same bytes again gives the same copy.
      assert.strictEqual(yield* PrivateHelpers.install("host", dir, "kt-agent", bytes("version 1")), old)
    }))

  it.effect("never writes through a link left at the copy's name or its temporary name", () =>
    Effect.gen(function*() {
      const dir = PrivateHelpers.helpersDir(stateDir())
      mkdirSync(dir, { mode: 0o700 })
      const victim = join(base, `victim-${n++}`)
      writeFileSync(victim, "untouched")
      const final = join(dir, copyName("kt-agent", "agent"))
      symlinkSync(victim, final)
      symlinkSync(victim, `${final}.${process.pid}.tmp`)
      const path = yield* PrivateHelpers.install("host", dir, "kt-agent", bytes("agent"))
      assert.isFalse(lstatSync(path).isSymbolicLink())
      assert.strictEqual(readFileSync(path, "utf8"), "agent")
      assert.strictEqual(readFileSync(victim, "utf8"), "untouched")
    }))

  it.effect("refuses a link in the directory's place", () =>
    Effect.gen(function*() {
      const state = stateDir()
      const elsewhere = join(base, `elsewhere-${n++}`)
      mkdirSync(elsewhere, { mode: 0o700 })
      symlinkSync(elsewhere, PrivateHelpers.helpersDir(state))
      const error = yield* Effect.flip(PrivateHelpers.install("host", PrivateHelpers.helpersDir(state), "kt-agent", bytes("agent")))
      assert.strictEqual(error.reason, "Invalid")
      assert.include(error.detail, "is not a directory")
    }))

  it.effect.skipIf(!asRoot)("refuses a directory that belongs to another user", () =>
    Effect.gen(function*() {
      const dir = PrivateHelpers.helpersDir(stateDir())
      mkdirSync(dir, { mode: 0o700 })
      chownSync(dir, 12_345, 12_345)
      const error = yield* Effect.flip(PrivateHelpers.install("host", dir, "kt-agent", bytes("agent")))
      assert.strictEqual(error.reason, "Invalid")
      assert.include(error.detail, `${dir} belongs to uid 12345, not to this server's (0)`)
      assert.include(error.detail, "only its user can write")
    }))
})
