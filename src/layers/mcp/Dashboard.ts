/**
 * The `computer_dashboard` MCP App resource (MCP Apps specification 2026-01-26): its URI, MIME
 * type, metadata and page.
 *
 * The app itself is TypeScript in `src/dashboard` (on ext-apps' `App`), bundled by `npm run build`
 * (`scripts/build-dashboard.mjs`) into one self-contained page with inline script and style, and
 * no external scripts, styles, fonts or images. The server only reads that built file, from its
 * own package; it needs neither esbuild nor ext-apps at run time.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { readFile } from "node:fs/promises"
import { fileURLToPath } from "node:url"
import { inPackage } from "../server/PackageRoot.js"

export const resourceUri = "ui://kilntainers/computers"
export const mimeType = "text/html;profile=mcp-app"

/** The app's metadata on its resource: no external origins, drawn with a border. */
export const resourceMeta = { ui: { csp: {}, prefersBorder: true } } as const

/** The page was not built (a source checkout before `npm run build`). */
export class DashboardNotBuilt extends Schema.TaggedError<DashboardNotBuilt>()("DashboardNotBuilt", {
  path: Schema.String
}) {
  override get message() {
    return `the dashboard page is missing (${this.path}); run 'npm run build'`
  }
}

/**
 * Where a built page is: `dist/src/dashboard/` beside this module's compiled form
 * (`dist/src/layers/mcp/Dashboard.js`); from the sources (`src/layers/mcp/Dashboard.ts`, under
 * vitest) the same file of the checkout's build.
 */
const candidates = (file: string) => [
  fileURLToPath(new URL(`../../dashboard/${file}`, import.meta.url)),
  // The installed package, whichever file this code was bundled into (dist/bin).
  inPackage("dist", "src", "dashboard", file)
].filter((path): path is string => path !== undefined)

/** A page `npm run build` made (`dashboard.html`, `terminal.html`): the first candidate that exists. */
export const builtPage = (file: string): Effect.Effect<string, DashboardNotBuilt> =>
  Effect.firstSuccessOf(candidates(file).map((path) => Effect.tryPromise(() => readFile(path, "utf8")))).pipe(
    Effect.mapError(() => new DashboardNotBuilt({ path: candidates(file)[0]! }))
  )

/** The app's page. */
export const page: Effect.Effect<string, DashboardNotBuilt> = builtPage("dashboard.html")
