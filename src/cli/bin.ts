#!/usr/bin/env node
/**
 * The `kilntainers` command's entry. Before anything else loads, it turns on Node's on-disk cache of
 * compiled code (Node ≥ 22.1; a no-op on Node 20): a start then reads V8's code for the ~1.7 MB of
 * JavaScript a stdio server loads instead of compiling it again, which was the largest single share
 * of a start's CPU. The cache lives in Node's default place (`NODE_COMPILE_CACHE`, else the OS's
 * temporary directory) and is only an optimisation: a directory that cannot be written is ignored.
 * Then the command itself (Run.ts) is loaded and run.
 */
import * as NodeModule from "node:module"

;(NodeModule as { readonly enableCompileCache?: () => unknown }).enableCompileCache?.()
void import("./Run.js")
