/**
 * DenyRecords: the deny rules' objects recorded by identity and found again below their mount after
 * a computer moved them — never through a symlink, never on another device — and records that a
 * damaged file cannot turn into anything but "none".
 */
import { closeSync, mkdirSync, mkdtempSync, openSync, renameSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, assert, describe, it } from "vitest"
import * as DenyRecords from "../../../../src/layers/backends/mounts/DenyRecords.js"
import { O_PATH } from "../../../../src/layers/backends/mounts/MountObjects.js"

const base = mkdtempSync(join(tmpdir(), "kt-deny-records-"))
afterAll(() => rmSync(base, { recursive: true, force: true }))

const identityOf = (path: string) => DenyRecords.identity(statSync(path, { bigint: true }))

/** `find` through a held descriptor of `root`, as MountObjects calls it. */
const findIn = (root: string, wanted: ReadonlyArray<DenyRecords.Identity>) => {
  const fd = openSync(root, O_PATH)
  try {
    return DenyRecords.find(fd, root, statSync(root, { bigint: true }).dev, wanted)
  } finally {
    closeSync(fd)
  }
}

describe("DenyRecords", () => {
  it("finds an object moved anywhere below its root, and only there", () => {
    const root = join(base, "moved")
    mkdirSync(join(root, "config"), { recursive: true })
    writeFileSync(join(root, "config", ".env"), "secret\n")
    const denied = identityOf(join(root, "config", ".env"))
    mkdirSync(join(root, "deep", "er"), { recursive: true })
    renameSync(join(root, "config"), join(root, "deep", "er", "config2"))
    assert.deepStrictEqual(findIn(root, [denied]), [join(root, "deep", "er", "config2", ".env")])
    assert.deepStrictEqual(findIn(join(root, "deep", "er", "config2"), [denied]), [join(root, "deep", "er", "config2", ".env")])
    mkdirSync(join(root, "other"))
    assert.deepStrictEqual(findIn(join(root, "other"), [denied]), [])
  })

  it("never walks through a symlink, even one to where the object is", () => {
    const root = join(base, "linked")
    const outside = join(base, "outside")
    mkdirSync(root)
    mkdirSync(outside)
    writeFileSync(join(outside, "secret"), "x\n")
    symlinkSync(outside, join(root, "link"))
    assert.deepStrictEqual(findIn(root, [identityOf(join(outside, "secret"))]), [])
  })

  it("keeps what a rule holds first, then older identities, bounded, and reads damaged records as none", () => {
    const a = { dev: "1", ino: "2" }
    const b = { dev: "1", ino: "3" }
    assert.deepStrictEqual(DenyRecords.merge([b], [a, b]), [b, a])
    const many = Array.from({ length: 20 }, (_, i) => ({ dev: "1", ino: String(i) }))
    assert.lengthOf(DenyRecords.merge(many, []), 8)
    const state = join(base, "state")
    mkdirSync(state)
    assert.isUndefined(DenyRecords.write(state, { [DenyRecords.key(false, "/p/config/.env")]: [a] }))
    assert.deepStrictEqual(DenyRecords.read(state), { "deny-read /p/config/.env": [a] })
    assert.strictEqual(statSync(join(state, "deny-objects.json")).mode & 0o777, 0o600)
    writeFileSync(join(state, "deny-objects.json"), "{not json")
    assert.deepStrictEqual(DenyRecords.read(state), {})
    writeFileSync(join(state, "deny-objects.json"), JSON.stringify({ "deny-read /x": [{ dev: 1 }, a, "y"], other: 5 }))
    assert.deepStrictEqual(DenyRecords.read(state), { "deny-read /x": [a] })
  })
})
