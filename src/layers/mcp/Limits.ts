import { maxFileBytes } from "../FileTransfer.js"

/**
 * The largest MCP message either transport reads (a stdio line, an HTTP body): 32 MiB. It holds
 * file_write's largest content (16 MiB) as base64 (about 21.4 MiB) with room to spare, or as
 * UTF-8 text as long as JSON escaping does not double it (send binary or control-heavy content
 * as base64). A larger message is answered with an error; the server keeps serving.
 */
export const maxMessageBytes = 32 * 1024 * 1024

/** Bytes of JSON that file_write's largest content takes as base64. */
export const largestFileWriteAsBase64 = Math.ceil(maxFileBytes / 3) * 4
