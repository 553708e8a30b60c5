/**
 * The program of a tool worker: a thread that runs one WASI module instance (a toolset command or
 * the user's module) over a copy of the computer's tree, with @bjorn3/browser_wasi_shim.
 * Started by `Runner.ts` (from a shell worker, or from the server in module mode), loaded through
 * `WorkerScript.ts`.
 *
 * Protocol. The worker says `{ t: "ready" }`, then gets a `ToolJob`; after one that ended by itself
 * it may get another (the shim's methods are patched once per worker and work on the current run). It posts
 * `{ t: "out", fd: 1 | 2, data, weight }` as the module writes to a posted stream, then
 * `{ t: "exit", code, changes, reserved, trap? }`, `changes` being what it changed in the tree
 * (Vfs.Change, contents in SharedArrayBuffers) and `reserved` the quota it took.
 *
 * Output is bounded: Int32 [3] of `ctl` counts the weight (bytes, at least 1 KiB a message) posted
 * and not yet taken by the consumer; past `OUTPUT_WINDOW_BYTES` the worker waits.
 * Stdin is a ring of one chunk in `ctl`: Int32 [state, length, position] then the bytes; state
 * 0 = empty (the feeder may fill it), 1 = data, 2 = end of input. A read blocks until it changes.
 *
 * Files: contents are shared and never written in place; a write copies the file into a private
 * buffer that grows by doubling, and every byte a write adds is reserved against the computer's
 * quota first (Quota.ts): past it the write fails with ENOSPC and nothing of it is written. New
 * names cost `INODE_BYTES`. A redirection to a file (`> f`, `< f`) is the file itself opened as
 * fd 0, 1 or 2, as in a real shell.
 *
 * Paths relative to the root preopen (fd 3) are normalised in place first, so `..` stops at `/`
 * as in the backend's own path resolution (the shim would refuse it as NOTCAPABLE).
 */
import * as shim from "@bjorn3/browser_wasi_shim"
import { parentPort } from "node:worker_threads"
import { collectGarbage } from "./Collect.js"
import { INODE_BYTES, reserve as reserveInQuota } from "./Quota.js"
import { OUTPUT_WINDOW_BYTES, STDIN_HEADER_BYTES, type ToolJob, type ToolMessage, type ToolOutput } from "./ToolProtocol.js"
import { shared, type Change, type VNode } from "./Vfs.js"

const w = shim.wasi as any
const EMPTY = new Uint8Array(0)
/** Past this size a file being written lives in shared memory (see `own`). */
const LARGE_FILE_BYTES = 1024 * 1024

// --- quota --------------------------------------------------------------------------------------
/** What the current run owns; the shim's methods patched below (once per worker) work on it. */
interface RunState {
  readonly job: ToolJob
  reserved: number
  readonly dirty: WeakSet<object>
  readonly owned: WeakMap<object, ArrayBuffer | SharedArrayBuffer>
  readonly limit: number
}
let state: RunState

/** Quota.reserve, counted in this run's total too. */
const reserve = (bytes: number): boolean => {
  if (!reserveInQuota(state.job.quota, state.job.reserved, bytes)) return false
  if (bytes > 0) state.reserved += bytes
  return true
}

// --- files: private growing buffers, dirty tracking ----------------------------------------------
/**
 * Makes the file's bytes private with room for `need` bytes. A small file grows by doubling; a
 * large one lives in a growable SharedArrayBuffer that grows in place and is handed to the server
 * as it is (no copy at the end).
 */
