#!/usr/bin/env node
// Bundles the dashboard MCP App (src/dashboard) into one self-contained page,
// dist/src/dashboard/dashboard.html, which the server serves as ui://kilntainers/computers.
// index.html is the page's skeleton; its stylesheet link and module script are replaced by the
// minified style.css and the app bundled with everything it imports (ext-apps, the MCP SDK's
// protocol, zod), inline. The page loads nothing from anywhere: the build fails otherwise.
import { build, transform } from "esbuild"
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { dirname, join, relative } from "node:path"
import { fileURLToPath } from "node:url"
import { gzipSync } from "node:zlib"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const source = join(root, "src", "dashboard")
const output = join(root, "dist", "src", "dashboard", "dashboard.html")

const fail = (message) => {
  console.error(`build-dashboard: ${message}`)
  process.exit(1)
}

// zod's namespace object carries every locale (about 265 kB minified); its error messages are
// only ever produced in English here (zod's default), so the others are left out.
const englishOnly = {
  name: "zod-english-only",
  setup(esbuild) {
    esbuild.onResolve({ filter: /\/locales\/index\.js$/ }, (args) =>
      args.importer.includes("/node_modules/zod/") ? { path: "zod-locales", namespace: "zod-english-only" } : undefined
    )
    esbuild.onLoad({ filter: /.*/, namespace: "zod-english-only" }, () => ({
      contents: `export { default as en } from "zod/v4/locales/en.js"`,
      resolveDir: root,
      loader: "js"
    }))
  }
}

const bundle = await build({
  entryPoints: [join(source, "app.ts")],
  tsconfig: join(source, "tsconfig.json"),
  bundle: true,
  format: "iife",
  platform: "browser",
  target: "es2022",
  minify: true,
  legalComments: "eof",
  write: false,
  logLevel: "warning",
  plugins: [englishOnly]
}).catch(() => fail("bundling src/dashboard/app.ts failed"))
const script = bundle.outputFiles[0].text

const style = (await transform(readFileSync(join(source, "style.css"), "utf8"), { loader: "css", minify: true })).code

// Inline script and style end only at their closing tags: neither may appear inside them.
if (/<\/script|<!--/i.test(script)) fail("the bundled script contains '</script' or '<!--'")
if (/<\/style/i.test(style)) fail("the stylesheet contains '</style'")

const replaceOnce = (html, tag, replacement) => {
  const parts = html.split(tag)
  if (parts.length !== 2) fail(`index.html must contain ${tag} exactly once`)
  return parts[0] + replacement + parts[1]
}
let html = readFileSync(join(source, "index.html"), "utf8")
html = replaceOnce(html, `<link rel="stylesheet" href="./style.css">`, `<style>${style}</style>`)
html = replaceOnce(html, `<script type="module" src="./app.ts"></script>`, `<script>${script}</script>`)
const markup = html.replace(/<script>[\s\S]*?<\/script>|<style>[\s\S]*?<\/style>/g, "")
if (/<link\b|<img\b|<iframe\b|\bsrc\s*=|\bhref\s*=|@import|url\s*\(/i.test(markup + style)) {
  fail("the page refers to an external resource (link, img, iframe, src=, href=, @import or url())")
}

mkdirSync(dirname(output), { recursive: true })
writeFileSync(output, html)
const bytes = Buffer.byteLength(html)
console.error(`build-dashboard: ${relative(root, output)} ${bytes} bytes (${gzipSync(html, { level: 9 }).length} gzip)`)
