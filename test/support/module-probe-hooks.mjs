// Module resolution hooks of module-probe.mjs (they run on the loader's own thread).
import { appendFileSync } from "node:fs"

const file = process.env.KT_MODULE_PROBE
const match = new RegExp(process.env.KT_MODULE_PROBE_MATCH ?? "opentelemetry")

export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context)
  if (file !== undefined && match.test(resolved.url)) appendFileSync(file, `${resolved.url}\n`)
  return resolved
}