const own = (file: any, need: number) => {
  const current: any = state.owned.get(file)
  if (current !== undefined && file.data.buffer === current) {
    if (current.byteLength >= need) return
    if (current.growable === true && need <= current.maxByteLength) return current.grow(need)
  }
  const keep = Math.min(file.data.byteLength, need)
  const next = need > LARGE_FILE_BYTES
    ? new (SharedArrayBuffer as any)(need, { maxByteLength: Math.max(need, state.limit) }) as SharedArrayBuffer
    : new ArrayBuffer(Math.max(need, need < 65536 ? need * 2 : Math.ceil(need * 1.5), 4096))
  new Uint8Array(next).set(file.data.subarray(0, keep))
  state.owned.set(file, next)
  file.data = new Uint8Array(next, 0, keep)
}
/** Room for bytes up to `end` (reserved against the quota), zero-filled past the old size. */
const extend = (file: any, end: number): boolean => {
  const size: number = file.data.byteLength
  if (end > size && !reserve(end - size)) return false
  try {
    own(file, Math.max(end, size))
  } catch {
    return false
  }
  if (end > size) {
    file.data = new Uint8Array(state.owned.get(file)!, 0, end)
    file.data.fill(0, size, end)
  }
  state.dirty.add(file)
  return true
}
const OpenFile = shim.OpenFile.prototype as any
OpenFile.fd_write = function (this: any, data: Uint8Array) {
  if (this.file.readonly) return { ret: w.ERRNO_BADF, nwritten: 0 }
  const at = Number(this.file_pos)
  if (!extend(this.file, at + data.byteLength)) return { ret: w.ERRNO_NOSPC, nwritten: 0 }
  this.file.data.set(data, at)
  this.file_pos += BigInt(data.byteLength)
  return { ret: 0, nwritten: data.byteLength }
}
OpenFile.fd_pwrite = function (this: any, data: Uint8Array, offset: bigint) {
  if (this.file.readonly) return { ret: w.ERRNO_BADF, nwritten: 0 }
  if (!extend(this.file, Number(offset) + data.byteLength)) return { ret: w.ERRNO_NOSPC, nwritten: 0 }
  this.file.data.set(data, Number(offset))
  return { ret: 0, nwritten: data.byteLength }
}
OpenFile.fd_allocate = function (this: any, offset: bigint, length: bigint) {
  const end = Number(offset + length)
  if (end <= this.file.data.byteLength) return 0
  return extend(this.file, end) ? 0 : w.ERRNO_NOSPC
}
OpenFile.fd_filestat_set_size = function (this: any, size: bigint) {
  const n = Number(size)
  if (n >= this.file.data.byteLength) return extend(this.file, n) ? 0 : w.ERRNO_NOSPC
  own(this.file, n)
  this.file.data = new Uint8Array(state.owned.get(this.file)!, 0, n)
  state.dirty.add(this.file)
  return 0
}
const fileOpen = (shim.File.prototype as any).path_open
;(shim.File.prototype as any).path_open = function (this: any, oflags: number, ...rest: Array<unknown>) {
  if ((oflags & w.OFLAGS_TRUNC) === w.OFLAGS_TRUNC) state.dirty.add(this)
  return fileOpen.call(this, oflags, ...rest)
}
const create = (shim.Directory.prototype as any).create_entry_for_path
;(shim.Directory.prototype as any).create_entry_for_path = function (this: any, ...args: Array<unknown>) {
  if (!reserve(INODE_BYTES)) return { ret: w.ERRNO_NOSPC, entry: null }
  return create.apply(this, args)
}

// No "." and ".." entries from readdir (POSIX allows that): a ".." of a directory fd would be
// outside what the shim can resolve.
const readdir = (shim.OpenDirectory.prototype as any).fd_readdir_single
;(shim.OpenDirectory.prototype as any).fd_readdir_single = function (this: any, cookie: bigint) {
  const result = readdir.call(this, cookie + 2n)
  if (result.dirent) result.dirent.d_next -= 2n
  return result
}

