import { assert, describe, it } from "vitest"
import { ComputerFs } from "../../../../src/layers/backends/wasm/ComputerFs.js"
import { INODE_BYTES, reserve } from "../../../../src/layers/backends/wasm/Quota.js"
import { baseImage } from "../../../../src/layers/backends/wasm/Snapshot.js"
import { dir, Vfs } from "../../../../src/layers/backends/wasm/Vfs.js"

const bytes = (text: string) => new TextEncoder().encode(text)
const used = (fs: ComputerFs) => Number(Atomics.load(fs.quota, 0))

describe("the quota", () => {
  it("reserves up to the limit and never past it", () => {
    const fs = new ComputerFs(dir(), 10 * 1024)
    const cell = fs.begin()
    assert.isTrue(reserve(fs.quota, cell, 6 * 1024))
    assert.isFalse(reserve(fs.quota, cell, 5 * 1024), "6 + 5 KiB is over 10 KiB")
    assert.isTrue(reserve(fs.quota, cell, 4 * 1024))
    assert.strictEqual(used(fs), 10 * 1024)
    assert.strictEqual(Number(cell[0]), 10 * 1024)
  })
})

describe("ComputerFs", () => {
  it("counts contents and one inode per name", () => {
    const tree = new Vfs(dir())
    assert.strictEqual(tree.apply([{ op: "mkdir", path: "/a/b" }]), 2 * INODE_BYTES)
    assert.strictEqual(tree.apply([{ op: "write", path: "/a/b/f", data: bytes("12345") }]), INODE_BYTES + 5)
    assert.strictEqual(tree.apply([{ op: "write", path: "/a/b/f", data: bytes("12") }]), -3)
    assert.strictEqual(tree.apply([{ op: "link", path: "/a/l", target: "/a/b/f" }]), INODE_BYTES)
    assert.strictEqual(tree.usage(), 4 * INODE_BYTES + 2)
    assert.strictEqual(tree.apply([{ op: "rm", path: "/a" }]), -(4 * INODE_BYTES + 2))
    assert.strictEqual(tree.usage(), 0)
  })

  it("settles a batch's reservation and gives back what an ended process did not use", () => {
    const fs = new ComputerFs(dir(), 1024 * 1024)
    const a = fs.begin()
    const b = fs.begin()
    assert.isTrue(reserve(fs.quota, a, INODE_BYTES + 100))
    assert.isTrue(reserve(fs.quota, b, 50_000))
    fs.apply([{ op: "write", path: "/f", data: bytes("x".repeat(100)) }], INODE_BYTES + 100, a)
    assert.strictEqual(fs.usage, INODE_BYTES + 100)
    assert.strictEqual(used(fs), INODE_BYTES + 100 + 50_000, "b's reservation still counts")
    fs.end(b)
    assert.strictEqual(used(fs), INODE_BYTES + 100)
    fs.end(a)
    assert.strictEqual(used(fs), fs.usage, "with nothing running, used is the tree's usage")
  })

  it("lets a copy catch up from the log, or sends the whole tree when the log has moved on", () => {
    const fs = new ComputerFs(baseImage("c"), 1024 * 1024)
    const start = fs.generation
    fs.apply([{ op: "write", path: "/tmp/one", data: bytes("1") }], 0, undefined)
    fs.apply([{ op: "write", path: "/tmp/two", data: bytes("2") }], 0, undefined)
    assert.strictEqual(Atomics.load(fs.genCell, 0), fs.generation)
    const reply = fs.since(start)
    assert.isTrue("batches" in reply && reply.batches.length === 2)
    const copy = new Vfs(baseImage("c"))
    if ("batches" in reply) for (const batch of reply.batches) copy.apply(batch)
    assert.strictEqual(new TextDecoder().decode(copy.readFile("/", "/tmp/two")), "2")
    assert.deepStrictEqual(fs.since(fs.generation), { gen: fs.generation, batches: [] })
    fs.apply(Array.from({ length: 70_000 }, (_, i) => ({ op: "write" as const, path: `/tmp/f${i}`, data: bytes("x") })), 0, undefined)
    fs.apply([{ op: "rm", path: "/tmp/one" }], 0, undefined)
    const behind = fs.since(start)
    assert.isTrue("tree" in behind, "too far behind: the whole tree")
    fs.reset(baseImage("c"))
    assert.isTrue("tree" in fs.since(fs.generation - 1), "after a reset: the whole tree")
    assert.isUndefined(fs.vfs.lookup("/", "/tmp/two"))
  })

  it("keeps file contents in shared memory", () => {
    const fs = new ComputerFs(dir(), 1024 * 1024)
    fs.apply([{ op: "write", path: "/f", data: bytes("abc") }], 0, undefined)
    const data = fs.vfs.readFile("/", "/f")!
    assert.instanceOf(data.buffer, SharedArrayBuffer)
  })
})
