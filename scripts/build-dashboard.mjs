#!/usr/bin/env node
// Bundles the dashboard MCP App (src/dashboard) into one self-contained page,
// dist/src/dashboard/dashboard.html, which the server serves as ui://kilntainers/computers, and the
// standalone terminal page (terminal.html, served at /terminal for a signed link) the same way.
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

/** xterm.js's own stylesheet, which its terminal needs on the page. */
const xtermCss = readFileSync(join(root, "node_modules", "@xterm", "xterm", "css", "xterm.css"), "utf8")

/** One page: `html` with its stylesheet (plus xterm's) and its entry bundled, inline. */
const buildPage = async (page) => {
  const bundle = await build({
    entryPoints: [join(source, page.entry)],
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
  }).catch(() => fail(`bundling src/dashboard/${page.entry} failed`))
  const script = bundle.outputFiles[0].text

  const css = readFileSync(join(source, page.css), "utf8") + "\n" + xtermCss
  const style = (await transform(css, { loader: "css", minify: true })).code

  // Inline script and style end only at their closing tags: neither may appear inside them.
  if (/<\/script|<!--/i.test(script)) fail(`the bundled ${page.entry} contains '</script' or '<!--'`)
  if (/<\/style/i.test(style)) fail(`the stylesheet of ${page.html} contains '</style'`)

  const replaceOnce = (html, tag, replacement) => {
    const parts = html.split(tag)
    if (parts.length !== 2) fail(`${page.html} must contain ${tag} exactly once`)
    return parts[0] + replacement + parts[1]
  }
  let html = readFileSync(join(source, page.html), "utf8")
  html = replaceOnce(html, `<link rel="stylesheet" href="./${page.css}">`, `<style>${style}</style>`)
  html = replaceOnce(html, `<script type="module" src="./${page.entry}"></script>`, `<script>${script}</script>`)
  const markup = html.replace(/<script>[\s\S]*?<\/script>|<style>[\s\S]*?<\/style>/g, "")
  if (/<link\b|<img\b|<iframe\b|\bsrc\s*=|\bhref\s*=|@import|url\s*\(/i.test(markup + style)) {
    fail(`${page.html} refers to an external resource (link, img, iframe, src=, href=, @import or url())`)
  }
  const output = join(root, "dist", "src", "dashboard", page.out)
  mkdirSync(dirname(output), { recursive: true })
  writeFileSync(output, html)
  const bytes = Buffer.byteLength(html)
  console.error(`build-dashboard: ${relative(root, output)} ${bytes} bytes (${gzipSync(html, { level: 9 }).length} gzip)`)
}

// The MCP App, and the standalone terminal page of the HTTP server (a signed link's).
await buildPage({ entry: "app.ts", html: "index.html", css: "style.css", out: "dashboard.html" })
await buildPage({ entry: "terminal.ts", html: "terminal.html", css: "terminal.css", out: "terminal.html" })
