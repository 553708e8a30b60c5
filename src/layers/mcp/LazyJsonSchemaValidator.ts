import type { jsonSchemaValidator, JsonSchemaType, JsonSchemaValidator } from "@modelcontextprotocol/server"
import type * as AjvProviderModule from "@modelcontextprotocol/server/validators/ajv"
import { createRequire } from "node:module"

type AjvProvider = typeof AjvProviderModule

const require = createRequire(import.meta.url)

/**
 * The SDK's Ajv validator, made on first use. The server only validates against a JSON Schema when
 * it elicits input from the client, which this server never does; built eagerly, Ajv (with its
 * formats and meta-schemas) costs every start ~15 ms, and every session's `Server` a new instance.
 * The CLI bundle leaves the SDK's eager import of Ajv out (scripts/build-bundle.mjs), so this is
 * its only way in.
 */
export class LazyJsonSchemaValidator implements jsonSchemaValidator {
  private inner: jsonSchemaValidator | undefined

  getValidator<T>(schema: JsonSchemaType): JsonSchemaValidator<T> {
    this.inner ??= new (require("@modelcontextprotocol/server/validators/ajv") as AjvProvider).AjvJsonSchemaValidator()
    return this.inner.getValidator<T>(schema)
  }
}

/** One for the process: Ajv caches compiled schemas per instance. */
export const lazyJsonSchemaValidator = new LazyJsonSchemaValidator()
