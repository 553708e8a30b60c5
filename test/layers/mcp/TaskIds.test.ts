import { assert, describe, it } from "@effect/vitest"
import * as TaskIds from "../../../src/layers/mcp/TaskIds.js"

const claim: TaskIds.Claim = { tool: "sandbox_exec", computer_id: "steady-otter-a31f", pid: "p7", createdAt: 1_700_000_000_000, timeoutSec: 300 }

describe("TaskIds", () => {
  it("an id carries its task to a server with the same tokens, for the session it was issued to", () => {
    const id = TaskIds.sign(TaskIds.keyFrom(["token-a", "token-b"]), "default/agent-1", claim)
    assert.isTrue(TaskIds.isCarried(id))
    // Another replica derives the same key from the same tokens, in any order.
    assert.deepStrictEqual(TaskIds.open(TaskIds.keyFrom(["token-b", "token-a"]), "default/agent-1", id), { claim })
  })

  it("refuses an id for another session, from servers with other tokens, or altered", () => {
    const key = TaskIds.keyFrom(["token-a"])
    const id = TaskIds.sign(key, "default/agent-1", claim)
    assert.match((TaskIds.open(key, "mallory/agent-1", id) as { refused: string }).refused, /not issued to this session/)
    assert.match((TaskIds.open(key, "default/agent-2", id) as { refused: string }).refused, /not issued to this session/)
    assert.match((TaskIds.open(TaskIds.keyFrom(["token-z"]), "default/agent-1", id) as { refused: string }).refused, /not issued/)
    // The same signature on another process's claim (p8 for p7) is a forgery.
    const [payload, tag] = id.slice(4).split(".")
    const edited = Buffer.from(Buffer.from(payload!, "base64url").toString().replace("\"p7\"", "\"p8\"")).toString("base64url")
    assert.match((TaskIds.open(key, "default/agent-1", `kt1.${edited}.${tag}`) as { refused: string }).refused, /not issued/)
    assert.match((TaskIds.open(key, "default/agent-1", "kt1.garbage") as { refused: string }).refused, /not a task id/)
  })

  it("without tokens, each server's key is its own", () => {
    const id = TaskIds.sign(TaskIds.keyFrom([]), "stdio", claim)
    assert.isTrue("refused" in TaskIds.open(TaskIds.keyFrom([]), "stdio", id))
  })
})
