#!/usr/bin/env node
// Empties dist/ before a build: tsc only adds and overwrites, so a module that moved or was removed
// would stay in dist/src and be packed (and imported by name) long after its source is gone.
import { rmSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

rmSync(join(dirname(fileURLToPath(import.meta.url)), "..", "dist"), { recursive: true, force: true })
