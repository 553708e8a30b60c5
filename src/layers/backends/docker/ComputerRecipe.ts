/**
 * The computer image's name, its default base and where its recipe (`images/computer`, shipped with
 * the package) is: what `kilntainers image build` builds and what the Docker backend's default
 * `--image` builds on first use. No engine code here, so the CLI can name them without loading it.
 */
import { existsSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

/** The computer image's name: the Docker backend's default `--image`. */
export const COMPUTER_IMAGE = "kilntainers-computer:bookworm"
/** The recipe's default base: Docker Hub's Debian, or a local stand-in of it. */
export const DEFAULT_BASE = "debian:bookworm-slim"

/**
 * The recipe's directory, found upwards from `from` (this module: `src/layers/backends/docker` under
 * the tests, `dist/src/…` when built, `dist/bin` when bundled), or undefined outside a package.
 */
export const recipeDirectory = (from: string = fileURLToPath(import.meta.url)): string | undefined => {
  for (let dir = dirname(from), depth = 0; depth < 8; dir = dirname(dir), depth++) {
    const candidate = join(dir, "images", "computer")
    if (existsSync(join(candidate, "Dockerfile"))) return candidate
    if (dirname(dir) === dir) break
  }
  return undefined
}
