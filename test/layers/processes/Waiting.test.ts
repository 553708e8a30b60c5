import { describe, expect, it } from "vitest"
import { screenForMatch } from "../../../src/layers/processes/Waiting.js"

describe("what a wait's pattern sees of a terminal's screen", () => {
  it("keeps the spaces before the cursor on its row: a prompt's trailing space", () => {
    expect(screenForMatch({ text: "/dev/pts/0\n20 100\nname?", cursor: { x: 6, y: 2 } })).toBe("/dev/pts/0\n20 100\nname? ")
    expect(screenForMatch({ text: ">>>", cursor: { x: 4, y: 0 } })).toBe(">>> ")
  })

  it("adds the cursor's row below the last row with text, and nothing where the cursor is within the text", () => {
    expect(screenForMatch({ text: "done", cursor: { x: 2, y: 2 } })).toBe("done\n\n  ")
    expect(screenForMatch({ text: "name? kiln", cursor: { x: 6, y: 0 } })).toBe("name? kiln")
    expect(screenForMatch({ text: "a\nb", cursor: { x: 0, y: 0 } })).toBe("a\nb")
  })

  it("is empty without a screen (pipes)", () => {
    expect(screenForMatch(undefined)).toBe("")
  })
})
