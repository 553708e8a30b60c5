#!/usr/bin/env node
/**
 * The `kilntainers` command's entry. Before anything else loads, it turns on Node's on-disk cache of
 * compiled code (Node ≥ 22.1; a no-op on Node 20): a start then reads V8's code for the ~1.7 MB of
 * JavaScript a stdio server loads instead of compiling it again, which was the largest single share
 * of a start's CPU. The cache lives in Node's default place (`NODE_COMPILE_CACHE`, else the OS's
 * temporary directory) and is only an optimisation: a directory that cannot be written is ignored.
 *
 * It also tells V8 to favour memory over speed (`--optimize-for-size`; Node refuses the flag in
 * NODE_OPTIONS, so the command sets it for itself). A server's heap is almost all short-lived
 * garbage (each tool call allocates about half a megabyte, mostly fibers) over a small live set:
 * by default V8 let the young generation grow to 32 MiB and the old one to twice and more what
 * survives, so 50 HTTP sessions peaked at 192–218 MiB RSS; with the flag it keeps a 4 MiB young
 * generation and collects the old one sooner (see README, "Throughput at scale"). Set before any
 * code runs, it acts on the collector's sizing decisions, which V8 makes as the heap grows.
 * Then the command itself (Run.ts) is loaded and run.
 */
import * as NodeModule from "node:module"
import { setFlagsFromString } from "node:v8"

setFlagsFromString("--optimize-for-size")
;(NodeModule as { readonly enableCompileCache?: () => unknown }).enableCompileCache?.()
void import("./Run.js")