const run = (job: ToolJob) => {
  const port = parentPort!
  const ctl = new Int32Array(job.ctl, 0, 4)
  const ring = new Uint8Array(job.ctl, STDIN_HEADER_BYTES)
  state = { job, reserved: 0, dirty: new WeakSet(), owned: new WeakMap(), limit: Number(Atomics.load(job.quota, 1)) }
  const { dirty } = state

  // --- the tree: the same VFile object (a link) becomes the same File -------------------------------
  const files = new Map<VNode, shim.File>()
  const original = new Map<string, shim.Inode>()
  const build = (node: VNode, path: string): shim.Inode => {
    if (node.kind === "file") {
      let file = files.get(node)
      if (file === undefined) {
        file = new shim.File(EMPTY)
        file.data = node.data
        files.set(node, file)
      }
      original.set(path, file)
      return file
    }
    const entries = new Map<string, shim.Inode>()
    if (node.kind === "dir") for (const [name, child] of node.entries) entries.set(name, build(child, path === "/" ? "/" + name : path + "/" + name))
    const directory = new shim.Directory(entries)
    original.set(path, directory)
    return directory
  }
  const rootEntries = new Map<string, shim.Inode>()
  for (const [name, child] of job.tree.entries) rootEntries.set(name, build(child, "/" + name))
  const root = new shim.PreopenDirectory("/", rootEntries)
  original.set("/", root.dir)

  // --- standard streams -------------------------------------------------------------------------------
  const held: Record<1 | 2, Array<Uint8Array>> = { 1: [], 2: [] }
  const heldBytes = { 1: 0, 2: 0 }
  // Posted at once when the consumer has taken everything before, else gathered (up to 64 KiB) and
  // posted with the next write, a blocking read, a sleep, or the exit.
  const post = (fd: 1 | 2) => {
    if (heldBytes[fd] === 0) return
    const parts = held[fd]
    const data = parts.length === 1 ? parts[0]! : new Uint8Array(heldBytes[fd])
    if (parts.length > 1) {
      let at = 0
      for (const part of parts) {
        data.set(part, at)
        at += part.byteLength
      }
    }
    held[fd] = []
    heldBytes[fd] = 0
    const weight = Math.max(data.byteLength, 1024)
    let inFlight = Atomics.add(ctl, 3, weight) + weight
    port.postMessage({ t: "out", fd, data, weight } satisfies ToolMessage)
    while (inFlight > OUTPUT_WINDOW_BYTES) {
      Atomics.wait(ctl, 3, inFlight, 50)
      inFlight = Atomics.load(ctl, 3)
    }
  }
  const flush = () => {
    post(1)
    post(2)
  }
  const pipeStat = (rights: number) => {
    const fdstat = new w.Fdstat(w.FILETYPE_UNKNOWN, 0)
    fdstat.fs_rights_base = BigInt(rights)
    return { ret: 0, fdstat }
  }
  class Stdin extends shim.Fd {
    override fd_fdstat_get() { return pipeStat(w.RIGHTS_FD_READ) }
    override fd_filestat_get() { return { ret: 0, filestat: new w.Filestat(0n, w.FILETYPE_UNKNOWN, 0n) } }
    override fd_read(size: number) {
      if (job.stdin === "empty") return { ret: 0, data: EMPTY }
      for (;;) {
        const state = Atomics.load(ctl, 0)
        if (state === 1) {
          const length = ctl[1]!
          const position = ctl[2]!
          const n = Math.min(size, length - position)
          const data = ring.slice(position, position + n)
          if (position + n >= length) {
            Atomics.store(ctl, 0, 0)
            Atomics.notify(ctl, 0)
          } else ctl[2] = position + n
          return { ret: 0, data }
        }
        if (state === 2) return { ret: 0, data: EMPTY }
        flush()
        Atomics.wait(ctl, 0, 0)
      }
    }
  }
  // Pipes, not terminals: isatty() is false (WASI has no pipe file type; "unknown" it is).
  class Output extends shim.ConsoleStdout {
    override fd_fdstat_get() { return pipeStat(w.RIGHTS_FD_WRITE) }
    override fd_filestat_get() { return { ret: 0, filestat: new w.Filestat(0n, w.FILETYPE_UNKNOWN, 0n) } }
  }
  const posted = (fd: 1 | 2) =>
    new Output((data) => {
      // The shim hands over a fresh copy of the bytes (it slices them out of the instance memory).
      held[fd].push(data)
      heldBytes[fd] += data.byteLength
      if (Atomics.load(ctl, 3) === 0 || heldBytes[fd] >= 65536) {
        post(fd === 1 ? 2 : 1)
        post(fd)
      }
    })
  /** A file of the tree as a standard stream (created if missing), positioned at its end. */
  const fileFd = (path: string, write: boolean): shim.Fd => {
    const relative = path.replace(/^\/+/, "") || "."
    const opened = root.path_open(0, relative, write ? w.OFLAGS_CREAT : 0, BigInt(write ? w.RIGHTS_FD_WRITE : w.RIGHTS_FD_READ), 0n, 0)
    if (opened.fd_obj === null) return new Output(() => {})
    if (write) opened.fd_obj.fd_seek(0n, w.WHENCE_END)
    return opened.fd_obj
  }
  const output = (spec: ToolOutput, fd: 1 | 2): shim.Fd =>
    spec === "post" ? posted(fd) : spec === "null" ? new Output(() => {}) : fileFd(spec.file, true)
  const stdin: shim.Fd = typeof job.stdin === "object" ? fileFd(job.stdin.file, false) : new Stdin()
  const stdout = output(job.stdout, 1)
  const stderr = job.stderr === "stdout" ? stdout : output(job.stderr, 2)
  const wasi = new shim.WASI([...job.args], [...job.env], [stdin, stdout, stderr, root], { debug: false })

  let memory: WebAssembly.Memory | undefined
  // (fd, pointer, length) argument positions of the path calls, for the root preopen.
  const PATH_ARGS: Record<string, Array<[number, number, number]>> = {
    path_open: [[0, 2, 3]], path_filestat_get: [[0, 2, 3]], path_filestat_set_times: [[0, 2, 3]],
    path_create_directory: [[0, 1, 2]], path_unlink_file: [[0, 1, 2]], path_remove_directory: [[0, 1, 2]],
    path_readlink: [[0, 1, 2]], path_rename: [[0, 1, 2], [3, 4, 5]], path_link: [[0, 2, 3], [4, 5, 6]],
    path_symlink: [[2, 3, 4]]
  }
  const decoder = new TextDecoder()
  const encoder = new TextEncoder()
  const normalise = (args: Array<number>, [fdAt, ptrAt, lenAt]: [number, number, number]) => {
    if (args[fdAt] !== 3 || memory === undefined) return
    const bytes = new Uint8Array(memory.buffer, args[ptrAt], args[lenAt])
    const parts: Array<string> = []
    for (const part of decoder.decode(bytes).split("/")) {
      if (part === "" || part === ".") continue
      if (part === "..") parts.pop()
      else parts.push(part)
    }
    const clean = encoder.encode(parts.length === 0 ? "." : parts.join("/"))
    if (clean.length <= bytes.length) {
      bytes.set(clean)
      args[lenAt] = clean.length
    }
  }
  const calls = wasi.wasiImport as Record<string, (...args: Array<any>) => unknown>
  const imports: Record<string, (...args: Array<any>) => unknown> = { ...calls }
  for (const name of ["poll_oneoff", "proc_exit", "sched_yield"]) {
    const call = calls[name]!
    imports[name] = (...args) => {
      flush()
      return call(...args)
    }
  }
  for (const [name, positions] of Object.entries(PATH_ARGS)) {
    const call = calls[name]!
    imports[name] = (...args) => {
      positions.forEach((p) => normalise(args, p))
      return call(...args)
    }
  }

  let code = 0
  let trap: string | undefined
  try {
    const instance = new WebAssembly.Instance(job.module, { wasi_snapshot_preview1: imports, wasi_unstable: imports } as WebAssembly.Imports)
    memory = instance.exports.memory as WebAssembly.Memory
    code = wasi.start(instance as any)
  } catch (error) {
    if (error instanceof shim.WASIProcExit) code = error.code
    else {
      code = 1
      trap = error instanceof Error ? error.message : String(error)
    }
  }
  flush()

  // What changed: removed names, new directories, new or written files.
  const final = new Map<string, shim.Inode>()
  const walk = (node: shim.Inode, path: string) => {
    final.set(path, node)
    if (node instanceof shim.Directory) for (const [name, child] of node.contents) walk(child, path === "/" ? "/" + name : path + "/" + name)
  }
  walk(root.dir, "/")
  const changes: Array<Change> = []
  for (const [path, node] of original) {
    const now = final.get(path)
    if (now === undefined || (now instanceof shim.Directory) !== (node instanceof shim.Directory)) changes.push({ op: "rm", path })
  }
  for (const [path, node] of final) {
    const before = original.get(path)
    if (node instanceof shim.Directory) {
      if (!(before instanceof shim.Directory)) changes.push({ op: "mkdir", path })
    } else if (node instanceof shim.File && (before !== node || dirty.has(node))) {
      changes.push({ op: "write", path, data: shared(node.data) })
    }
  }
  port.postMessage({ t: "exit", code, changes, reserved: state.reserved, ...(trap === undefined ? {} : { trap }) } satisfies ToolMessage)
}

if (parentPort !== null) {
  // One job at a time; a worker whose run ended by itself is given the next one.
  parentPort.on("message", (job: ToolJob) => {
    run(job)
    setImmediate(collectGarbage)
  })
  parentPort.postMessage({ t: "ready" } satisfies ToolMessage)
}
