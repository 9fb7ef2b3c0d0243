/** A one-line progress bar on stderr (redrawn in place on a terminal, a line per 10% otherwise). */
export class ProgressBar {
  private lastDecile = -1;
  private readonly started = Date.now();

  constructor(
    private readonly label: string,
    private readonly total: number,
    private readonly format: (value: number) => string = String,
    private readonly stream: NodeJS.WriteStream = process.stderr,
  ) {}

  update(value: number, detail = ''): void {
    const fraction = this.total > 0 ? Math.min(1, value / this.total) : 1;
    const text = `${this.label} [${'#'.repeat(Math.round(fraction * 30)).padEnd(30, '.')}] ${(fraction * 100).toFixed(0).padStart(3)}% ${this.format(value)}/${this.format(this.total)} ${detail}`;
    if (this.stream.isTTY) {
      this.stream.write(`\r${text.padEnd(100)}`);
      return;
    }
    const decile = Math.floor(fraction * 10);
    if (decile !== this.lastDecile) {
      this.lastDecile = decile;
      this.stream.write(`${text}\n`);
    }
  }

  done(detail = ''): void {
    this.update(this.total, `${detail} (${((Date.now() - this.started) / 1000).toFixed(1)} s)`);
    if (this.stream.isTTY) this.stream.write('\n');
  }
}

export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 ** 2) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1024 ** 2).toFixed(1)} MiB`;
}
