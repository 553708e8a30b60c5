/**
 * A rendered screen as bytes that draw it on an empty terminal: for a viewer that joins after the
 * PTY log left bytes out, or falls too far behind. Text only (colours and attributes are not in
 * the snapshot); the next bytes from the PTY draw on top of it as they would on the agent's screen.
 */
import type { ScreenView } from "../../domain/Process.js"

const ESC = "\x1b"

/** Clears the screen (the alternate one for a full-screen app), writes the rows, places the cursor. */
export const redraw = (screen: ScreenView): string =>
  (screen.alternateScreen ? `${ESC}[?1049h` : "") +
  `${ESC}[H${ESC}[2J` +
  screen.text.split("\n").slice(0, screen.rows).map((row, y) => `${ESC}[${y + 1};1H${row}`).join("") +
  `${ESC}[${screen.cursor.y + 1};${screen.cursor.x + 1}H`
