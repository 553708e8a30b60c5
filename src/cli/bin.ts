#!/usr/bin/env node
/**
 * The `kilntainers` command's entry. Before anything else loads, it turns on Node's on-disk cache of
 * compiled code (Node ≥ 22.1; a no-op on Node 20): a start then reads V8's code for the ~1.7 MB of
 * JavaScript a stdio server loads instead of compiling it again, which was the largest single share
 * of a start's CPU. The cache lives in Node's default place (`NODE_COMPILE_CACHE`, else the OS's
 * temporary directory) and is only an optimisation: a directory that cannot be written is ignored.
 *
 * It also caps how far V8 lets the old generation grow past what survives a full collection: 1.5
 * times (`--heap-growing-percent=50`) instead of V8's own factor, which reaches 4 when the program
 * allocates fast. A server's heap is mostly short-lived garbage (a tool call allocates about half a
 * megabyte, mostly fibers) over a small live set (36 MiB with 50 HTTP sessions open); under 50
 * sessions at once the old generation grew to 113 MiB for those 36, and the server peaked at
 * 192–226 MiB RSS. With the cap it peaked at 150 MiB at the same calls/s, side by side (README,
 * "Throughput at scale"). V8 reads the flag at each full collection, so setting it here, before any
 * code runs, is enough. `--optimize-for-size` did more (123 MiB) but cost a quarter of the calls/s.
 * Then the command itself (Run.ts) is loaded and run.
 */
import * as NodeModule from "node:module"
import { setFlagsFromString } from "node:v8"

setFlagsFromString("--heap-growing-percent=50")
;(NodeModule as { readonly enableCompileCache?: () => unknown }).enableCompileCache?.()
void import("./Run.js")
