/**
 * The program of a worker thread that runs one WASI process (plain JavaScript, started with
 * `eval: true`, so it works the same from the sources under vitest and from dist).
 *
 * Protocol. The worker loads @bjorn3/browser_wasi_shim, says `{ t: "ready" }`, then gets one job:
 *   { module: WebAssembly.Module, args, env: ["K=V"], tree: VDir (see Vfs.ts), stdin: SharedArrayBuffer }
 * It posts `{ t: "out", fd: 1 | 2, data }` as the module writes, then
 * `{ t: "exit", code, changes, trap? }` where `changes` are the filesystem changes (Vfs.Change).
 *
 * Output is bounded: Int32 [3] of the stdin buffer counts bytes posted and not yet taken; past
 * OUTPUT_WINDOW_BYTES the worker waits (so a fast writer cannot flood the main thread).
 *
 * Stdin is a ring of one chunk in a SharedArrayBuffer: Int32 [state, length, position] then the
 * bytes; state 0 = empty (the main thread may fill it), 1 = data, 2 = end of input. A read blocks
 * on Atomics.wait until the main thread fills it or ends it.
 *
 * Paths relative to the root preopen (fd 3) are normalised in place first, so `..` stops at `/`
 * as in the backend's own path resolution (the shim would refuse it as NOTCAPABLE).
 */
export const STDIN_HEADER_BYTES = 16
export const STDIN_CHUNK_BYTES = 64 * 1024
/** Output a worker may have in flight before it waits for the main thread to take it. */
export const OUTPUT_WINDOW_BYTES = 1024 * 1024

