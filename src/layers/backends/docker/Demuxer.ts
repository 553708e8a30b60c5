/**
 * The engine's multiplexed stream of a non-TTY exec: frames of an 8-byte header
 * `[type, 0, 0, 0, size (u32 BE)]` then `size` bytes; type 1 = stdout, 2 = stderr. Split without
 * gathering: each piece of a frame goes out as it arrives, as a view into the chunk (copy to keep).
 */
export class Demuxer {
  private readonly header = Buffer.alloc(8)
  private headerFill = 0
  private type = 0
  private remaining = 0

  constructor(private readonly onPiece: (type: number, piece: Buffer) => void) {}

  push(chunk: Buffer): void {
    let offset = 0
    while (offset < chunk.length) {
      if (this.remaining === 0) {
        const n = Math.min(8 - this.headerFill, chunk.length - offset)
        chunk.copy(this.header, this.headerFill, offset, offset + n)
        this.headerFill += n
        offset += n
        if (this.headerFill < 8) return
        this.headerFill = 0
        this.type = this.header[0]!
        this.remaining = this.header.readUInt32BE(4)
        continue
      }
      const n = Math.min(this.remaining, chunk.length - offset)
      const piece = chunk.subarray(offset, offset + n)
      offset += n
      this.remaining -= n
      this.onPiece(this.type, piece)
    }
  }
}
