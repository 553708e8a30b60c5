import { describe, expect, it } from "vitest"
import { LazyJsonSchemaValidator } from "../../../src/layers/mcp/LazyJsonSchemaValidator.js"

describe("LazyJsonSchemaValidator", () => {
  it("validates like the SDK's Ajv validator, which it loads on first use", () => {
    const validator = new LazyJsonSchemaValidator()
    const check = validator.getValidator<{ name: string }>({
      type: "object",
      properties: { name: { type: "string", minLength: 1 }, email: { type: "string", format: "email" } },
      required: ["name"]
    })
    expect(check({ name: "ada" })).toEqual({ valid: true, data: { name: "ada" }, errorMessage: undefined })
    const bad = check({ name: "" })
    expect(bad.valid).toBe(false)
    expect(bad.errorMessage).toMatch(/name/)
    // formats are there (ajv-formats), as with the SDK's default
    expect(check({ name: "ada", email: "not an address" }).valid).toBe(false)
  })
})