export const workerSource = (shimUrl: string) => `
"use strict";
const { parentPort } = require("node:worker_threads");
const SHIM_URL = ${JSON.stringify(shimUrl)};
const HEADER = ${STDIN_HEADER_BYTES};

import(SHIM_URL).then((shim) => {
  parentPort.once("message", (job) => run(shim, job));
  parentPort.postMessage({ t: "ready" });
});

function run(shim, job) {
  const ctl = new Int32Array(job.stdin, 0, 4);
  const ring = new Uint8Array(job.stdin, HEADER);
  const EMPTY = new Uint8Array(0);

  // Dirty tracking: what a process wrote is sent back; untouched files are not.
  const dirty = new WeakSet();
  const mark = (name) => {
    const original = shim.OpenFile.prototype[name];
    shim.OpenFile.prototype[name] = function (...args) { dirty.add(this.file); return original.apply(this, args); };
  };
  ["fd_write", "fd_pwrite", "fd_filestat_set_size", "fd_allocate"].forEach(mark);
  const fileOpen = shim.File.prototype.path_open;
  shim.File.prototype.path_open = function (oflags, ...rest) {
    if ((oflags & shim.wasi.OFLAGS_TRUNC) === shim.wasi.OFLAGS_TRUNC) dirty.add(this);
    return fileOpen.call(this, oflags, ...rest);
  };

  // No "." and ".." entries from readdir (POSIX allows that): a ".." of a directory fd would be
  // outside what the shim can resolve.
  const readdir = shim.OpenDirectory.prototype.fd_readdir_single;
  shim.OpenDirectory.prototype.fd_readdir_single = function (cookie) {
    const result = readdir.call(this, cookie + 2n);
    if (result.dirent) result.dirent.d_next -= 2n;
    return result;
  };

  // The tree: the same VFile object (a link) becomes the same File.
  const files = new Map();
  const original = new Map();
  const build = (node, path) => {
    if (node.kind === "file") {
      let file = files.get(node);
      if (file === undefined) {
        file = new shim.File(EMPTY);
        file.data = node.data;
        files.set(node, file);
      }
      original.set(path, file);
      return file;
    }
    const entries = new Map();
    for (const [name, child] of node.entries) entries.set(name, build(child, path === "/" ? "/" + name : path + "/" + name));
    const directory = new shim.Directory(entries);
    original.set(path, directory);
    return directory;
  };
  const rootEntries = new Map();
  for (const [name, child] of job.tree.entries) rootEntries.set(name, build(child, "/" + name));
  const root = new shim.PreopenDirectory("/", rootEntries);
  original.set("/", root.dir);

  class Stdin extends shim.Fd {
    fd_fdstat_get() { const fdstat = new shim.wasi.Fdstat(shim.wasi.FILETYPE_UNKNOWN, 0); fdstat.fs_rights_base = BigInt(shim.wasi.RIGHTS_FD_READ); return { ret: 0, fdstat }; }
    fd_filestat_get() { return { ret: 0, filestat: new shim.wasi.Filestat(0n, shim.wasi.FILETYPE_UNKNOWN, 0n) }; }
    fd_read(size) {
      for (;;) {
        const state = Atomics.load(ctl, 0);
        if (state === 1) {
          const length = ctl[1], position = ctl[2];
          const n = Math.min(size, length - position);
          const data = ring.slice(position, position + n);
          if (position + n >= length) { Atomics.store(ctl, 0, 0); Atomics.notify(ctl, 0); }
          else ctl[2] = position + n;
          return { ret: 0, data };
        }
        if (state === 2) return { ret: 0, data: EMPTY };
        flush();
        Atomics.wait(ctl, 0, 0);
      }
    }
  }
  // Pipes, not terminals: isatty() is false (WASI has no pipe file type; "unknown" it is).
  class Output extends shim.ConsoleStdout {
    fd_fdstat_get() { const fdstat = new shim.wasi.Fdstat(shim.wasi.FILETYPE_UNKNOWN, 0); fdstat.fs_rights_base = BigInt(shim.wasi.RIGHTS_FD_WRITE); return { ret: 0, fdstat }; }
    fd_filestat_get() { return { ret: 0, filestat: new shim.wasi.Filestat(0n, shim.wasi.FILETYPE_UNKNOWN, 0n) }; }
  }
  // Output: posted at once when the main thread has taken everything before, else gathered (up to
  // 64 KiB) and posted with the next write, a blocking read, a sleep, or the exit. Backpressure:
  // ctl[3] counts the weight (bytes, at least 1 KiB a message) posted and not yet taken.
  const held = { 1: [], 2: [] }, heldBytes = { 1: 0, 2: 0 };
  const post = (fd) => {
    if (heldBytes[fd] === 0) return;
    const data = held[fd].length === 1 ? held[fd][0] : new Uint8Array(heldBytes[fd]);
    if (held[fd].length > 1) { let at = 0; for (const part of held[fd]) { data.set(part, at); at += part.byteLength; } }
    held[fd] = []; heldBytes[fd] = 0;
    const weight = Math.max(data.byteLength, 1024);
    let inFlight = Atomics.add(ctl, 3, weight) + weight;
    parentPort.postMessage({ t: "out", fd, data, weight });
    while (inFlight > ${OUTPUT_WINDOW_BYTES}) { Atomics.wait(ctl, 3, inFlight, 50); inFlight = Atomics.load(ctl, 3); }
  };
  const flush = () => { post(1); post(2); };
  const out = (fd) => new Output((data) => {
    held[fd].push(data.slice()); heldBytes[fd] += data.byteLength;
    if (Atomics.load(ctl, 3) === 0 || heldBytes[fd] >= 65536) { post(fd === 1 ? 2 : 1); post(fd); }
  });
  const wasi = new shim.WASI(job.args, job.env, [new Stdin(), out(1), out(2), root], { debug: false });

  let memory;
  // (fd, pointer, length) argument positions of the path calls, for the root preopen.
  const PATH_ARGS = {
    path_open: [[0, 2, 3]], path_filestat_get: [[0, 2, 3]], path_filestat_set_times: [[0, 2, 3]],
    path_create_directory: [[0, 1, 2]], path_unlink_file: [[0, 1, 2]], path_remove_directory: [[0, 1, 2]],
    path_readlink: [[0, 1, 2]], path_rename: [[0, 1, 2], [3, 4, 5]], path_link: [[0, 2, 3], [4, 5, 6]],
    path_symlink: [[2, 3, 4]]
  };
  const decoder = new TextDecoder(), encoder = new TextEncoder();
  const normalise = (args, [fdAt, ptrAt, lenAt]) => {
    if (args[fdAt] !== 3 || memory === undefined) return;
    const bytes = new Uint8Array(memory.buffer, args[ptrAt], args[lenAt]);
    const parts = [];
    for (const part of decoder.decode(bytes).split("/")) {
      if (part === "" || part === ".") continue;
      if (part === "..") parts.pop(); else parts.push(part);
    }
    const clean = encoder.encode(parts.length === 0 ? "." : parts.join("/"));
    if (clean.length <= bytes.length) { bytes.set(clean); args[lenAt] = clean.length; }
  };
  const imports = { ...wasi.wasiImport };
  for (const name of ["poll_oneoff", "proc_exit", "sched_yield"]) {
    const call = wasi.wasiImport[name];
    imports[name] = (...args) => { flush(); return call(...args); };
  }
  for (const [name, positions] of Object.entries(PATH_ARGS)) {
    const call = wasi.wasiImport[name];
    imports[name] = (...args) => { positions.forEach((p) => normalise(args, p)); return call(...args); };
  }

  let code = 0, trap;
  try {
    const instance = new WebAssembly.Instance(job.module, { wasi_snapshot_preview1: imports, wasi_unstable: imports });
    memory = instance.exports.memory;
    code = wasi.start(instance);
  } catch (error) {
    if (error instanceof shim.WASIProcExit) code = error.code;
    else { code = 1; trap = error instanceof Error ? error.message : String(error); }
  }

  flush();

  // What changed: removed names, new directories, new or written files.
  const final = new Map();
  const walk = (node, path) => {
    final.set(path, node);
    if (node instanceof shim.Directory) for (const [name, child] of node.contents) walk(child, path === "/" ? "/" + name : path + "/" + name);
  };
  walk(root.dir, "/");
  const changes = [];
  for (const [path, node] of original) {
    const now = final.get(path);
    if (now === undefined || (now instanceof shim.Directory) !== (node instanceof shim.Directory)) changes.push({ op: "rm", path });
  }
  for (const [path, node] of final) {
    const before = original.get(path);
    if (node instanceof shim.Directory) {
      if (!(before instanceof shim.Directory)) changes.push({ op: "mkdir", path });
    } else if (node instanceof shim.File && (before !== node || dirty.has(node))) {
      changes.push({ op: "write", path, data: node.data });
    }
  }
  parentPort.postMessage({ t: "exit", code, changes, trap });
}
`
